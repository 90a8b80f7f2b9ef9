"""The structure benchmarks (ListOps, Boolean circuits): sequence baselines and accuracy by a graph property.

* :func:`token_sequence` and :func:`topological_sequence` give a graph the
  sequence a :class:`SequenceLSTM` reads: ListOps' tokens (brackets
  included), or a DAG's nodes in a topological order with their wiring.
* :class:`SequenceLSTM`: ``nn.LSTM`` over that sequence, a class per graph
  from its last state (the baseline of ``experiments/structure.py``).
* :func:`structure_of` says what the graphs ask of a tree cell (for
  :func:`~lab.own_data.model_settings`); :func:`accuracy_by`
  breaks accuracy down by depth, size or any other integer per graph.
* :func:`structure_model` builds a model of ``experiments/structure.py`` (a tree
  cell on the gold graphs, or the sequence LSTM) with the sizes the script
  chooses; :func:`add_sequences` gives the graphs the sequence model's input.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence
from torch_geometric.data import Data

from graphtree.data.tree import NO_WORD
from graphtree.datasets.circuits import FAN_IN, NODE_TYPES
from graphtree.datasets.listops import LISTOPS_VOCAB
from graphtree.models import NodeEmbedding
from graphtree.nn.functional import dropout

from .own_data import NodeInputs, Structure, Task, build_model, model_settings

__all__ = ["SequenceLSTM", "accuracy_by", "add_sequences", "structure_model", "structure_of", "token_sequence",
           "topological_order", "topological_sequence"]

_TASKS = ("listops", "circuits")  # the benchmarks of experiments/structure.py


def token_sequence(data: Data) -> Data:
    """``data`` with its token ids ``word_flat`` as ``seq`` and their number as ``seq_len`` ``[1]``."""
    data.seq = data.word_flat
    data.seq_len = torch.tensor([data.seq.numel()])
    return data


def topological_order(data: Data) -> Tensor:
    """The nodes by height, ties in index order: every child comes before its parents."""
    return torch.sort(data.height, stable=True).indices


def topological_sequence(data: Data, slots: int, max_offset: int = 32) -> Data:
    """``data`` with its nodes in :func:`topological_order` as ``seq`` ``[N, F + slots * max_offset]``.

    A node's row is its features ``x``, then per child position (``edge_pos``
    below ``slots``) the one-hot distance back to that child in the sequence
    (1 to ``max_offset``; farther counts as ``max_offset``), zeros for an
    absent child: the sequence holds the whole DAG, wiring included.
    """
    order = topological_order(data)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel())
    child, parent = data.edge_index
    offset = (rank[parent] - rank[child]).clamp(max=max_offset) - 1
    wiring = torch.zeros(data.num_nodes, slots, max_offset)
    wiring[rank[parent], data.edge_pos, offset] = 1.0
    data.seq = torch.cat([data.x[order], wiring.flatten(1)], dim=1)
    data.seq_len = torch.tensor([data.num_nodes])
    return data


def add_sequences(graphs: Iterable[Data], task: str, max_offset: int) -> None:
    """Give each of ``task``'s graphs (``"listops"`` or ``"circuits"``) the sequence a :class:`SequenceLSTM` reads:
    ListOps' tokens (:func:`token_sequence`), or a circuit's gates in a topological order with the distances back
    to their operands up to ``max_offset`` (:func:`topological_sequence`)."""
    for graph in graphs:
        token_sequence(graph) if task == "listops" else topological_sequence(graph, max(FAN_IN.values()), max_offset)


class SequenceLSTM(torch.nn.Module):
    """``nn.LSTM`` over each graph's ``seq`` (:func:`token_sequence`, :func:`topological_sequence`); scores per
    graph from the last state through dropout and a linear layer: ``[num_graphs, out_channels]``.

    Args:
        in_channels: Width of a sequence element (of the embedding, with ``embedding``).
        hidden_channels: The LSTM's memory size.
        out_channels: Scores per graph.
        embedding: Vectors of the ids in ``seq`` (``None``: ``seq`` holds vectors already).
        dropout: Dropout on the last state in training.
    """

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int,
                 embedding: NodeEmbedding | None = None, dropout: float = 0.0) -> None:
        super().__init__()
        self.embedding, self.dropout = embedding, dropout
        self.lstm = torch.nn.LSTM(in_channels, hidden_channels, batch_first=True)
        self.out = torch.nn.Linear(hidden_channels, out_channels)

    def forward(self, batch: Any) -> Tensor:
        x = self.embedding(batch.seq) if self.embedding is not None else batch.seq
        lengths = batch.seq_len.view(-1).cpu()
        padded = pad_sequence(list(x.split(lengths.tolist())), batch_first=True)
        h = self.lstm(pack_padded_sequence(padded, lengths, batch_first=True, enforce_sorted=False))[1][0][-1]
        return self.out(dropout(h, self.dropout, self.training))


def structure_of(graphs: Iterable[Data], name: str) -> Structure:
    """The :class:`~lab.own_data.Structure` of generated ``graphs`` (``name``: where, in errors)."""
    most, inner = 0, False
    for graph in graphs:
        most = max(most, int(graph.edge_pos.max()) + 1 if graph.edge_pos.numel() else 0)
        has_input = (torch.ones(graph.num_nodes, dtype=torch.bool) if getattr(graph, "x", None) is not None
                     else graph.word_pos != NO_WORD)
        inner = inner or bool((has_input & ~graph.is_leaf).any())
    return Structure(most, name if most else None, name if most > 2 else None, name if inner else None)


def structure_model(task_name: str, model: str, splits: Mapping[str, Sequence[Data]], task: Task, *, dim: int,
                    hidden: int, dropout: float, max_offset: int) -> tuple[torch.nn.Module, dict[str, Any],
                                                                           NodeEmbedding | None]:
    """A model of ``experiments/structure.py`` on ``task_name``'s graphs (``"listops"`` or ``"circuits"``), its
    settings, and its word embedding (``None`` for circuits, whose inputs are their one-hot gate types).

    ``model`` is a cell of :data:`~lab.own_data.MODELS` on the gold
    graphs of ``splits`` (it must fit them: :func:`model_settings`), or
    ``"lstm"``: a :class:`SequenceLSTM` over the sequences of
    :func:`add_sequences` (``max_offset``: its circuits' operand distances).
    ListOps' tokens are vectors of ``dim``; ``hidden`` is the memory size,
    ``dropout`` that of the output layer.
    """
    if task_name not in _TASKS:
        raise ValueError(f"task must be one of {', '.join(_TASKS)}, got {task_name!r}")
    listops = task_name == "listops"
    embedding = NodeEmbedding(len(LISTOPS_VOCAB), dim) if listops else None
    if model == "lstm":
        width = dim if listops else len(NODE_TYPES) + max(FAN_IN.values()) * max_offset
        settings = dict(model="lstm", in_channels=width, hidden=hidden,
                        sequence="tokens" if listops else f"topological, operand offsets up to {max_offset}")
        return SequenceLSTM(width, hidden, task.out_channels, embedding, dropout), settings, embedding
    inputs = NodeInputs(embedding, 0 if listops else len(NODE_TYPES))
    structure = structure_of((g for s in splits.values() for g in s), f"the {task_name} graphs")
    settings = model_settings(model, structure, inputs.out_channels, hidden)
    return build_model(settings, task, inputs, dropout), settings, embedding


def accuracy_by(keys: Sequence[int], correct: Sequence[bool]) -> dict[str, dict[str, Any]]:
    """``{key: {"correct", "total", "accuracy"}}`` (accuracy in %) per distinct key, in increasing order."""
    if len(keys) != len(correct):
        raise ValueError(f"{len(keys)} keys for {len(correct)} results")
    out: dict[str, dict[str, Any]] = {}
    for key in sorted(set(keys)):
        hits = [c for k, c in zip(keys, correct) if k == key]
        out[str(key)] = {"correct": sum(hits), "total": len(hits), "accuracy": 100.0 * sum(hits) / len(hits)}
    return out
