"""Training steps replayed as CUDA graphs: one launch per step instead of hundreds.

On a GPU the level loop is host-bound: each level issues a few small kernels
from Python and autograd, each a few microseconds of GPU work behind tens of
microseconds of host work. A CUDA graph records a whole step (forward, backward
and optimizer step) once and replays it with one launch; what it needs is
static shapes and no host synchronization inside the step.

Static shapes come from **buckets**. A batch's bottom-up levels are padded to
widths from a short list (:class:`Buckets`): the number of levels is rounded up
to a multiple of ``level_step``, the levels are cut into dyadic segments (level
0, level 1, levels 2-3, 4-7, 8-15, ...), and every level of a segment gets the
segment's widest level rounded up to the grid ``exact_below * growth**k``. A
batch's :class:`BucketShape` (those widths and the slots per node) names the
graph that serves it, so a handful of graphs serve a whole epoch
(``benchmarks/gpu_step.py`` reports how many, and the padding they cost).

Padding changes nothing. A padded row of a level is a **replica** of a real
node of that level (its first one; past the batch's top level, a node of its
top level): the same inputs and the same children, so it computes a copy of
that node's states from valid numbers, never from empty rows (no cell sees a
node at a level above 0 without children). Nothing reads a replica's states: no
node has it as a child, and the loss weighs it 0 (``node_weight``), so the
gradients it sends back are exact zeros. The model runs on the padded node set
(:class:`PaddedBatch`), its per-node attributes gathered from the nodes each row
copies.

The cell's math is its ``update``, run by the engine's definition pass
(:func:`graphtree.engine.propagate`) on the padded plan: no copy of any cell's
equations lives here, and a cell of the user's own replays as the paper cells
do. What the padded pass cannot give is data-dependent host values:
top-down passes group their rows by position with counts read on the host
(``Children.position_counts``), so a model with a top-down pass raises
:class:`ReplayError` on its first step and :class:`ReplayedStep` runs it
eagerly.

On the CPU (and with ``graphs=False``) :class:`ReplayedStep` runs the padded
step eagerly: the tests compare it there with the plain step, and check that
it asks the host for nothing.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Data

from .backend import native
from .data import NO_LABEL
from .schedule import LevelPlan, Schedule, schedule_of

__all__ = ["BucketShape", "Buckets", "PaddedBatch", "ReplayError", "ReplayStats", "ReplayedStep", "pad",
           "padded_batch", "weighted_node_loss"]

# Attributes whose padded copies would mislead: the levels are the padded plan's, and a graph id per node would
# count the replicas as nodes of their source's graph.
_NOT_PADDED = frozenset({"height", "depth", "batch", "ptr", "edge_index", "edge_pos"})


class ReplayError(RuntimeError):
    """A model's step cannot run on a padded, static-shape plan (e.g. it reads host values of the batch)."""


@dataclass(frozen=True)
class Buckets:
    """How level widths are padded, so that few shapes serve an epoch.

    Args:
        growth: Ratio of successive widths on the grid (above ``exact_below``).
        exact_below: Widths up to this are kept as they are.
        level_step: The number of levels is rounded up to a multiple of this.
    """

    growth: float = 2.0
    exact_below: int = 8
    level_step: int = 8

    def __post_init__(self) -> None:
        if self.growth <= 1:
            raise ValueError(f"growth must be above 1, got {self.growth}")
        if self.exact_below < 1 or self.level_step < 1:
            raise ValueError("exact_below and level_step must be at least 1")

    def width(self, n: int) -> int:
        """``n`` rounded up to the grid (at least 1)."""
        if n <= self.exact_below:
            return max(int(n), 1)
        k = math.ceil(math.log(n / self.exact_below, self.growth) - 1e-9)
        width = math.ceil(self.exact_below * self.growth ** k)
        return width if width >= n else math.ceil(self.exact_below * self.growth ** (k + 1))

    def shape(self, level_sizes: Sequence[int], slots: int) -> BucketShape:
        """The padded shape of a plan with these level sizes and at most ``slots`` predecessors per node."""
        if not level_sizes:
            raise ReplayError("an empty batch has no levels to replay")
        num_levels = math.ceil(len(level_sizes) / self.level_step) * self.level_step
        widths: list[int] = []
        start = 0
        while start < num_levels:
            stop = min(max(2 * start, 1), num_levels)  # dyadic segments: [0], [1], [2, 3], [4, 7], ...
            widest = max(level_sizes[start:stop], default=1)
            widths += [self.width(widest)] * (stop - start)
            start = stop
        # Slots stay exact: a fixed-arity cell takes no more than its arity, and a batch's widest node varies little.
        return BucketShape(tuple(widths), int(slots))


