"""Sequential baselines on phrases: an LSTM over the words of every node's span."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.nn import Linear

from ..data import NO_WORD
from ..errors import InvalidArgumentError
from ..nn.functional import dropout
from .classifier import NodeEmbedding
from .similarity import _graph_of_nodes, padded_words

__all__ = ["SpanLSTMClassifier", "word_spans"]


def word_spans(batch: Any) -> tuple[Tensor, Tensor]:
    """The words each node covers, as ``[start, end)`` word positions within its own sentence.

    A node covers its own word (if any) and the words of its descendants.
    Parents are visited in order of height, so every child's span is final when
    its parent reads it. A node that covers no word is an error.

    Returns:
        ``(start, end)``, each ``[num_nodes]`` long.
    """
    num_nodes = batch.num_nodes
    is_word = batch.word_pos != NO_WORD
    start = torch.where(is_word, batch.word_pos, torch.iinfo(torch.long).max)
    end = torch.where(is_word, batch.word_pos + 1, -1)
    child, parent = batch.edge_index
    if child.numel():
        parent_height = batch.height[parent]
        order = torch.argsort(parent_height, stable=True)
        bounds = torch.bincount(parent_height, minlength=int(parent_height.max()) + 1).cumsum(0).tolist()
        for lo, hi in zip([0, *bounds[:-1]], bounds):
            edges = order[lo:hi]
            if edges.numel():
                c, p = child[edges], parent[edges]
                start.scatter_reduce_(0, p, start[c], "amin")
                end.scatter_reduce_(0, p, end[c], "amax")
    if bool((end < 0).any()):
        node = int((end < 0).nonzero()[0])
        raise InvalidArgumentError(f"node {node} of {num_nodes} covers no word: every node needs a word below it")
    return start, end


class SpanLSTMClassifier(torch.nn.Module):
    r"""The sequential LSTM baselines of Tai et al. (2015), §5.1 and Table 2: the
    sentiment of a phrase is predicted from an LSTM run over the phrase's words
    alone, and the model is trained on the spans of all labelled nodes. For
    each node :math:`j` covering words :math:`w_s \ldots w_e`,

    .. math::
        h_j = \big[\overrightarrow{\mathrm{LSTM}}(x_s, \ldots, x_e);\;
        \overleftarrow{\mathrm{LSTM}}(x_e, \ldots, x_s)\big], \qquad
        \hat{p}(y \mid j) = \mathrm{softmax}(W^{(s)} h_j + b^{(s)})

    (the last state of each direction; one direction only when
    ``bidirectional=False``). With ``tied=True`` both directions share their
    weights, as in Tai et al.'s footnote 2, so the BiLSTM has the LSTM's
    parameter count: ``hidden_channels=168`` on 300d vectors gives the 315,840
    of their Table 1. Each node's state is the LSTM's over its own span
    alone; spans that begin at the same word share one run of the LSTM
    (:func:`_span_states`).

    Args:
        embedding (NodeEmbedding): Word vectors.
        hidden_channels (int): LSTM memory size :math:`d`.
        num_classes (int): Number of labels.
        bidirectional (bool): Add the reversed pass (default ``True``).
        tied (bool): Share the two directions' weights (default ``True``).
        dropout (float): Dropout on :math:`h_j` before the classifier (default 0.5).

    Shapes:
        - **input:** a ``Batch`` of trees with ``word`` ids, ``word_pos`` and ``height``.
        - **output:** logits :math:`(|\mathcal{V}|, C)` for every node.
    """

    def __init__(self, embedding: NodeEmbedding, hidden_channels: int, num_classes: int,
                 bidirectional: bool = True, tied: bool = True, dropout: float = 0.5) -> None:
        super().__init__()
        self.embedding, self.dropout, self.bidirectional = embedding, dropout, bidirectional
        self.lstm = torch.nn.LSTM(embedding.embedding_dim, hidden_channels, batch_first=True)
        self.lstm_reverse = (torch.nn.LSTM(embedding.embedding_dim, hidden_channels, batch_first=True)
                             if bidirectional and not tied else None)
        self.classifier = Linear(hidden_channels * (2 if bidirectional else 1), num_classes)

    def forward(self, batch: Any) -> Tensor:
        x = self.embedding(batch.word)
        sentences, _ = padded_words(x, batch)  # [B, T, D]
        start, end = word_spans(batch)
        graph = _graph_of_nodes(batch, x.size(0), x.device)
        h = _span_states(self.lstm, sentences, graph, start, end, reverse=False)
        if self.bidirectional:
            lstm = self.lstm_reverse if self.lstm_reverse is not None else self.lstm
            h = torch.cat([h, _span_states(lstm, sentences, graph, start, end, reverse=True)], dim=-1)
        return self.classifier(dropout(h, self.dropout, self.training))

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(embedding={self.embedding.embedding_dim}, "
                f"hidden={self.lstm.hidden_size}, bidirectional={self.bidirectional}, "
                f"tied={self.lstm_reverse is None}, num_classes={self.classifier.out_features})")


def _span_states(lstm: torch.nn.LSTM, sentences: Tensor, graph: Tensor, start: Tensor, end: Tensor,
                 reverse: bool) -> Tensor:
    """Each node's last state of ``lstm`` run over the words of its span, first to last (last to first with
    ``reverse``): ``[num_nodes, hidden]``.

    Spans that begin at the same word (end there, reversed) share every state up to the shorter one's length,
    so one sequence per sentence and first word, as long as the longest span read from it, gives each span's
    state at its own length: a sentence of n words needs n sequences, not one per node. The sequences run in
    groups of similar length (up to 1, 2, 4, 8... words), padded to the longest of their group; a state depends
    only on the steps before it, so the padding after a span never reaches the span's state.
    """
    positions = sentences.size(1)
    first = end - 1 if reverse else start
    lengths = end - start
    keys, sequence_of = torch.unique(graph * positions + first, return_inverse=True)
    sequence_length = torch.zeros_like(keys).scatter_reduce_(0, sequence_of, lengths, "amax", include_self=False)
    sequence_graph, sequence_first = keys // positions, keys % positions
    group = torch.ceil(torch.log2(sequence_length.double())).long()  # 1 -> 0, 2 -> 1, 3-4 -> 2, 5-8 -> 3...
    node_group = group[sequence_of]
    nodes, states = [], []
    for g in torch.unique(group).tolist():
        members = (group == g).nonzero().view(-1)
        steps = torch.arange(int(sequence_length[members].max()), device=sentences.device)
        words = sequence_first[members].unsqueeze(1) + (-steps if reverse else steps)
        out = lstm(sentences[sequence_graph[members].unsqueeze(1), words.clamp(0, positions - 1)])[0]
        local = torch.empty_like(sequence_of)
        local[members] = torch.arange(members.numel(), device=sentences.device)
        read = (node_group == g).nonzero().view(-1)
        nodes.append(read)
        states.append(out[local[sequence_of[read]], lengths[read] - 1])
    order = torch.cat(nodes)
    return torch.cat(states).index_select(0, torch.argsort(order))
