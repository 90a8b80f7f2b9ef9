"""Padding: a batch's rows laid out on its bucket shape, as host tensors that a bucket's fixed ones take.

A padded row of a level is a **replica** of a real node of that level (its first one; past the batch's top
level, a node of its top level): the same inputs and the same children, so it computes a copy of that node's
states from valid numbers, never from empty rows. A padded top-down plan has rows of its own, level by level by
depth (:func:`_top_down_rows`): its replicas run a node of their level once more, from that node's first parent,
at the position their block needs, and every padded row returns the top-down states of the node it copies.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..schedule import LevelPlan, Schedule, schedule_of
from .batch import NOT_PADDED, PaddedBatch, graph_keys, num_graphs
from .buckets import Buckets, BucketShape, ReplayError
from .static import Bucket

__all__ = ["pad", "padded_batch", "padded_slots"]

# Per-node flags that a replica must not copy: a root counted twice is a second root (graphtree.data.tree makes
# ``is_root``). ``is_leaf`` is copied: a replica reads its source's children, so it is a leaf where its source is.
_ROOT_FLAGS = frozenset({"is_root"})


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


def padded_slots(plan: LevelPlan) -> tuple[Tensor, Tensor]:
    """``[num_nodes, K]`` slot indices and positions of every level-sorted row of a plain ``plan``, ``K`` the
    widest level's width, the missing slots padded (``num_nodes``, ``-1``): the layout a padded, static-shape
    plan takes (the plain plan's levels are each as wide as their own widest node)."""
    # In NumPy, for all levels at once: a row's slots are consecutive in the flat tensors, from its level's
    # block start plus its place in the level times the level's width.
    widest, num_nodes = max(plan.widths, default=0), plan.num_nodes
    ptr = np.asarray(plan.ptr, dtype=np.int64)
    level = np.repeat(np.arange(plan.num_levels), np.diff(ptr))
    width = np.asarray(plan.widths, dtype=np.int64)[level]
    first = np.asarray(plan.slot_start, dtype=np.int64)[level] + (np.arange(num_nodes) - ptr[level]) * width
    column = np.arange(widest)
    filled = column < width[:, None]
    entry = np.where(filled, first[:, None] + column, 0)
    index, position = plan.slot_index.numpy(), plan.slot_position.numpy()
    if not index.size:  # no slots at all: nothing to read (entry is [num_nodes, 0] then)
        index, position = np.zeros(1, dtype=index.dtype), np.zeros(1, dtype=position.dtype)
    return (torch.from_numpy(np.where(filled, index[entry], num_nodes)),
            torch.from_numpy(np.where(filled, position[entry], -1)))


def padded_batch(batch: Any, buckets: Buckets = Buckets(), top_down: bool = False  # noqa: B008 (frozen)
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
    index, position = (matrix.numpy() for matrix in padded_slots(plan))
    width = index.shape[1]
    slots = np.full((num_padded, shape.slots), num_padded, dtype=np.int64)
    slots[:, :width] = padded_of[index[rows]]
    slot_pos = np.full((num_padded, shape.slots), -1, dtype=np.int64)
    slot_pos[:, :width] = position[rows]
    weight = np.zeros(num_padded, dtype=np.float32)
    weight[padded_of[:-1]] = 1.0
    source = torch.from_numpy(plan.order.numpy()[rows])
    replica = torch.from_numpy(weight == 0)
    graphs = num_graphs(batch)
    graph = getattr(batch, "batch", None)
    graph = graph.detach().cpu().long() if isinstance(graph, Tensor) else torch.zeros(plan.num_nodes, dtype=torch.long)
    tensors = dict(slots=torch.from_numpy(slots), slot_pos=torch.from_numpy(slot_pos),
                   node_weight=torch.from_numpy(weight).to(torch.get_default_dtype()), source=source,
                   batch=graph.index_select(0, source).masked_fill_(replica, graphs))
    keys = graph_keys(batch)
    for key in batch.keys():
        value = batch[key]
        if key in keys:
            tensors[key] = value.detach().cpu()
            continue
        if key in NOT_PADDED or not isinstance(value, Tensor) or not batch.is_node_attr(key):
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
    index, position = (matrix.numpy() for matrix in padded_slots(plan))
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


def pad(batch: Any, buckets: Buckets = Buckets(), device: torch.device | str | None = None,  # noqa: B008 (frozen)
        top_down: bool = True) -> PaddedBatch:
    """``batch`` padded to its bucket shape, on ``device`` (default: where ``batch`` is): a :class:`PaddedBatch`
    that graphtree's cells run on as on ``batch`` (its rows ``source`` hold the states of those nodes), in both
    directions (``top_down=False``: bottom-up only)."""
    shape, tensors = padded_batch(batch, buckets, top_down)
    if device is None:
        device = next((v.device for v in batch.to_dict().values() if isinstance(v, Tensor)), torch.device("cpu"))
    bucket = Bucket.make(shape, tensors, torch.device(device), num_graphs(batch))
    bucket.fill(tensors)
    return bucket.batch
