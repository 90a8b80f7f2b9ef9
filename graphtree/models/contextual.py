r"""Contextual leaves: a pretrained transformer's word states as the node inputs of any cell.

:class:`EncoderLeaves` runs a Hugging Face encoder (a ``transformers``
``PreTrainedModel`` with its *fast* tokenizer) once over each sentence of a
batch and hands every node that carries a word the encoder's state of that
word; nodes without a word get zeros, as every cell and
:class:`~graphtree.models.BiTreeLSTM` expect of their inputs. Fine-tuned end to
end, it puts graphtree's cells over a modern encoder (SentiBERT's setting, Yin
et al. 2020, https://arxiv.org/abs/2005.04114, with a Tree-LSTM in place of
its span attention).

Alignment, per sentence of ``tokens`` (the graph's words as its converter wrote them):

1. Treebank escapes become the characters the encoder was trained on
   (:func:`encoder_text`): ``-LRB-`` ``(``, ``-RRB-`` ``)``, ``-LSB-`` ``[``,
   ``-RSB-`` ``]``, ``-LCB-`` ``{``, ``-RCB-`` ``}``, ````` `` ````` and ``''``
   ``"``, `````` ` `````` and ``'`` stay, ``\/`` ``/``, ``\*`` ``*``.
2. The tokenizer splits the words as given (``is_split_into_words``: it never
   merges two words or splits one across two); its ``word_ids`` name the word of
   each sub-word token.
3. A word's vector pools its sub-words' last-layer states: their mean
   (``pool="mean"``, the default) or the first one's (``"first"``, BERT's
   tagging convention).
4. The node with ``word_pos == i`` gets word ``i``'s vector; a word the
   tokenizer left without sub-words (an empty string) and the words past the
   encoder's length limit get zeros, the latter with a warning naming the sentence.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import Tensor

from ..data import NO_WORD
from ..errors import InvalidArgumentError
from ..nn.functional import dropout

__all__ = ["POOLS", "EncoderLeaves", "EncoderSpanClassifier", "encoder_layers", "encoder_text"]

POOLS = ("mean", "first")
"""How a word's sub-word states become its vector."""

# Penn Treebank escapes -> the text a transformer saw in pretraining.
_PTB_TEXT = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}", "``": '"',
             "''": '"', "-lrb-": "(", "-rrb-": ")", "-lsb-": "[", "-rsb-": "]", "-lcb-": "{", "-rcb-": "}"}


def encoder_text(token: str) -> str:
    """The form of a treebank token that a transformer was trained on: ``-LRB-`` -> ``(``, ```` `` ```` -> ``"``,
    ``\\/`` -> ``/`` (see the module docstring); other tokens as they are."""
    token = _PTB_TEXT.get(token, token)
    return token.replace("\\/", "/").replace("\\*", "*")


def _sentences(batch: Any) -> list[list[str]]:
    """The words of each graph of ``batch`` (a ``Batch``: one list per graph; a single ``Data``: its list)."""
    tokens = getattr(batch, "tokens", None)
    if tokens is None:
        raise InvalidArgumentError("the batch has no tokens: EncoderLeaves reads each graph's words from its 'tokens' "
                                   "attribute, which every graphtree converter writes")
    if hasattr(batch, "ptr"):  # a Batch: a list per graph
        return [list(t) for t in tokens]
    return [list(tokens)]


