"""The propagation engine: every cell in graphtree runs through :func:`propagate`.

A pass visits the levels of a :class:`~graphtree.schedule.LevelPlan` in order.
At each level it gathers the states of the nodes' predecessors (children
bottom-up, parents top-down) into dense ``[n, K, d]`` slots, the aggregated
messages of PyG's terms, and calls the cell's ``update(children, **inputs)``
on that level's nodes only, which applies the cell's equations. States live in
level-sorted buffers, so a level is a contiguous slice and nothing is
scattered.

The engine is in parts, each with one job, each importing only those listed
before it:

* :mod:`~graphtree.engine.layout`: the level-sorted state buffers, each level's
  slots and the :class:`Children` a cell reads them through;
* :mod:`~graphtree.engine.slot_check`: the check that a cell's ``update``
  leaves empty slots out of its result (the engine's anomaly mode);
* :mod:`~graphtree.engine.definition`: the definition pass, the cell's
  ``update`` level by level, under autograd in one graph for the whole pass;
* :mod:`~graphtree.engine.kernel_pass`: the compiled pass, a paper cell's level
  math in C++ (:mod:`graphtree.backend.dispatch`) as one autograd node;
* this module: the public API, which prepares a pass and chooses between the
  two: the compiled pass where :func:`graphtree.backend.dispatch.bound_kernel`
  gives one (CPU, float32, kernels built; asked once per pass), else the
  definition pass. The exactness tests check both against per-node recursive
  references.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor

from .. import settings
from ..backend import dispatch
from ..errors import InvalidArgumentError, InvalidTypeError, ScheduleError
from ..schedule import SPLIT_COST_SLOTS, Schedule, schedule_of
from . import slot_check
from .definition import Update, definition_pass, run_update_levels
from .kernel_pass import LevelPass, SideBySidePasses, by_pass, run_compiled_levels, run_side_by_side
from .layout import Children, Prepared, in_node_order, level_slots, num_outputs
from .slot_check import detect_slot_leaks

__all__ = ["Children", "Pass", "detect_slot_leaks", "propagate", "propagate_side_by_side", "schedule_of"]


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
    return in_node_order(prepared, _propagated(prepared))


class Pass(NamedTuple):
    """One cell's pass over a graph: :func:`propagate`'s arguments, for :func:`propagate_side_by_side`."""

    cell: torch.nn.Module
    inputs: Sequence[Tensor] | Mapping[str, Tensor]
    schedule: Schedule | Any
    direction: str = "bottom_up"


def propagate_side_by_side(passes: Sequence[Pass]) -> list[tuple[Tensor, ...]]:
    """:func:`propagate` of each of several passes that do not read one another's states, side by side.

    Where every pass runs compiled (:mod:`graphtree.backend.dispatch`) and PyTorch has more than one thread,
    the passes run at the same time, each on one thread of PyTorch's pool, forward and backward (e.g.
    BiConTree's bottom-up and top-down passes, which both read only the head vectors). A level's products are
    too small for two threads to share well, so two chains of levels at once finish sooner than one after
    the other with both threads on each product. Everything in a pass, its products too, runs on its one
    thread: each pass does the arithmetic :func:`propagate` does in a one-thread process, and gives its results
    to float32 rounding (not bit for bit: a BLAS may block a product otherwise inside a worker thread). Where
    not every pass runs compiled, or PyTorch has one thread, the passes run one after the other through
    :func:`propagate`.

    Returns:
        Each pass's states, as :func:`propagate` returns them.
    """
    prepared = [_prepare(*p) for p in passes]
    kernels: list[dispatch.BoundKernel | None] = []
    if len(prepared) > 1 and torch.get_num_threads() > 1 and len({p.needs_grad for p in prepared}) == 1 \
            and not slot_check.always():
        with torch.no_grad():  # as inside an autograd Function's forward, where the kernels run
            kernels = [dispatch.bound_kernel(p.cell, p.inputs, p.plan) for p in prepared]
    if not kernels or any(k is None for k in kernels):
        return [in_node_order(p, _propagated(p)) for p in prepared]
    if prepared[0].needs_grad:
        tensors = [t for p, k in zip(prepared, kernels) for t in (*p.inputs, *k.weights)]
        returned = by_pass(SideBySidePasses.apply(prepared, kernels, *tensors), prepared)
    else:
        returned = [buffers[:num_outputs(p.cell)]
                    for p, buffers in zip(prepared, run_side_by_side(prepared, kernels, save=False))]
    return [in_node_order(p, states) for p, states in zip(prepared, returned)]


def _prepare(cell: torch.nn.Module, inputs: Sequence[Tensor] | Mapping[str, Tensor], schedule: Schedule | Any,
             direction: str) -> Prepared:
    """``propagate``'s arguments checked and laid out: the plan and slots on the inputs' device, the inputs
    sorted by level, and whether the pass runs under autograd."""
    schedule = schedule_of(schedule)
    names = tuple(inputs) if isinstance(inputs, Mapping) else None
    inputs = list(inputs.values()) if isinstance(inputs, Mapping) else list(inputs)
    if not inputs:
        raise InvalidArgumentError("propagate needs at least one per-node input tensor")
    for k, x in enumerate(inputs):
        if not isinstance(x, Tensor) or x.dim() == 0:
            raise InvalidTypeError(f"input {names[k] if names else k} must be a per-node tensor, got "
                                   f"{type(x).__name__ if not isinstance(x, Tensor) else 'a scalar tensor'}")
        if x.size(0) != schedule.num_nodes:
            raise ScheduleError(f"input {names[k] if names else k} has {x.size(0)} rows but the batch has "
                                f"{schedule.num_nodes} nodes; was the schedule built for another batch?")
    device = inputs[0].device
    # A cell that takes any number of predecessors runs on levels split by width (a hub's slots are its own);
    # a fixed-arity cell pads every node to its arity bottom-up anyway.
    fixed_arity = direction == "bottom_up" and getattr(cell, "max_children", None) is not None
    split_cost = None if fixed_arity or not settings.current().width_classes else \
        getattr(cell, "level_cost_slots", SPLIT_COST_SLOTS)
    host_plan = schedule.plan(direction, split_cost)
    plan = host_plan.to(device)
    levels = level_slots(cell, host_plan, schedule, device)
    # index_select, not x[perm]: the same rows, but its backward is index_add_, where advanced indexing's is
    # index_put_ with accumulate, which sorts its indices first (several times slower on CPU).
    sorted_inputs = [x.index_select(0, plan.order) for x in inputs]
    needs_grad = torch.is_grad_enabled() and (any(p.requires_grad for p in cell.parameters())
                                              or any(x.requires_grad for x in sorted_inputs))
    return Prepared(cell, Update(cell, names), plan, levels, sorted_inputs, needs_grad, schedule.describe_node)


def _propagated(prepared: Prepared) -> list[Tensor]:
    """The returned states of one prepared pass, in level order: the compiled pass where the cell has a kernel
    for it, else the definition pass."""
    if slot_check.always():  # the slot check reads the cell's update, level by level
        return (definition_pass(prepared) if prepared.needs_grad
                else run_update_levels(prepared)[:num_outputs(prepared.cell)])
    if prepared.needs_grad:
        with torch.no_grad():  # as inside an autograd Function's forward, where the kernels run
            kernel = dispatch.bound_kernel(prepared.cell, prepared.inputs, prepared.plan)
        if kernel is None:
            return definition_pass(prepared)
        return list(LevelPass.apply(prepared.cell, prepared.plan, prepared.levels, kernel,
                                    len(prepared.inputs), *prepared.inputs, *kernel.weights))
    kernel = dispatch.bound_kernel(prepared.cell, prepared.inputs, prepared.plan)
    buffers = run_update_levels(prepared) if kernel is None else run_compiled_levels(prepared, kernel)
    return buffers[:num_outputs(prepared.cell)]
