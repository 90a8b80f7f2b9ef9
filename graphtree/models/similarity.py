"""Sentence-pair relatedness (Tai et al. 2015, §4.2): sentence encoders, the similarity head of eq 15, the KL loss.

An *encoder* maps a batch of trees (with ``word`` ids) to one vector per
sentence, ``[num_graphs, out_channels]``; :class:`PairSimilarity` runs it on
both sides of a batch of :class:`~graphtree.datasets.PairData` in one pass and
feeds the two sentence vectors to :class:`SimilarityHead`.

* :class:`TreeEncoder` — the root state of any tree cell (Child-Sum on
  dependency trees: Tai's Dependency Tree-LSTM; the binary N-ary cell on
  binarized trees: the Constituency Tree-LSTM).
* :class:`SequenceEncoder` — an LSTM over the words in sentence order, or a
  bidirectional one (Tai's footnote 2: forward and backward share weights).
* :class:`MeanEncoder` — the mean of the word vectors (Tai's mean-vector baseline).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Linear
from torch.nn.utils.rnn import pack_padded_sequence

from ..data.pairs import pair_side
from ..data.tree import NO_WORD
from ..errors import InvalidArgumentError
from ..nn.cell import TreeCell, first_state
from ..nn.functional import dropout
from .classifier import NodeEmbedding

__all__ = ["MeanEncoder", "PairSimilarity", "SequenceEncoder", "SimilarityHead", "TreeEncoder",
           "padded_words", "root_states", "roots_of", "similarity_loss"]


def _num_graphs(batch: Any) -> int:
    ptr = getattr(batch, "ptr", None)
    if ptr is not None:
        return int(ptr.numel() - 1)
    graph = getattr(batch, "batch", None)
    return 1 if graph is None or graph.numel() == 0 else int(graph.max()) + 1


def _graph_of_nodes(batch: Any, num_nodes: int, device: torch.device) -> Tensor:
    graph = getattr(batch, "batch", None)
    return graph if graph is not None else torch.zeros(num_nodes, dtype=torch.long, device=device)


def roots_of(batch: Any) -> Tensor:
    """Indices of the roots of ``batch``, one per tree, in graph order.

    Raises:
        ValueError: a tree without exactly one root (a forest cannot be one sentence vector).
    """
    roots = batch.is_root.nonzero().view(-1)
    if roots.numel() != _num_graphs(batch):
        raise InvalidArgumentError(
            f"expected one root per tree, got {roots.numel()} roots for {_num_graphs(batch)} trees")
    return roots


def _padded(batch: Any) -> bool:
    """Whether ``batch`` is a :class:`graphtree.replay.PaddedBatch`, as its class says: the models sit below
    graphtree.replay (which imports the training code), so they do not import it."""
    return getattr(type(batch), "padded", False) is True


def root_states(h: Tensor, batch: Any) -> Tensor:
    """Each tree's root row of ``h``, in graph order: ``h[roots_of(batch)]``, and on a padded batch
    (:class:`graphtree.replay.PaddedBatch`, whose rows are sorted by level and hold replicas that are never
    roots) the rows summed per graph with all but the roots zeroed, the replicas' graph dropped: the same
    numbers (a root's row plus exact zeros), without asking the host how many roots there are."""
    if not _padded(batch):
        return h[roots_of(batch)]
    roots = h * batch.is_root.unsqueeze(-1).to(h.dtype)
    size = batch.num_graphs
    return h.new_zeros(size + 1, *h.shape[1:]).index_add_(0, batch.batch, roots)[:size]


def padded_words(x: Tensor, batch: Any, reverse: bool = False) -> tuple[Tensor, Tensor]:
    """The word vectors of each sentence in word order (or reversed), padded with zeros.

    Args:
        x: ``[num_nodes, D]`` node vectors; rows of nodes without a word are ignored.
        batch: The trees (``word_pos``, and ``batch`` when there are several).
        reverse: Last word first (each sentence reversed within its own length).

    Returns:
        ``([B, T, D], [B])``: the padded sequences and their lengths.
    """
    is_word = batch.word_pos != NO_WORD
    graph = _graph_of_nodes(batch, x.size(0), x.device)[is_word]
    pos = batch.word_pos[is_word]
    lengths = torch.bincount(graph, minlength=_num_graphs(batch))
    if reverse:
        pos = lengths[graph] - 1 - pos
    out = x.new_zeros(lengths.numel(), int(lengths.max()), x.size(-1))
    out[graph, pos] = x[is_word]
    return out, lengths


class TreeEncoder(torch.nn.Module):
    """The root hidden state :math:`h_{root}` of a tree cell run on word vectors.

    Args:
        embedding (NodeEmbedding): Word vectors (inner nodes without a word get zeros), or another input
            module with ``node_inputs(batch)`` (:class:`~graphtree.models.EncoderLeaves`).
        cell (TreeCell): Any cell returning ``(h, c, ...)``, e.g.
            :class:`~graphtree.nn.ChildSumTreeLSTM` or :class:`~graphtree.nn.NaryTreeLSTM`.
        input_dropout (float): Dropout on the word vectors in training (default 0).

    Shapes:
        - **input:** a ``Batch`` of :math:`B` trees with ``word`` ids.
        - **output:** :math:`(B, d)`.
    """

    def __init__(self, embedding: NodeEmbedding, cell: TreeCell, input_dropout: float = 0.0) -> None:
        super().__init__()
        self.embedding, self.cell, self.input_dropout = embedding, cell, input_dropout
        self.out_channels = cell.state_channels[0]

    def forward(self, batch: Any) -> Tensor:
        x = dropout(self.embedding.node_inputs(batch), self.input_dropout, self.training)
        return root_states(first_state(self.cell(x, batch)), batch)


class SequenceEncoder(torch.nn.Module):
    """The last hidden state of an LSTM over the words in sentence order (the tree is ignored).

    Bidirectional: the concatenation of the last states of a forward and a
    backward pass, :math:`[\\overrightarrow{h}_n; \\overleftarrow{h}_1]`. With
    ``tied=True`` both passes use the same weights, as in Tai et al.'s
    footnote 2 (so the parameter count equals the unidirectional LSTM's).

    Args:
        embedding (NodeEmbedding): Word vectors.
        hidden_channels (int): Memory dimension :math:`d`.
        bidirectional (bool): Add the backward pass.
        tied (bool): Share the weights of the two passes (default ``True``).
        input_dropout (float): Dropout on the word vectors in training (default 0).

    Shapes:
        - **input:** a ``Batch`` of :math:`B` trees with ``word`` ids and ``word_pos``.
        - **output:** :math:`(B, d)`, or :math:`(B, 2d)` when bidirectional.
    """

    def __init__(self, embedding: NodeEmbedding, hidden_channels: int, bidirectional: bool = False,
                 tied: bool = True, input_dropout: float = 0.0) -> None:
        super().__init__()
        self.embedding, self.input_dropout, self.bidirectional = embedding, input_dropout, bidirectional
        self.lstm = torch.nn.LSTM(embedding.embedding_dim, hidden_channels, batch_first=True)
        self.lstm_backward = (torch.nn.LSTM(embedding.embedding_dim, hidden_channels, batch_first=True)
                              if bidirectional and not tied else None)
        self.out_channels = hidden_channels * (2 if bidirectional else 1)

    def _last_state(self, lstm: torch.nn.LSTM, x: Tensor, lengths: Tensor) -> Tensor:
        # Packing makes h_n the state after each sentence's own last word, not after the padding.
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        return lstm(packed)[1][0][-1]

    def forward(self, batch: Any) -> Tensor:
        x = dropout(self.embedding.node_inputs(batch), self.input_dropout, self.training)
        seq, lengths = padded_words(x, batch)
        h = self._last_state(self.lstm, seq, lengths)
        if not self.bidirectional:
            return h
        backward = self.lstm_backward if self.lstm_backward is not None else self.lstm
        return torch.cat([h, self._last_state(backward, padded_words(x, batch, reverse=True)[0], lengths)], dim=-1)


class MeanEncoder(torch.nn.Module):
    """The mean of a sentence's word vectors (Tai et al.'s mean-vector baseline; no parameters of its own).

    Shapes:
        - **input:** a ``Batch`` of :math:`B` trees with ``word`` ids.
        - **output:** :math:`(B, D)`.
    """

    def __init__(self, embedding: NodeEmbedding) -> None:
        super().__init__()
        self.embedding = embedding
        self.out_channels = embedding.embedding_dim

    def forward(self, batch: Any) -> Tensor:
        x = self.embedding.node_inputs(batch)
        is_word = (batch.word_pos != NO_WORD).to(x.dtype)
        graph = _graph_of_nodes(batch, x.size(0), x.device)
        total = x.new_zeros(_num_graphs(batch), x.size(-1)).index_add(0, graph, x * is_word.unsqueeze(-1))
        count = x.new_zeros(_num_graphs(batch)).index_add(0, graph, is_word)
        return total / count.clamp(min=1).unsqueeze(-1)


class SimilarityHead(torch.nn.Module):
    r"""The similarity network of Tai et al. (2015), eq 15:

    .. math::
        h_\times &= h_L \odot h_R, \qquad h_+ = |h_L - h_R|,

        h_s &= \sigma\left(W^{(\times)} h_\times + W^{(+)} h_+ + b^{(h)}\right),

        \hat{p}_\theta &= \mathrm{softmax}\left(W^{(p)} h_s + b^{(p)}\right),

        \hat{y} &= r^\top \hat{p}_\theta, \qquad r^\top = [1\ 2\ \dots\ K].

    :meth:`forward` returns :math:`\log \hat{p}_\theta` (what
    :func:`similarity_loss` takes); :meth:`score` turns it into :math:`\hat{y}`.

    Args:
        in_channels (int): Size of :math:`h_L` and :math:`h_R`.
        hidden_channels (int): Size of :math:`h_s` (Tai: 50).
        num_classes (int): :math:`K` (5 for SICK).

    Shapes:
        - **input:** :math:`h_L, h_R` of shape :math:`(B, F_{in})`.
        - **output:** :math:`\log \hat{p}_\theta` of shape :math:`(B, K)`.
    """

    def __init__(self, in_channels: int, hidden_channels: int = 50, num_classes: int = 5) -> None:
        super().__init__()
        self.W_times = Linear(in_channels, hidden_channels)  # W^(x) with the hidden bias b^(h)
        self.W_plus = Linear(in_channels, hidden_channels, bias=False)  # W^(+): b^(h) is counted once
        self.W_p = Linear(hidden_channels, num_classes)  # W^(p), b^(p)
        # Not persistent: r is fixed by K, so state_dicts hold only what is learned.
        self.register_buffer("r", torch.arange(1, num_classes + 1, dtype=torch.float), persistent=False)

    def reset_parameters(self) -> None:
        for layer in (self.W_times, self.W_plus, self.W_p):
            layer.reset_parameters()

    def forward(self, h_l: Tensor, h_r: Tensor) -> Tensor:
        h_s = torch.sigmoid(self.W_times(h_l * h_r) + self.W_plus((h_l - h_r).abs()))
        return F.log_softmax(self.W_p(h_s), dim=-1)

    def score(self, log_probs: Tensor) -> Tensor:
        """:math:`\\hat{y} = r^\\top \\hat{p}_\\theta`, in :math:`[1, K]`, shape :math:`(B,)`."""
        return log_probs.exp() @ self.r


def similarity_loss(log_probs: Tensor, target: Tensor) -> Tensor:
    r"""Summed KL divergence :math:`\sum_k \mathrm{KL}(p^{(k)} \,\|\, \hat{p}_\theta^{(k)})` (Tai et al. §4.2).

    .. math::
        \mathrm{KL}(p \,\|\, \hat{p}) = \sum_{i=1}^K p_i \left(\log p_i - \log \hat{p}_i\right),

    with :math:`0 \log 0 = 0`, so the sparse targets of
    :func:`~graphtree.datasets.sick_target` are fine. Divide by the number of
    pairs for Tai's :math:`\frac{1}{m}\sum_k`.

    Args:
        log_probs: :math:`(B, K)` predicted :math:`\log \hat{p}_\theta`.
        target: :math:`(B, K)` target distributions :math:`p`.
    """
    return F.kl_div(log_probs, target, reduction="sum")


class PairSimilarity(torch.nn.Module):
    """A sentence-pair relatedness model: one encoder for both sentences, then :class:`SimilarityHead`.

    Args:
        encoder: Maps a tree batch to ``[num_graphs, encoder.out_channels]``
            (:class:`TreeEncoder`, :class:`SequenceEncoder`, :class:`MeanEncoder`).
        hidden_channels (int): Size of :math:`h_s` (Tai: 50).
        num_classes (int): :math:`K`.

    Shapes:
        - **input:** a :class:`~graphtree.datasets.PairData` or a ``Batch`` of :math:`B` of them, with word ids.
        - **output:** :math:`\\log \\hat{p}_\\theta` of shape :math:`(B, K)`; :meth:`predict` gives :math:`\\hat{y}`.
    """

    def __init__(self, encoder: torch.nn.Module, hidden_channels: int = 50, num_classes: int = 5) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = SimilarityHead(encoder.out_channels, hidden_channels, num_classes)

    def forward(self, pairs: Any) -> Tensor:
        # Both sides as one batch of 2B trees: one level schedule for the whole minibatch.
        return self.forward_trees(pair_side(pairs, "both"))

    def forward_trees(self, trees: Any) -> Tensor:
        """The log-probabilities of the pairs whose sides are ``trees`` (``pair_side(pairs, "both")``:
        the a sides, then the b sides; or such a batch padded, :mod:`graphtree.replay`)."""
        h = self.encoder(trees)
        half = h.size(0) // 2
        return self.head(h[:half], h[half:])

    @torch.no_grad()
    def predict(self, pairs: Any) -> Tensor:
        """Predicted ratings :math:`\\hat{y}`, shape :math:`(B,)`."""
        return self.head.score(self(pairs))
