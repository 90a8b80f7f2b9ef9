"""Where a pass's rows and slots lie: the level-sorted state buffers, each level's slots, and :class:`Children`.

A pass keeps every state in one buffer per component, its rows sorted by
level, so that a level is a contiguous slice; a level's predecessors are
gathered from those buffers into dense ``[n, K, d]`` slots. Both level loops
(the definition pass over ``update`` and the compiled one) read the same
layout, built once per plan: this module builds it and hands a level's slots
to a cell as :class:`Children`. It knows nothing of autograd or kernels.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import NamedTuple

import torch
from torch import Tensor

from ..errors import HostValueError, InvalidArgumentError, ScheduleError
from ..schedule import LevelPlan, Schedule, level_blocks

__all__ = ["Children", "Prepared", "SlotLayout", "Slots", "children_of", "gathered", "in_node_order",
           "level_slots", "num_outputs", "position_counts", "state_buffers"]


class Children(NamedTuple):
    """Predecessor states of the nodes of one level, gathered into slots: the children in a bottom-up pass,
    the parents in a top-down one.

    A level has as many slots ``K`` as its widest node has predecessors, so
    most nodes have empty slots, and how many depends on the other graphs of
    the batch. Reduce over the slots with :meth:`sum`, :meth:`mean`,
    :meth:`max` or :meth:`attend`: each takes a state index or **any**
    ``[n, K, ...]`` tensor computed from the slots, and leaves the empty slots
    out whatever they hold, so ``children.sum(self.U(children.states[0]))``
    is right where ``self.U(children.states[0]).sum(dim=1)`` would add
    ``self.U``'s bias once per empty slot too. :meth:`map` applies a function
    to the filled slots and leaves zeros in the empty ones.

    Attributes:
        states: One ``[n, K, d]`` tensor per state component (e.g. ``(h, c)``);
            empty slots hold zeros. ``K`` is 0 at a level whose nodes have no
            predecessors (the leaves bottom-up, the roots top-down).
        mask: ``[n, K]`` bool, ``True`` where a slot is filled.
        position: ``[n, K]`` long, the ``edge_pos`` of the edge behind each slot
            (the node's own position under that parent, in a top-down pass),
            ``-1`` where empty.
        host_position_counts: What :attr:`position_counts` reads: the counts,
            or ``None`` where the plan cannot know them (a static-shape plan).
        every_slot_filled: ``True`` only where the schedule knows, on the host,
            that no slot of the level is empty (every node has ``K``
            predecessors); the reductions then have nothing to mask and skip
            it. ``False`` (the default) always masks.
    """

    states: tuple[Tensor, ...]
    mask: Tensor
    position: Tensor
    host_position_counts: tuple[int, ...] | None = ()
    every_slot_filled: bool = False

    @property
    def position_counts(self) -> tuple[int, ...]:
        """How many of the level's filled slots hold each position (empty slots are not counted); plain ints,
        read from the schedule on the host once per plan, so that a cell that groups rows by position never has
        to ask the GPU for sizes. A static-shape plan (a replayed step) cannot know them: reading them there
        raises :class:`~graphtree.errors.HostValueError`."""
        if self.host_position_counts is None:
            raise HostValueError("this cell reads Children.position_counts, host values that change from batch "
                                 "to batch, which a static-shape plan (a replayed step) does not hold")
        return self.host_position_counts

    # Every reduction masks the empty slots itself rather than trusting that they hold zeros: a value computed
    # from the slots (a biased product, a sigmoid) is not zero there, and at the leaves K is 0, where torch's
    # max over dim 1 fails outright.

    def values(self, value: int | Tensor = 0) -> Tensor:
        """``[n, K, ...]``: ``states[value]`` for an index, else ``value`` itself, checked to have one entry per
        slot."""
        if isinstance(value, int):
            return self.states[value]
        shape, slots = getattr(value, "shape", ()), self.mask.shape
        if len(shape) < 2 or shape[0] != slots[0] or shape[1] != slots[1] or not isinstance(value, Tensor):
            shape = list(value.shape) if isinstance(value, Tensor) else type(value).__name__
            raise InvalidArgumentError(
                f"a reduction over the slots takes a state index or a tensor of shape [n, K, ...] = "
                f"[{', '.join(map(str, self.mask.shape))}, ...], one entry per slot; got {shape}")
        return value

    def filled(self, value: int | Tensor = 0, fill: float = 0.0) -> Tensor:
        """``[n, K, ...]``: ``value`` (a state index or a tensor with one entry per slot) with ``fill`` in the
        empty slots, whatever they held."""
        values = self.values(value)
        if self.every_slot_filled:  # nothing to fill: the level has no empty slot
            return values
        mask = self.mask.view(*self.mask.shape, *([1] * (values.dim() - 2)))
        return values.masked_fill(~mask, fill)

    def count(self, like: Tensor | None = None) -> Tensor:
        """``[n, 1, ...]`` (as many trailing ones as ``like`` has dimensions after its two first): each node's
        number of filled slots, in ``like``'s dtype (default: the first state's)."""
        like = self.states[0] if like is None else like
        count = self.mask.sum(dim=1).to(like.dtype)
        return count.view(-1, *([1] * (like.dim() - 2)))

    def sum(self, value: int | Tensor = 0) -> Tensor:
        """``[n, ...]``: the sum of ``value`` over each node's filled slots (zeros where a node has none).

        ``value``: a state index (default 0, the first state, e.g. ``h``), or any ``[n, K, ...]`` tensor
        computed from the slots, e.g. ``children.sum(f * c_k)`` for Child-Sum's forget gates."""
        if isinstance(value, int):  # a state holds zeros in its empty slots: nothing to mask
            return self.states[value].sum(dim=1)
        return self.filled(value).sum(dim=1)

    def mean(self, value: int | Tensor = 0) -> Tensor:
        """``[n, ...]``: the mean of ``value`` (a state index or an ``[n, K, ...]`` tensor) over each node's
        filled slots (zeros where a node has none)."""
        return self.sum(value) / self.count(self.values(value)).clamp(min=1)

    def max(self, value: int | Tensor = 0) -> Tensor:
        """``[n, ...]``: the elementwise maximum of ``value`` (a state index or an ``[n, K, ...]`` tensor) over
        each node's filled slots (zeros where a node has none)."""
        values = self.values(value)
        if values.size(1) == 0:
            return values.new_zeros(values.size(0), *values.shape[2:])
        best = self.filled(values, -math.inf).amax(dim=1)
        if self.every_slot_filled:
            return best
        any_filled = self.mask.any(dim=1).view(-1, *([1] * (best.dim() - 1)))
        return torch.where(any_filled, best, torch.zeros_like(best))

    def map(self, fn: Callable[[Tensor], Tensor], value: int | Tensor = 0) -> Tensor:
        """``[n, K, ...]``: ``fn`` applied to every slot of ``value`` (a state index or an ``[n, K, ...]``
        tensor), zeros in the empty slots whatever ``fn`` gives there: e.g. ``children.map(self.U)``, a biased
        layer on each child's state, ready for any later reduction."""
        values = self.values(value)
        n, K = self.mask.shape
        out = fn(values.reshape(n * K, *values.shape[2:]))
        return self.filled(out.reshape(n, K, *out.shape[1:]))

    def softmax_weights(self, scores: Tensor) -> Tensor:
        """Weights ``[n, K]`` (not a reduced value) from one score per slot, ``[n, K]`` or ``[n, K, 1]``: a
        softmax over each node's filled slots, zero in empty ones, and all zero where a node has no
        predecessor. :meth:`attend` gives the weighted sum."""
        if scores.dim() == 3 and scores.size(-1) == 1:
            scores = scores.squeeze(-1)
        if scores.shape != self.mask.shape:
            raise InvalidArgumentError(
                f"softmax_weights takes one score per slot, [n, K] = {list(self.mask.shape)}, got "
                f"{list(scores.shape)}")
        if scores.size(1) == 0:
            return scores
        if self.every_slot_filled:
            return torch.softmax(scores, dim=1)
        # A row with no slot filled is softmaxed over zeros instead of all -inf, whose softmax is NaN: no NaN
        # is made at all, rather than made and then masked away.
        masked = scores.masked_fill(~self.mask, -math.inf).masked_fill(~self.mask.any(dim=1, keepdim=True), 0.0)
        return torch.softmax(masked, dim=1) * self.mask

    def attend(self, scores: Tensor, value: int | Tensor = 0) -> Tensor:
        """``[n, ...]``: the sum of ``value`` (a state index or an ``[n, K, ...]`` tensor) over each node's filled
        slots, weighed by :meth:`softmax_weights` of ``scores`` (zeros where a node has no predecessor)."""
        weights = self.softmax_weights(scores)
        values = self.values(value)
        return self.sum(weights.view(*weights.shape, *([1] * (values.dim() - 2))) * self.filled(values))

    def softmax(self, scores: Tensor) -> Tensor:
        """Deprecated name of :meth:`softmax_weights`, which says that it returns weights ``[n, K]``, not a
        reduced value; :meth:`attend` gives the weighted sum."""
        warnings.warn("Children.softmax returns weights [n, K], not a reduced value, and is renamed "
                      "softmax_weights; children.attend(scores, value) gives the weighted sum", FutureWarning,
                      stacklevel=2)
        return self.softmax_weights(scores)


