"""The tasks, models and baseline of ``experiments/code.py`` on :class:`~graphtree.datasets.CodeTrees`.

Tasks, both one prediction per function:

* ``name``: method-name prediction as ogbg-code2 sets it (Hu et al. 2020,
  https://ogb.stanford.edu/docs/graphprop/#ogbg-code2): the first
  :data:`NAME_LENGTH` sub-tokens of the name, one class per position over the
  :data:`NAME_VOCAB` commonest training sub-tokens plus ``__UNK__`` and
  ``__EOS__`` (a shorter name is padded with ``__EOS__``); the prediction is cut
  at its first ``__EOS__`` and scored by :func:`name_f1`, OGB's F1
  (``ogb.graphproppred.Evaluator``, ``_eval_F1``): per function the F1 of the
  predicted and the true sub-token *sets* (the full name), averaged over the
  functions.
* ``kind``: :data:`~graphtree.datasets.code.KINDS` (the method kind of the name's
  pattern), accuracy, on the functions whose name has one.

Models (:class:`CodeModel`): a :class:`~graphtree.models.NodeFields` input
(type + mean of the sub-token vectors), then ``childsum`` (Child-Sum Tree-LSTM on
the AST), ``nary`` (binary N-ary Tree-LSTM, general setting, on the AST's
left-child right-sibling binarization: a node's first child is its left child,
its next sibling its right one, :func:`lcrs`) or ``bilstm`` (a bidirectional
``nn.LSTM`` over the nodes in pre-order); the states pooled as [root; mean; max]
over the function's nodes, dropout, a linear layer per output. ``tfidf``:
multinomial logistic regression on TF-IDF uni- and bigrams of the same pre-order
tokens (type and sub-tokens of every node), :func:`tfidf_features`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence
from torch_geometric.data import Batch, Data

from graphtree.models import NodeFields, Readout
from graphtree.nn import ChildSumTreeLSTM, NaryTreeLSTM
from graphtree.nn.functional import dropout
from graphtree.train.trainer import Trainer

__all__ = ["EOS", "NAME_LENGTH", "NAME_VOCAB", "UNK", "CodeModel", "CodeTrainer", "InputVocab", "decode_name",
           "lcrs", "name_f1", "name_targets", "prepare", "tfidf_features"]

NAME_LENGTH = 5        # ogbg-code2: the first 5 sub-tokens of the name
NAME_VOCAB = 1000      # output sub-tokens (ogbg-code2 takes 5,000 over 407,976 training functions)
UNK, EOS = "__UNK__", "__EOS__"
MODELS = ("childsum", "nary", "bilstm")
MAX_POSITION = 15      # child positions from here on share one input vector (an AST node has few children mostly)


def name_f1(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict[str, float]:
    """OGB's ogbg-code2 F1 (``ogb.graphproppred.Evaluator._eval_F1``): per example, precision and recall of the
    predicted sub-token set against the true one (0 where undefined), F1 their harmonic mean (0 when both are 0);
    each averaged over the examples, in %."""
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} true names for {len(predicted)} predictions")
    precision = recall = f1 = 0.0
    for true_words, predicted_words in zip(gold, predicted):
        truth, guess = set(true_words), set(predicted_words)
        hits = len(truth & guess)
        p = hits / len(guess) if guess else 0.0
        r = hits / len(truth) if truth else 0.0
        precision, recall = precision + p, recall + r
        f1 += 2 * p * r / (p + r) if p + r > 0 else 0.0
    n = max(len(gold), 1)
    return dict(f1=100 * f1 / n, precision=100 * precision / n, recall=100 * recall / n)


def name_targets(name: Sequence[str], index: dict[str, int]) -> list[int]:
    """The :data:`NAME_LENGTH` target ids of a name's sub-tokens: ``__UNK__`` for one out of ``index``, padded
    with ``__EOS__`` (ogbg-code2's ``encode_y_to_arr``)."""
    ids = [index.get(w, index[UNK]) for w in name[:NAME_LENGTH]]
    return ids + [index[EOS]] * (NAME_LENGTH - len(ids))


def decode_name(ids: Sequence[int], words: Sequence[str]) -> list[str]:
    """Predicted ids as sub-tokens, up to the first ``__EOS__`` (ogbg-code2's ``decode_arr_to_seq``)."""
    out = []
    for i in ids:
        if words[i] == EOS:
            break
        out.append(words[i])
    return out


def lcrs(parents: Tensor, num_nodes: int) -> tuple[Tensor, Tensor]:
    """Left-child right-sibling binarization of a tree given by its child -> parent ``edge_index`` in pre-order
    child order: ``(edge_index, edge_pos)`` where a node's first child is its child at position 0 and its next
    sibling its child at position 1 (the root has no sibling, so it stays the root)."""
    child, parent = parents.tolist()
    first: dict[int, int] = {}
    previous: dict[int, int] = {}
    last_child: dict[int, int] = {}
    for c, p in zip(child, parent):  # children arrive in order: to_data lists edges by child index
        if p in last_child:
            previous[c] = last_child[p]
        else:
            first[p] = c
        last_child[p] = c
    edges = [(c, p, 0) for p, c in first.items()] + [(c, s, 1) for c, s in previous.items()]
    edges.sort()
    if not edges:
        return torch.zeros(2, 0, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    index = torch.tensor([[c for c, _, _ in edges], [p for _, p, _ in edges]], dtype=torch.long)
    return index, torch.tensor([k for _, _, k in edges], dtype=torch.long)


class InputVocab:
    """The model's input ids: node types and sub-tokens seen at least ``min_count`` times in training (id 0
    ``__UNK__`` for the rest), as lookup tables from a :class:`~graphtree.datasets.CodeTrees`' ids."""

    def __init__(self, train: Sequence[Data], num_types: int, num_subtokens: int, min_count: int = 2) -> None:
        types, words = Counter(), Counter()
        for g in train:
            types.update(g.node_type.tolist())
            words.update(g.subtoken.tolist())
        self.types = self._table(types, num_types, 1)
        self.subtokens = self._table(words, num_subtokens, min_count)
        self.num_types, self.num_subtokens = int(self.types.max()) + 1, int(self.subtokens.max()) + 1

    @staticmethod
    def _table(counts: Counter, size: int, min_count: int) -> Tensor:
        table = torch.zeros(size, dtype=torch.long)
        kept = sorted(i for i, n in counts.items() if n >= min_count)
        table[torch.tensor(kept, dtype=torch.long)] = torch.arange(1, len(kept) + 1)
        return table


def prepare(graphs: Sequence[Data], vocab: InputVocab, targets: Sequence[Sequence[int]], model: str) -> list[Data]:
    """Plain graphs for training: the model's input ids, ``y`` ``[1, K]`` and, for ``nary``, the binarized edges."""
    out = []
    for g, y in zip(graphs, targets):
        edge_index, edge_pos = lcrs(g.edge_index, g.num_nodes) if model == "nary" else (g.edge_index, g.edge_pos)
        # Each node's position among its AST siblings, 1-based (0 at the root), of the tree before binarization.
        child_pos = torch.zeros(g.num_nodes, dtype=torch.long)
        child_pos[g.edge_index[0]] = (g.edge_pos + 1).clamp(max=MAX_POSITION)
        out.append(Data(edge_index=edge_index, edge_pos=edge_pos, node_type=vocab.types[g.node_type],
                        child_pos=child_pos,
                        subtoken=vocab.subtokens[g.subtoken], subtoken_index=g.subtoken_index,
                        y=torch.tensor([list(y)], dtype=torch.long), num_nodes=g.num_nodes))
    return out


class CodeModel(torch.nn.Module):
    """Fields -> encoder (``model`` of :data:`MODELS`) -> [root; mean; max] of the node states -> dropout ->
    ``outputs`` linear layers of ``classes`` scores each: ``[num_graphs, outputs, classes]``.

    Args:
        model: ``"childsum"``, ``"nary"`` (on :func:`lcrs` edges) or ``"bilstm"`` (pre-order).
        num_types, num_subtokens: Input vocabulary sizes.
        dim: Size of the field vectors.
        hidden: Memory size (the BiLSTM's per direction is half of it, so that every state has ``hidden``).
        outputs, classes: Output positions and classes per position.
        dropout: Dropout on the pooled vector.
        input_dropout: Dropout on the node inputs (the fields' vectors).
        positions: Add to each node's input a vector of its position among its siblings (``batch.child_pos``,
            :func:`prepare`; the Child-Sum cell is blind to the order of a node's children).
    """

    def __init__(self, model: str, num_types: int, num_subtokens: int, dim: int, hidden: int, outputs: int,
                 classes: int, dropout: float = 0.0, input_dropout: float = 0.0, positions: bool = False) -> None:
        super().__init__()
        if model not in MODELS:
            raise ValueError(f"model must be one of {', '.join(MODELS)}, got {model!r}")
        self.model, self.outputs, self.classes, self.dropout = model, outputs, classes, dropout
        self.input_dropout = input_dropout
        self.fields = NodeFields(num_types, num_subtokens, dim)
        self.positions = torch.nn.Embedding(MAX_POSITION + 1, dim) if positions else None
        if model == "childsum":
            self.encoder: torch.nn.Module = ChildSumTreeLSTM(dim, hidden)
        elif model == "nary":
            self.encoder = NaryTreeLSTM(dim, hidden, n_ary=2, setting="general")
        else:
            self.encoder = torch.nn.LSTM(dim, hidden // 2, batch_first=True, bidirectional=True)
        self.readout = Readout("root-mean-max", hidden)  # the root: each tree's first node (pre-order)
        self.out = torch.nn.Linear(self.readout.out_channels, outputs * classes)

    def encode(self, batch: Batch) -> Tensor:
        """The node states ``[N, hidden]``."""
        x = self.fields(batch.node_type, batch.subtoken, batch.subtoken_index)
        if self.positions is not None:
            x = x + self.positions(batch.child_pos)
        x = dropout(x, self.input_dropout,
                    self.training)
        if self.model != "bilstm":
            return self.encoder(x, batch)[0]
        lengths = torch.bincount(batch.batch, minlength=batch.num_graphs).cpu()
        padded = pad_sequence(list(x.split(lengths.tolist())), batch_first=True)
        states = self.encoder(pack_padded_sequence(padded, lengths, batch_first=True, enforce_sorted=False))[0]
        states = pad_packed_sequence(states, batch_first=True)[0]
        mask = torch.arange(states.size(1)).unsqueeze(0) < lengths.unsqueeze(1)
        return states[mask]

    def forward(self, batch: Batch) -> Tensor:
        pooled = self.readout(self.encode(batch), batch)
        return self.out(dropout(pooled, self.dropout, self.training)).view(-1, self.outputs, self.classes)


class CodeTrainer(Trainer):
    """:class:`~graphtree.train.Trainer` for one of the tasks: summed cross-entropy over the output positions,
    dev selection on accuracy (``kind``) or OGB's F1 (``name``, :func:`name_f1` against ``dev_names``, the dev
    functions' full names in order, with ``name_words`` the output classes)."""

    checkpoint_format = "code-1"

    def __init__(self, model: torch.nn.Module, optimizer: Any, *, task: str, dev_names: Sequence[Sequence[str]] = (),
                 name_words: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(model, optimizer, **kwargs)
        self.task, self.dev_names, self.name_words = task, dev_names, name_words
        self.metric = "f1" if task == "name" else "accuracy"
        self.csv_fields = ("epoch", "train_loss", f"dev_{self.metric}", "train_seconds", "seconds", "best")

    def _batch_loss(self, model: torch.nn.Module, batch: Batch) -> Tensor:
        scores = model(batch)
        return torch.nn.functional.cross_entropy(scores.flatten(0, 1), batch.y.flatten(), reduction="sum")

    @torch.no_grad()
    def predict(self, batches: Sequence[Batch]) -> Tensor:
        """The predicted class per function and output position, ``[num_graphs, outputs]``."""
        was_training = self.model.training
        self.model.eval()
        try:
            return torch.cat([self.model(self.to_device(b)).argmax(-1).cpu() for b in batches])
        finally:
            self.model.train(was_training)

    def scores(self, predicted: Tensor, gold: Tensor, names: Sequence[Sequence[str]]) -> dict[str, Any]:
        if self.task == "kind":
            return dict(accuracy=100 * float((predicted[:, 0] == gold[:, 0]).float().mean()), total=len(gold))
        guesses = [decode_name(p, self.name_words) for p in predicted.tolist()]
        return dict(name_f1(names, guesses), total=len(gold))

    def _validate(self, model: torch.nn.Module, dev_batches: list[Batch]) -> tuple[dict[str, float], dict[str, Any]]:
        gold = torch.cat([b.y for b in dev_batches])
        metrics = self.scores(self.predict(dev_batches), gold, self.dev_names)
        return {f"dev_{self.metric}": metrics[self.metric]}, metrics

    def _improves(self, dev: dict[str, Any], best_dev: dict[str, Any] | None) -> bool:
        return best_dev is None or dev[self.metric] > best_dev[self.metric]

    def _last_dev(self, history: list[dict]) -> str:
        return f"{history[-1][f'dev_{self.metric}']:.1f}" if history else "-"

    def _dev_summary(self, columns: dict[str, float]) -> str:
        return f"dev {self.metric} {columns[f'dev_{self.metric}']:.2f}"


def preorder_text(graph: Data, node_types: Sequence[str], subtokens: Sequence[str]) -> str:
    """A function's pre-order tokens as one string: each node's type, then its sub-tokens."""
    words: list[list[str]] = [[node_types[t]] for t in graph.node_type.tolist()]
    for w, node in zip(graph.subtoken.tolist(), graph.subtoken_index.tolist()):
        words[node].append(subtokens[w])
    return " ".join(w for node in words for w in node)


def tfidf_features(texts: dict[str, list[str]], min_df: int = 2, max_features: int | None = None) -> dict[str, Tensor]:
    """TF-IDF of word uni- and bigrams (sublinear tf, l2 rows; the n-grams of ``min_df`` training functions or more,
    the ``max_features`` commonest of them with a limit; fitted on ``texts["train"]``), each split as a sparse CSR
    tensor."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    vectorizer = TfidfVectorizer(token_pattern=r"\S+", lowercase=False, ngram_range=(1, 2), min_df=min_df,
                                 max_features=max_features, sublinear_tf=True, dtype=np.float32)
    fitted = {"train": vectorizer.fit_transform(texts["train"])}
    fitted.update({s: vectorizer.transform(t) for s, t in texts.items() if s != "train"})
    out = {}
    for split, matrix in fitted.items():
        matrix = matrix.tocsr().astype("float32")
        out[split] = torch.sparse_csr_tensor(torch.from_numpy(matrix.indptr).long(),
                                             torch.from_numpy(matrix.indices).long(),
                                             torch.from_numpy(matrix.data), size=matrix.shape)
    return out