class BucketShape(NamedTuple):
    """A padded plan's shape: each level's width, and the slots (predecessors) of every node above level 0."""

    widths: tuple[int, ...]
    slots: int

    @property
    def num_nodes(self) -> int:
        return sum(self.widths)


class _NoPositionCounts:
    """A padded plan's ``position_table``: the counts differ from batch to batch, so a cell that reads them
    (``Children.position_counts``) cannot run in a replayed step."""

    def __iter__(self):
        self._refuse()

    def __len__(self) -> int:
        self._refuse()

    def __getitem__(self, index: Any) -> int:
        self._refuse()

    def _refuse(self) -> Any:
        raise ReplayError("this cell reads Children.position_counts, host values that change from batch to "
                          "batch, so its step cannot be replayed; run it eagerly")


class _PaddedSchedule(Schedule):
    """The schedule of a :class:`PaddedBatch`: its bottom-up plan, fixed tensors refilled for every batch."""

    def __init__(self, plan: LevelPlan) -> None:  # no Schedule.__init__: nothing is built from edges
        self.num_nodes = plan.num_nodes
        self.batch = None
        device = plan.order.device
        self.edge_index = torch.empty(2, 0, dtype=torch.long, device=device)
        self.edge_pos = torch.empty(0, dtype=torch.long, device=device)
        self.height = self.depth = None
        self._plans = {"bottom_up": plan}

    def plan(self, direction: str) -> LevelPlan:
        if direction != "bottom_up":
            raise ReplayError(f"replayed steps run bottom-up passes only; this model asked for a {direction} "
                              "pass, which groups its rows by host counts: run it eagerly")
        return self._plans["bottom_up"]

    def describe_node(self, node: int) -> str:
        return f"padded node {node}"

    def check_fits(self, data: Any) -> None:  # a padded batch has nodes but no edges: its plan holds its slots
        if data.num_nodes != self.num_nodes:
            raise ReplayError(f"a padded schedule of {self.num_nodes} nodes on a batch of {data.num_nodes}")


class PaddedBatch(Data):
    """A batch padded to a :class:`BucketShape`: every per-node attribute of the batch, gathered from the node
    each padded row copies, and ``node_weight`` (1 on the batch's nodes, 0 on replicas). Its schedule is fixed:
    graphtree's cells run on its padded bottom-up plan."""


def _source_rows(plan: LevelPlan, shape: BucketShape) -> tuple[np.ndarray, np.ndarray]:
    """For every padded row, the level-sorted row of the node it copies; for every real row, its padded row
    (with one more entry: the empty row, for the slots)."""
    ptr, num_levels, num_nodes = plan.ptr, plan.num_levels, plan.num_nodes
    if num_levels > len(shape.widths):
        raise ReplayError(f"the batch has {num_levels} levels, its shape {len(shape.widths)}")
    starts = np.concatenate([[0], np.cumsum(shape.widths)])
    source = np.empty(int(starts[-1]), dtype=np.int64)
    padded_of = np.empty(num_nodes + 1, dtype=np.int64)
    padded_of[num_nodes] = starts[-1]
    top = ptr[num_levels - 1]  # the first node of the top level: what levels above the batch's copy
    for level, width in enumerate(shape.widths):
        a, b = (ptr[level], ptr[level + 1]) if level < num_levels else (top, top)
        s = int(starts[level])
        if b - a > width:
            raise ReplayError(f"level {level} has {b - a} nodes, its shape {width}")
        source[s:s + b - a] = np.arange(a, b)
        padded_of[a:b] = np.arange(s, s + b - a)
        source[s + b - a:s + width] = a if b > a else top
    return source, padded_of


