"""Base class of graphtree's tree cells."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch_geometric.nn import MessagePassing

from ..engine import Children, propagate
from ..schedule import Schedule
from .functional import PackedWeights
from .native import native_kernels

__all__ = ["TreeCell"]

# Steps taken by torch.optim optimizers in this process. The fused optimizers (fused=True) update parameters
# without bumping their version counters, so TreeCell.derived_weights keys its copies by this count as well.
_optimizer_steps = 0


def _count_optimizer_step(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    global _optimizer_steps
    _optimizer_steps += 1


register_optimizer_step_post_hook(_count_optimizer_step)


class TreeCell(MessagePassing):
    """A recurrent cell that runs level by level over a tree or DAG.

    Subclasses set ``state_channels`` (the width of each state component, e.g.
    ``(hidden, hidden)`` for ``(h, c)``), optionally ``max_children`` (a fixed
    arity) and ``output_states`` (how many leading state components
    :meth:`propagate_levels` returns; the rest are internal to the pass), and
    implement :meth:`update`, which computes the states of one
    level's nodes from their node inputs and their predecessors' states. The
    shared engine (:func:`graphtree.engine.propagate`) owns the level schedule;
    no cell schedules anything itself. Messages are the predecessors' states,
    gathered into slots by position, so ``update`` both aggregates and updates.

    ``update`` must be deterministic: the engine re-runs it in backward.

    For speed a cell may instead set ``fused_backward = True`` and implement
    ``forward_level(inputs, children) -> (states, context)`` and
    ``backward_level(context, grad_states, grad_params, needs_input_grad) ->
    (grad_inputs, grad_children_states)``, the level's hand-written
    derivatives; it adds its parameter gradients into ``grad_params`` (keyed
    by parameter name, present only for parameters that need one) and may
    return ``None`` for an input whose ``needs_input_grad`` flag is false.
    Matrix products with the cell's weights go through :attr:`weights`.

    A fused cell may further implement ``native_level_kernel(inputs)``,
    returning ``(kernels, kernel)``: the compiled kernels module and a
    ``LevelKernel`` (``graphtree/csrc/level_loop.h``) holding the same level
    math in C++, or ``None`` where it does not apply. The engine then runs its
    level loop in C++ over that kernel (see :mod:`graphtree.engine`).
    """

    direction: str = "bottom_up"
    max_children: int | None = None
    state_channels: tuple[int, ...] = ()
    output_states: int | None = None  # None: every state component is returned

    def __init__(self) -> None:
        super().__init__(aggr=None)

    def reset_parameters(self) -> None:
        """Uniform in :math:`\\pm 1/\\sqrt{d}` for every parameter, as ``torch.nn.LSTM`` initializes."""
        bound = 1.0 / math.sqrt(self.hidden_channels)
        for param in self.parameters():
            torch.nn.init.uniform_(param, -bound, bound)

    def update(self, inputs: tuple[Tensor, ...], children: Children) -> tuple[Tensor, ...]:
        """States of one level's nodes; a cell with :meth:`forward_level` gets it from there."""
        if type(self).forward_level is TreeCell.forward_level:
            raise NotImplementedError(f"{type(self).__name__} implements neither update nor forward_level")
        return self.forward_level(inputs, children)[0]

    def forward_level(self, inputs: tuple[Tensor, ...], children: Children) -> tuple[tuple[Tensor, ...], Any]:
        """States of one level and the context its :meth:`backward_level` needs (fused cells only)."""
        raise NotImplementedError

    def propagate_levels(self, inputs: tuple[Tensor, ...], batch: Schedule | Any) -> tuple[Tensor, ...]:
        """Run this cell over every level of ``batch`` (a ``Data``/``Batch`` or a :class:`Schedule`)."""
        self._pass_weights = PackedWeights()
        try:
            return propagate(self, inputs, batch, self.direction)
        finally:
            # Levels that need the packs in backward keep them in their context.
            self._pass_weights = None

    def _compiled_levels(self, inputs: tuple[Tensor, ...], kernel: str, *args: Any) -> tuple[Any, Any] | None:
        """``(kernels, kernels.<kernel>(*args))`` for :meth:`native_level_kernel`, with the tensors among ``args``
        (the cell's weights) detached, or ``None`` where the compiled kernels do not apply to ``inputs`` and those
        tensors. A kernel with a static ``derive`` (its transposed and rearranged weights) gets them from
        :meth:`derived_weights`: once per training pass, once in all in inference."""
        detached = tuple(a.detach() if isinstance(a, Tensor) else a for a in args)
        # May build the kernels: only a cell's own native_level_kernel gets here, naming the compiled kernel it
        # runs on (a cell written in PyTorch alone has none, and never causes a build).
        kernels = native_kernels(*inputs, *(a for a in detached if isinstance(a, Tensor)))
        if kernels is None:
            return None
        levels = getattr(kernels, kernel)
        if not hasattr(levels, "derive"):
            return kernels, levels(*detached)
        sources = tuple(a for a in args if isinstance(a, Tensor))
        derived = self.derived_weights(kernel, sources, lambda: levels.derive(*detached))
        return kernels, levels(*detached, derived=derived)

    def derived_weights(self, key: str, sources: tuple[Tensor, ...], compute: Callable[[], Any]) -> Any:
        """``compute()`` (run without autograd) for weights derived from ``sources``, for the compiled level
        kernels, which take their weights detached. A pass under autograd (training) makes them anew, as its
        weights have just been stepped; a no-grad pass (inference) reuses the last ones while no source has
        changed: the same storage and version counter (``load_state_dict`` or any in-place write bumps it) and no
        optimizer step since (torch.optim's fused optimizers leave version counters alone), so that they are
        made once rather than once per batch.

        A write through ``.data`` is invisible to both; after one, call ``derived_weights_clear()``.
        """
        # The sources themselves are kept, so that their storage cannot be freed and reused by another tensor.
        stamp = (_optimizer_steps, tuple((t.data_ptr(), t._version) for t in sources))
        cache = self.__dict__.setdefault("_derived_weights", {})
        entry = cache.get(key)
        training = torch.is_grad_enabled() and any(t.requires_grad for t in sources)
        if (training or entry is None or entry[1] != stamp or len(entry[0]) != len(sources)
                or any(kept is not t for kept, t in zip(entry[0], sources))):
            with torch.no_grad():
                entry = cache[key] = (sources, stamp, compute())
        return entry[2]

    def derived_weights_clear(self) -> None:
        """Forget every :meth:`derived_weights` entry (they are rebuilt on the next pass)."""
        self.__dict__.pop("_derived_weights", None)

    @property
    def weights(self) -> PackedWeights:
        """This pass's :class:`~graphtree.nn.functional.PackedWeights` (fast products with the cell's weights)."""
        packed = getattr(self, "_pass_weights", None)
        return packed if packed is not None else PackedWeights()

    def _check_input(self, x: Tensor, channels: int) -> None:
        if x.dim() != 2 or x.size(-1) != channels:
            raise ValueError(f"{type(self).__name__} expects node features of shape [num_nodes, {channels}], "
                             f"got {tuple(x.shape)}")