class Prepared(NamedTuple):
    """A pass made ready to run: the cell and its update, the plan and slots, the level-sorted inputs."""

    cell: torch.nn.Module
    call: Callable[[Children, Sequence[Tensor]], tuple[Tensor, ...]]  # the cell's update on one level
    plan: LevelPlan
    levels: list[Slots]
    inputs: list[Tensor]
    needs_grad: bool
    describe_node: Callable[[int], str] = str  # a node's name in errors (the schedule's describe_node)


def in_node_order(prepared: Prepared, buffers: Sequence[Tensor]) -> tuple[Tensor, ...]:
    """The level-sorted ``buffers`` back in the batch's node order."""
    return tuple(buf.index_select(0, prepared.plan.rank) for buf in buffers)  # the padding row stays out


def num_outputs(cell: torch.nn.Module) -> int:
    """How many leading state buffers a pass returns (``output_states``); the rest are internal to it."""
    count = getattr(cell, "output_states", None)
    if count is None:
        return len(cell.state_channels)
    if not 1 <= count <= len(cell.state_channels):
        raise InvalidArgumentError(f"{type(cell).__name__}.output_states must be between 1 and its "
                                   f"{len(cell.state_channels)} state components, got {count}")
    return count


class Slots:
    """One level's slots: ``index`` ``[n, K]``, the level-sorted predecessor ids (``num_nodes`` where empty), and
    ``flat_index``, its ``view(-1)`` (the gathers and the gradient accumulation use it). ``mask``, ``position``
    and ``position_counts``, the layout a level's :class:`Children` carry, are made on first use (from flat
    tensors made once for all levels): the compiled level loops read only ``flat_index``. ``every_slot_filled``:
    whether no slot of the level is empty, known on the host (``False`` where the plan cannot know)."""

    __slots__ = ("_children_layout", "_layout", "_level", "every_slot_filled", "flat_index", "index", "shape")

    def __init__(self, index: Tensor, flat_index: Tensor, layout: SlotLayout, level: int,
                 every_slot_filled: bool = False) -> None:
        self.index, self.flat_index, self._layout, self._level = index, flat_index, layout, level
        self.every_slot_filled = every_slot_filled
        self.shape = tuple(index.shape)  # (n, K), as plain ints
        self._children_layout: tuple | None = None

    @property
    def children_layout(self) -> tuple:
        """What a level's :class:`Children` carry besides the states (mask, position, counts, whether every
        slot is filled), made once."""
        if self._children_layout is None:
            self._children_layout = (self.mask, self.position, self.position_counts, self.every_slot_filled)
        return self._children_layout

    @property
    def mask(self) -> Tensor:
        return self._layout.masks[self._level]

    @property
    def position(self) -> Tensor:
        return self._layout.positions[self._level]

    @property
    def position_counts(self) -> tuple[int, ...] | None:
        return self._layout.counts[self._level]