class EncoderLeaves(torch.nn.Module):
    r"""Node inputs from a pretrained transformer: each word-carrying node gets its word's contextual state.

    .. math::
        x_j = \begin{cases} \operatorname{pool}\big(\{ E(s)_t : t \in \mathrm{subwords}(w_j) \}\big) &
        \text{node } j \text{ carries word } w_j \text{ of sentence } s \\ 0 & \text{otherwise} \end{cases}

    where :math:`E(s)` are the encoder's last-layer states over the whole
    sentence :math:`s` (one pass per sentence, in batches), and the alignment is
    the module docstring's.

    Args:
        encoder: A ``transformers`` encoder (``BertModel``, ``MPNetModel``, ...: called as
            ``encoder(input_ids=..., attention_mask=...)`` with a ``last_hidden_state``).
        tokenizer: Its fast tokenizer (``word_ids`` are needed for the alignment).
        pool: ``"mean"`` or ``"first"`` of a word's sub-words.
        trainable_layers: How many of the encoder's top layers are fine-tuned (``None``: all, with the input
            embeddings; ``0``: the encoder is frozen). The layers below are frozen and run without a graph for
            the backward pass, which saves their backward.
        max_length: Sub-word tokens per sentence, special tokens included (default: the tokenizer's
            ``model_max_length``, capped at the encoder's position table); longer sentences are cut, with a
            warning naming them.
        cache_frozen: With a frozen encoder (``trainable_layers=0``), keep each sentence's word states once
            computed (keyed by its words; on the CPU), so that a corpus is encoded once.
        cache_below: With ``trainable_layers=K`` above 0, keep each sentence's states at the input of the first
            trained layer (computed once, without dropout, by the frozen layers below) and run only the top ``K``
            layers on them: a pass then costs the top layers alone. The frozen layers run without dropout
            (they would with it under ``cache_below=False``).

    Shapes:
        - **input:** a ``Batch`` (or ``Data``) with ``tokens`` and ``word_pos`` (and ``batch``).
        - **output:** :math:`(|\mathcal{V}|, H)` with :math:`H` = :attr:`out_channels`, the encoder's width.
    """

    def __init__(self, encoder: torch.nn.Module, tokenizer: Any, *, pool: str = "mean",
                 trainable_layers: int | None = None, max_length: int | None = None,
                 cache_frozen: bool = True, cache_below: bool = False) -> None:
        super().__init__()
        if pool not in POOLS:
            raise InvalidArgumentError(f"pool must be one of {POOLS}, got {pool!r}")
        if not getattr(tokenizer, "is_fast", False):
            raise InvalidArgumentError("EncoderLeaves needs a fast tokenizer (its word_ids align sub-words to words); "
                                       f"got {type(tokenizer).__name__}")
        self.encoder, self.tokenizer, self.pool = encoder, tokenizer, pool
        config = getattr(encoder, "config", None)
        self.out_channels = int(config.hidden_size)
        positions = getattr(config, "max_position_embeddings", None)
        limit = max_length or min(int(getattr(tokenizer, "model_max_length", 512) or 512), 512)
        if positions is not None:  # RoBERTa-style tables keep two rows for the padding offset
            limit = min(limit, int(positions) - (2 if getattr(config, "pad_token_id", None) == 1 else 0))
        self.max_length = limit
        self.trainable_layers = trainable_layers
        self._freeze(trainable_layers)
        self.cache_frozen = cache_frozen
        self._frozen_states: dict[tuple[str, ...], Tensor] = {}  # sentence words -> [words, H], frozen only
        layers = encoder_layers(encoder) if cache_below else None
        self.cache_below = bool(cache_below and trainable_layers and layers is not None
                                and trainable_layers < len(layers))
        if cache_below and not self.cache_below:
            raise InvalidArgumentError("cache_below needs trainable_layers between 1 and the encoder's layers less one")
        # sentence words -> (its sub-words' states at the first trained layer's input [T, H], their word ids)
        self._below: dict[tuple[str, ...], tuple[Tensor, list[int | None]]] = {}
        self._upper = _UpperStack(encoder, int(trainable_layers or 0)) if self.cache_below else None
        self._warned: set[tuple[str, ...]] = set()

    # -- set-up -------------------------------------------------------------------------------------

    def _freeze(self, trainable_layers: int | None) -> None:
        if trainable_layers is None:
            return
        layers = encoder_layers(self.encoder)
        if not 0 <= trainable_layers <= len(layers):
            raise InvalidArgumentError(
                f"trainable_layers must be between 0 and the encoder's {len(layers)} layers, got "
                f"{trainable_layers}")
        keep = {id(p) for layer in layers[len(layers) - trainable_layers:] for p in layer.parameters()}
        for p in self.encoder.parameters():
            p.requires_grad_(id(p) in keep)

    @property
    def frozen(self) -> bool:
        """Whether no parameter of the encoder is trained (its states depend on the words alone)."""
        return not any(p.requires_grad for p in self.encoder.parameters())

    def train(self, mode: bool = True) -> EncoderLeaves:
        super().train(mode)
        if self.frozen:  # a frozen encoder runs without dropout: its states are then a function of the words
            self.encoder.eval()
        return self

    # -- the encoder over sentences ------------------------------------------------------------------

    def word_states(self, sentences: Sequence[Sequence[str]]) -> list[Tensor]:
        """Each sentence's word vectors, ``[len(sentence), H]``, from one batched pass of the encoder (zeros for
        words without sub-words or past the length limit)."""
        if self.frozen and self.cache_frozen:
            keys = [tuple(s) for s in sentences]
            missing = list(dict.fromkeys(k for k in keys if k not in self._frozen_states))
            if missing:
                with torch.no_grad():
                    for key, states in zip(missing, self._encode(missing)):
                        self._frozen_states[key] = states.detach().cpu()
            device = self.device
            return [self._frozen_states[k].to(device) for k in keys]
        if self.frozen:
            with torch.no_grad():
                return self._encode(sentences)
        return self._encode(sentences)

    @property
    def device(self) -> torch.device:
        return next(self.encoder.parameters()).device

    def _tokenize(self, words: list[list[str]]) -> Any:
        return self.tokenizer(words, is_split_into_words=True, truncation=True, max_length=self.max_length,
                              padding=True, return_tensors="pt")

    def _encode(self, sentences: Sequence[Sequence[str]]) -> list[Tensor]:
        words = [[encoder_text(w) for w in s] for s in sentences]
        if not words:
            return []
        device = self.device
        if self.cache_below:
            states, word_ids, filled = self._upper_states(sentences, words)
        else:
            encoded = self._tokenize(words)
            states = self.encoder(input_ids=encoded["input_ids"].to(device),
                                  attention_mask=encoded["attention_mask"].to(device)).last_hidden_state
            word_ids = [encoded.word_ids(k) for k in range(len(words))]
            filled = encoded["attention_mask"].sum(1).tolist()
        # One row per word of the batch: sentence k's words start at offsets[k].
        lengths = torch.tensor([len(s) for s in words], dtype=torch.long)
        offsets = torch.cumsum(lengths, 0) - lengths
        rows, tokens = [], []
        for k in range(len(words)):
            ids = word_ids[k]
            seen: set[int] = set()
            for t, w in enumerate(ids):
                if w is None or (self.pool == "first" and w in seen):
                    continue
                seen.add(w)
                rows.append(int(offsets[k]) + w)
                tokens.append(k * states.size(1) + t)
            kept = max(seen, default=-1) + 1  # the tokenizer keeps a prefix of the words
            if any(words[k][kept:]) and int(filled[k]) >= self.max_length:
                self._warn_cut(tuple(sentences[k]), kept)
        total = int(lengths.sum())
        flat = states.reshape(-1, states.size(-1))
        index = torch.tensor(rows, dtype=torch.long, device=device)
        picked = flat.index_select(0, torch.tensor(tokens, dtype=torch.long, device=device))
        summed = flat.new_zeros(total, flat.size(-1)).index_add_(0, index, picked)
        counts = torch.zeros(total, dtype=flat.dtype, device=device).index_add_(
            0, index, torch.ones_like(index, dtype=flat.dtype))
        pooled = summed / counts.clamp(min=1).unsqueeze(-1)
        return list(pooled.split(lengths.tolist()))

    @property
    def caches(self) -> bool:
        """Whether this module keeps per-sentence states (a frozen encoder's, or the lower layers' with
        ``cache_below``)."""
        return self.cache_below or (self.frozen and self.cache_frozen)

    def precompute(self, sentences: Iterable[Sequence[str]], batch_size: int = 64, progress: bool = True,
                   keep: Callable[[], None] | None = None, keep_every: float = 600.0) -> int:
        """Fill the cache (:attr:`caches`) for ``sentences`` not yet in it, in batches of similar length (less
        padding), with a progress bar; returns how many were computed. ``keep`` (e.g. saving
        :meth:`cache_state`) is called every ``keep_every`` seconds on the way, so that a stopped run keeps
        what it computed. A no-op without a cache."""
        if not self.caches:
            return 0
        store = self._below if self.cache_below else self._frozen_states
        todo = sorted({tuple(s) for s in sentences} - store.keys(), key=len)
        from tqdm.auto import tqdm

        last_kept = time.perf_counter()
        for start in tqdm(range(0, len(todo), batch_size), desc="encoding sentences once", disable=not progress,
                          unit="batch", leave=False):
            chunk = todo[start:start + batch_size]
            if self.cache_below:
                self._fill_below(chunk, [[encoder_text(w) for w in s] for s in chunk])
            else:
                self.word_states(chunk)
            if keep is not None and time.perf_counter() - last_kept >= keep_every:
                keep()
                last_kept = time.perf_counter()
        return len(todo)

    def cache_state(self) -> dict[str, Any]:
        """The cache as data (to save with ``torch.save``), with what it depends on."""
        return {"key": self._cache_key(), "below": self._below, "frozen": self._frozen_states}

    def load_cache_state(self, state: dict[str, Any]) -> None:
        """Take back a :meth:`cache_state`; one made under other settings or weights is refused."""
        if state.get("key") != self._cache_key():
            raise InvalidArgumentError(f"the cache was made for {state.get('key')}, not {self._cache_key()}")
        self._below.update(state["below"])
        self._frozen_states.update(state["frozen"])

    def _cache_key(self) -> dict[str, Any]:
        config = getattr(self.encoder, "config", None)
        frozen = [p for p in self.encoder.parameters() if not p.requires_grad]
        checksum = float(sum(p.detach().double().sum() for p in frozen)) if frozen else 0.0
        return {"encoder": getattr(config, "_name_or_path", type(self.encoder).__name__),
                "model_type": getattr(config, "model_type", None), "trainable_layers": self.trainable_layers,
                "cache_below": self.cache_below, "pool": self.pool, "max_length": self.max_length,
                "frozen_weights_sum": round(checksum, 6)}

    def _fill_below(self, keys: Sequence[tuple[str, ...]], words: list[list[str]]) -> None:
        encoded = self._tokenize(words)
        was_training = self.encoder.training
        self.encoder.eval()
        with torch.no_grad():
            below = self.encoder(input_ids=encoded["input_ids"].to(self.device),
                                 attention_mask=encoded["attention_mask"].to(self.device),
                                 output_hidden_states=True).hidden_states[-1 - self.trainable_layers]
        self.encoder.train(was_training)
        for j, key in enumerate(keys):
            count = int(encoded["attention_mask"][j].sum())
            self._below[key] = (below[j, :count].detach().cpu().clone(), encoded.word_ids(j))

    def _upper_states(self, sentences: Sequence[Sequence[str]], words: list[list[str]]
                      ) -> tuple[Tensor, list[list[int | None]], list[int]]:
        """The top layers' output over the sentences' cached lower states (computed here for those not seen):
        ``[B, T, H]`` padded states, each sentence's word ids and its count of sub-word tokens."""
        keys = [tuple(s) for s in sentences]
        missing = [k for k in dict.fromkeys(keys) if k not in self._below]
        if missing:
            self._fill_below(missing, [words[keys.index(k)] for k in missing])
        cached = [self._below[k] for k in keys]
        filled = [c[0].size(0) for c in cached]
        width = max(filled)
        hidden = cached[0][0].new_zeros(len(cached), width, self.out_channels)
        mask = torch.zeros(len(cached), width, dtype=torch.long)
        for j, (states, _) in enumerate(cached):
            hidden[j, :filled[j]] = states
            mask[j, :filled[j]] = 1
        out = self._upper(hidden.to(self.device), mask.to(self.device))
        return out, [c[1] for c in cached], filled

    def _warn_cut(self, sentence: tuple[str, ...], kept: int) -> None:
        if sentence in self._warned:
            return
        self._warned.add(sentence)
        text = " ".join(sentence)
        warnings.warn(f"EncoderLeaves: a sentence of {len(sentence)} words is longer than the encoder's "
                      f"{self.max_length} sub-word tokens; its words after the first {kept} get zero vectors: "
                      f"{text[:80]}{'...' if len(text) > 80 else ''}", stacklevel=3)

    # -- node inputs --------------------------------------------------------------------------------

    def forward(self, batch: Any) -> Tensor:
        """``[num_nodes, H]`` inputs of ``batch``'s nodes: word states where ``word_pos`` names a word, else 0."""
        sentences = _sentences(batch)
        states = self.word_states(sentences)
        num_nodes = int(batch.num_nodes)
        device = self.device
        dtype = next(self.encoder.parameters()).dtype
        out_rows = torch.cat(states) if states else torch.zeros(0, self.out_channels, device=device, dtype=dtype)
        word_pos = batch.word_pos.to(device)
        graph = (batch.batch.to(device) if getattr(batch, "batch", None) is not None
                 else torch.zeros(num_nodes, dtype=torch.long, device=device))
        lengths = torch.tensor([len(s) for s in sentences], dtype=torch.long, device=device)
        offsets = torch.cumsum(lengths, 0) - lengths
        has_word = word_pos != NO_WORD
        if bool((word_pos[has_word] >= lengths[graph[has_word]]).any()):
            node = int((has_word & (word_pos >= lengths[graph])).nonzero()[0])
            raise InvalidArgumentError(f"node {node}: word_pos {int(word_pos[node])} is past its sentence's "
                                       f"{int(lengths[graph[node]])} tokens")
        row = torch.where(has_word, offsets[graph] + word_pos, 0)
        x = out_rows.new_zeros(num_nodes, self.out_channels)
        if out_rows.size(0):
            x = torch.where(has_word.unsqueeze(-1), out_rows.index_select(0, row), x)
        return x

    def node_inputs(self, batch: Any) -> Tensor:
        """The node inputs of ``batch`` (what :class:`~graphtree.models.TreeClassifier` asks its input module)."""
        return self(batch)

    @property
    def embedding_dim(self) -> int:
        return self.out_channels

    def __repr__(self) -> str:
        layers = "all" if self.trainable_layers is None else self.trainable_layers
        return (f"{self.__class__.__name__}({type(self.encoder).__name__}, {self.out_channels}, pool={self.pool}, "
                f"trainable_layers={layers}, max_length={self.max_length})")


