"""The fixed-shape side of replay: static-shape plans, the schedule a padded batch runs on, and a bucket's fixed
tensors with the padded batch over them.

A captured step reads the same device memory at every replay, so a bucket's tensors are made once per shape and
refilled for every batch of it (:meth:`Bucket.fill`). Its plans are :class:`~graphtree.schedule.LevelPlan`\\ s
over those tensors (:func:`static_plan`, ``is_static``: nothing read from their values on the host holds beyond
one batch), and its schedule is a :class:`StaticSchedule`: one with rows but no edges, whose levels are the
plans' own. The plain :class:`~graphtree.schedule.Schedule` knows nothing of either.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..errors import HostValueError, InvalidArgumentError, ScheduleError
from ..schedule import DIRECTIONS, LevelPlan, Schedule
from .batch import PaddedBatch
from .buckets import BucketShape, ReplayError

__all__ = ["Bucket", "StaticSchedule", "static_plan", "top_down_plan"]

# The padded plans' tensors: the bucket's plans hold them, the padded batch does not (``down_rank`` has a row per
# node, and would pass for a per-node attribute).
PLAN_KEYS = frozenset({"slots", "slot_pos", "down_slots", "down_slot_pos", "down_order", "down_rank"})


def static_plan(widths: Sequence[int], slots: int, slot_index: Tensor, slot_position: Tensor, *,
                direction: str = "bottom_up", order: Tensor | None = None, rank: Tensor | None = None,
                position_table: Sequence[Sequence[int]] | None = None,
                position_groups: Sequence[Sequence[int]] = ()) -> LevelPlan:
    """A static-shape plan (a padded batch's): level ``l`` is ``widths[l]`` consecutive rows, every level above
    the first with ``slots`` slots per row, read from the ``[sum(widths), slots]`` matrices ``slot_index`` and
    ``slot_position``, which the caller refills for every batch of the shape (the plan holds views of them).

    By default the rows are the graph's own (``order`` and ``rank`` the identity) and the plan knows no host
    counts: a pass that asks for them raises :class:`~graphtree.errors.HostValueError`. A plan with rows of
    its own (a padded top-down plan) takes ``order`` (``[sum(widths)]``: the graph row each plan row reads
    its inputs from) and ``rank`` (one entry per graph row: the plan row it returns), both refilled like the
    slots, and may take the counts its shape fixes: ``position_table[l][p]``, the filled slots of level
    ``l`` at position ``p``, and ``position_groups`` (see :mod:`graphtree.schedule`)."""
    if direction not in DIRECTIONS:
        raise InvalidArgumentError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    starts = [0, *itertools.accumulate(widths)]
    identity = torch.arange(starts[-1], device=slot_index.device) if order is None or rank is None else None
    table = None if position_table is None else [list(row) for row in position_table]
    return LevelPlan(direction, identity if order is None else order, identity if rank is None else rank, starts,
                     slot_index.view(-1), slot_position.view(-1), [0] + [slots] * (len(widths) - 1),
                     [start * slots for start in starts[:-1]], table, [list(row) for row in position_groups],
                     is_static=True)


class StaticSchedule(Schedule):
    """The schedule of a graph given by its static-shape bottom-up plan alone (:func:`static_plan`), with no
    edges: every pass bottom-up runs on ``bottom_up`` itself, and every pass top-down on ``top_down``, a
    static-shape plan over the same rows; without one a top-down pass raises
    :class:`~graphtree.errors.HostValueError` (its levels and counts change from batch to batch). ``what``: the
    graph, in errors.

    A :class:`~graphtree.schedule.Schedule` to everything that takes one (:func:`~graphtree.schedule.schedule_of`,
    the cells, the loaders), with an empty ``edge_index`` and ``edge_pos`` on the plan's device and no levels
    (``height`` and ``depth`` are ``None``: a padded batch's levels are its plan's, not heights)."""

    def __init__(self, bottom_up: LevelPlan, top_down: LevelPlan | None = None, what: str = "a padded batch") -> None:
        num_nodes = bottom_up.num_nodes
        levels = torch.zeros(num_nodes, dtype=torch.long)  # checked against no edges, then dropped
        super().__init__(torch.empty(2, 0, dtype=torch.long), num_nodes, height=levels, depth=levels)
        device = bottom_up.order.device
        self.edge_index = self.edge_index.to(device)
        self.edge_pos = self.edge_pos.to(device)
        self.height = self.depth = None  # a padded batch's levels are its plan's, not heights
        self.what = what
        self.fixed: dict[str, LevelPlan] = {"bottom_up": bottom_up}  # the plans, by direction
        if top_down is not None:
            self.fixed["top_down"] = top_down

    def plan(self, direction: str, split_cost: int | None = None) -> LevelPlan:
        """The static plan of ``direction``: its levels are fixed by the plan, split by width or not."""
        if direction not in DIRECTIONS:
            raise InvalidArgumentError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
        if direction not in self.fixed:
            raise HostValueError(f"{self.what} has a static-shape bottom-up plan only; a {direction} pass "
                                 "groups its rows by counts that change from batch to batch (pad the batch "
                                 "with its top-down plan: graphtree.replay.pad, padded_batch(..., "
                                 "top_down=True))")
        return self.fixed[direction]

    def describe_node(self, node: int) -> str:
        return f"row {node} of {self.what}"

    def __repr__(self) -> str:
        levels = self.fixed["bottom_up"].num_levels
        return f"{type(self).__name__}(num_nodes={self.num_nodes}, {levels} static levels)"

    def check_fits(self, data: Any) -> None:
        """Raise a :class:`~graphtree.errors.ScheduleError` unless ``data`` has this schedule's rows (a padded
        batch has rows but no edges: its plan holds its slots)."""
        if data.num_nodes != self.num_nodes:
            raise ScheduleError(f"a static-shape schedule of {self.num_nodes} rows on a batch of "
                                f"{data.num_nodes}")


def top_down_plan(shape: BucketShape, fixed: dict[str, Tensor]) -> LevelPlan:
    """The static top-down plan of ``shape`` over the bucket's fixed tensors: its counts by position are the
    shape's, and in a forest so are its position groups (each position's block, then none at several; the
    roots all with no parent)."""
    positions = len(shape.down_counts[0]) if shape.down_counts else 0
    groups: list[list[int]] = []
    if shape.down_slots <= 1:
        groups = [[0] * (positions + 1) + [shape.down_widths[0]]]
        groups += [[*counts, 0, 0] if shape.down_slots else [0] * (positions + 1) + [width]
                   for width, counts in zip(shape.down_widths[1:], shape.down_counts[1:])]
    return static_plan(shape.down_widths, shape.down_slots, fixed["down_slots"], fixed["down_slot_pos"],
                       direction="top_down", order=fixed["down_order"], rank=fixed["down_rank"],
                       position_table=shape.down_counts, position_groups=groups)


@dataclass
class Bucket:
    """One bucket shape's fixed tensors, its padded batch over them and its plans, and once captured
    (:class:`~graphtree.replay.capture.Replayer`) its graph and the graph's output."""

    batch: PaddedBatch
    plan: LevelPlan
    fixed: dict[str, Tensor]
    graph: Any = None
    output: Tensor | None = None  # what the captured pass returns (a step's loss, an evaluation's outputs)
    down_plan: LevelPlan | None = None  # the padded top-down plan, where the batch has one

    @classmethod
    def make(cls, shape: BucketShape, tensors: dict[str, Tensor], device: torch.device, num_graphs: int) -> Bucket:
        """Fixed tensors on ``device`` for ``shape`` (made like ``tensors``), a padded batch of ``num_graphs``
        graphs over them and its plan."""
        fixed = {key: torch.zeros(value.shape, dtype=value.dtype, device=device) for key, value in tensors.items()}
        # Every level's slots are its rows of the fixed [N', K] matrices (level 0's none), refilled for every batch.
        plan = static_plan(shape.widths, shape.slots, fixed["slots"], fixed["slot_pos"])
        down = top_down_plan(shape, fixed) if "down_slots" in fixed else None
        batch = PaddedBatch(num_nodes=shape.num_nodes)
        for key, value in fixed.items():
            if key not in PLAN_KEYS:
                batch[key] = value
        batch.num_graphs = num_graphs
        batch.schedule = StaticSchedule(plan, top_down=down)
        return cls(batch, plan, fixed, down_plan=down)

    def fill(self, tensors: dict[str, Tensor]) -> None:
        """Copy a batch's padded host tensors into the fixed ones (on a GPU asynchronously, from pinned memory)."""
        for key, value in tensors.items():
            fixed = self.fixed.get(key)
            if fixed is None or fixed.shape != value.shape or fixed.dtype != value.dtype:
                raise ReplayError(f"the batch's {key!r} does not match the first batch of its shape")
            on_gpu = fixed.is_cuda
            fixed.copy_(value.pin_memory() if on_gpu else value, non_blocking=on_gpu)

    def forget_derived(self) -> None:
        """Forget what every plan of the bucket derived from its fixed tensors (after a refill)."""
        self.plan.forget_derived()
        if self.down_plan is not None:
            self.down_plan.forget_derived()

    def replay(self) -> Tensor:
        """Replay the captured graph: its output, copied (the graphs share one memory pool, so the next replay
        may reuse the output's memory)."""
        self.graph.replay()
        return self.output.clone()