def padded_batch(batch: Any, buckets: Buckets = Buckets()) -> tuple[BucketShape, dict[str, Tensor]]:
    """The bucket shape of ``batch`` and its padded host tensors (see the module docstring).

    Returns the shape and a dict of CPU tensors: ``slots`` and ``slot_pos`` (``[N', K]``: each padded row's
    predecessors, as padded node ids, ``N'`` where empty), ``node_weight`` (``[N']``), ``source`` (``[N']``: the
    batch node each row copies) and every per-node tensor attribute of ``batch``, gathered by ``source``.
    """
    plan = schedule_of(batch).plan("bottom_up")
    shape = buckets.shape(plan.level_sizes(), max(plan.widths, default=0))
    rows, padded_of = _source_rows(plan, shape)
    num_padded = shape.num_nodes
    index = plan.slot_matrix.numpy()
    width = index.shape[1]
    slots = np.full((num_padded, shape.slots), num_padded, dtype=np.int64)
    slots[:, :width] = padded_of[index[rows]]
    slot_pos = np.full((num_padded, shape.slots), -1, dtype=np.int64)
    slot_pos[:, :width] = plan.slot_pos_matrix.numpy()[rows]
    weight = np.zeros(num_padded, dtype=np.float32)
    weight[padded_of[:-1]] = 1.0
    source = torch.from_numpy(plan.order.numpy()[rows])
    tensors = dict(slots=torch.from_numpy(slots), slot_pos=torch.from_numpy(slot_pos),
                   node_weight=torch.from_numpy(weight).to(torch.get_default_dtype()), source=source)
    for key in batch.keys():
        value = batch[key]
        if key in _NOT_PADDED or not isinstance(value, Tensor) or not batch.is_node_attr(key):
            continue
        tensors[key] = value.detach().cpu().index_select(0, source)
    return shape, tensors


def weighted_node_loss(logits: Tensor, y: Tensor, weight: Tensor) -> Tensor:
    """:func:`graphtree.models.node_loss` of a padded batch: the cross-entropy summed over labelled nodes, each
    weighed by ``weight`` (0 on replicas), with no data-dependent shapes."""
    weight = weight.to(logits.dtype) * (y != NO_LABEL).to(logits.dtype)
    return (F.cross_entropy(logits, y.clamp(min=0), reduction="none") * weight).sum()


def _model_node_loss(model: torch.nn.Module, batch: Any) -> Tensor:
    """The node loss of ``model`` on a padded batch, or on a plain one (a model whose step runs eagerly)."""
    weight = batch.node_weight if isinstance(batch, PaddedBatch) else torch.ones_like(batch.y, dtype=torch.float)
    return weighted_node_loss(model(batch), batch.y, weight)


@dataclass
class _Bucket:
    """One bucket shape's fixed tensors, its padded batch, and once captured its graph and loss."""

    batch: PaddedBatch
    plan: LevelPlan
    fixed: dict[str, Tensor]
    graph: Any = None
    loss: Tensor | None = None


