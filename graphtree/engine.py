"""The propagation engine: every cell in graphtree runs through :func:`propagate`.

A pass visits the levels of a :class:`~graphtree.schedule.LevelPlan` in order.
At each level it gathers the states of the nodes' predecessors (children
bottom-up, parents top-down) into dense ``[n, K, d]`` slots, the aggregated
messages of PyG's terms, and calls the cell's ``update(children, **inputs)``
on that level's nodes only, which applies the cell's equations. States live in
level-sorted buffers, so a level is a contiguous slice and nothing is
scattered.

In training, each level's ``update`` is ordinary autograd; between two
levels one small autograd function writes the states just made into the
buffers and gathers the next level's children (:func:`_definition_pass`). In
backward it adds the children's gradients into one gradient buffer per state
with one indexed add, and hands each level its rows of it, so a pass costs time
linear in the number of nodes (autograd's own bookkeeping of in-place buffer
writes would copy the whole buffer at every level), any cell works, the whole
pass is one autograd graph (one backward call, no per-level ``autograd.grad``),
and a 10,000-deep chain backpropagates with no recursion.

The paper cells have one fast path beside their ``update``: their level math
compiled (:mod:`graphtree.backend.compiled`). Where it applies (CPU, float32,
kernels built; :func:`graphtree.backend.compiled.level_kernel` decides, once
per pass), the engine runs the same two loops in C++ (``run_levels_forward``
and ``run_levels_backward`` in ``graphtree/csrc/engine_ops.cpp``) over the
cell's kernel, which saves what its hand-written derivatives need. The
exactness tests check both against per-node recursive references.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import cached_property
from types import ModuleType
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch.utils.weak import WeakIdKeyDictionary

from .backend import native
from .backend.compiled import LevelKernel, level_kernel
from .errors import ScheduleError
from .schedule import LevelPlan, Schedule, block

__all__ = ["Children", "Pass", "propagate", "propagate_side_by_side", "schedule_of"]


class Children(NamedTuple):
    """Predecessor states of the nodes of one level, gathered into slots: the children in a bottom-up pass,
    the parents in a top-down one.

    ``sum``, ``mean``, ``max`` and ``softmax`` reduce over the filled slots only (see each).

    Attributes:
        states: One ``[n, K, d]`` tensor per state component (e.g. ``(h, c)``);
            empty slots hold zeros. ``K`` is 0 at a level whose nodes have no
            predecessors (the leaves bottom-up, the roots top-down).
        mask: ``[n, K]`` bool, ``True`` where a slot is filled.
        position: ``[n, K]`` long, the ``edge_pos`` of the edge behind each slot
            (the node's own position under that parent, in a top-down pass),
            ``-1`` where empty.
        position_counts: How many of the level's ``n * K`` slots hold each
            position, empty slots counted as position 0; plain ints, read from
            the schedule on the host once per plan, so that a cell that groups
            rows by position never has to ask the GPU for sizes.
    """

    states: tuple[Tensor, ...]
    mask: Tensor
    position: Tensor
    position_counts: tuple[int, ...] = ()

    # Reductions over the filled slots only. Empty slots hold zeros, which a sum may add but a mean, a maximum
    # or a softmax must not see; and at the leaves K is 0, where torch's max over dim 1 fails outright.

    def sum(self, state: int = 0) -> Tensor:
        """``[n, d]``: the sum of the children's ``states[state]`` (zeros where a node has none)."""
        return self.states[state].sum(dim=1)

    def mean(self, state: int = 0) -> Tensor:
        """``[n, d]``: the mean of the children's ``states[state]`` over the filled slots (zeros where none)."""
        count = self.mask.sum(dim=1, keepdim=True).clamp(min=1).to(self.states[state].dtype)
        return self.sum(state) / count

    def max(self, state: int = 0) -> Tensor:
        """``[n, d]``: the elementwise maximum of the children's ``states[state]`` over the filled slots (zeros
        where a node has none)."""
        values = self.states[state]
        n, _, d = values.shape
        if values.size(1) == 0:
            return values.new_zeros(n, d)
        filled = self.mask.unsqueeze(-1)
        best = values.masked_fill(~filled, -math.inf).amax(dim=1)
        return torch.where(filled.any(dim=1), best, torch.zeros_like(best))

    def softmax(self, scores: Tensor) -> Tensor:
        """Weights ``[n, K]`` from ``scores`` ``[n, K]``: a softmax over each node's filled slots, zero in empty
        ones, and all zero where a node has no children."""
        if scores.dim() == 3 and scores.size(-1) == 1:
            scores = scores.squeeze(-1)
        if scores.shape != self.mask.shape:
            raise ValueError(f"softmax takes one score per slot, [n, K] = {list(self.mask.shape)}, got "
                             f"{list(scores.shape)}")
        if scores.size(1) == 0:
            return scores
        weights = torch.softmax(scores.masked_fill(~self.mask, -math.inf), dim=1)
        return torch.where(self.mask, weights, torch.zeros_like(weights))  # a row with no slot filled: NaN -> 0


# What Schedule.from_data reads besides num_nodes. A cached schedule is reused only while each of these is
# the very same tensor, unmodified: same object, version counter (bumped by every in-place write) and storage
# pointer (changed by ``t.data = ...``). Sizes alone let a graph whose edges were replaced by another of the
# same size keep running on the old graph's levels.
_SCHEDULE_INPUTS = ("edge_index", "edge_pos", "height", "depth", "batch")


class _CachedSchedule(NamedTuple):
    """A schedule in ``data.__dict__["_schedule"]`` with what it was built from (see :func:`schedule_of`)."""

    key: tuple  # num_nodes, then per input (id, version, data_ptr), or None where the attribute is absent
    tensors: tuple  # the inputs themselves: holding them keeps their ids from being reused by other tensors
    schedule: Schedule

    def __reduce__(self) -> tuple:
        # Pickled with its batch (a DataLoader worker sends one to the main process), the key is made anew on
        # arrival from the unpickled tensors, which pickle keeps the very objects of the batch: the schedule
        # built in the worker is then a cache hit, without comparing values.
        return _rekeyed, (self.key[0], self.tensors, self.schedule)


def _rekeyed(num_nodes: Any, tensors: tuple, schedule: Schedule) -> _CachedSchedule:
    return _CachedSchedule(_schedule_key(tensors, num_nodes), tensors, schedule)


def schedule_of(data: Any, num_nodes: int | None = None, edge_pos: Tensor | None = None) -> Schedule:
    """Return the :class:`Schedule` of ``data``, building and caching it on first use.

    ``data`` may be a ``Schedule`` already, a ``Data``/``Batch``, or a bare
    ``edge_index`` (``[2, E]``, child -> parent) with ``num_nodes`` and
    optionally ``edge_pos`` (each child's position under its parent), as
    PyG layers are called: ``cell(x, edge_index)``. The cached
    schedule is keyed by the tensors it was built from (``edge_index``,
    ``edge_pos``, ``height``, ``depth``, ``batch``: each one's identity, version
    counter and storage) and ``num_nodes``, so a cache hit costs a few attribute
    reads. When the key no longer matches but the tensors were only replaced by
    equal ones (``batch.to(device)`` after the trainer built the schedule on the
    host, ``data.clone()``, which copies the cache along), their values are
    compared with the schedule's own copies once and the schedule is kept;
    otherwise (new edges, new levels, an in-place edit) it is rebuilt.

    A write that bypasses the version counter (through ``.data``, through a
    NumPy view such as ``data.edge_index.numpy()[...] = ...``, or in place
    under ``torch.inference_mode`` on an inference tensor, which has none) is
    not seen: replace the tensor instead, or ``del data.__dict__["_schedule"]``.
    """
    if isinstance(data, Schedule):
        return data
    if isinstance(data, Tensor):
        return _schedule_of_edges(data, num_nodes, edge_pos)
    fixed = getattr(data, "__dict__", {}).get("_fixed_schedule")
    if fixed is not None:  # a batch padded to a bucket shape carries its own plan (graphtree.replay)
        return fixed
    if not hasattr(data, "edge_index"):
        raise ScheduleError(
            f"expected a graphtree Schedule or a torch_geometric Data/Batch, got {type(data).__name__}")
    tensors, num_nodes = _schedule_inputs(data)
    key = _schedule_key(tensors, num_nodes)
    cached = data.__dict__.get("_schedule")
    if type(cached) is _CachedSchedule:
        if cached.key == key:
            return cached.schedule
        if key is not None and _same_graph(cached, tensors, key):
            data.__dict__["_schedule"] = _CachedSchedule(key, tensors, cached.schedule)
            return cached.schedule
    schedule = Schedule.from_data(data)
    if key is not None:
        data.__dict__["_schedule"] = _CachedSchedule(key, tensors, schedule)
    else:
        data.__dict__.pop("_schedule", None)
    return schedule


# Schedules of bare edge_index tensors, held as long as the tensor lives, keyed like a Data's cached schedule.
_EDGE_SCHEDULES: WeakIdKeyDictionary = WeakIdKeyDictionary()


def _schedule_of_edges(edge_index: Tensor, num_nodes: int | None, edge_pos: Tensor | None) -> Schedule:
    """The schedule of a bare ``edge_index``, cached on that tensor (weakly: it goes with the tensor)."""
    if num_nodes is None:
        raise ScheduleError("a bare edge_index needs num_nodes (a cell passes x.size(0))")
    key = _schedule_key((edge_index, edge_pos), num_nodes)
    cached = _EDGE_SCHEDULES.get(edge_index) if key is not None else None
    if cached is not None and cached.key == key:
        return cached.schedule
    schedule = Schedule(edge_index, num_nodes, edge_pos=edge_pos)
    if key is not None:
        _EDGE_SCHEDULES[edge_index] = _CachedSchedule(key, (edge_index, edge_pos), schedule)
    return schedule


def _schedule_inputs(data: Any) -> tuple[tuple, Any]:
    """The schedule's input attributes of ``data`` (``None`` where absent) and its ``num_nodes``.

    Read straight from a PyG ``Data``'s attribute dict where there is one: this runs on every forward, and
    ``Data.__getattr__`` costs several calls per attribute.
    """
    mapping = getattr(data.__dict__.get("_store"), "_mapping", None)
    if type(mapping) is dict:
        get = mapping.get
        num_nodes = get("num_nodes")
        return ((get("edge_index"), get("edge_pos"), get("height"), get("depth"), get("batch")),
                num_nodes if num_nodes is not None else data.num_nodes)
    return tuple(getattr(data, name, None) for name in _SCHEDULE_INPUTS), data.num_nodes


def _schedule_key(tensors: tuple, num_nodes: Any) -> tuple | None:
    """The cache key of these inputs, or ``None`` if one of them is not a tensor (no schedule is cached)."""
    try:
        return (num_nodes, *[None if t is None else (id(t), t._version, t.data_ptr()) for t in tensors])
    except AttributeError:  # not a tensor: Schedule.from_data says what is wrong
        return None
    except RuntimeError:  # an inference tensor has no version counter: it can only be written in inference mode
        if not all(t is None or isinstance(t, Tensor) for t in tensors):
            return None
        return (num_nodes, *[None if t is None else (id(t), -1 if t.is_inference() else t._version, t.data_ptr())
                             for t in tensors])


def _same_graph(cached: _CachedSchedule, tensors: tuple, key: tuple) -> bool:
    """Whether ``tensors`` hold the same values the cached schedule was built from (the key differs).

    Each replaced tensor is compared with the schedule's private copy of it, all of them through one transfer
    to the host: a batch moved to a GPU after its schedule was built pays one small copy on its first pass
    instead of a second build.
    """
    if cached.key[0] != key[0]:  # num_nodes
        return False
    schedule = cached.schedule
    snapshots = (schedule.edge_index, schedule.edge_pos, schedule.height, schedule.depth, schedule.batch)
    changed, expected = [], []
    for new, old, old_key, new_key, snapshot in zip(tensors, cached.tensors, cached.key[1:], key[1:], snapshots):
        if (new is None) != (old is None):
            return False
        if new is None or (new is old and new_key == old_key):
            continue
        # The old tensor passed the build's checks; the new one must look like it to share its schedule.
        if new.shape != old.shape or new.dtype != old.dtype or snapshot is None:
            return False
        changed.append(new)
        expected.append(snapshot)
    if not changed or any(t.device != changed[0].device for t in changed):
        return False
    try:
        values = torch.cat([t.detach().reshape(-1).long() for t in changed]).cpu()
    except (RuntimeError, NotImplementedError):  # e.g. meta tensors: rebuild, and let the build report
        return False
    return torch.equal(values, torch.cat([t.reshape(-1) for t in expected]))


def propagate(cell: torch.nn.Module, inputs: Sequence[Tensor] | Mapping[str, Tensor], schedule: Schedule | Any,
              direction: str = "bottom_up") -> tuple[Tensor, ...]:
    """Run ``cell`` over all levels of ``schedule`` in ``direction``.

    Args:
        cell: A module with ``state_channels`` (the width of each state
            component), ``update(children, *inputs) -> states`` for one level, and
            optionally ``max_children`` (fixed-arity cells get exactly that many
            slots; a node with more children is an error) and ``output_states``
            (how many leading state components are returned; the others are
            internal, carried from level to level only).
        inputs: Per-node tensors, first dimension ``num_nodes`` (node order of
            the batch), handed to ``update`` sliced to the level's nodes: by
            position, or by keyword where given as a mapping of names.
        schedule: A :class:`Schedule`, or a ``Data``/``Batch`` to take it from.
        direction: ``"bottom_up"`` (children before parents) or ``"top_down"``.

    Returns:
        One ``[num_nodes, d]`` tensor per returned state component, in the batch's node order.
    """
    prepared = _prepare(cell, inputs, schedule, direction)
    return _in_node_order(prepared, _propagated(prepared))


class Pass(NamedTuple):
    """One cell's pass over a graph: :func:`propagate`'s arguments, for :func:`propagate_side_by_side`."""

    cell: torch.nn.Module
    inputs: Sequence[Tensor] | Mapping[str, Tensor]
    schedule: Schedule | Any
    direction: str = "bottom_up"


def propagate_side_by_side(passes: Sequence[Pass]) -> list[tuple[Tensor, ...]]:
    """:func:`propagate` of each of several passes that do not read one another's states, side by side.

    Where every pass runs compiled (:mod:`graphtree.backend.compiled`) and PyTorch has more than one thread,
    the passes run at the same time, each on one thread of PyTorch's pool, forward and backward (e.g.
    BiConTree's bottom-up and top-down passes, which both read only the head vectors). A level's products are
    too small for two threads to share well, so two chains of levels at once finish sooner than one after
    the other with both threads on each product. Everything in a pass, its products too, runs on its one
    thread: each pass computes exactly what :func:`propagate` computes in a one-thread process (with several
    threads a product split over them may round otherwise). Where not every pass runs compiled, or PyTorch
    has one thread, the passes run one after the other through :func:`propagate`.

    Returns:
        Each pass's states, as :func:`propagate` returns them.
    """
    prepared = [_prepare(*p) for p in passes]
    compiled: list[LevelKernel | None] = []
    if len(prepared) > 1 and torch.get_num_threads() > 1 and len({p.needs_grad for p in prepared}) == 1:
        with torch.no_grad():  # as inside an autograd Function's forward, where the kernels run
            compiled = [level_kernel(p.call.cell, p.inputs, p.plan) for p in prepared]
    if not compiled or any(c is None for c in compiled):
        return [_in_node_order(p, _propagated(p)) for p in prepared]
    if prepared[0].needs_grad:
        tensors = [t for p in prepared for t in (*p.inputs, *p.params)]
        returned = _by_pass(_SideBySidePasses.apply(prepared, compiled, *tensors), prepared)
    else:
        returned = [buffers[:_num_outputs(p.call.cell)]
                    for p, buffers in zip(prepared, _run_side_by_side(prepared, compiled, save=False))]
    return [_in_node_order(p, states) for p, states in zip(prepared, returned)]


class _Prepared(NamedTuple):
    """A pass made ready to run: the cell's update, the plan and slots, the level-sorted inputs."""

    call: _Update
    plan: LevelPlan
    levels: list[_Slots]
    inputs: list[Tensor]
    params: list[Tensor]
    needs_grad: bool


def _prepare(cell: torch.nn.Module, inputs: Sequence[Tensor] | Mapping[str, Tensor], schedule: Schedule | Any,
             direction: str) -> _Prepared:
    schedule = schedule_of(schedule)
    names = tuple(inputs) if isinstance(inputs, Mapping) else None
    inputs = list(inputs.values()) if isinstance(inputs, Mapping) else list(inputs)
    if not inputs:
        raise ValueError("propagate needs at least one per-node input tensor")
    for k, x in enumerate(inputs):
        if not isinstance(x, Tensor) or x.dim() == 0:
            raise TypeError(f"input {names[k] if names else k} must be a per-node tensor, got "
                            f"{type(x).__name__ if not isinstance(x, Tensor) else 'a scalar tensor'}")
        if x.size(0) != schedule.num_nodes:
            raise ScheduleError(f"input {names[k] if names else k} has {x.size(0)} rows but the batch has "
                                f"{schedule.num_nodes} nodes; was the schedule built for another batch?")
    device = inputs[0].device
    host_plan = schedule.plan(direction)
    plan = host_plan.to(device)
    levels = _level_slots(cell, host_plan, schedule, device)
    # index_select, not x[perm]: the same rows, but its backward is index_add_, where advanced indexing's is
    # index_put_ with accumulate, which sorts its indices first (several times slower on CPU).
    sorted_inputs = [x.index_select(0, plan.order) for x in inputs]
    params = [p for p in cell.parameters() if p.requires_grad]
    needs_grad = torch.is_grad_enabled() and (bool(params) or any(x.requires_grad for x in sorted_inputs))
    return _Prepared(_Update(cell, names), plan, levels, sorted_inputs, params, needs_grad)


def _propagated(prepared: _Prepared) -> list[Tensor]:
    """The returned states of one prepared pass, in level order."""
    if prepared.needs_grad:
        with torch.no_grad():  # as inside an autograd Function's forward, where the kernels run
            compiled = level_kernel(prepared.call.cell, prepared.inputs, prepared.plan)
        if compiled is None:
            return _definition_pass(prepared)
        return list(_LevelPass.apply(prepared.call, prepared.plan, prepared.levels, compiled,
                                     len(prepared.inputs), *prepared.inputs, *prepared.params))
    buffers = _run_levels(prepared.call, prepared.plan, prepared.levels, prepared.inputs)
    return buffers[:_num_outputs(prepared.call.cell)]


def _in_node_order(prepared: _Prepared, buffers: Sequence[Tensor]) -> tuple[Tensor, ...]:
    return tuple(buf.index_select(0, prepared.plan.rank) for buf in buffers)  # the padding row stays out


class _Update(NamedTuple):
    """A cell and how its ``update`` takes the per-node inputs (by position, or by these names)."""

    cell: torch.nn.Module
    names: tuple[str, ...] | None

    def __call__(self, children: Children, inputs: Sequence[Tensor]) -> tuple[Tensor, ...]:
        if self.names is None:
            states = self.cell.update(children, *inputs)
        else:
            states = self.cell.update(children, **dict(zip(self.names, inputs)))
        if isinstance(states, Tensor):
            states = (states,)
        channels = self.cell.state_channels
        if len(states) != len(channels):
            raise ValueError(f"{type(self.cell).__name__}.update returned {len(states)} states, but its "
                             f"state_channels has {len(channels)}")
        n = children.mask.size(0)
        for k, (state, d) in enumerate(zip(states, channels)):
            if not isinstance(state, Tensor) or state.shape != (n, d):
                shape = list(state.shape) if isinstance(state, Tensor) else type(state).__name__
                raise ValueError(f"{type(self.cell).__name__}.update returned state {k} of shape {shape} for a level "
                                 f"of {n} nodes; expected [{n}, {d}] (state_channels[{k}] = {d})")
        return tuple(states)


def _num_outputs(cell: torch.nn.Module) -> int:
    count = getattr(cell, "output_states", None)
    if count is None:
        return len(cell.state_channels)
    if not 1 <= count <= len(cell.state_channels):
        raise ValueError(f"{type(cell).__name__}.output_states must be between 1 and its "
                         f"{len(cell.state_channels)} state components, got {count}")
    return count


class _Slots:
    """One level's slots: ``index`` ``[n, K]``, the level-sorted predecessor ids (``num_nodes`` where empty), and
    ``flat_index``, its ``view(-1)`` (the gathers and the gradient accumulation use it). ``mask``, ``position``
    and ``position_counts``, the layout a level's :class:`Children` carry, are made on first use (blocks of
    matrices made once for all levels): the compiled level loops read only ``flat_index``."""

    __slots__ = ("_layout", "_level", "_mask", "_position", "flat_index", "index")

    def __init__(self, index: Tensor, flat_index: Tensor, layout: _SlotLayout, level: int) -> None:
        self.index, self.flat_index, self._layout, self._level = index, flat_index, layout, level
        self._mask: Tensor | None = None
        self._position: Tensor | None = None

    @property
    def mask(self) -> Tensor:
        if self._mask is None:
            self._mask = self._layout.block(self._layout.mask, self._level)
        return self._mask

    @property
    def position(self) -> Tensor:
        if self._position is None:
            self._position = self._layout.block(self._layout.position, self._level)
        return self._position

    @property
    def position_counts(self) -> tuple[int, ...]:
        return self._layout.counts[self._level]


class _SlotLayout:
    """What the levels of one :func:`_level_slots` share: the padded slot and position matrices, the plan."""

    def __init__(self, plan: LevelPlan, widths: list[int], index: Tensor, position: Tensor) -> None:
        self.plan, self.widths, self.index, self.position = plan, widths, index, position

    def block(self, matrix: Tensor, level: int) -> Tensor:
        return block(matrix, self.plan.ptr[level], self.plan.ptr[level + 1], self.widths[level])

    @cached_property
    def mask(self) -> Tensor:
        return self.index != self.plan.num_nodes

    @cached_property
    def counts(self) -> list[tuple[int, ...]]:
        return _position_counts(self.plan, self.widths)


def _level_slots(cell: torch.nn.Module, plan: LevelPlan, schedule: Schedule, device: torch.device) -> list[_Slots]:
    """Per level: slot indices, mask and positions, widened to ``cell.max_children`` for fixed-arity cells.

    Built once per plan, arity and device from the host copy of the plan (so
    checks and counts cost no device synchronization), for all levels at once
    on the plan's whole slot matrix, then moved to ``device``; each level is a
    block of it, and the level loop does nothing but gather.
    """
    arity = getattr(cell, "max_children", None) if plan.direction == "bottom_up" else None
    key = ("slots", arity, torch.device(device))
    if key in plan._by_device:
        return plan._by_device[key]
    if arity is not None and any(width > arity for width in plan.widths):
        level = next(k for k, width in enumerate(plan.widths) if width > arity)
        index = plan.slots[level]
        row = int((index[:, arity:] != plan.num_nodes).any(dim=1).nonzero()[0])
        node = int(plan.order[plan.ptr[level] + row])
        count = int((index[row] != plan.num_nodes).sum())
        raise ScheduleError(f"{schedule.describe_node(node)} has {count} {'child' if count == 1 else 'children'} "
                            f"(or a child at position "
                            f"{index.size(1) - 1}), but {type(cell).__name__} takes at most {arity}")
    # A fixed-arity cell sees every level with children at its full arity, the missing slots padded.
    widths = [max(width, arity) if arity is not None and width > 0 else width for width in plan.widths]
    index, position = plan.slot_matrix, plan.slot_pos_matrix
    extra = max(widths, default=0) - index.size(1)
    if extra > 0:
        index = torch.nn.functional.pad(index, (0, extra), value=plan.num_nodes)
        position = torch.nn.functional.pad(position, (0, extra), value=-1)
    index, position = index.to(device), position.to(device)
    layout = _SlotLayout(plan, widths, index, position)
    # A level as wide as the matrix is a run of its flat view: one split cuts all of those (a level loop of
    # small minibatches, LSTM-RNN's five trees, spent as long on one slice per level as on its products).
    full = index.size(1)
    runs = index.view(-1).split([(b - a) * full for a, b in zip(plan.ptr, plan.ptr[1:])]) if full else None
    levels = []
    for level, width in enumerate(widths):
        a, b = plan.ptr[level], plan.ptr[level + 1]
        if width == full and runs is not None:
            flat = runs[level]
            level_index = flat.view(b - a, width)
        else:
            level_index = block(index, a, b, width)
            flat = level_index.view(-1)
        levels.append(_Slots(level_index, flat, layout, level))
    plan._by_device[key] = levels
    return levels


def _position_counts(plan: LevelPlan, widths: list[int]) -> list[tuple[int, ...]]:
    """Per level, how many of its ``n * width`` slots hold each position, empty slots counted as position 0
    (a ``bincount`` of the level's slot positions), from the plan's count of filled slots by position."""
    if not isinstance(plan.position_table, list):  # counts the plan cannot know (a padded plan): left as they are
        return [plan.position_table] * plan.num_levels
    counts = []
    for filled, size, width in zip(plan.position_table, plan.level_sizes(), widths):
        if not size * width:
            counts.append(())
            continue
        row = list(filled)
        row[0] += size * width - sum(filled)
        while row[-1] == 0:
            row.pop()
        counts.append(tuple(row))
    return counts


def _gather(buffers: list[Tensor], slots: _Slots) -> Children:
    return _children(_gathered(buffers, slots), slots)


def _children(states: Sequence[Tensor], slots: _Slots) -> Children:
    """A level's :class:`Children`: the children's ``states`` (``[n, K, d]`` each) and the slots' layout."""
    return Children(tuple(states), slots.mask, slots.position, slots.position_counts)


def _gathered(buffers: list[Tensor], slots: _Slots) -> tuple[Tensor, ...]:
    """Each buffer's rows of the level's slots, ``[n, K, d]``."""
    # index_select on the flat index, then a view: cheaper than advanced indexing on small levels.
    n, K = slots.index.shape
    return tuple(buf.index_select(0, slots.flat_index).view(n, K, buf.size(1)) for buf in buffers)


def _run_levels(call: _Update, plan: LevelPlan, levels: list[_Slots], inputs: list[Tensor]) -> list[Tensor]:
    """Forward through all levels without autograd: the cell's compiled levels where they apply, else its
    ``update``. Returns the state buffers."""
    buffers = _state_buffers(call.cell, plan, inputs)
    compiled = level_kernel(call.cell, inputs, plan)
    if compiled is not None:
        compiled.kernels.run_levels_forward(compiled.kernel, buffers, inputs, plan.ptr,
                                            [s.flat_index for s in levels], plan.position_groups, False)
        return buffers
    for level in range(plan.num_levels):
        a, b = plan.ptr[level], plan.ptr[level + 1]
        states = call(_gather(buffers, levels[level]), [x[a:b] for x in inputs])
        for buf, value in zip(buffers, states):
            buf[a:b] = value
    return buffers


def _definition_pass(prepared: _Prepared) -> list[Tensor]:
    """One pass of the cell's ``update`` under autograd, level by level: the returned states, in level order.

    Each level's ``update`` is ordinary autograd. Before each level, and once after the last, one small
    function, :class:`_NextLevel`, writes the states just made into the pass's buffers and reads the next
    level's children's rows out of them. Its backward works on one buffer of gradients per state: it adds the
    children's slot gradients into their rows, then hands the level below its rows' gradients, and nothing
    copies a whole buffer per level (autograd's own bookkeeping of ``buf[a:b] = states`` would). Each one
    takes the token, an empty tensor, that the one before it made: so backward reaches a level's rows only
    after every later level's children have added into them. Parameters and inputs get their gradients from
    autograd itself, as anywhere else.
    """
    call, plan, levels = prepared.call, prepared.plan, prepared.levels
    run = _DefinitionPass(plan, levels, _state_buffers(call.cell, plan, prepared.inputs), _num_outputs(call.cell))
    # split, not a slice per level: its backward puts the levels' input gradients together in one cat.
    per_level = [x.split(plan.level_sizes()) for x in prepared.inputs]
    token = run.buffers[0].new_empty(0).requires_grad_()
    states: tuple[Tensor, ...] = ()
    for level in range(plan.num_levels):
        token, *children = _NextLevel.apply(run, level, token, *states)
        states = call(_children(children, levels[level]), [x[level] for x in per_level])
    token, = _NextLevel.apply(run, plan.num_levels, token, *states)  # the last level's states in, nothing out
    return list(_PassOutputs.apply(run, token))


class _DefinitionPass:
    """What the levels of one pass of ``update`` under autograd share (see :func:`_definition_pass`): the
    level-sorted state buffers, and in backward the gradients of every buffer row."""

    __slots__ = ("buffers", "grads", "kernels", "levels", "num_outputs", "plan")

    def __init__(self, plan: LevelPlan, levels: list[_Slots], buffers: list[Tensor], num_outputs: int) -> None:
        self.plan, self.levels, self.buffers, self.num_outputs = plan, levels, buffers, num_outputs
        self.grads: list[Tensor] = []
        self.kernels: ModuleType | None = None


class _NextLevel(torch.autograd.Function):
    """Level ``level - 1``'s states into the pass's buffers, and level ``level``'s children's states out (none
    after the last level).

    Backward: the children's gradients added into their rows, then level ``level - 1``'s rows' gradients.
    """

    @staticmethod
    def forward(ctx, run, level, token, *states):
        a, b = (run.plan.ptr[level - 1], run.plan.ptr[level]) if level else (0, 0)
        for buf, value in zip(run.buffers, states):
            buf[a:b] = value
        ctx.run, ctx.level, ctx.rows, ctx.num_states = run, level, (a, b), len(states)
        ctx.set_materialize_grads(False)
        children = _gathered(run.buffers, run.levels[level]) if level < run.plan.num_levels else ()
        return token.new_empty(0), *children

    @staticmethod
    def backward(ctx, grad_token, *grad_children):
        run, (a, b) = ctx.run, ctx.rows
        if grad_children:
            _accumulate_children(run.grads, run.levels[ctx.level], grad_children, run.kernels)
        grads = tuple(g[a:b] for g in run.grads[:ctx.num_states])
        if not ctx.level:  # the last of the pass's backward: its gradient buffers go now, not with the graph
            run.grads, run.kernels = [], None
        return (None, None, None, *grads)


class _PassOutputs(torch.autograd.Function):
    """The pass's returned buffers; backward, the first of the pass's, starts its gradient buffers."""

    @staticmethod
    def forward(ctx, run, token):
        ctx.run = run
        ctx.set_materialize_grads(False)
        return tuple(run.buffers[:run.num_outputs])

    @staticmethod
    def backward(ctx, *grad_outputs):
        run = ctx.run
        # Cloned: the levels add their children's gradients into these in place.
        run.grads = [g.clone() if g is not None else torch.zeros_like(buf)
                     for g, buf in zip(grad_outputs, run.buffers)]
        run.grads += [torch.zeros_like(buf) for buf in run.buffers[len(grad_outputs):]]
        # The compiled scatter-add only if this process has the kernels already: a cell written in PyTorch
        # alone must never wait minutes for a compiler on its first backward pass.
        run.kernels = native.native_kernels_if_loaded(*run.grads)
        return None, None


def _state_buffers(cell: torch.nn.Module, plan: LevelPlan, inputs: list[Tensor]) -> list[Tensor]:
    """The pass's level-sorted state buffers, zero, with one row more for the empty slots to point at."""
    reference = next((x for x in inputs if x.is_floating_point()), None)
    dtype = reference.dtype if reference is not None else next(cell.parameters()).dtype
    return [torch.zeros(plan.num_nodes + 1, d, dtype=dtype, device=inputs[0].device) for d in cell.state_channels]


def _run_side_by_side(passes: list[_Prepared], compiled: list[LevelKernel], save: bool) -> list[list[Tensor]]:
    """Forward through every pass at once (``run_passes_forward``); each pass's buffers."""
    buffers = [_state_buffers(p.call.cell, p.plan, p.inputs) for p in passes]
    compiled[0].kernels.run_passes_forward([c.kernel for c in compiled], buffers, [p.inputs for p in passes],
                                           *_loop_arguments(passes), save)
    return buffers


def _loop_arguments(passes: Sequence[_Prepared]) -> tuple[list, list, list]:
    """Each pass's level boundaries, slot indices and position groups: the C++ level loops' arguments."""
    return ([p.plan.ptr for p in passes], [[s.flat_index for s in p.levels] for p in passes],
            [p.plan.position_groups for p in passes])


def _by_pass(flat: Sequence, passes: Sequence[_Prepared]) -> list[Sequence]:
    """``flat``, the passes' returned states (or their gradients) one pass after the other, cut by pass."""
    parts, start = [], 0
    for p in passes:
        count = _num_outputs(p.call.cell)
        parts.append(flat[start:start + count])
        start += count
    return parts


_RELEASED = "released"  # ctx.saved after the compiled backward has run and let its kernel go


class _LevelPass(torch.autograd.Function):
    """A compiled pass as one autograd node: the kernel's level loop forward, its hand-written derivatives
    level by level backward."""

    @staticmethod
    def forward(ctx, call, plan, levels, compiled, num_inputs, *tensors):
        inputs = list(tensors[:num_inputs])
        buffers = _state_buffers(call.cell, plan, inputs)
        compiled.kernels.run_levels_forward(compiled.kernel, buffers, inputs, plan.ptr,
                                            [s.flat_index for s in levels], plan.position_groups, True)
        ctx.call, ctx.plan, ctx.levels, ctx.num_inputs = call, plan, levels, num_inputs
        ctx.params = tensors[num_inputs:]
        ctx.saved = compiled  # it holds every level's context
        # Internal states are never returned, so no gradient arrives for them. Unused outputs get None rather
        # than a materialized zero gradient.
        outputs = _num_outputs(call.cell)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(*inputs, *buffers[:outputs])
        return tuple(buffers[:outputs])

    @staticmethod
    def backward(ctx, *grad_buffers):
        saved = ctx.saved_tensors
        inputs, buffers = saved[:ctx.num_inputs], saved[ctx.num_inputs:]
        if ctx.saved is _RELEASED:
            raise RuntimeError(
                "a second backward through the same graphtree pass (retain_graph=True): its compiled level loop "
                "freed what its backward needs after the first one. Run the forward again, or set "
                "GRAPHTREE_NATIVE=0 for the Python level loop, which keeps it.")
        grad_states, grad_inputs = _backward_buffers(ctx.call.cell, grad_buffers, buffers, inputs)
        grad_params = _compiled_backward(ctx, grad_states, grad_inputs)
        # The kernel's contexts live as long as the autograd graph, which outlives the backward pass until the
        # caller drops the outputs (usually during the next batch's forward pass): freed here, that memory is
        # reused by the next pass instead of fresh pages.
        ctx.saved = _RELEASED
        return (None, None, None, None, None, *grad_inputs, *grad_params)


class _SideBySidePasses(torch.autograd.Function):
    """Several compiled passes as one autograd node, so that their backward loops too run side by side."""

    @staticmethod
    def forward(ctx, passes, compiled, *tensors):
        buffers = _run_side_by_side(passes, compiled, save=True)
        ctx.passes, ctx.compiled = passes, compiled
        ctx.set_materialize_grads(False)
        outputs = [b for p, pass_buffers in zip(passes, buffers) for b in pass_buffers[:_num_outputs(p.call.cell)]]
        ctx.save_for_backward(*outputs)
        return tuple(outputs)

    @staticmethod
    def backward(ctx, *grad_outputs):
        if ctx.compiled is _RELEASED:
            raise RuntimeError("a second backward through the same graphtree passes (retain_graph=True): their "
                               "compiled level loops freed what the backward needs after the first one")
        grad_states, grad_inputs = [], []
        for p, grads_out, outputs in zip(ctx.passes, _by_pass(grad_outputs, ctx.passes),
                                         _by_pass(ctx.saved_tensors, ctx.passes)):
            states, inputs = _backward_buffers(p.call.cell, grads_out, outputs, p.inputs)
            grad_states.append(states)
            grad_inputs.append(inputs)
        compiled = ctx.compiled
        grads = compiled[0].kernels.run_passes_backward([c.kernel for c in compiled], grad_states, grad_inputs,
                                                        *_loop_arguments(ctx.passes))
        ctx.compiled = _RELEASED  # the kernels' contexts go now, as in _LevelPass.backward
        result: list[Tensor | None] = [None, None]
        for p, c, inputs, pass_grads in zip(ctx.passes, compiled, grad_inputs, grads):
            result += [*inputs, *_parameter_grads(c, pass_grads, p.params)]
        return tuple(result)


def _backward_buffers(cell: torch.nn.Module, grad_buffers: Sequence[Tensor | None], buffers: Sequence[Tensor],
                      inputs: Sequence[Tensor]) -> tuple[list[Tensor], list[Tensor | None]]:
    """The gradients a backward loop adds into: of every state buffer (the internal ones too), of the inputs."""
    # Cloned: the levels add their children's gradients into these in place.
    grad_states = [g.clone() if g is not None else torch.zeros_like(buf) for g, buf in zip(grad_buffers, buffers)]
    reference = buffers[0]
    grad_states += [reference.new_zeros(reference.size(0), d) for d in cell.state_channels[len(buffers):]]
    grad_inputs = [torch.zeros_like(x) if x.requires_grad else None for x in inputs]
    return grad_states, grad_inputs


def _parameter_grads(compiled: LevelKernel, grads: Sequence[Tensor], params: Sequence[Tensor]) -> list[Tensor]:
    """The gradients of ``params`` from those a kernel returns, in the order of its maker's parameters."""
    by_parameter = {id(p): grad for p, grad in zip(compiled.parameters, grads, strict=True)}
    # A parameter used outside the pass (an input projection hoisted before it) gets no gradient here.
    return [by_parameter[id(p)] if id(p) in by_parameter else torch.zeros_like(p) for p in params]


def _accumulate_children(grad_states: list[Tensor], slots: _Slots, grads: Sequence[Tensor | None],
                         kernels: ModuleType | None) -> None:
    """Add each slot's gradient into its child's row; ``kernels``: the compiled ones, if loaded already."""
    flat_index = slots.flat_index
    if not flat_index.numel():
        return
    for grad_state, g in zip(grad_states, grads):
        if g is not None:
            g = g.reshape(flat_index.numel(), -1)
            if g.untyped_storage().data_ptr() == grad_state.untyped_storage().data_ptr():
                # The level's update passed its own rows' gradient through as a view (a sum over one slot, say):
                # other rows of this very buffer, which the indexed add below refuses to read while it writes.
                g = g.clone()
            if kernels is not None:  # one pass over the rows; index_put_ with accumulate sorts its indices first
                kernels.scatter_add_rows_(grad_state, flat_index, g)
            elif grad_state.device.type == "cpu":
                # index_put_ rather than index_add_: the latter goes multi-threaded on
                # small inputs and costs milliseconds per level on a 2-core machine.
                grad_state.index_put_((flat_index,), g, accumulate=True)
            else:
                # On a GPU index_add_ is one kernel, where index_put_ with accumulate sorts first in several.
                # A tree's child has one slot, so each row gets one addition; a DAG's node with several
                # parents in one level gets several, in an order that torch.use_deterministic_algorithms fixes.
                grad_state.index_add_(0, flat_index, g)


def _compiled_backward(ctx, grad_states, grad_inputs) -> list[Tensor]:
    """Backward through the compiled level loop, over the kernel object its forward loop filled."""
    compiled = ctx.saved  # the module the forward loop ran on, whatever the settings are by now
    grads = compiled.kernels.run_levels_backward(compiled.kernel, grad_states, grad_inputs, ctx.plan.ptr,
                                                 [s.flat_index for s in ctx.levels], ctx.plan.position_groups)
    return _parameter_grads(compiled, grads, ctx.params)