class SlotLayout:
    """What the levels of one :func:`level_slots` share: the flat slot and position tensors (each level one
    ``[n_l, widths[l]]`` block of them, from ``starts[l]``), and the plan."""

    def __init__(self, plan: LevelPlan, widths: list[int], starts: list[int], index: Tensor,
                 position: Tensor) -> None:
        self.plan, self.widths, self.starts, self.index, self.position = plan, widths, starts, index, position

    def blocks(self, flat: Tensor) -> list[Tensor]:
        """Each level's ``[n_l, widths[l]]`` block of ``flat`` (a tensor laid out like ``index``), as views."""
        return level_blocks(flat, self.plan.ptr, self.widths, self.starts)

    @cached_property
    def masks(self) -> list[Tensor]:
        return self.blocks(self.index != self.plan.num_nodes)

    @cached_property
    def positions(self) -> list[Tensor]:
        return self.blocks(self.position)

    @cached_property
    def counts(self) -> list[tuple[int, ...] | None]:
        return position_counts(self.plan)


def level_slots(cell: torch.nn.Module, plan: LevelPlan, schedule: Schedule, device: torch.device) -> list[Slots]:
    """Per level: slot indices, mask and positions, widened to ``cell.max_children`` for fixed-arity cells.

    Built once per plan, arity and device from the host copy of the plan (so
    checks and counts cost no device synchronization), for all levels at once
    on the plan's flat slot tensors, then moved to ``device``; each level is a
    block of them, and the level loop does nothing but gather.
    """
    arity = getattr(cell, "max_children", None) if plan.direction == "bottom_up" else None
    return plan.derived(("slots", arity, torch.device(device)),
                        lambda: _level_slots(cell, arity, plan, schedule, torch.device(device)))