def _new_bucket(shape: BucketShape, tensors: dict[str, Tensor], device: torch.device) -> _Bucket:
    """Fixed tensors on ``device`` for ``shape`` (made like ``tensors``), a padded batch over them and its plan."""
    fixed = {key: torch.zeros(value.shape, dtype=value.dtype, device=device) for key, value in tensors.items()}
    starts = [0, *np.cumsum(shape.widths).tolist()]
    identity = torch.arange(shape.num_nodes, device=device)
    plan = LevelPlan("bottom_up", identity, identity, starts, fixed["slots"], fixed["slot_pos"],
                     [0] + [shape.slots] * (len(shape.widths) - 1), _NoPositionCounts(), [])
    batch = PaddedBatch(num_nodes=shape.num_nodes)
    for key, value in fixed.items():
        if key not in ("slots", "slot_pos"):
            batch[key] = value
    batch.schedule = _PaddedSchedule(plan)
    return _Bucket(batch, plan, fixed)


def _fill(bucket: _Bucket, tensors: dict[str, Tensor]) -> None:
    """Copy a batch's padded host tensors into the bucket's fixed ones (on a GPU asynchronously, from pinned
    memory)."""
    for key, value in tensors.items():
        fixed = bucket.fixed.get(key)
        if fixed is None or fixed.shape != value.shape or fixed.dtype != value.dtype:
            raise ReplayError(f"the batch's {key!r} does not match the first batch of its shape")
        on_gpu = fixed.is_cuda
        fixed.copy_(value.pin_memory() if on_gpu else value, non_blocking=on_gpu)


def pad(batch: Any, buckets: Buckets = Buckets(), device: torch.device | str | None = None) -> PaddedBatch:
    """``batch`` padded to its bucket shape, on ``device`` (default: where ``batch`` is): a :class:`PaddedBatch`
    that graphtree's cells run on as on ``batch`` (its rows ``source`` hold the states of those nodes)."""
    shape, tensors = padded_batch(batch, buckets)
    if device is None:
        device = next((v.device for v in batch.to_dict().values() if isinstance(v, Tensor)), torch.device("cpu"))
    bucket = _new_bucket(shape, tensors, torch.device(device))
    _fill(bucket, tensors)
    return bucket.batch


@dataclass
class ReplayStats:
    """What a :class:`ReplayedStep` did: steps by kind, graphs captured and the time that took, and the padding
    (nodes of the batches against rows run)."""

    eager: int = 0
    padded_eager: int = 0
    replayed: int = 0
    captures: int = 0
    capture_seconds: float = 0.0
    nodes: int = 0
    padded_nodes: int = 0
    shapes: set = field(default_factory=set)

    @property
    def padding(self) -> float:
        """Rows run over nodes of the batches (1.0: no padding)."""
        return self.padded_nodes / self.nodes if self.nodes else float("nan")