def encoder_layers(encoder: torch.nn.Module) -> torch.nn.ModuleList:
    """The stack of transformer layers of a Hugging Face encoder (``encoder.encoder.layer`` in BERT, MPNet,
    RoBERTa and their kin; ``transformer.layer`` in DistilBERT)."""
    for path in (("encoder", "layer"), ("transformer", "layer"), ("layers",)):
        module: Any = encoder
        for name in path:
            module = getattr(module, name, None)
        if isinstance(module, torch.nn.ModuleList):
            return module
    raise InvalidArgumentError(f"cannot find the layer stack of {type(encoder).__name__} (looked for encoder.layer, "
                               "transformer.layer, layers): pass trainable_layers=None")


class EncoderSpanClassifier(torch.nn.Module):
    r"""The encoder alone, as a classifier of every phrase: a node's vector is the mean of the encoder's word
    states over the words it covers, with no composition along the tree (the baseline that says what a tree
    cell adds over the same fine-tuned encoder):

    .. math::
        h_j = \frac{1}{e_j - s_j} \sum_{i = s_j}^{e_j - 1} x_i, \qquad
        \hat{p}(y \mid j) = \mathrm{softmax}(W h_j + b)

    with :math:`[s_j, e_j)` the words under node :math:`j`
    (:func:`~graphtree.models.spans.word_spans`) and :math:`x_i` the states of
    :class:`EncoderLeaves`. At the root this is the mean-pooled sentence.

    Args:
        leaves: The encoder's word states.
        num_classes: Number of labels.
        dropout: Dropout on :math:`h_j` before the classifier.
    """

    def __init__(self, leaves: EncoderLeaves, num_classes: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.leaves, self.dropout = leaves, dropout
        self.classifier = torch.nn.Linear(leaves.out_channels, num_classes)

    def forward(self, batch: Any) -> Tensor:
        from .spans import word_spans

        sentences = _sentences(batch)
        states = self.leaves.word_states(sentences)
        start, end = word_spans(batch)
        graph = batch.batch if getattr(batch, "batch", None) is not None else torch.zeros_like(start)
        lengths = torch.tensor([len(s) for s in sentences], dtype=torch.long, device=start.device)
        # One running sum per sentence, with a zero row in front: a span's sum is two lookups.
        offsets = torch.cumsum(lengths + 1, 0) - (lengths + 1)
        width = self.leaves.out_channels
        sums = torch.cat([torch.cat([s.new_zeros(1, width), s.cumsum(0)]) for s in states]) if states else None
        if sums is None:
            return self.classifier.weight.new_zeros(0, self.classifier.out_features)
        device = sums.device
        first, last = (offsets[graph] + start).to(device), (offsets[graph] + end).to(device)
        h = (sums[last] - sums[first]) / (end - start).to(device=device, dtype=sums.dtype).unsqueeze(-1)
        return self.classifier(dropout(h, self.dropout, self.training))

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.leaves}, num_classes={self.classifier.out_features})"