def _level_slots(cell: torch.nn.Module, arity: int | None, plan: LevelPlan, schedule: Schedule,
                 device: torch.device) -> list[Slots]:
    if arity is not None and any(width > arity for width in plan.widths):
        level = next(k for k, width in enumerate(plan.widths) if width > arity)
        index = plan.slots[level]
        row = int((index[:, arity:] != plan.num_nodes).any(dim=1).nonzero()[0])
        node = int(plan.order[plan.ptr[level] + row])
        count = int((index[row] != plan.num_nodes).sum())
        raise ScheduleError(f"{schedule.describe_node(node)} has {count} {'child' if count == 1 else 'children'} "
                            f"(or a child at position "
                            f"{index.size(1) - 1}), but {type(cell).__name__} takes at most {arity}")
    index, position, widths, starts = plan.slot_index, plan.slot_position, plan.widths, plan.slot_start
    if arity is not None and any(0 < width < arity for width in widths):
        # A fixed-arity cell sees every level with children at its full arity, the missing slots padded.
        pad = torch.nn.functional.pad
        widths = [arity if width > 0 else 0 for width in widths]
        index = torch.cat([pad(block, (0, w - block.size(1)), value=plan.num_nodes).reshape(-1)
                           for block, w in zip(plan.slots, widths)]) if plan.num_levels else index
        position = torch.cat([pad(block, (0, w - block.size(1)), value=-1).reshape(-1)
                              for block, w in zip(plan.slot_pos, widths)]) if plan.num_levels else position
        sizes = [(b - a) * w for a, b, w in zip(plan.ptr, plan.ptr[1:], widths)]
        starts = [sum(sizes[:k]) for k in range(len(sizes))]
    # Which levels have no empty slot, read on the host once per plan (a static-shape plan's slots are refilled
    # for every batch, so it cannot know: its levels always mask).
    if plan.is_static or index.device.type != "cpu":
        full = [False] * len(widths)
    else:
        # The empty slots before each level's block and after it, from one running count over all slots.
        empty_before = torch.cat([index.new_zeros(1), (index == plan.num_nodes).cumsum(0)])
        ends = [start + (b - a) * width for a, b, width, start in zip(plan.ptr, plan.ptr[1:], widths, starts)]
        counts = empty_before[torch.tensor([*starts, *ends], dtype=torch.long)].tolist()
        full = [before == after for before, after in zip(counts[:len(ends)], counts[len(ends):])]
    index, position = index.to(device), position.to(device)
    layout = SlotLayout(plan, widths, starts, index, position)
    return [Slots(block, block.view(-1), layout, level, full[level])
            for level, block in enumerate(layout.blocks(index))]


def position_counts(plan: LevelPlan) -> list[tuple[int, ...] | None]:
    """Per level, how many of its filled slots hold each position (a ``bincount`` of the positions of the
    level's edges), from the plan's count of filled slots by position."""
    if plan.position_table is None:  # counts the plan cannot know (a static-shape plan)
        return [None] * plan.num_levels
    counts = []
    for filled in plan.position_table:
        row = list(filled)
        while row and row[-1] == 0:
            row.pop()
        counts.append(tuple(row))
    return counts


def gather(buffers: list[Tensor], slots: Slots) -> Children:
    """A level's :class:`Children`, read out of the state buffers (outside autograd's graph of the pass)."""
    return children_of(gathered(buffers, slots), slots)


def children_of(states: Sequence[Tensor], slots: Slots) -> Children:
    """A level's :class:`Children`: the children's ``states`` (``[n, K, d]`` each) and the slots' layout."""
    return Children(tuple(states), *slots.children_layout)


def gathered(buffers: list[Tensor], slots: Slots) -> tuple[Tensor, ...]:
    """Each buffer's rows of the level's slots, ``[n, K, d]``."""
    # index_select on the flat index, then a view: cheaper than advanced indexing on small levels.
    n, K = slots.shape
    index = slots.flat_index
    return tuple([buf.index_select(0, index).view(n, K, buf.size(1)) for buf in buffers])


def state_buffers(cell: torch.nn.Module, plan: LevelPlan, inputs: list[Tensor]) -> list[Tensor]:
    """The pass's level-sorted state buffers, zero, with one row more for the empty slots to point at."""
    reference = next((x for x in inputs if x.is_floating_point()), None)
    dtype = reference.dtype if reference is not None else next(cell.parameters()).dtype
    return [torch.zeros(plan.num_nodes + 1, d, dtype=dtype, device=inputs[0].device) for d in cell.state_channels]