class ReplayedStep:
    """A training step (forward, loss, backward, optimizer step) that replays as a CUDA graph per bucket shape.

    The first batch runs eagerly on the padded plan (it trains, and warms the step up); then its step is
    captured. A batch of a shape seen before is copied into that graph's fixed tensors and replayed; one of a new
    shape is captured first, then replayed.
    Each call returns the batch's loss as a device tensor (no synchronization).

    Args:
        model: Maps a batch to per-node logits (e.g. :class:`~graphtree.models.TreeClassifier`); in a replayed
            step it gets a :class:`PaddedBatch`.
        optimizer: Its optimizer; a replayed step needs one that runs without host values
            (:func:`graphtree.train.make_optimizer` with ``capturable=True``).
        loss: ``loss(model, batch) -> scalar``; by default :func:`weighted_node_loss` of ``model(batch)``. It must
            weigh replicas 0 (``batch.node_weight``).
        buckets: The padding grid.
        graphs: Capture CUDA graphs (default: where the model is on a GPU). Without, the padded step runs eagerly.
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 loss: Callable[[torch.nn.Module, Any], Tensor] = _model_node_loss, buckets: Buckets = Buckets(),
                 graphs: bool | None = None) -> None:
        self.model, self.optimizer, self.loss, self.buckets = model, optimizer, loss, buckets
        self.device = next(model.parameters()).device
        self.graphs = self.device.type == "cuda" if graphs is None else graphs
        if self.graphs and self.device.type != "cuda":
            raise ValueError(f"CUDA graphs need a model on a GPU, this one is on {self.device}")
        self.stats = ReplayStats()
        self.replayable = True
        self._warm = False
        self._buckets: dict[BucketShape, _Bucket] = {}
        self._pool = torch.cuda.graph_pool_handle() if self.graphs else None

    def __call__(self, batch: Any) -> Tensor:
        if not self.replayable:
            return self._eager(batch)
        shape, tensors = padded_batch(batch, self.buckets)
        bucket = self._buckets.get(shape)
        if bucket is None:
            bucket = self._bucket(shape, tensors)
        self._fill(bucket, tensors)
        if bucket.graph is None and self.graphs and self._warm:
            self._capture(bucket)  # warm already: captured at once, and this batch's step is its first replay
            if bucket.graph is None:
                return self._eager(batch)
        if bucket.graph is not None:
            bucket.graph.replay()
            self.stats.replayed += 1
            loss = bucket.loss.clone()  # the graphs share one memory pool: the next replay may reuse the loss's
        else:
            # The first batch (and on the CPU every batch) runs eagerly on the padded plan: it trains, makes the
            # optimizer's state and warms the libraries up before any capture.
            try:
                loss = self._padded_step(bucket)
            except ReplayError as error:
                warnings.warn(f"{type(self.model).__name__}'s step is not replayed: {error}", stacklevel=2)
                self.replayable = False
                self._buckets.clear()
                return self._eager(batch)
            self.stats.padded_eager += 1
            self._warm = True
            if self.graphs:
                self._capture(bucket)
        self.stats.nodes += int(batch.num_nodes)
        self.stats.padded_nodes += shape.num_nodes
        self.stats.shapes.add(shape)
        return loss

    def _bucket(self, shape: BucketShape, tensors: dict[str, Tensor]) -> _Bucket:
        bucket = _new_bucket(shape, tensors, self.device)
        self._buckets[shape] = bucket
        return bucket

    def _fill(self, bucket: _Bucket, tensors: dict[str, Tensor]) -> None:
        _fill(bucket, tensors)

    def _step(self, batch: Any) -> Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss(self.model, batch)
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    def _eager(self, batch: Any) -> Tensor:
        self.stats.eager += 1
        return self._step(batch)

    def _padded_step(self, bucket: _Bucket) -> Tensor:
        # The padded plan's slot layouts are derived from its fixed tensors on first use: made anew here, never
        # kept from another batch. The compiled CPU kernels read host tables a padded plan lacks: off.
        bucket.plan._by_device.clear()
        with native.use_native(False):
            if not self.graphs:
                return self._step(bucket.batch)
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):  # warm-up work off the capture's stream, as PyTorch advises
                loss = self._step(bucket.batch)
            torch.cuda.current_stream(self.device).wait_stream(side)
            return loss

    def _capture(self, bucket: _Bucket) -> None:
        start = time.perf_counter()
        bucket.plan._by_device.clear()  # everything derived from the fixed tensors is recomputed in the graph
        self.optimizer.zero_grad(set_to_none=True)  # the graph's backward makes its own gradients
        graph = torch.cuda.CUDAGraph()
        try:
            with native.use_native(False), torch.cuda.graph(graph, pool=self._pool):
                loss = self.loss(self.model, bucket.batch)
                loss.backward()
                self.optimizer.step()
        except RuntimeError as error:  # e.g. an operation that waits on the GPU: nothing ran, the step stays eager
            warnings.warn(f"{type(self.model).__name__}'s step could not be captured, it runs eagerly: {error}",
                          stacklevel=3)
            self.optimizer.zero_grad(set_to_none=True)
            self.replayable = False
            self._buckets.clear()
            return
        bucket.graph, bucket.loss = graph, loss.detach()
        self.optimizer.zero_grad(set_to_none=True)
        bucket.plan._by_device.clear()
        self.stats.captures += 1
        self.stats.capture_seconds += time.perf_counter() - start