class _UpperStack:
    """The top ``k`` layers of a Hugging Face encoder, run on states at their input: the encoder's own layer
    stack (BERT's and MPNet's ``encoder``, with MPNet's relative position bias) over a view of its last ``k``
    layers, sharing their weights. Not a registered module, so the encoder's parameters are listed once."""

    def __init__(self, encoder: torch.nn.Module, k: int) -> None:
        import copy

        stack = getattr(encoder, "encoder", None)
        if stack is None or not isinstance(getattr(stack, "layer", None), torch.nn.ModuleList):
            raise InvalidArgumentError(f"cache_below needs an encoder with encoder.layer (BERT, MPNet, RoBERTa), not "
                                       f"{type(encoder).__name__}")
        self.config = encoder.config
        self.stack = copy.copy(stack)  # the same submodules, another list of layers
        self.stack._modules = dict(stack._modules)
        self.stack._modules["layer"] = torch.nn.ModuleList(list(stack.layer)[len(stack.layer) - k:])

    def __call__(self, hidden: Tensor, mask: Tensor) -> Tensor:
        try:
            from transformers.masking_utils import create_bidirectional_mask
        except ImportError:  # transformers before 4.53: the additive mask of get_extended_attention_mask
            extended = (1.0 - mask[:, None, None, :].to(hidden.dtype)) * torch.finfo(hidden.dtype).min
        else:
            extended = create_bidirectional_mask(config=self.config, inputs_embeds=hidden, attention_mask=mask)
        self.stack.train(self.stack.layer[0].training)
        return self.stack(hidden, attention_mask=extended)[0]

