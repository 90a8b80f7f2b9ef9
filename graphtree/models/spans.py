"""Sequential baselines on phrases: an LSTM over the words of every node's span."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Linear
from torch.nn.utils.rnn import pack_padded_sequence

from ..data import NO_WORD
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
        raise ValueError(f"node {node} of {num_nodes} covers no word: every node needs a word below it")
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
    of their Table 1. Every node of every tree is encoded as its own
    sequence, all in one packed ``torch.nn.LSTM`` call.

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
        lengths = end - start
        steps = torch.arange(int(lengths.max()), device=x.device)
        within = (steps < lengths.unsqueeze(1)).unsqueeze(-1)
        last = sentences.size(1) - 1
        forward_words = (start.unsqueeze(1) + steps).clamp(max=last)
        h = self._last_state(self.lstm, sentences[graph.unsqueeze(1), forward_words] * within, lengths)
        if self.bidirectional:
            backward_words = ((end - 1).unsqueeze(1) - steps).clamp(min=0)
            lstm = self.lstm_reverse if self.lstm_reverse is not None else self.lstm
            h = torch.cat([h, self._last_state(lstm, sentences[graph.unsqueeze(1), backward_words] * within,
                                               lengths)], dim=-1)
        return self.classifier(F.dropout(h, self.dropout, self.training))

    @staticmethod
    def _last_state(lstm: torch.nn.LSTM, spans: Tensor, lengths: Tensor) -> Tensor:
        packed = pack_padded_sequence(spans, lengths.cpu(), batch_first=True, enforce_sorted=False)
        return lstm(packed)[1][0][-1]

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(embedding={self.embedding.embedding_dim}, "
                f"hidden={self.lstm.hidden_size}, bidirectional={self.bidirectional}, "
                f"tied={self.lstm_reverse is None}, num_classes={self.classifier.out_features})")
