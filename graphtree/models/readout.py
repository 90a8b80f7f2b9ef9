r"""Graph readouts: one vector per graph from the states of its nodes, for graph labels.

A tree LSTM's root sums up its tree, but on trees of tens of nodes whose label
is spread over them (a function's kind, what its body calls) a pool over every
node reads more: ``experiments/code.py`` found ``[root; mean; max]`` best on
program trees. :class:`Readout` offers the usual choices, PyG's pools where
they serve.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch_geometric.nn import global_max_pool, global_mean_pool
from torch_geometric.nn.aggr import AttentionalAggregation
from torch_geometric.utils import scatter

from ..errors import InvalidArgumentError

__all__ = ["READOUTS", "Readout", "graph_index"]

READOUTS = ("root", "mean", "max", "root-mean-max", "attention")
"""The modes of :class:`Readout`."""


def graph_index(batch: Any, num_nodes: int, device: torch.device) -> tuple[Tensor, int]:
    """Each node's graph (``batch.batch``; all zeros for a single graph) and the number of graphs."""
    index = getattr(batch, "batch", None)
    if index is None:
        return torch.zeros(num_nodes, dtype=torch.long, device=device), 1
    return index, int(getattr(batch, "num_graphs", 1))


class Readout(torch.nn.Module):
    r"""Pool node states :math:`h_j` into one vector per graph :math:`G`:

    .. math::
        \text{root: } \frac{1}{|R_G|} \sum_{j \in R_G} h_j \qquad
        \text{mean: } \frac{1}{|G|} \sum_{j \in G} h_j \qquad
        \text{max: } \max_{j \in G} h_j \qquad
        \text{root-mean-max: } [\text{root}; \text{mean}; \text{max}]

    .. math::
        \text{attention: } \sum_{j \in G} \operatorname{softmax}_{j \in G}(w^\top h_j + b)\, h_j

    with :math:`R_G` the roots of :math:`G` (a tree has one; a DAG's roots are
    averaged): ``batch.is_root`` where the batch has it, else each graph's
    first node (the root of a pre-order tree). Mean and max are PyG's
    ``global_mean_pool`` / ``global_max_pool``, attention its
    ``AttentionalAggregation`` with a linear gate (Li et al. 2016, gated graph
    sequence networks' readout).

    Args:
        mode: One of :data:`READOUTS`.
        channels: Size of the node states (the gate's input for ``attention``).

    Shapes:
        - **input:** ``h`` :math:`(N, C)` and the batch (``batch``, ``num_graphs``; ``is_root`` or ``ptr``).
        - **output:** :math:`(B, F)`, :math:`F` = :attr:`out_channels` (:math:`3C` for ``root-mean-max``).
    """

    def __init__(self, mode: str, channels: int) -> None:
        super().__init__()
        if mode not in READOUTS:
            raise InvalidArgumentError(f"readout must be one of {', '.join(READOUTS)}, got {mode!r}")
        self.mode, self.channels = mode, channels
        self.out_channels = 3 * channels if mode == "root-mean-max" else channels
        self.attention = (AttentionalAggregation(torch.nn.Linear(channels, 1)) if mode == "attention" else None)

    def forward(self, h: Tensor, batch: Any) -> Tensor:
        index, size = graph_index(batch, h.size(0), h.device)
        # One row more than there are graphs, dropped at the end: on a padded batch (a replayed step,
        # graphtree.replay.PaddedBatch) the replica rows are graph num_graphs, and they must count nowhere; on a
        # plain batch the extra row is empty. No host read either way, so a CUDA graph can hold the pool.
        full = size + 1
        if self.mode == "root":
            return self.root(h, batch, index, full)[:size]
        if self.mode == "mean":
            return global_mean_pool(h, index, full)[:size]
        if self.mode == "max":
            return global_max_pool(h, index, full)[:size]
        if self.mode == "attention":
            return self.attention(h, index, dim_size=full)[:size]
        return torch.cat([self.root(h, batch, index, full), global_mean_pool(h, index, full),
                          global_max_pool(h, index, full)], dim=1)[:size]

    @staticmethod
    def root(h: Tensor, batch: Any, index: Tensor, size: int) -> Tensor:
        """The mean state of each graph's roots."""
        is_root = getattr(batch, "is_root", None)
        if is_root is None:
            ptr = getattr(batch, "ptr", None)
            first = h[ptr[:-1]] if ptr is not None else h[:1]  # each graph's first node
            return torch.cat([first, first.new_zeros(size - first.size(0), h.size(1))])
        weight = is_root.to(h.dtype).unsqueeze(-1)  # a mask, not an index: the shapes do not follow the data
        total = scatter(h * weight, index, dim=0, dim_size=size, reduce="sum")
        count = scatter(weight, index, dim=0, dim_size=size, reduce="sum")
        return total / count.clamp(min=1)

    def extra_repr(self) -> str:
        return f"{self.mode}, channels={self.channels}"
