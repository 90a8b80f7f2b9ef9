"""The compiled pass: a paper cell's level math in C++, wrapped as one autograd node.

Where :func:`graphtree.backend.dispatch.bound_kernel` gives a pass a kernel
(CPU, float32, kernels built), the engine runs the same two loops as the
definition pass in C++ (``run_levels_forward`` and ``run_levels_backward`` in
``graphtree/csrc/engine_ops.cpp``) over the cell's kernel, which saves what its
hand-written derivatives need; several independent passes can run side by side,
one thread each. This module only wraps those loops for autograd: the layout
they read is :mod:`graphtree.engine.layout`'s, and the tests check them against
the definition pass.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ..backend.dispatch import BoundKernel
from ..errors import UsageError
from .layout import Prepared, num_outputs, state_buffers

__all__ = ["LevelPass", "SideBySidePasses", "by_pass", "run_compiled_levels", "run_side_by_side"]


def run_compiled_levels(prepared: Prepared, bound: BoundKernel) -> list[Tensor]:
    """Forward through all levels in the kernel's loop without autograd. Returns the state buffers."""
    plan = prepared.plan
    buffers = state_buffers(prepared.cell, plan, prepared.inputs)
    bound.extension.run_levels_forward(bound.kernel, buffers, prepared.inputs, plan.ptr,
                                        [s.flat_index for s in prepared.levels], plan.position_groups, False)
    return buffers


def run_side_by_side(passes: list[Prepared], bound: list[BoundKernel], save: bool) -> list[list[Tensor]]:
    """Forward through every pass at once (``run_passes_forward``); each pass's buffers."""
    buffers = [state_buffers(p.cell, p.plan, p.inputs) for p in passes]
    bound[0].extension.run_passes_forward([c.kernel for c in bound], buffers, [p.inputs for p in passes],
                                           *_loop_arguments(passes), save)
    return buffers


def _loop_arguments(passes: Sequence[Prepared]) -> tuple[list, list, list]:
    """Each pass's level boundaries, slot indices and position groups: the C++ level loops' arguments."""
    return ([p.plan.ptr for p in passes], [[s.flat_index for s in p.levels] for p in passes],
            [p.plan.position_groups for p in passes])


def by_pass(flat: Sequence, passes: Sequence[Prepared]) -> list[Sequence]:
    """``flat``, the passes' returned states (or their gradients) one pass after the other, cut by pass."""
    parts, start = [], 0
    for p in passes:
        count = num_outputs(p.cell)
        parts.append(flat[start:start + count])
        start += count
    return parts


_RELEASED = "released"  # ctx.saved after the compiled backward has run and let its kernel go


class LevelPass(torch.autograd.Function):
    """A compiled pass as one autograd node: the kernel's level loop forward, its hand-written derivatives
    level by level backward. Its tensors are the pass's inputs, then the kernel's weights
    (``bound.weights``), whose gradients the kernel returns in that order: they go back by position."""

    @staticmethod
    def forward(ctx, cell, plan, levels, bound, num_inputs, *tensors):
        inputs = list(tensors[:num_inputs])
        buffers = state_buffers(cell, plan, inputs)
        bound.extension.run_levels_forward(bound.kernel, buffers, inputs, plan.ptr,
                                            [s.flat_index for s in levels], plan.position_groups, True)
        ctx.cell, ctx.plan, ctx.levels, ctx.num_inputs = cell, plan, levels, num_inputs
        ctx.saved = bound  # it holds every level's context
        # Internal states are never returned, so no gradient arrives for them. Unused outputs get None rather
        # than a materialized zero gradient.
        outputs = num_outputs(cell)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(*inputs, *buffers[:outputs])
        return tuple(buffers[:outputs])

    @staticmethod
    def backward(ctx, *grad_buffers):
        saved = ctx.saved_tensors
        inputs, buffers = saved[:ctx.num_inputs], saved[ctx.num_inputs:]
        if ctx.saved is _RELEASED:
            raise UsageError(
                "a second backward through the same graphtree pass (retain_graph=True): its compiled level loop "
                "freed what its backward needs after the first one. Run the forward again, or set "
                "GRAPHTREE_NATIVE=0 for the Python level loop, which keeps it.")
        grad_states, grad_inputs = _backward_buffers(ctx.cell, grad_buffers, buffers, inputs)
        grad_weights = _compiled_backward(ctx, grad_states, grad_inputs)
        # The kernel's contexts live as long as the autograd graph, which outlives the backward pass until the
        # caller drops the outputs (usually during the next batch's forward pass): freed here, that memory is
        # reused by the next pass instead of fresh pages.
        ctx.saved = _RELEASED
        return (None, None, None, None, None, *grad_inputs, *grad_weights)


