"""The definition pass: a cell's ``update`` run level by level, under autograd or without it.

This is the pass every cell has, and the one that defines what a cell
computes; the compiled pass (:mod:`graphtree.engine.kernel_pass`) must agree
with it. In training, each level's ``update`` is ordinary autograd; between
two levels one small autograd function writes the states just made into the
buffers and gathers the next level's children (:func:`definition_pass`). In
backward it adds the children's gradients into one gradient buffer per state
with one indexed add, and hands each level its rows of it, so a pass costs time
linear in the number of nodes (autograd's own bookkeeping of in-place buffer
writes would copy the whole buffer at every level), any cell works, the whole
pass is one autograd graph (one backward call, no per-level ``autograd.grad``),
and a 10,000-deep chain backpropagates with no recursion.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import NamedTuple

import torch
from torch import Tensor

from ..backend import native
from ..errors import InvalidArgumentError
from ..schedule import LevelPlan
from . import slot_check
from .layout import Children, Prepared, Slots, children_of, gather, gathered, num_outputs, state_buffers

__all__ = ["Update", "accumulate_children", "definition_pass", "run_update_levels"]


class Update(NamedTuple):
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
            raise InvalidArgumentError(f"{type(self.cell).__name__}.update returned {len(states)} states, but its "
                                       f"state_channels has {len(channels)}")
        n = children.mask.size(0)
        for k, (state, d) in enumerate(zip(states, channels)):
            if not isinstance(state, Tensor) or state.shape != (n, d):
                shape = list(state.shape) if isinstance(state, Tensor) else type(state).__name__
                raise InvalidArgumentError(
                    f"{type(self.cell).__name__}.update returned state {k} of shape {shape} for a level "
                    f"of {n} nodes; expected [{n}, {d}] (state_channels[{k}] = {d})")
        return tuple(states)


def run_update_levels(prepared: Prepared) -> list[Tensor]:
    """Forward through all levels of the cell's ``update`` without autograd. Returns the state buffers."""
    call, plan, levels, inputs = prepared.call, prepared.plan, prepared.levels, prepared.inputs
    buffers = state_buffers(prepared.cell, plan, inputs)
    check = slot_check.wanted(prepared.cell, plan)
    # Each buffer's and input's levels as views, cut once per pass rather than sliced level by level.
    sizes = plan.level_sizes()
    buffer_levels = [buf[:-1].split(sizes) for buf in buffers]  # the last row: the empty slots' zeros
    input_levels = [x.split(sizes) for x in inputs]
    for level in range(plan.num_levels):
        children, level_inputs = gather(buffers, levels[level]), [x[level] for x in input_levels]
        if check:
            slot_check.check_level(call, prepared.cell, children, level_inputs, plan, level, prepared.describe_node)
        states = call(children, level_inputs)
        for rows, value in zip(buffer_levels, states):
            rows[level].copy_(value)
    return buffers


def definition_pass(prepared: Prepared) -> list[Tensor]:
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
    run = _DefinitionPass(plan, levels, state_buffers(prepared.cell, plan, prepared.inputs),
                          num_outputs(prepared.cell))
    # split, not a slice per level: its backward puts the levels' input gradients together in one cat.
    per_level = [x.split(plan.level_sizes()) for x in prepared.inputs]
    token = run.buffers[0].new_empty(0).requires_grad_()
    states: tuple[Tensor, ...] = ()
    check = slot_check.wanted(prepared.cell, plan)
    for level in range(plan.num_levels):
        token, *children = _NextLevel.apply(run, level, token, *states)
        level_children, level_inputs = children_of(children, levels[level]), [x[level] for x in per_level]
        if check:
            slot_check.check_level(call, prepared.cell, level_children, level_inputs, plan, level,
                                   prepared.describe_node)
        states = call(level_children, level_inputs)
    token, = _NextLevel.apply(run, plan.num_levels, token, *states)  # the last level's states in, nothing out
    return list(_PassOutputs.apply(run, token))


class _DefinitionPass:
    """What the levels of one pass of ``update`` under autograd share (see :func:`definition_pass`): the
    level-sorted state buffers, and in backward the gradients of every buffer row."""

    __slots__ = ("buffer_levels", "buffers", "extension", "grads", "levels", "num_outputs", "plan")

    def __init__(self, plan: LevelPlan, levels: list[Slots], buffers: list[Tensor], num_outputs: int) -> None:
        self.plan, self.levels, self.buffers, self.num_outputs = plan, levels, buffers, num_outputs
        sizes = plan.level_sizes()
        self.buffer_levels = [buf[:-1].split(sizes) for buf in buffers]  # each level's rows, cut once
        self.grads: list[Tensor] = []
        self.extension: ModuleType | None = None


class _NextLevel(torch.autograd.Function):
    """Level ``level - 1``'s states into the pass's buffers, and level ``level``'s children's states out (none
    after the last level).

    Backward: the children's gradients added into their rows, then level ``level - 1``'s rows' gradients.
    """

    @staticmethod
    def forward(ctx, run, level, token, *states):
        a, b = (run.plan.ptr[level - 1], run.plan.ptr[level]) if level else (0, 0)
        if level:
            for rows, value in zip(run.buffer_levels, states):
                rows[level - 1].copy_(value)
        ctx.run, ctx.level, ctx.rows, ctx.num_states = run, level, (a, b), len(states)
        ctx.set_materialize_grads(False)
        children = gathered(run.buffers, run.levels[level]) if level < run.plan.num_levels else ()
        return token.new_empty(0), *children

    @staticmethod
    def backward(ctx, grad_token, *grad_children):
        run, (a, b) = ctx.run, ctx.rows
        if grad_children:
            accumulate_children(run.grads, run.levels[ctx.level], grad_children, run.extension)
        grads = tuple(g[a:b] for g in run.grads[:ctx.num_states])
        if not ctx.level:  # the last of the pass's backward: its gradient buffers go now, not with the graph
            run.grads, run.extension = [], None
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
        run.extension = native.native_kernels_if_loaded(*run.grads)
        return None, None


def accumulate_children(grad_states: list[Tensor], slots: Slots, grads: Sequence[Tensor | None],
                         extension: ModuleType | None) -> None:
    """Add each slot's gradient into its child's row; ``extension``: the compiled kernels' C++ extension, if
    loaded already."""
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
            if extension is not None:  # one pass over the rows; index_put_ with accumulate sorts its indices first
                extension.scatter_add_rows_(grad_state, flat_index, g)
            elif grad_state.device.type == "cpu":
                # index_put_ rather than index_add_: the latter goes multi-threaded on
                # small inputs and costs milliseconds per level on a 2-core machine.
                grad_state.index_put_((flat_index,), g, accumulate=True)
            else:
                # On a GPU index_add_ is one kernel, where index_put_ with accumulate sorts first in several.
                # A tree's child has one slot, so each row gets one addition; a DAG's node with several
                # parents in one level gets several, in an order that torch.use_deterministic_algorithms fixes.
                grad_state.index_add_(0, flat_index, g)


