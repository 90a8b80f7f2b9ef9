"""The models ``experiments/train.py --model`` offers (:data:`MODELS`): :func:`model_settings` checks that a
cell fits the data (children per node, where the inputs are), :func:`build_model` builds it under an output layer
(:class:`GraphModel`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.nn import Linear
from torch_geometric.utils import scatter

from graphtree.data.tree import NO_WORD
from graphtree.models import BiTreeLSTM, Readout
from graphtree.nn import LSTMRNN, SLSTM, ChildSumTreeLSTM, NaryTreeLSTM
from graphtree.nn.functional import dropout

from ..runs import fail
from .inputs import NodeInputs
from .names import MODELS
from .splits import SPLITS, GraphSplits
from .task import Task

__all__ = ["MODELS", "GraphModel", "NodeSequence", "PooledOutput", "Structure", "build_model", "describe_structure",
           "model_settings"]

_BINARY = ("slstm", "lstmrnn", "contree", "topdown", "bicontree")  # at most two children; only leaves read inputs
_TENG_VARIANTS = {"contree": "contree", "topdown": "top_down", "bicontree": "bicontree"}


@dataclass(frozen=True)
class Structure:
    """What the graphs of all splits ask of a cell.

    Attributes:
        max_children: The most children of any node (as positions: the largest ``edge_pos`` + 1).
        widest: Where the first node with that many children is (``<file>, line <n>``), or ``None``.
        binary_breach: Where the first node with more than two children is, or ``None``.
        inner_inputs: Where the first inner node with a word or features is, or ``None``.
    """

    max_children: int
    widest: str | None
    binary_breach: str | None
    inner_inputs: str | None


def describe_structure(splits: GraphSplits) -> Structure:
    """The :class:`Structure` of every graph of ``splits``."""
    most, widest, breach, inner = 0, None, None, None
    for split in SPLITS:
        for graph in splits.graphs[split]:
            width = int(graph.edge_pos.max()) + 1 if graph.edge_pos.numel() else 0
            if width > most:
                most, widest = width, splits.where(split, graph)
            if width > 2 and breach is None:
                breach = splits.where(split, graph)
            if inner is None:
                has_input = (graph.word_pos != NO_WORD) if getattr(graph, "x", None) is None else \
                    torch.ones(graph.num_nodes, dtype=torch.bool)
                if bool((has_input & ~graph.is_leaf).any()):
                    inner = splits.where(split, graph)
    return Structure(most, widest, breach, inner)


def model_settings(model: str, structure: Structure, in_channels: int, hidden: int) -> dict[str, Any]:
    """The settings of ``model`` on graphs of this structure (what :func:`build_model` builds).

    Raises:
        RunError: an unknown model; a binary model on nodes with more than two
            children, or on inner nodes that carry inputs it would not read
            (it names the first such graph).
    """
    if model not in MODELS:
        fail(f"--model {model}: not one of {', '.join(MODELS)}")
    if model in _BINARY:
        if structure.binary_breach is not None:
            fail(f"{structure.binary_breach}: --model {model} takes at most 2 children per node, and this graph has "
                 "a node with more; use childsum or nary")
        if structure.inner_inputs is not None:
            fail(f"{structure.inner_inputs}: --model {model} reads inputs at leaves only, and this graph has a word "
                 "or features at an inner node (a dependency tree?), which it would ignore; use childsum or nary")
    settings: dict[str, Any] = {"model": model, "in_channels": in_channels, "hidden": hidden}
    if model == "nary":
        settings["n_ary"] = max(structure.max_children, 1)
        settings["setting"] = "general" if structure.inner_inputs is not None else "constituency"
    if model == "lstmrnn":
        settings["hidden"] = in_channels  # a leaf's output is its input vector (Le & Zuidema, section 4)
    return settings


class CellOutput(torch.nn.Module):
    """A cell's ``h`` at every node, dropout, and a linear map to the outputs."""

    def __init__(self, cell: torch.nn.Module, out_channels: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.cell, self.dropout = cell, dropout
        self.out = Linear(cell.state_channels[0], out_channels)

    def forward(self, x: Tensor, batch: Any) -> Tensor:
        h = self.cell(x, batch)[0]
        return self.out(dropout(h, self.dropout, self.training))


class PooledOutput(torch.nn.Module):
    """A cell's ``h`` at every node pooled per graph (:class:`~graphtree.models.Readout`), dropout, and a linear
    map to the outputs: ``[num_graphs, C]``."""

    pools = True  # GraphModel: one row per graph already

    def __init__(self, cell: torch.nn.Module, readout: str, out_channels: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.cell, self.dropout = cell, dropout
        self.readout = Readout(readout, cell.state_channels[0])
        self.out = Linear(self.readout.out_channels, out_channels)

    def forward(self, x: Tensor, batch: Any) -> Tensor:
        h = self.cell(x, batch)[0]
        return self.out(dropout(self.readout(h, batch), self.dropout, self.training))


class NodeSequence(torch.nn.Module):
    """A bidirectional LSTM over each graph's nodes in node order (a PTB or code tree's pre-order, a sentence's
    words), the baseline without structure: ``h`` ``[N, hidden]`` (``hidden // 2`` per direction)."""

    def __init__(self, in_channels: int, hidden: int) -> None:
        super().__init__()
        if hidden < 2 or hidden % 2:
            raise ValueError(f"the BiLSTM's hidden size is split between its two directions: give an even size, "
                             f"got {hidden}")
        self.lstm = torch.nn.LSTM(in_channels, hidden // 2, batch_first=True, bidirectional=True)
        self.state_channels = (hidden, hidden)

    def forward(self, x: Tensor, batch: Any) -> tuple[Tensor, None]:
        from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence

        graph = getattr(batch, "batch", None)
        if graph is None:
            lengths = torch.tensor([x.size(0)])
        else:
            lengths = torch.bincount(graph, minlength=getattr(batch, "num_graphs", 1)).cpu()
        padded = pad_sequence(list(x.split(lengths.tolist())), batch_first=True)
        packed = pack_padded_sequence(padded, lengths, batch_first=True, enforce_sorted=False)
        states = pad_packed_sequence(self.lstm(packed)[0], batch_first=True)[0]
        mask = torch.arange(states.size(1)).unsqueeze(0) < lengths.unsqueeze(1)
        return states[mask.to(states.device)], None


def root_mean(out: Tensor, batch: Any) -> Tensor:
    """The mean of ``out`` over each graph's roots (a tree has one; a DAG may have several): ``[num_graphs, C]``.

    On a padded batch (:mod:`graphtree.replay`: rows sorted by level, replicas never roots and in a graph of
    their own, one past the batch's) the rows are summed per graph with all but the roots zeroed and divided by
    the roots' count, without asking the host how many roots there are."""
    from graphtree.replay import PaddedBatch  # here: graphtree.replay imports the training code

    if isinstance(batch, PaddedBatch):
        is_root = batch.is_root.to(out.dtype)
        size = batch.num_graphs
        total = out.new_zeros(size + 1, out.size(-1)).index_add_(0, batch.batch, out * is_root.unsqueeze(-1))
        count = out.new_zeros(size + 1).index_add_(0, batch.batch, is_root)
        return (total / count.clamp(min=1).unsqueeze(-1))[:size]
    roots = batch.is_root
    graph = getattr(batch, "batch", None)
    graph = graph[roots] if graph is not None else torch.zeros(int(roots.sum()), dtype=torch.long,
                                                               device=out.device)
    return scatter(out[roots], graph, dim=0, dim_size=getattr(batch, "num_graphs", 1), reduce="mean")


class GraphModel(torch.nn.Module):
    """``net(inputs(batch), batch)``: outputs at every node, or (``level="graph"``) their mean over each graph's roots.

    Args:
        inputs: The node input vectors (:class:`NodeInputs`).
        net: ``net(x, batch) -> [num_nodes, C]``, e.g. :class:`CellOutput` or :class:`~graphtree.models.BiTreeLSTM`.
        level: ``"graph"`` or ``"node"``.
    """

    def __init__(self, inputs: NodeInputs, net: torch.nn.Module, level: str) -> None:
        super().__init__()
        if level not in ("graph", "node"):
            raise ValueError(f"level must be 'graph' or 'node', got {level!r}")
        self.inputs, self.net, self.level = inputs, net, level

    def forward(self, batch: Any) -> Tensor:
        out = self.net(self.inputs(batch), batch)
        return out if self.level == "node" or getattr(self.net, "pools", False) else root_mean(out, batch)


def build_model(settings: Mapping[str, Any], task: Task, inputs: NodeInputs, dropout: float = 0.0,
                readout: str = "root") -> GraphModel:
    """The model of ``settings`` (:func:`model_settings`) for ``task``, on ``inputs``.

    The cells' ``h`` goes through dropout and a linear layer at every node
    (node labels, or ``readout="root"``: the graph's output is its roots'
    mean), or is pooled per graph by ``readout`` first
    (:class:`~graphtree.models.Readout`, graph labels); Teng & Zhang's models
    keep their own output layer (an MLP of ``hidden`` units) at the root and
    take the dropout on their inputs, as in the paper.
    """
    model, d_in, hidden = settings["model"], settings["in_channels"], settings["hidden"]
    if d_in != inputs.out_channels:
        raise ValueError(f"settings are for {d_in} input channels, the inputs have {inputs.out_channels}")
    if model in _TENG_VARIANTS:
        if readout != "root" and task.level == "graph":
            raise ValueError(f"--model {model} has its own output layer at the root; readout {readout!r} is for "
                             "the other models")
        net = BiTreeLSTM(d_in, hidden, task.out_channels, mlp_channels=hidden, variant=_TENG_VARIANTS[model],
                         dropout=dropout)
        return GraphModel(inputs, net, task.level)
    if model == "childsum":
        cell = ChildSumTreeLSTM(d_in, hidden)
    elif model == "nary":
        cell = NaryTreeLSTM(d_in, hidden, n_ary=settings["n_ary"], setting=settings["setting"])
    elif model == "slstm":
        cell = SLSTM(d_in, hidden, leaf="embedding" if d_in == hidden else "lstm")
    elif model == "bilstm":
        cell = NodeSequence(d_in, hidden)
    else:
        cell = LSTMRNN(d_in, hidden)
    if task.level == "graph" and readout != "root":
        return GraphModel(inputs, PooledOutput(cell, readout, task.out_channels, dropout), task.level)
    return GraphModel(inputs, CellOutput(cell, task.out_channels, dropout), task.level)


