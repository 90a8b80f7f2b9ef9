"""The level schedule of a batch: which nodes run at each step, and which states they read.

A :class:`Schedule` is computed once per batch and shared by every layer that
runs on it. For each direction it holds a :class:`LevelPlan`:

* ``order``: node ids sorted by level (height for ``"bottom_up"``, depth for
  ``"top_down"``), so every level is one contiguous slice ``ptr[l]:ptr[l + 1]``
  of level-sorted buffers;
* ``slots[l]``: a ``[n_l, K_l]`` matrix naming, for each node of level ``l``, the
  level-sorted index of each predecessor whose state it reads (its children
  bottom-up, its parents top-down). ``K_l`` is the level's widest node's. The
  value ``num_nodes`` pads missing slots and points at an all-zero state row;
* ``slot_pos[l]``: for each slot the ``edge_pos`` of the edge it came through
  (the node's position under that parent, used by top-down cells);
* ``position_groups[l]``: within a level, nodes come grouped by their own
  position under their parents: first the nodes that are child 0 of every
  parent they have, then child 1, and so on up to the widest position, then
  the nodes at several positions (a DAG), then those with no parent. The list
  holds each group's size, so a cell can run a block of rows that share a
  position as one contiguous slice: bottom-up, rows that feed the same parent
  slot (the LSTM-RNN computes only the maps its parent will read); top-down,
  rows that use the same position's parameter set (the top-down Tree-LSTM).

Bottom-up, a child sits in the slot equal to its ``edge_pos`` (its position among
the parent's children), which is what ordered N-ary cells need. Top-down, a
node's parents fill slots ``0..P-1`` in edge order.

A level is a set of nodes that do not read one another, so a plan may cut a
height (or depth) into several levels run one after the other. The plan *split
by width* (``plan(direction, split_cost)``, which the engine runs for every
cell that takes any number of predecessors) does so where one node is much
wider than the rest: a hub of 400 children gets a level of its own instead of
padding its 400 neighbours to 400 slots each, so a pass costs about one slot per
edge (:func:`_width_classes`). Sentence batches, whose levels waste at most a
few hundred slots, are not split; fixed-arity cells take the plain plan.

Building it is vectorized over nodes and edges, in NumPy on the host arrays
(a minibatch's plan is a few dozen small array operations, and NumPy dispatches
each for a fraction of what PyTorch takes): every level's slot matrix is a block
of one flat array, filled in one indexed write, so the only Python loop takes a
view per level.

A schedule is data, passed explicitly. A batch carries it as ``batch.schedule``
(set where the batch is collated: :class:`~graphtree.data.TreeLoader`,
:func:`~graphtree.data.with_schedule`), a cell is handed one in place of
``edge_index`` (``cell(x, schedule)``), or a cell builds one from the bare
``edge_index`` or the ``Data`` it is called on, for that call only. Nothing is
cached behind the caller's back: a schedule holds its own copies of the graph's
tensors, so the pass runs on the graph the schedule was built from, and a graph
that changes needs a new schedule (``batch.schedule = Schedule.from_data(batch)``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .errors import InvalidArgumentError, ScheduleError
from .levels import topological_levels

__all__ = ["DIRECTIONS", "SPLIT_COST_SLOTS", "LevelPlan", "Schedule", "level_blocks", "schedule_of"]

DIRECTIONS = ("bottom_up", "top_down")
# What one more level costs, in slots (a slot: one predecessor's state gathered and computed on): a plan split by
# width (Schedule.plan(split_cost=...)) makes a level of its own for a group of nodes where that saves more slots.
# A level's fixed cost on the CPU is about the work of 256 slots of a 150-wide Child-Sum (benchmarks/hubs.py), but
# the default is set above what the experiments' sentence batches waste in a level (SICK's dependency trees, the
# widest, a few hundred slots at 25 pairs: benchmarks/level_waste.py), so that they keep one level per height, and
# their rounding: hubs and program trees, which waste thousands, are split. A cell may set less.
SPLIT_COST_SLOTS = 1024


@dataclass
class LevelPlan:
    """Execution plan for one pass direction (see module docstring).

    Every level's slots are one contiguous block of ``slot_index``:
    ``slots[l]`` is the ``[n_l, widths[l]]`` view of ``slot_index[slot_start[l]:]``
    (``slot_pos`` likewise of ``slot_position``), so a level costs as many
    slots as its own widest node needs, not the batch's widest, and work on
    all levels at once reads one flat tensor.
    """

    direction: str
    order: Tensor
    rank: Tensor
    ptr: list[int]
    slot_index: Tensor
    slot_position: Tensor
    widths: list[int]
    slot_start: list[int]
    # [level][p]: filled slots at position p, or None where the plan cannot know them (a static-shape plan)
    position_table: list[list[int]] | None = field(default_factory=list, repr=False)
    position_groups: list[list[int]] = field(default_factory=list)
    # A static-shape plan's tensors are refilled for every batch of its shape, so nothing read from their values
    # on the host holds beyond one batch (a captured step would keep it).
    is_static: bool = False
    _derived: dict = field(default_factory=dict, repr=False)

    def derived(self, key: tuple, make: Callable[[], Any]) -> Any:
        """What ``make()`` derives from this plan (its tensors on a device, a level layout), made once per
        ``key`` and kept with the plan, which never changes. A static-shape plan's tensors are refilled in
        place, so their derived values are remade after every refill: :meth:`forget_derived`."""
        if key not in self._derived:
            self._derived[key] = make()
        return self._derived[key]

    def forget_derived(self) -> None:
        """Drop what :meth:`derived` kept (a static-shape plan, after its tensors were refilled)."""
        self._derived.clear()

    @cached_property
    def slots(self) -> list[Tensor]:
        return level_blocks(self.slot_index, self.ptr, self.widths, self.slot_start)

    @cached_property
    def slot_pos(self) -> list[Tensor]:
        return level_blocks(self.slot_position, self.ptr, self.widths, self.slot_start)

    @property
    def num_nodes(self) -> int:
        return self.order.numel()

    @property
    def num_levels(self) -> int:
        return len(self.ptr) - 1

    @property
    def num_slots(self) -> int:
        """Slots over all levels (``sum(n_l * widths[l])``): the rows a pass gathers, each level padded to its
        own widest node."""
        return sum((b - a) * w for a, b, w in zip(self.ptr, self.ptr[1:], self.widths))

    def level_sizes(self) -> list[int]:
        return [b - a for a, b in zip(self.ptr[:-1], self.ptr[1:])]

    def to(self, device: torch.device | str) -> LevelPlan:
        """This plan with its tensors on ``device`` (made once, so repeated calls are free)."""
        device = torch.device(device)
        if self.order.device == device:
            return self
        return self.derived(("plan on", device), lambda: LevelPlan(
            self.direction, self.order.to(device), self.rank.to(device), self.ptr, self.slot_index.to(device),
            self.slot_position.to(device), self.widths, self.slot_start, self.position_table,
            self.position_groups, self.is_static))


class Schedule:
    """Level schedule of a graph or batch with child -> parent edges.

    Args:
        edge_index: ``[2, E]`` edges, row 0 the child, row 1 the parent.
        num_nodes: number of nodes.
        height, depth: precomputed levels (as stored by graphtree's converters);
            computed here when omitted. Stored ones must be exact (leaves and
            roots 0, every other node 1 + its highest child or deepest parent):
            a :class:`ScheduleError` names the first node that is not.
        edge_pos: position of each edge's child among its parent's children, one
            non-negative integer per edge; when omitted, children are numbered in edge order.
        batch: optional graph id per node, used only to name nodes in errors.

    Plans are built lazily, the first time a direction is asked for.
    """

    def __init__(self, edge_index: Tensor, num_nodes: int, height: Tensor | None = None,
                 depth: Tensor | None = None, edge_pos: Tensor | None = None,
                 batch: Tensor | None = None) -> None:
        if edge_index.dim() != 2 or edge_index.size(0) != 2:
            raise ScheduleError(f"edge_index must have shape [2, E], got {tuple(edge_index.shape)}")
        _require_integers("edge_index", edge_index)
        self.num_nodes = int(num_nodes)
        if self.num_nodes < 0:
            raise ScheduleError(f"num_nodes must be non-negative, got {self.num_nodes}")
        # Private host copies, not views of the caller's tensors: plans are built lazily from these, so an
        # in-place edit of the caller's tensors cannot reach a schedule that is already in use.
        self.batch = _host_long(batch) if batch is not None else None
        if self.batch is not None and self.batch.numel() != self.num_nodes:
            raise ScheduleError(f"batch has {self.batch.numel()} entries for {self.num_nodes} nodes "
                                "(one graph id per node)")
        self.edge_index = edge_index = _host_long(edge_index)
        _check_edge_range(edge_index, self.num_nodes)
        num_edges = edge_index.size(1)
        if edge_pos is not None:
            # Checked here, up front: a wrong length used to fail deep inside the plan build, a float one
            # was truncated by .long() (0.5 became a second position 0).
            if edge_pos.dim() != 1:
                raise ScheduleError(f"edge_pos must have shape [{num_edges}] (one entry per edge: the child's "
                                    f"position under its parent), got {tuple(edge_pos.shape)}")
            if edge_pos.numel() != num_edges:
                raise ScheduleError(f"edge_pos has {edge_pos.numel()} entries, expected {num_edges} (one per edge "
                                    "of edge_index); rebuild it with edge_index, e.g. child_pos[edge_index[0]]")
            _require_integers("edge_pos", edge_pos)
            self.edge_pos = _host_long(edge_pos)
            negative = (self.edge_pos < 0).nonzero()
            if negative.numel():
                e = int(negative[0])
                raise ScheduleError(f"edge_pos[{e}] is {int(self.edge_pos[e])} on edge {e} "
                                    f"({int(edge_index[0, e])} -> {int(edge_index[1, e])}), into "
                                    f"{self.describe_node(int(edge_index[1, e]))}; positions count from 0")
        else:
            _check_no_repeated_edge(edge_index)
            self.edge_pos = _rank_within_groups(edge_index[1])
        computed = topological_levels(edge_index, self.num_nodes) if height is None or depth is None else None
        self.height = self._stored_levels("height", height) if height is not None else computed[0]
        self.depth = self._stored_levels("depth", depth) if depth is not None else computed[1]
        self._plans: dict[tuple[str, int | None], LevelPlan] = {}

    def _stored_levels(self, name: str, level: Tensor) -> Tensor:
        """A caller's ``height`` or ``depth``, checked to be exactly what the edges give (see :func:`_check_levels`)."""
        if level.numel() != self.num_nodes:
            raise ScheduleError(f"{name} has {level.numel()} entries for {self.num_nodes} nodes")
        _require_integers(name, level)
        level = _host_long(level).reshape(-1)
        child, parent = self.edge_index
        if name == "height":  # leaves 0, a parent 1 + its highest child
            _check_levels(name, level, receiver=parent, sender=child, describe=self.describe_node)
        else:  # roots 0, a child 1 + its deepest parent
            _check_levels(name, level, receiver=child, sender=parent, describe=self.describe_node)
        return level

    @classmethod
    def from_data(cls, data) -> Schedule:
        """Schedule of a ``Data``/``Batch`` (uses its ``height``, ``depth``, ``edge_pos`` when present)."""
        if getattr(data, "edge_index", None) is None:
            raise ScheduleError("the graph has no edge_index; build it with graphtree.data converters")
        num_nodes = data.num_nodes
        if num_nodes is None:
            raise ScheduleError("the graph's number of nodes is unknown; set data.num_nodes")
        schedule = cls(data.edge_index, num_nodes, getattr(data, "height", None), getattr(data, "depth", None),
                       getattr(data, "edge_pos", None), getattr(data, "batch", None))
        schedule.check_flags(data)
        return schedule

    def check_flags(self, data: Any) -> None:
        """Raise a :class:`ScheduleError` naming the first node whose stored ``is_root`` (no parent) or ``is_leaf``
        (no children) says otherwise than the edges, where ``data`` stores them: models pick their roots with
        ``is_root``, so a wrong one would train on the wrong nodes, silently. Checked like the stored levels."""
        child, parent = self.edge_index
        for name, has_edge, why in (("is_root", child, "parent"), ("is_leaf", parent, "child")):
            stored = getattr(data, name, None)
            if stored is None:
                continue
            if not isinstance(stored, Tensor) or stored.numel() != self.num_nodes:
                size = stored.numel() if isinstance(stored, Tensor) else type(stored).__name__
                raise ScheduleError(f"{name} must be a tensor of one flag per node ({self.num_nodes}), got {size}")
            flags = stored.detach().cpu().reshape(-1)
            if flags.dtype != torch.bool:
                if flags.is_floating_point() or not bool(((flags == 0) | (flags == 1)).all()):
                    raise ScheduleError(f"{name} must hold booleans (or 0 and 1), got {stored.dtype}")
                flags = flags.bool()
            expected = torch.ones(self.num_nodes, dtype=torch.bool)
            expected[has_edge] = False
            wrong = (flags != expected).nonzero()
            if wrong.numel():
                node = int(wrong[0])
                count = int((has_edge == node).sum())
                noun = why if count == 1 else {"parent": "parents", "child": "children"}[why]
                said = f"{name}[{node}] is {bool(flags[node])}, but {self.describe_node(node)} has {count} {noun}"
                raise ScheduleError(f"stored {name} does not fit the edges: {said}; recompute it from the edges "
                                    f"(is_root: depth == 0, is_leaf: height == 0) or drop it")

    def plan(self, direction: str, split_cost: int | None = None) -> LevelPlan:
        """The :class:`LevelPlan` for ``"bottom_up"`` or ``"top_down"``.

        ``split_cost``: split by width. Each level's nodes are grouped by how many slots they need (their widest
        position + 1), into consecutive levels of their own where that saves more slots than ``split_cost`` per
        level it adds (what one more level costs, in slots: :data:`SPLIT_COST_SLOTS` by default, a cell's
        ``level_cost_slots``), so that a hub of hundreds of children does not pad every node of its level to its
        width: a level's nodes never read one another, so any split of a level is a valid schedule. Where no
        level gains, it is the plain plan itself. ``None``: the plain plan, one level per height (or depth),
        which fixed-arity cells take (their every node has ``max_children`` slots anyway).
        """
        if direction not in DIRECTIONS:
            raise InvalidArgumentError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
        key = (direction, split_cost)
        if key not in self._plans:
            if direction == "bottom_up":
                # Receivers are parents; children fill the slot of their position.
                level, receiver, sender, slot = self.height, self.edge_index[1], self.edge_index[0], self.edge_pos
            else:
                # Receivers are children; parents fill slots in edge order.
                level, receiver, sender = self.depth, self.edge_index[0], self.edge_index[1]
                slot = _rank_within_groups(self.edge_index[0])
            split = _width_classes(level.numpy(), receiver.numpy(), slot.numpy(), split_cost) \
                if split_cost is not None else None
            if split_cost is not None and split is None:
                self._plans[key] = self.plan(direction)
            else:
                groups = _parent_position_groups(self.edge_index[0], self.edge_pos, self.num_nodes)
                self._plans[key] = _build_plan(direction, torch.from_numpy(split) if split is not None else level,
                                               receiver=receiver, sender=sender, slot=slot, edge_pos=self.edge_pos,
                                               describe=self.describe_node, groups=groups)
        return self._plans[key]

    @property
    def num_edges(self) -> int:
        return self.edge_index.size(1)

    @property
    def bottom_up(self) -> LevelPlan:
        return self.plan("bottom_up")

    @property
    def top_down(self) -> LevelPlan:
        return self.plan("top_down")

    def describe_node(self, node: int) -> str:
        """Human-readable name of a node: its index, and its graph and local index in a batch."""
        if self.batch is None:
            return f"node {node}"
        graph = int(self.batch[node])
        local = node - int((self.batch < graph).sum())
        return f"node {node} (node {local} of graph {graph} in the batch)"

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(num_nodes={self.num_nodes}, num_edges={self.edge_index.size(1)}, "
                f"height={int(self.height.max()) + 1 if self.num_nodes else 0} levels)")

    def check_fits(self, data: Any) -> None:
        """Raise a :class:`ScheduleError` unless ``data`` has this schedule's numbers of nodes and edges: a graph
        whose size changed after its schedule was attached fails here, by name, rather than inside a pass."""
        num_nodes, num_edges = data.num_nodes, data.edge_index.size(1)
        if self.num_nodes != num_nodes or self.num_edges != num_edges:
            raise ScheduleError(f"the graph's schedule was built for {self.num_nodes} nodes and {self.num_edges} "
                                f"edges, but the graph has {num_nodes} nodes and {num_edges} edges; attach a new "
                                "one: data.schedule = Schedule.from_data(data)")

    def to(self, *args, **kwargs) -> Schedule:
        """This schedule itself: it stays on the host, where its checks and counts cost no synchronization, and
        each pass moves the plan it runs to its inputs' device (once per plan and device). Defined so that
        ``batch.to(device)`` carries ``batch.schedule`` along unchanged."""
        return self


def schedule_of(graph: Any, num_nodes: int | None = None, edge_pos: Tensor | None = None) -> Schedule:
    """The :class:`Schedule` a pass over ``graph`` runs on.

    ``graph`` may be a ``Schedule`` (returned as it is); a ``Data``/``Batch``
    that carries one as ``graph.schedule`` (returned, after a check that it
    has the graph's numbers of nodes and edges); another ``Data``/``Batch``
    (a schedule built from its ``edge_index``, ``edge_pos``, ``height``,
    ``depth`` and ``batch``); or a bare ``edge_index`` (``[2, E]``, child ->
    parent) with ``num_nodes`` and optionally ``edge_pos`` (each child's
    position under its parent), as PyG layers are called: ``cell(x, edge_index)``.
    A schedule built here is not kept anywhere: to run several passes, or
    many steps, on one graph, build it once and pass it (or attach it with
    :func:`~graphtree.data.with_schedule`).
    """
    if isinstance(graph, Schedule):
        return graph
    if isinstance(graph, Tensor):
        if num_nodes is None:
            raise ScheduleError("a bare edge_index needs num_nodes (a cell passes x.size(0))")
        return Schedule(graph, num_nodes, edge_pos=edge_pos)
    attached = getattr(graph, "schedule", None)
    if isinstance(attached, Schedule):  # not PyG's list of the graphs' own after Batch.from_data_list
        attached.check_fits(graph)
        return attached
    if getattr(graph, "edge_index", None) is None:
        raise ScheduleError(f"expected a graphtree Schedule, an edge_index or a torch_geometric Data/Batch with "
                            f"an edge_index, got {type(graph).__name__}")
    return Schedule.from_data(graph)


def _require_integers(name: str, tensor: Tensor) -> None:
    """Refuse a float, complex or bool tensor where node ids, positions or levels belong: ``.long()`` would
    truncate it silently."""
    if tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool:
        raise ScheduleError(f"{name} must hold integers, got {tensor.dtype}; convert it with .long() if its "
                            "values are whole numbers")


def _host_long(tensor: Tensor) -> Tensor:
    """A private ``long`` copy on the CPU (``copy=True``: never a view of the caller's storage)."""
    return tensor.detach().to(device="cpu", dtype=torch.long, copy=True)


def _check_edge_range(edge_index: Tensor, num_nodes: int) -> None:
    """Every edge must join two of the ``num_nodes`` nodes (stored levels skip topological_levels' check)."""
    if not edge_index.numel():
        return
    low, high = torch.aminmax(edge_index)
    if low >= 0 and high < num_nodes:  # the common case: one reduction, no index tensor
        return
    e = int(((edge_index < 0) | (edge_index >= num_nodes)).any(dim=0).nonzero()[0])
    child, parent = int(edge_index[0, e]), int(edge_index[1, e])
    node = child if not 0 <= child < num_nodes else parent
    raise ScheduleError(f"edge {e} ({child} -> {parent}) refers to node {node}, but the graph has {num_nodes} "
                        f"nodes (0..{num_nodes - 1}); set num_nodes or fix edge_index")


def _check_no_repeated_edge(edge_index: Tensor) -> None:
    """Without positions, an edge given twice is a child counted twice (a sum over children would add it twice),
    where ``from_networkx`` refuses the multigraph: named here. With ``edge_pos`` a child may feed one parent at
    two positions, as a gate's two operands may be one wire."""
    if edge_index.size(1) < 2:
        return
    key = edge_index[0] * (int(edge_index[1].max()) + 1) + edge_index[1]
    order = torch.argsort(key, stable=True)
    repeated = (key[order[1:]] == key[order[:-1]]).nonzero()
    if repeated.numel():
        first, again = int(order[int(repeated[0])]), int(order[int(repeated[0]) + 1])
        child, parent = int(edge_index[0, again]), int(edge_index[1, again])
        raise ScheduleError(f"edge {again} ({child} -> {parent}) repeats edge {first}: without edge_pos a child "
                            "feeds its parent once; drop the repeat (torch_geometric.utils.coalesce), or give "
                            "edge_pos with the child's two positions")


def _check_levels(name: str, level: Tensor, receiver: Tensor, sender: Tensor,
                  describe: Callable[[int], str]) -> None:
    """Check stored levels against their definition, for every node: ``level[v]`` is 0 where ``v`` receives
    no edge, else 1 + the highest ``level`` among the nodes it receives from (children for ``height``,
    parents for ``depth``).

    Checking only that levels rise along each edge let a leaf stored above 0 through: it then ran on a
    level with slots for children, and the N-ary and S-LSTM cells ignored its input. One scatter over the
    edges, once per schedule build. Exact levels also rule out cycles (they strictly rise along each edge).
    """
    levels = level.numpy()
    highest = np.zeros_like(levels)  # below every valid 1 + level (a negative level is wrong either way)
    np.maximum.at(highest, receiver.numpy(), levels[sender.numpy()] + 1)
    if np.array_equal(highest, levels):  # the common case: no index tensor built
        return
    expected = torch.from_numpy(highest)
    node = int((expected != level).nonzero()[0])
    want, given = int(expected[node]), int(level[node])
    has_input = bool((receiver == node).any())
    if name == "height":
        why = f"1 + the highest height of its children, {want - 1}" if has_input else "it has no children"
    else:
        why = f"1 + the deepest depth of its parents, {want - 1}" if has_input else "it has no parents"
    raise ScheduleError(f"stored {name} does not fit the edges: {describe(node)} has {name} {given}, expected "
                        f"{want} ({why}); recompute the levels with graphtree.data.topological_levels, or drop "
                        "height and depth so that the schedule computes them")


def level_blocks(flat: Tensor, ptr: Sequence[int], widths: Sequence[int], starts: Sequence[int]) -> list[Tensor]:
    """Each level's ``[n_l, widths[l]]`` block of ``flat``, the one from ``starts[l]``, as views: by one split
    where the levels lie end to end (a level loop of small minibatches spent as long on one slice per level as
    on its products), else a slice each."""
    sizes = [(b - a) * w for a, b, w in zip(ptr, ptr[1:], widths)]
    ends = [start + size for start, size in zip(starts, sizes)]
    if list(starts) == [0, *ends[:-1]] and (not ends or ends[-1] == flat.numel()):
        parts = list(flat.split(sizes)) if sizes else []
    else:
        parts = [flat[start:end] for start, end in zip(starts, ends)]
    return [part.view(b - a, w) for part, a, b, w in zip(parts, ptr, ptr[1:], widths)]


def _stable_order(key: np.ndarray) -> np.ndarray:
    """``argsort(key)``, stable: the indices of ``key`` by value, ties in index order. Keys that fit 16 bits
    (a minibatch's levels and groups) are sorted as such, which NumPy does by radix sort."""
    if key.size and 0 <= key.min() and key.max() < 1 << 16:
        key = key.astype(np.uint16)
    return np.argsort(key, kind="stable")


def _rank_within_groups(group: Tensor) -> Tensor:
    """For each entry, how many earlier entries share its group id (stable, vectorized)."""
    groups = group.numpy()
    n = groups.size
    order = _stable_order(groups)
    sorted_groups = groups[order]
    is_start = np.ones(n, dtype=bool)
    is_start[1:] = sorted_groups[1:] != sorted_groups[:-1]
    start_index = np.maximum.accumulate(np.where(is_start, np.arange(n), 0))
    rank = np.empty_like(groups)
    rank[order] = np.arange(n) - start_index
    return torch.from_numpy(rank)


def _parent_position_groups(child: Tensor, edge_pos: Tensor, num_nodes: int) -> tuple[Tensor, int]:
    """Each node's group for ``position_groups``, and the number of groups: ``p`` for a node that is child
    ``p`` of every parent it has, ``K`` (the widest position + 1) for one at several positions, ``K + 1`` for
    one with no parent."""
    children, positions = child.numpy(), edge_pos.numpy()
    widest = int(positions.max()) + 1 if positions.size else 0
    low = np.full(num_nodes, widest, dtype=np.int64)
    high = np.full(num_nodes, -1, dtype=np.int64)
    np.minimum.at(low, children, positions)
    np.maximum.at(high, children, positions)
    group = np.where(low == high, low, widest)
    group[np.bincount(children, minlength=num_nodes) == 0] = widest + 1
    return torch.from_numpy(group), widest + 2


def _build_plan(direction: str, level: Tensor, receiver: Tensor, sender: Tensor, slot: Tensor,
                edge_pos: Tensor, describe, groups: tuple[Tensor, int] | None = None) -> LevelPlan:
    """The plan of one direction. Its inputs were checked when the :class:`Schedule` was made (levels exact, so
    they rise along every edge; positions non-negative); left to check is that no two edges fill one slot.

    In NumPy on the host arrays (the tensors' memory, shared both ways): a minibatch's plan is some thirty
    small operations, and PyTorch's dispatch costs several times NumPy's on each (the plan of a small minibatch
    took twice as long in PyTorch)."""
    levels, receivers, senders = level.numpy(), receiver.numpy(), sender.numpy()
    slots, edge_positions = slot.numpy(), edge_pos.numpy()
    num_nodes = levels.size
    num_levels = int(levels.max()) + 1 if num_nodes else 0
    position_groups: list[list[int]] = []
    if groups is None:
        order = _stable_order(levels)
    else:
        group, num_groups = groups
        key = levels * num_groups + group.numpy()
        order = _stable_order(key)
        position_groups = np.bincount(key, minlength=num_levels * num_groups).reshape(num_levels, num_groups).tolist()
    rank = np.empty_like(order)
    rank[order] = np.arange(num_nodes)
    ptr = [0, *np.cumsum(np.bincount(levels, minlength=num_levels)).tolist()]

    # Each level's slots are one [n_l, widths[l]] block of a flat array, the blocks in level order: a level is as
    # wide as its own widest node (its widest slot + 1). Each edge writes its own entry (its receiver's row of
    # its level's block, its slot's column), so the edges' order does not matter.
    row, col, source, pos = rank[receivers], slots, rank[senders], edge_positions
    receiver_level = levels[receivers]
    widths = np.zeros(num_levels, dtype=np.int64)
    np.maximum.at(widths, receiver_level, slots + 1)
    sizes = np.diff(np.asarray(ptr, dtype=np.int64)) * widths
    slot_start = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    total = int(slot_start[-1])
    index = np.full(total, num_nodes, dtype=np.int64)
    position = np.full(total, -1, dtype=np.int64)
    ptr_array = np.asarray(ptr, dtype=np.int64)
    entry = slot_start[receiver_level] + (row - ptr_array[receiver_level]) * widths[receiver_level] + col
    index[entry] = source
    position[entry] = pos
    if receivers.size and int((position >= 0).sum()) != receivers.size:  # an entry written twice
        key = entry
        by_key = np.argsort(key, kind="stable")
        sorted_key = key[by_key]
        dup = int(by_key[1:][sorted_key[1:] == sorted_key[:-1]][0])
        raise ScheduleError(f"two edges into {describe(int(receivers[dup]))} share position {int(slots[dup])}")
    positions = int(pos.max()) + 1 if pos.size else 1
    position_table = np.bincount(receiver_level * positions + edge_positions, minlength=num_levels * positions
                                 ).reshape(num_levels, positions).tolist()
    return LevelPlan(direction, torch.from_numpy(order), torch.from_numpy(rank), ptr, torch.from_numpy(index),
                     torch.from_numpy(position), widths.tolist(), slot_start[:-1].tolist(), position_table,
                     position_groups)


def _width_classes(levels: np.ndarray, receivers: np.ndarray, slots: np.ndarray,
                   split_cost: int = SPLIT_COST_SLOTS) -> np.ndarray | None:
    """Each node's level in a plan whose levels are split into width classes, or ``None`` where no split saves
    more slots than it costs.

    A node's width is its widest slot + 1 (its number of predecessors, where they are numbered from 0). In each
    level the distinct widths, sorted, are cut into runs, each a level of its own as wide as its widest node:
    the cut that minimizes the level's slots plus ``split_cost`` per level it makes (a small
    dynamic program over the distinct widths; a level's nodes of one width are never parted). The new levels
    of a level follow one another, narrowest first, and keep the order of the levels."""
    num_nodes = levels.size
    if not receivers.size:
        return None
    width = np.zeros(num_nodes, dtype=np.int64)
    np.maximum.at(width, receivers, slots + 1)
    num_levels = int(levels.max()) + 1
    stride = int(width.max()) + 1
    pairs, counts = np.unique(levels * stride + width, return_counts=True)
    pair_level, pair_width = pairs // stride, pairs % stride
    starts = np.searchsorted(pair_level, np.arange(num_levels + 1))
    # A class per (level, width) pair: its new level; a level whose widths all share one class keeps one level.
    pair_class = np.zeros(pairs.size, dtype=np.int64)
    split_any = False
    for level in range(num_levels):
        a, b = int(starts[level]), int(starts[level + 1])
        if b - a < 2:
            continue
        n, w = counts[a:b], pair_width[a:b]
        if int(n.sum()) * int(w[-1]) - int((n * w).sum()) <= split_cost:
            continue  # even all the padding of the level costs less than one more level
        cuts = _cheapest_cuts(n.tolist(), w.tolist(), split_cost)
        ends = cuts[1:] + [b - a]
        if len(cuts) > 1:
            split_any = True
            for k, (lo, hi) in enumerate(zip(cuts, ends)):
                pair_class[a + lo:a + hi] = k
    if not split_any:
        return None
    # New levels: each old level's classes in order, the old levels in order.
    classes_per_level = np.ones(num_levels, dtype=np.int64)
    np.maximum.at(classes_per_level, pair_level, pair_class + 1)
    first = np.concatenate([[0], np.cumsum(classes_per_level)[:-1]])
    pair_new_level = first[pair_level] + pair_class
    return pair_new_level[np.searchsorted(pairs, levels * stride + width)]


def _cheapest_cuts(counts: list[int], widths: list[int], split_cost: int) -> list[int]:
    """Where to cut a level's distinct widths (ascending, ``counts`` nodes of each) into runs: the starts of the
    runs that minimize the slots (each run as wide as its widest) plus ``split_cost`` per run."""
    m = len(widths)
    prefix = [0]
    for c in counts:
        prefix.append(prefix[-1] + c)
    best = [0.0] + [math.inf] * m  # best[j]: the cheapest cut of the first j widths
    start = [0] * (m + 1)
    for j in range(1, m + 1):
        for i in range(j):  # the last run holds widths i..j-1
            cost = best[i] + (prefix[j] - prefix[i]) * widths[j - 1] + split_cost
            if cost < best[j]:
                best[j], start[j] = cost, i
    cuts, j = [], m
    while j > 0:
        cuts.append(start[j])
        j = start[j]
    return cuts[::-1]
