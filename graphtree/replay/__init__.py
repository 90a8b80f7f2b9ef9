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
copies, except what would count a replica as a node of its source's graph: a
replica is never a root (``is_root``), and it belongs to a graph of its own,
``num_graphs``, one past the batch's (``batch``), so that pooling per graph
gives the batch's graphs first and the replicas' row last. Graph attributes
(``graph_y``) come as they are.

A loss that counts replicas anyway (a mean over all rows, a pooling that keeps
the replicas' row) would train on other numbers than the batch's, silently, so
:class:`ReplayedStep` checks once, on its first batch, that the loss of the
padded batch is the loss of the batch itself, and names what the loss read if
not.

The cell's math is its ``update``, run by the engine's definition pass
(:func:`graphtree.engine.propagate`) on the padded plan: no copy of any cell's
equations lives here, and a cell of the user's own replays as the paper cells
do. What the padded pass cannot give is data-dependent host values.

A top-down pass groups its rows by their position under the parent, with
counts read on the host (``Children.position_counts``: the top-down Tree-LSTM
runs each position's rows with that position's weights). So a model with a
top-down pass gets a **padded top-down plan** too (:func:`padded_batch` with
``top_down=True``; :class:`ReplayedStep` asks for it where a module of the
model runs top-down): rows of its own, level by level by depth, where each
level's filled slots at each position are rounded on the segments and grid of
the widths (:meth:`Buckets.top_down`) and belong to the shape, as the widths
do, so the counts a cell reads are host numbers fixed per graph. Its replicas
run a node of their level once more, from that node's first parent, at the
position their block needs; no row reads them, and every padded row returns
the top-down states of the node it copies (:func:`_top_down_rows`). A model
whose top-down pass no module declares (a bottom-up cell run top-down through
the engine) finds no top-down plan on its padded batch: it raises
:class:`~graphtree.errors.HostValueError` on its first step, and
:class:`ReplayedStep` runs it eagerly, with a warning.

On the CPU (and with ``graphs=False``) :class:`ReplayedStep` runs the padded
step eagerly: the tests compare it there with the plain step, and check that
it asks the host for nothing. It refuses an optimizer that a graph could not
hold there too, so that a step that runs on the CPU replays on a GPU.
"""

from __future__ import annotations

import copy
import math
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Batch, Data

from .backend import native
from .data import NO_LABEL
from .errors import HostValueError
from .schedule import LevelPlan, Schedule, schedule_of

__all__ = ["BucketShape", "Buckets", "PaddedBatch", "ReplayError", "ReplayStats", "ReplayedStep", "pad",
           "padded_batch", "weighted_node_loss"]

# Attributes whose padded copies would mislead: the levels are the padded plan's, and a graph id per node would
# count the replicas as nodes of their source's graph (``batch`` is made anew, ``ptr`` cannot be: PaddedBatch).
_NOT_PADDED = frozenset({"height", "depth", "batch", "ptr", "edge_index", "edge_pos"})

# Per-node flags that a replica must not copy: a root counted twice is a second root (graphtree.data.tree makes
# ``is_root``). ``is_leaf`` is copied: a replica reads its source's children, so it is a leaf where its source is.
_ROOT_FLAGS = frozenset({"is_root"})

# The padded plans' tensors: the bucket's plans hold them, the padded batch does not (``down_rank`` has a row per
# node, and would pass for a per-node attribute).
_PLAN_KEYS = frozenset({"slots", "slot_pos", "down_slots", "down_slot_pos", "down_order", "down_rank"})

_NO_PTR = ("a padded batch has no ptr: its rows are sorted by level (the padded plan's order), not grouped by "
           "graph, so no graph's rows are one slice of them. Use batch.batch (each row's graph; replicas in graph "
           "batch.num_graphs, one past the batch's) with size=batch.num_graphs + 1")


class ReplayError(HostValueError):
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
        for start, stop in _segments(num_levels):
            widest = max(level_sizes[start:stop], default=1)
            widths += [self.width(widest)] * (stop - start)
        # Slots stay exact: a fixed-arity cell takes no more than its arity, and a batch's widest node varies little.
        return BucketShape(tuple(widths), int(slots))

    def top_down(self, num_levels: int, level_sizes: Sequence[int], filled: Sequence[Sequence[int]],
                 slots: int) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
        """The padded top-down levels of a plan with these level sizes (by depth), ``filled[l][p]`` filled slots
        of level ``l`` at position ``p`` and at most ``slots`` parents per node, over ``num_levels`` levels (the
        bottom-up shape's: a batch has as many depths as heights): each level's rows, and its filled slots by
        position, ``P = len(filled[l])`` of them.

        The slots at each position are what is rounded, on the same segments and grid as the bottom-up widths
        (0 stays 0): a position's group of a segment's levels is as wide as its widest. A level's rows are its
        slots, less the parents past the first of its nodes that have several (a DAG's; none in a forest), so
        that each padded row has one parent: a top-down cell that groups its rows by position then sees counts
        fixed by the shape. The roots (level 0) have no slots: their rows are rounded as a bottom-up level's."""
        positions = len(filled[0]) if len(filled) else 0
        real = len(level_sizes)
        if real > num_levels:
            raise ReplayError(f"the batch has {real} levels, its shape {num_levels}")
        table = np.zeros((num_levels, positions), dtype=np.int64)
        table[:real] = np.asarray(filled, dtype=np.int64).reshape(real, positions)
        sizes = np.zeros(num_levels, dtype=np.int64)
        sizes[:real] = level_sizes
        # A DAG's nodes' parents past their first (none in a forest, and none past the deepest level).
        extra = table.sum(axis=1) - sizes
        widths: list[int] = []
        counts: list[tuple[int, ...]] = []
        for start, stop in _segments(num_levels):
            if start == 0 or slots == 0:  # no parents: rows as bottom-up, no slots
                widths += [self.width(int(sizes[start:stop].max()))] * (stop - start)
                counts += [(0,) * positions] * (stop - start)
                continue
            group = [self.width(int(count)) if count else 0 for count in table[start:stop].max(axis=0)]
            if not any(group):  # levels past the batch's deepest: one replica each, as bottom-up
                group[0] = 1
            widths += (sum(group) - extra[start:stop]).tolist()
            counts += [tuple(group)] * (stop - start)
        return tuple(widths), tuple(counts)


def _segments(num_levels: int) -> Iterator[tuple[int, int]]:
    """The dyadic segments of ``num_levels`` levels: [0], [1], [2, 3], [4, 7], ... (the last cut short)."""
    start = 0
    while start < num_levels:
        stop = min(max(2 * start, 1), num_levels)
        yield start, stop
        start = stop


class BucketShape(NamedTuple):
    """A padded plan's shape: each level's width, and the slots (predecessors) of every node above level 0;
    with a top-down plan (:func:`padded_batch` with ``top_down=True``) its levels' widths, slots (parents), and
    filled slots by position (:meth:`Buckets.top_down`), else empty."""

    widths: tuple[int, ...]
    slots: int
    down_widths: tuple[int, ...] = ()
    down_slots: int = 0
    down_counts: tuple[tuple[int, ...], ...] = ()

    @property
    def num_nodes(self) -> int:
        return sum(self.widths)


class PaddedBatch(Data):
    """A batch padded to a :class:`BucketShape`: every per-node attribute of the batch, gathered from the node
    each padded row copies, and ``node_weight`` (1 on the batch's nodes, 0 on replicas). Its schedule is fixed:
    graphtree's cells run on its padded bottom-up plan.

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
    :class:`ReplayError`. Graph attributes (tensors neither per node nor per edge, e.g. ``graph_y``) are the
    batch's, unchanged; anything that is not a tensor is left out, as a replayed graph could not refill it.
    """

    padded: ClassVar[bool] = True  # read on the class by the models, which do not import this module

    def __getattr__(self, key: str) -> Any:
        self._note(key)
        return super().__getattr__(key)

    def __getitem__(self, key: str) -> Any:
        self._note(key)
        return super().__getitem__(key)

    def _note(self, key: str) -> None:
        """Refuse ``ptr``; while :func:`_reading` records, note the attribute read (attributes found by normal
        lookup, such as ``num_nodes``, go past both methods and are not noted)."""
        if key == "ptr":
            raise ReplayError(_NO_PTR)
        reads = self.__dict__.get("_reads")
        if reads is not None:
            reads.add(key)


@contextmanager
def _reading(batch: PaddedBatch) -> Iterator[set[str]]:
    """The attributes of ``batch`` read inside the block."""
    reads: set[str] = set()
    batch.__dict__["_reads"] = reads  # not Data.__setattr__: that would store it as an attribute of the batch
    try:
        yield reads
    finally:
        batch.__dict__.pop("_reads", None)


def _num_graphs(batch: Any) -> int:
    """The graphs of a plain batch: a ``Batch``'s count, else one past its largest graph id, else 1."""
    if isinstance(batch, Batch):
        return int(batch.num_graphs)
    graph = getattr(batch, "batch", None)
    return int(graph.max()) + 1 if isinstance(graph, Tensor) and graph.numel() else 1


def _graph_keys(batch: Any) -> list[str]:
    """The graph attributes of a plain batch: tensors that PyG does not take for per-node ones, with a row per
    graph (or none: a scalar) or else not per edge either. A row per graph wins over PyG's per-edge guess, which
    only compares sizes (a batch of as many edges as graphs is common); where every graph has one node, PyG takes
    ``[num_graphs]`` tensors for per-node ones, and so does this."""
    num_graphs = _num_graphs(batch)
    keys = []
    for key in batch.keys():
        value = batch[key]
        if key in _NOT_PADDED or not isinstance(value, Tensor) or batch.is_node_attr(key):
            continue
        if value.dim() == 0 or value.size(0) == num_graphs or not batch.is_edge_attr(key):
            keys.append(key)
    return keys


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


def padded_batch(batch: Any, buckets: Buckets = Buckets(), top_down: bool = False
                 ) -> tuple[BucketShape, dict[str, Tensor]]:
    """The bucket shape of ``batch`` and its padded host tensors (see the module docstring).

    Returns the shape and a dict of CPU tensors: ``slots`` and ``slot_pos`` (``[N', K]``: each padded row's
    predecessors, as padded node ids, ``N'`` where empty), ``node_weight`` (``[N']``), ``source`` (``[N']``: the
    batch node each row copies), ``batch`` (``[N']``: each row's graph, ``num_graphs`` on replicas), every
    per-node tensor attribute of ``batch``, gathered by ``source`` (``is_root`` False on replicas), and every
    graph attribute as it is (see :class:`PaddedBatch`). With ``top_down``, the padded top-down plan too (its
    shape in the ``down_*`` fields of the shape; its tensors ``down_slots``, ``down_slot_pos``, ``down_order``
    and ``down_rank``: :func:`_top_down_rows`); without, a top-down pass on the padded batch raises
    :class:`~graphtree.errors.HostValueError`.
    """
    schedule = schedule_of(batch)
    plan = schedule.plan("bottom_up")
    shape = buckets.shape(plan.level_sizes(), max(plan.widths, default=0))
    rows, padded_of = _source_rows(plan, shape)
    num_padded = shape.num_nodes
    index, position = (matrix.numpy() for matrix in plan.padded_slots())
    width = index.shape[1]
    slots = np.full((num_padded, shape.slots), num_padded, dtype=np.int64)
    slots[:, :width] = padded_of[index[rows]]
    slot_pos = np.full((num_padded, shape.slots), -1, dtype=np.int64)
    slot_pos[:, :width] = position[rows]
    weight = np.zeros(num_padded, dtype=np.float32)
    weight[padded_of[:-1]] = 1.0
    source = torch.from_numpy(plan.order.numpy()[rows])
    replica = torch.from_numpy(weight == 0)
    num_graphs = _num_graphs(batch)
    graph = getattr(batch, "batch", None)
    graph = graph.detach().cpu().long() if isinstance(graph, Tensor) else torch.zeros(plan.num_nodes, dtype=torch.long)
    tensors = dict(slots=torch.from_numpy(slots), slot_pos=torch.from_numpy(slot_pos),
                   node_weight=torch.from_numpy(weight).to(torch.get_default_dtype()), source=source,
                   batch=graph.index_select(0, source).masked_fill_(replica, num_graphs))
    graph_keys = _graph_keys(batch)
    for key in batch.keys():
        value = batch[key]
        if key in graph_keys:
            tensors[key] = value.detach().cpu()
            continue
        if key in _NOT_PADDED or not isinstance(value, Tensor) or not batch.is_node_attr(key):
            continue
        tensors[key] = value.detach().cpu().index_select(0, source)
        if key in _ROOT_FLAGS:
            tensors[key][replica] = 0  # False; index_select made a copy: the batch's own flags stay
    if top_down:
        # Each batch node's padded row (the real row of it; replicas are never read from).
        node_row = padded_of[plan.rank.numpy()]
        shape, down = _top_down_rows(schedule, buckets, shape, node_row, source.numpy())
        tensors.update(down)
    return shape, tensors


def _top_down_rows(schedule: Schedule, buckets: Buckets, shape: BucketShape, node_row: np.ndarray,
                   source: np.ndarray) -> tuple[BucketShape, dict[str, Tensor]]:
    """The padded top-down plan of a batch: ``shape`` with its ``down_*`` fields, and its tensors.

    The plan has rows of its own, ``M`` of them (``sum(down_widths)``), level by level (by depth). Each level
    is cut into blocks: in a forest (at most one parent a node) one per position, the level's nodes at that
    position and then replicas at it, as wide as :meth:`Buckets.top_down` counts its slots, so that the plan's
    ``position_groups`` are fixed by the shape too (the compiled CPU kernel reads them); in a DAG, the level's
    nodes in the plain plan's order and then the replicas by position. A replica runs a node of its level (of
    the deepest level, past it) once more from that node's first parent, at the position its block needs: valid
    numbers, which nothing reads (no row has it as a parent, no padded row returns it). The roots' replicas copy
    the first root. Tensors: ``down_slots`` and ``down_slot_pos`` (``[M, K]``, plan rows, ``M`` and ``-1``
    where empty), ``down_order`` (``[M]``: the padded row whose inputs each plan row reads) and ``down_rank``
    (``[N']``: the plan row each padded row returns, its source node's, so that a bottom-up replica gets its
    source's top-down states, as it has its source's bottom-up ones)."""
    plan = schedule.plan("top_down")
    real, num_levels = plan.num_levels, len(shape.widths)
    slots = max(plan.widths, default=0)
    positions = int(schedule.edge_pos.max()) + 1 if schedule.edge_pos.numel() else 0
    table = [(list(row) + [0] * positions)[:positions] for row in plan.position_table]
    widths, counts = buckets.top_down(num_levels, plan.level_sizes(), table, slots)
    starts = np.concatenate([[0], np.cumsum(widths)]).astype(np.int64)
    num_rows = int(starts[-1])
    sizes = np.zeros(num_levels, dtype=np.int64)
    sizes[:real] = plan.level_sizes()
    filled = np.zeros((num_levels, positions), dtype=np.int64)
    filled[:real] = table
    wanted = np.asarray(counts, dtype=np.int64).reshape(num_levels, positions)
    forest = slots <= 1
    # Blocks [level, column]: `block_rows` rows, the first `block_real` the level's nodes, the rest replicas at
    # position `block_position`. Forest: a column per position. DAG: column 0 the level's nodes, then one per
    # position. The roots: column 0, all their rows (replicas with no parent).
    columns = max(positions, 1) if forest else positions + 1
    block_rows = np.zeros((num_levels, columns), dtype=np.int64)
    block_real = np.zeros((num_levels, columns), dtype=np.int64)
    if forest:
        block_rows[1:, :positions], block_real[1:, :positions] = wanted[1:], filled[1:]
        if positions == 0:  # no edges at all: every level's rows are roots, replicas of the first
            block_rows[1:, 0] = widths[1:]
        block_position = np.broadcast_to(np.arange(columns), (num_levels, columns))
    else:
        block_rows[1:, 0] = block_real[1:, 0] = sizes[1:]
        block_rows[1:, 1:], block_position = wanted[1:] - filled[1:], np.arange(columns) - 1
        block_position = np.broadcast_to(block_position, (num_levels, columns))
    block_rows[0, 0], block_real[0, 0] = widths[0], sizes[0]
    if not np.array_equal(block_rows.sum(axis=1), widths) or (block_real > block_rows).any():
        raise ReplayError("the padded top-down plan does not fit its shape")  # a bug, never the batch's fault
    block_start = starts[:-1, None] + np.cumsum(block_rows, axis=1) - block_rows

    # The level's nodes: each plain row into its block, in order (the plain plan groups a level's rows by
    # position, so in a forest each block's nodes are consecutive there too).
    ptr = np.asarray(plan.ptr, dtype=np.int64)
    plain_level = np.repeat(np.arange(real), np.diff(ptr))
    index, position = (matrix.numpy() for matrix in plan.padded_slots())
    if forest and positions:
        column = np.where(plain_level > 0, position[:, 0], 0)  # a root's slot is empty (-1)
    else:
        column = np.zeros(plan.num_nodes, dtype=np.int64)
    plain_start = ptr[:real, None] + np.cumsum(block_real[:real], axis=1) - block_real[:real]
    row_of = block_start[plain_level, column] + np.arange(plan.num_nodes) - plain_start[plain_level, column]
    row_of = np.append(row_of, num_rows)  # the empty slot

    down_slots = np.full((num_rows, slots), num_rows, dtype=np.int64)
    down_pos = np.full((num_rows, slots), -1, dtype=np.int64)
    down_order = np.empty(num_rows, dtype=np.int64)
    order = plan.order.numpy()
    down_slots[row_of[:-1]], down_pos[row_of[:-1]] = row_of[index], position
    down_order[row_of[:-1]] = node_row[order]

    replicas = (block_rows - block_real).reshape(-1)
    total = int(replicas.sum())
    if total:
        level = np.repeat(np.repeat(np.arange(num_levels), columns), replicas)
        first = np.repeat((block_start + block_real).reshape(-1), replicas)
        rows = first + np.arange(total) - np.repeat(np.cumsum(replicas) - replicas, replicas)
        copied = ptr[np.minimum(level, real - 1)]  # the plain row of the node each replica runs again
        down_order[rows] = node_row[order[copied]]
        above = level > 0
        if slots:
            down_slots[rows[above], 0] = row_of[index[copied[above], 0]]
            down_pos[rows[above], 0] = np.repeat(block_position.reshape(-1), replicas)[above]
    down_rank = row_of[plan.rank.numpy()[source]]
    shape = shape._replace(down_widths=widths, down_slots=slots, down_counts=counts)
    return shape, dict(down_slots=torch.from_numpy(down_slots), down_slot_pos=torch.from_numpy(down_pos),
                       down_order=torch.from_numpy(down_order), down_rank=torch.from_numpy(down_rank))


def _top_down_plan(shape: BucketShape, fixed: dict[str, Tensor]) -> LevelPlan:
    """The static top-down plan of ``shape`` over the bucket's fixed tensors: its counts by position are the
    shape's, and in a forest so are its position groups (each position's block, then none at several; the
    roots all with no parent)."""
    positions = len(shape.down_counts[0]) if shape.down_counts else 0
    groups: list[list[int]] = []
    if shape.down_slots <= 1:
        groups = [[0] * (positions + 1) + [shape.down_widths[0]]]
        groups += [[*counts, 0, 0] if shape.down_slots else [0] * (positions + 1) + [width]
                   for width, counts in zip(shape.down_widths[1:], shape.down_counts[1:])]
    return LevelPlan.static(shape.down_widths, shape.down_slots, fixed["down_slots"], fixed["down_slot_pos"],
                            direction="top_down", order=fixed["down_order"], rank=fixed["down_rank"],
                            position_table=shape.down_counts, position_groups=groups)


def _bucket_key(shape: BucketShape, tensors: dict[str, Tensor], num_graphs: int) -> tuple:
    """What a bucket's graph holds fixed: the shape, the number of graphs (``num_graphs`` is a host number a
    captured step keeps), and every tensor's name, type and shape (a graph attribute's shape follows the graphs,
    and a later batch with an attribute more or less must not leave a stale one in the graph)."""
    layout = sorted((key, str(value.dtype), tuple(value.shape)) for key, value in tensors.items())
    return shape, num_graphs, tuple(layout)


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
    down_plan: LevelPlan | None = None  # the padded top-down plan, where the batch has one

    def forget_derived(self) -> None:
        """Forget what every plan of the bucket derived from its fixed tensors (after a refill)."""
        self.plan.forget_derived()
        if self.down_plan is not None:
            self.down_plan.forget_derived()


def _new_bucket(shape: BucketShape, tensors: dict[str, Tensor], device: torch.device, num_graphs: int) -> _Bucket:
    """Fixed tensors on ``device`` for ``shape`` (made like ``tensors``), a padded batch of ``num_graphs`` graphs
    over them and its plan."""
    fixed = {key: torch.zeros(value.shape, dtype=value.dtype, device=device) for key, value in tensors.items()}
    # Every level's slots are its rows of the fixed [N', K] matrices (level 0's none), refilled for every batch.
    plan = LevelPlan.static(shape.widths, shape.slots, fixed["slots"], fixed["slot_pos"])
    down = _top_down_plan(shape, fixed) if "down_slots" in fixed else None
    batch = PaddedBatch(num_nodes=shape.num_nodes)
    for key, value in fixed.items():
        if key not in _PLAN_KEYS:
            batch[key] = value
    batch.num_graphs = num_graphs
    batch.schedule = Schedule.of_plan(plan, "a padded batch", top_down=down)
    return _Bucket(batch, plan, fixed, down_plan=down)


def _fill(bucket: _Bucket, tensors: dict[str, Tensor]) -> None:
    """Copy a batch's padded host tensors into the bucket's fixed ones (on a GPU asynchronously, from pinned
    memory)."""
    for key, value in tensors.items():
        fixed = bucket.fixed.get(key)
        if fixed is None or fixed.shape != value.shape or fixed.dtype != value.dtype:
            raise ReplayError(f"the batch's {key!r} does not match the first batch of its shape")
        on_gpu = fixed.is_cuda
        fixed.copy_(value.pin_memory() if on_gpu else value, non_blocking=on_gpu)


def pad(batch: Any, buckets: Buckets = Buckets(), device: torch.device | str | None = None,
        top_down: bool = True) -> PaddedBatch:
    """``batch`` padded to its bucket shape, on ``device`` (default: where ``batch`` is): a :class:`PaddedBatch`
    that graphtree's cells run on as on ``batch`` (its rows ``source`` hold the states of those nodes), in both
    directions (``top_down=False``: bottom-up only)."""
    shape, tensors = padded_batch(batch, buckets, top_down)
    if device is None:
        device = next((v.device for v in batch.to_dict().values() if isinstance(v, Tensor)), torch.device("cpu"))
    bucket = _new_bucket(shape, tensors, torch.device(device), _num_graphs(batch))
    _fill(bucket, tensors)
    return bucket.batch


def _has_top_down_pass(model: torch.nn.Module) -> bool:
    """Whether a module of ``model`` runs top-down (a :class:`~graphtree.nn.TreeCell` with ``direction``
    ``"top_down"``): its padded batches then carry a top-down plan."""
    return any(getattr(module, "direction", None) == "top_down" for module in model.modules())


def _refuse_uncapturable(optimizer: torch.optim.Optimizer) -> None:
    """Raise ``ValueError`` for an optimizer whose step a CUDA graph cannot hold, on every device.

    A PyTorch optimizer with a ``capturable`` setting is capturable where it is on in every param group (one
    that reads its step count on the host otherwise); one without is capturable where it keeps no host state:
    ``torch.optim.SGD`` (its learning rate and momentum are Python floats, fixed in a graph as in a step), and
    graphtree's :class:`~graphtree.train.CapturableAdagrad`. Anything else (PyTorch's Adagrad, which reads its
    step count on the host, SparseAdam, LBFGS, an optimizer of one's own) is refused: an optimizer that asks the
    host for nothing says so with ``capturable=True`` in its param groups, or ``host_free_step = True`` on its
    class (as CapturableAdagrad does).
    """
    flags = [group.get("capturable") for group in optimizer.param_groups]
    if any(flag is not None for flag in flags):
        if all(flags):
            return
        reason = "its param_groups have capturable=False"
        if any(p.device.type == "cpu" for group in optimizer.param_groups for p in group["params"]):
            reason += (" (PyTorch's capturable forms run on a GPU only: on the CPU, use CapturableAdagrad or "
                       "SGD; make_optimizer('adam', ..., capturable=True) gives a capturable Adam where the "
                       "parameters are on a GPU when it is called)")
    elif isinstance(optimizer, torch.optim.SGD) or getattr(type(optimizer), "host_free_step", False) is True:
        return  # CapturableAdagrad says so on its class (this module sits below the training code: no import)
    else:
        reason = "it has no capturable setting, and graphtree does not know it for one that asks the host for nothing"
    raise ValueError(f"a replayed step needs an optimizer whose step a CUDA graph can hold; "
                     f"{type(optimizer).__name__} is not one: {reason}. Use graphtree.train.make_optimizer(..., "
                     f"capturable=True), graphtree.train.CapturableAdagrad, torch.optim.SGD, or "
                     f"torch.optim.Adam(..., capturable=True) on a GPU")


def _plain_batch(batch: Any, device: torch.device) -> Any:
    """``batch`` on ``device`` for the check, with ``node_weight`` all ones where it has none (a loss written
    for padded batches reads it); a copy, so that the caller's batch stays as it was."""
    plain = copy.copy(batch)
    if isinstance(plain, Data):
        plain = plain.to(device)
        if "node_weight" not in plain:
            plain.node_weight = torch.ones(plain.num_nodes, dtype=torch.get_default_dtype(), device=device)
    return plain


def _rng_state(device: torch.device) -> list[Tensor]:
    """The random state that a step on ``device`` draws from."""
    states = [torch.get_rng_state()]
    if device.type == "cuda":
        states.append(torch.cuda.get_rng_state(device))
    return states


def _same_rng_state(a: list[Tensor], b: list[Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def _losses_differ(want: Tensor, got: Tensor) -> bool:
    """Whether two losses differ beyond rounding: by more than ``1e-5`` of the larger's magnitude (more for a
    type coarser than float32)."""
    want, got = torch.as_tensor(want).detach(), torch.as_tensor(got).detach()
    if want.shape != got.shape:
        return True
    rtol = max(1e-5, 16 * torch.finfo(want.dtype).eps) if want.is_floating_point() else 0.0
    want, got = want.double().cpu(), got.double().cpu()
    both = torch.cat([want.reshape(-1), got.reshape(-1)]).abs().nan_to_num(0.0, posinf=0.0, neginf=0.0)
    scale = float(both.max()) if both.numel() else 0.0
    return not torch.allclose(got, want, rtol=0.0, atol=rtol * scale, equal_nan=True)


def _shown(loss: Tensor) -> str:
    loss = torch.as_tensor(loss).detach()
    return f"{float(loss):.8g}" if loss.numel() == 1 else f"a tensor of shape {tuple(loss.shape)}"


def _padding_advice(batch: Any, padded: PaddedBatch, reads: set[str]) -> str:
    """What the loss read of the padded batch that padding makes differ, and how a loss reads a padded batch."""
    graph_keys = set(_graph_keys(batch)) if isinstance(batch, Data) else set()
    stored = set(padded.keys())
    gathered = sorted(key for key in reads if key in stored and key not in graph_keys | {"schedule", "num_graphs"})
    plain_keys = set(batch.keys()) if isinstance(batch, Data) else set()
    missing = sorted(key for key in reads if key in plain_keys and key not in stored)
    rows, nodes = int(padded.num_nodes), int(batch.num_nodes)
    text = (f"The padded batch has {rows} rows: the batch's {nodes} nodes, then {rows - nodes} replica rows, copies "
            f"of real nodes that the loss must not count. ")
    if gathered:
        text += f"The loss read {', '.join(map(repr, gathered))}, per-node attributes that the replicas have too. "
    if missing:
        text += f"It read {', '.join(map(repr, missing))}, which a padded batch does not have. "
    if "node_weight" not in reads:
        text += "It never read batch.node_weight. "
    return text + ("Weigh every row by batch.node_weight (0 on replicas; weighted_node_loss does), and pool per "
                   "graph with size=batch.num_graphs + 1, keeping [:batch.num_graphs]: the last row is the "
                   "replicas' graph (see PaddedBatch).")


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
    shape is captured first, then replayed. A bucket is a shape, a number of graphs and the batch's tensor
    attributes (names, types, and the graph attributes' shapes): the last, smaller batch of an epoch gets its
    own graph.
    Each call returns the batch's loss as a device tensor (no synchronization).

    Before its first step, once, the step checks the loss: the loss of the padded batch must be the loss of the
    batch itself (to a relative ``1e-5``), both computed without gradients or an update. A loss that counts the
    replicas (a mean over all rows, a pooling that keeps the replicas' row) raises :class:`ReplayError`, naming
    the padded attributes it read; one that fails on the padded batch raises it with the failure.

    Args:
        model: Maps a batch to per-node logits (e.g. :class:`~graphtree.models.TreeClassifier`); in a replayed
            step it gets a :class:`PaddedBatch`.
        optimizer: Its optimizer, one that runs without host values, on every device (a step that runs on the
            CPU must replay on a GPU): :func:`graphtree.train.make_optimizer` with ``capturable=True``,
            :class:`~graphtree.train.CapturableAdagrad`, ``torch.optim.SGD``, or a PyTorch optimizer made with
            ``capturable=True`` (Adam's runs on a GPU only). Others raise ``ValueError``.
        loss: ``loss(model, batch) -> scalar``; by default :func:`weighted_node_loss` of ``model(batch)``. It must
            weigh replicas 0 (``batch.node_weight``) and drop the replicas' row of a pooling per graph (see
            :class:`PaddedBatch`). The check also runs it on the plain batch, with ``node_weight`` all ones
            where the batch has none.
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
        _refuse_uncapturable(optimizer)
        self.stats = ReplayStats()
        self.replayable = True
        # Padded top-down plans only for a model with a top-down pass: their shapes would split the buckets of
        # one without.
        self._top_down = _has_top_down_pass(model)
        self.reason: str | None = None  # why the step runs eagerly, once it does
        self._warm = False
        self._checked = False
        self._buckets: dict[tuple, _Bucket] = {}
        self._pool = torch.cuda.graph_pool_handle() if self.graphs else None

    def __call__(self, batch: Any) -> Tensor:
        if not self.replayable:
            return self._eager(batch)
        shape, tensors = padded_batch(batch, self.buckets, top_down=self._top_down)
        num_graphs = _num_graphs(batch)
        bucket = self._buckets.get(_bucket_key(shape, tensors, num_graphs))
        if bucket is None:
            bucket = self._bucket(shape, tensors, num_graphs)
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
            # optimizer's state and warms the libraries up before any capture. Before that, once, the loss is
            # checked (a loss that differs raises here, before any update).
            unreplayable = None if self._checked else self._check(batch, bucket)
            if unreplayable is None:
                try:
                    loss = self._padded_step(bucket)
                except HostValueError as error:  # a pass that asks for host values (a ReplayError among them)
                    unreplayable = error
            if unreplayable is not None:
                warnings.warn(f"{type(self.model).__name__}'s step is not replayed: {unreplayable}", stacklevel=2)
                self.replayable, self.reason = False, str(unreplayable)
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

    def _bucket(self, shape: BucketShape, tensors: dict[str, Tensor], num_graphs: int) -> _Bucket:
        bucket = _new_bucket(shape, tensors, self.device, num_graphs)
        self._buckets[_bucket_key(shape, tensors, num_graphs)] = bucket
        return bucket

    def _check(self, batch: Any, bucket: _Bucket) -> ReplayError | None:
        """Raise :class:`ReplayError` if the loss of the padded batch (filled from ``batch``) is not the loss of
        ``batch`` itself; return the :class:`ReplayError` of a model that cannot run padded at all (a top-down
        pass: it runs eagerly). Neither the parameters, the buffers, the modules' modes nor the random stream
        are changed: the training is the same with the check as without."""
        name = type(self.model).__name__
        plain = _plain_batch(batch, self.device)
        modes = [(module, module.training) for module in self.model.modules()]
        buffers = [(buffer, buffer.detach().clone()) for buffer in self.model.buffers()]
        devices = []
        if self.device.type == "cuda":
            devices.append(self.device.index if self.device.index is not None else torch.cuda.current_device())
        evaluated = False
        bucket.forget_derived()
        try:
            # Both losses under the same definition pass (no compiled kernels: the padded plan has none), from the
            # same random state, forked so that the training's stream is where it was.
            with torch.no_grad(), torch.random.fork_rng(devices=devices), native.use_native(False):
                state = _rng_state(self.device)
                try:
                    want = self.loss(self.model, plain)
                    # Dropout draws masks per row, and the padded rows are more and in another order: the two
                    # losses differ whatever the loss does. Where the model drew random numbers, both are taken
                    # in eval mode instead (deterministic), at the cost of missing what only training mode does
                    # to the rows (a batch norm's statistics over rows, replicas included).
                    training = any(mode for _, mode in modes)
                    if training and not _same_rng_state(state, _rng_state(self.device)):
                        self.model.eval()
                        evaluated = True
                        want = self.loss(self.model, plain)
                except Exception as error:  # the model's own error, as it is: the padding is not its cause
                    error.add_note(f"(raised by ReplayedStep's check of {name}'s loss on the batch itself, unpadded, "
                                   "with node_weight all ones)")
                    raise
                with _reading(bucket.batch) as reads:
                    try:
                        got = self.loss(self.model, bucket.batch)
                    except HostValueError as error:  # e.g. a top-down pass: not a wrong loss, a model run eagerly
                        return error
                    except Exception as error:
                        raise ReplayError(f"{name}'s loss fails on the padded batch, not on the batch itself "
                                          f"({type(error).__name__}: {error}). "
                                          f"{_padding_advice(batch, bucket.batch, reads)}") from error
        finally:
            for module, mode in modes:
                module.training = mode
            with torch.no_grad():
                for buffer, value in buffers:
                    buffer.copy_(value)
            bucket.forget_derived()
        if _losses_differ(want, got):
            mode = " (in eval mode: the model draws random numbers in training mode)" if evaluated else ""
            raise ReplayError(f"{name}'s loss on the padded batch is {_shown(got)}, on the batch itself "
                              f"{_shown(want)}{mode}: the padding changed it. "
                              f"{_padding_advice(batch, bucket.batch, reads)}")
        self._checked = True
        return None

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
        # The batch as the check gets it: on the model's device (a caller keeps batches on the host for padding).
        return self._step(_plain_batch(batch, self.device))

    def _padded_step(self, bucket: _Bucket) -> Tensor:
        # The padded plan's slot layouts are derived from its fixed tensors on first use: made anew here, never
        # kept from another batch. The compiled CPU kernels read host tables a padded plan lacks: off.
        bucket.forget_derived()
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
        bucket.forget_derived()  # everything derived from the fixed tensors is recomputed in the graph
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
            self.replayable, self.reason = False, f"the step could not be captured: {error}"
            self._buckets.clear()
            return
        bucket.graph, bucket.loss = graph, loss.detach()
        self.optimizer.zero_grad(set_to_none=True)
        bucket.forget_derived()
        self.stats.captures += 1
        self.stats.capture_seconds += time.perf_counter() - start
