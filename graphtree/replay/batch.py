"""The padded batch as a model sees it, what a plain batch counts (its graphs, its graph attributes), and the node
loss that weighs the replicas 0."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Batch, Data

from ..data import NO_LABEL
from .buckets import ReplayError

__all__ = ["NOT_PADDED", "PaddedBatch", "graph_keys", "model_node_loss", "num_graphs", "reading",
           "weighted_node_loss"]

# Attributes whose padded copies would mislead: the levels are the padded plan's, and a graph id per node would
# count the replicas as nodes of their source's graph (``batch`` is made anew, ``ptr`` cannot be: PaddedBatch).
NOT_PADDED = frozenset({"height", "depth", "batch", "ptr", "edge_index", "edge_pos"})

_NO_PTR = ("a padded batch has no ptr: its rows are sorted by level (the padded plan's order), not grouped by "
           "graph, so no graph's rows are one slice of them. Use batch.batch (each row's graph; replicas in graph "
           "batch.num_graphs, one past the batch's) with size=batch.num_graphs + 1")


class PaddedBatch(Data):
    """A batch padded to a :class:`~graphtree.replay.BucketShape`: every per-node attribute of the batch,
    gathered from the node each padded row copies, and ``node_weight`` (1 on the batch's nodes, 0 on replicas).
    Its schedule is fixed: graphtree's cells run on its padded bottom-up plan.

    What a replica must not copy is made anew: ``is_root`` is False on every replica (the batch's roots are the
    padded batch's, once each); ``is_leaf`` is its source's, as its children are. ``batch`` gives each of the
    batch's rows its graph and every replica graph ``num_graphs``, one past the batch's; ``num_graphs`` is the
    batch's count. So a pooling per graph has one row more than the batch has graphs, the replicas', last::

        g = global_mean_pool(h, batch.batch, size=batch.num_graphs + 1)[:batch.num_graphs]

    gives the batch's graphs, on a padded batch as on a plain one (where the extra row is empty). Give ``size``:
    without it PyG reads ``batch.max()`` on the host at every step, which a CUDA graph cannot capture (the step
    then runs eagerly, with a warning); ``size=batch.num_graphs`` puts the replicas' rows past the end, which
    PyG's scatter refuses (an index out of bounds: a RuntimeError on the CPU, a device-side assert on a GPU).
    ``ptr`` cannot be defined (the rows are sorted by level, not grouped by graph): reading it raises
    :class:`~graphtree.replay.ReplayError`. Graph attributes (tensors neither per node nor per edge, e.g.
    ``graph_y``) are the batch's, unchanged; anything that is not a tensor is left out, as a replayed graph
    could not refill it.
    """

    padded: ClassVar[bool] = True  # read on the class by the models, which do not import this module

    def __getattr__(self, key: str) -> Any:
        self._note(key)
        return super().__getattr__(key)

    def __getitem__(self, key: str) -> Any:
        self._note(key)
        return super().__getitem__(key)

    def _note(self, key: str) -> None:
        """Refuse ``ptr``; while :func:`reading` records, note the attribute read (attributes found by normal
        lookup, such as ``num_nodes``, go past both methods and are not noted)."""
        if key == "ptr":
            raise ReplayError(_NO_PTR)
        reads = self.__dict__.get("_reads")
        if reads is not None:
            reads.add(key)


@contextmanager
def reading(batch: PaddedBatch) -> Iterator[set[str]]:
    """The attributes of ``batch`` read inside the block (what the loss check names when a loss differs)."""
    reads: set[str] = set()
    batch.__dict__["_reads"] = reads  # not Data.__setattr__: that would store it as an attribute of the batch
    try:
        yield reads
    finally:
        batch.__dict__.pop("_reads", None)


def num_graphs(batch: Any) -> int:
    """The graphs of a plain batch: a ``Batch``'s count, else one past its largest graph id, else 1."""
    if isinstance(batch, Batch):
        return int(batch.num_graphs)
    graph = getattr(batch, "batch", None)
    return int(graph.max()) + 1 if isinstance(graph, Tensor) and graph.numel() else 1


def graph_keys(batch: Any) -> list[str]:
    """The graph attributes of a plain batch: tensors that PyG does not take for per-node ones, with a row per
    graph (or none: a scalar) or else not per edge either. A row per graph wins over PyG's per-edge guess, which
    only compares sizes (a batch of as many edges as graphs is common); where every graph has one node, PyG takes
    ``[num_graphs]`` tensors for per-node ones, and so does this."""
    graphs = num_graphs(batch)
    keys = []
    for key in batch.keys():
        value = batch[key]
        if key in NOT_PADDED or not isinstance(value, Tensor) or batch.is_node_attr(key):
            continue
        if value.dim() == 0 or value.size(0) == graphs or not batch.is_edge_attr(key):
            keys.append(key)
    return keys


def weighted_node_loss(logits: Tensor, y: Tensor, weight: Tensor) -> Tensor:
    """:func:`graphtree.models.node_loss` of a padded batch: the cross-entropy summed over labelled nodes, each
    weighed by ``weight`` (0 on replicas), with no data-dependent shapes."""
    weight = weight.to(logits.dtype) * (y != NO_LABEL).to(logits.dtype)
    return (F.cross_entropy(logits, y.clamp(min=0), reduction="none") * weight).sum()


def model_node_loss(model: torch.nn.Module, batch: Any) -> Tensor:
    """The node loss of ``model`` on a padded batch, or on a plain one (a model whose step runs eagerly)."""
    weight = batch.node_weight if isinstance(batch, PaddedBatch) else torch.ones_like(batch.y, dtype=torch.float)
    return weighted_node_loss(model(batch), batch.y, weight)