class SideBySidePasses(torch.autograd.Function):
    """Several compiled passes as one autograd node, so that their backward loops too run side by side."""

    @staticmethod
    def forward(ctx, passes, bound, *tensors):
        buffers = run_side_by_side(passes, bound, save=True)
        ctx.passes, ctx.bound = passes, bound
        ctx.set_materialize_grads(False)
        outputs = [b for p, pass_buffers in zip(passes, buffers) for b in pass_buffers[:num_outputs(p.cell)]]
        ctx.save_for_backward(*outputs)
        return tuple(outputs)

    @staticmethod
    def backward(ctx, *grad_outputs):
        if ctx.bound is _RELEASED:
            raise UsageError("a second backward through the same graphtree passes (retain_graph=True): their "
                             "compiled level loops freed what the backward needs after the first one")
        grad_states, grad_inputs = [], []
        for p, grads_out, outputs in zip(ctx.passes, by_pass(grad_outputs, ctx.passes),
                                         by_pass(ctx.saved_tensors, ctx.passes)):
            states, inputs = _backward_buffers(p.cell, grads_out, outputs, p.inputs)
            grad_states.append(states)
            grad_inputs.append(inputs)
        bound = ctx.bound
        grads = bound[0].extension.run_passes_backward([c.kernel for c in bound], grad_states, grad_inputs,
                                                        *_loop_arguments(ctx.passes))
        ctx.bound = _RELEASED  # the kernels' contexts go now, as in LevelPass.backward
        result: list[Tensor | None] = [None, None]
        for c, inputs, pass_grads in zip(bound, grad_inputs, grads, strict=True):
            result += [*inputs, *_weight_grads(c, pass_grads)]
        return tuple(result)


def _backward_buffers(cell: torch.nn.Module, grad_buffers: Sequence[Tensor | None], buffers: Sequence[Tensor],
                      inputs: Sequence[Tensor]) -> tuple[list[Tensor], list[Tensor | None]]:
    """The gradients a backward loop adds into: of every state buffer (the internal ones too), of the inputs."""
    # Cloned: the levels add their children's gradients into these in place.
    grad_states = [g.clone() if g is not None else torch.zeros_like(buf) for g, buf in zip(grad_buffers, buffers)]
    reference = buffers[0]
    grad_states += [reference.new_zeros(reference.size(0), d) for d in cell.state_channels[len(buffers):]]
    # Contiguous whatever the inputs' layout: the kernels index their rows.
    grad_inputs = [torch.zeros_like(x, memory_format=torch.contiguous_format) if x.requires_grad else None
                   for x in inputs]
    return grad_states, grad_inputs


def _weight_grads(bound: BoundKernel, grads: Sequence[Tensor]) -> Sequence[Tensor]:
    """The kernel's gradients of its weights, which it returns in the order of ``bound.weights`` (the cell's
    ``compiled_weights()``), the order in which the pass took them as inputs: matched by position."""
    if len(grads) != len(bound.weights):
        raise UsageError(f"a compiled level kernel returned {len(grads)} weight gradients for the "
                         f"{len(bound.weights)} weights it took")
    return grads


def _compiled_backward(ctx, grad_states, grad_inputs) -> Sequence[Tensor]:
    """Backward through the compiled level loop, over the kernel object its forward loop filled."""
    bound = ctx.saved  # the extension the forward loop ran on, whatever the settings are by now
    grads = bound.extension.run_levels_backward(bound.kernel, grad_states, grad_inputs, ctx.plan.ptr,
                                                 [s.flat_index for s in ctx.levels], ctx.plan.position_groups)
    return _weight_grads(bound, grads)
