"""When a compiled kernel serves a cell's pass: what is common to the paper cells' fast paths, which the engine's
level loop runs in C++.

A cell's ``update`` is its definition. Where a paper cell runs on CPU in
float32 and the kernels are built (:mod:`graphtree.backend.native`), the engine
instead hands the whole pass to the cell's kernel, a C++ ``LevelKernel`` of
``graphtree/csrc`` (``level_loop.h``): the same levels, buffers, slot gathers
and child-gradient accumulation as the Python loop, each level's forward and
hand-written derivatives in one pass over its rows, without the interpreter
between a level's small operators (on a tree level's few rows those calls cost
as much as the arithmetic). ``tests/test_fast_paths.py`` checks every kernel
against its cell's ``update``: states and gradients.

Each fast path stands beside its definition: the cell's
:meth:`~graphtree.nn.TreeCell.level_kernel` makes its kernel (which one, by its
C++ name, and the weights in the kernel's layout: N-ary's candidate rows
doubled, say) from the weights its ``compiled_weights()`` declares, and the
kernel returns those weights' gradients in the same order, which is how the
engine hands them back. This module holds what every fast path shares: the
choice, as PyG's ``MessagePassing`` chooses a layer's
``message_and_aggregate`` where the layer implements it. The engine asks
:func:`bound_kernel` once per pass; a subclass that overrides ``update`` never
gets its parent's kernel.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor

from ..schedule import LevelPlan
from . import native

__all__ = ["BoundKernel", "bound_kernel"]


class BoundKernel(NamedTuple):
    """A pass's compiled level math, bound to what it runs with.

    ``extension``: the loaded kernels' operators (:func:`graphtree.backend.native.native_kernels`,
    ``torch.ops.graphtree``), whose level loops run the kernel; ``kernel``: the cell's C++ ``LevelKernel``
    (``graphtree/csrc/level_loop.h``), made by its ``level_kernel``; ``weights``: the cell's
    ``compiled_weights()``, the tensors whose gradients the kernel's backward returns, in that order.
    """

    extension: Any
    kernel: Any
    weights: tuple[Tensor, ...]


def bound_kernel(cell: torch.nn.Module, inputs: list[Tensor], plan: LevelPlan) -> BoundKernel | None:
    """The compiled level math of ``cell`` for this pass, or ``None`` (the engine runs ``cell.update``).

    ``None`` unless the cell's class implements ``level_kernel`` for the very ``update`` it runs, the inputs
    and the cell's parameters are float32 CPU tensors, the kernels are (or can be) built, and the cell's
    ``level_kernel`` accepts its setting and the batch. Only such a cell ever causes a build.
    """
    cls = type(cell)
    if getattr(cls, "_compiled_update", None) is not cls.update:  # TreeCell.__init_subclass__ records it
        return None
    params = [p.detach() for p in cell.parameters()]
    extension = native.native_kernels(*inputs, *params)
    if extension is None:
        return None
    weights = tuple(cell.compiled_weights())
    kernel = cell.level_kernel(extension, plan, [w.detach() for w in weights])
    if kernel is None:
        return None
    return BoundKernel(extension, kernel, weights)
