"""Which compiled kernel serves a cell's pass, and when: the paper cells' fast path, run by the engine's level
loop in C++.

A cell's ``update`` is its definition. Where a paper cell runs on CPU in
float32 and the kernels are built (:mod:`graphtree.backend.native`), the engine
instead hands the whole pass to the cell's kernel, a C++ ``LevelKernel`` of
``graphtree/csrc`` (``level_loop.h``): the same levels, buffers, slot gathers
and child-gradient accumulation as the Python loop, each level's forward and
hand-written derivatives in one pass over its rows, without the interpreter
between a level's small operators (on a tree level's few rows those calls cost
as much as the arithmetic). ``tests/test_fast_paths.py`` checks every kernel
against its cell's ``update``: states and gradients.

This module is the one place that ties a cell to its kernel. A cell class
declares its kernel by name in ``compiled_kernel`` (e.g. ``compiled_kernel =
"child_sum"``, a key of :data:`MAKERS`; the cell imports nothing of this
module) and the weights its kernel takes, in the kernel's order, in
``compiled_weights()``; the engine chooses the kernel through
:func:`bound_kernel`. A maker receives those weights
(detached) with the cell's settings and returns the kernel, or ``None`` where
the kernel does not cover the cell's setting or the batch; the kernel returns
its weights' gradients in the same order, which is how the engine hands them
back. No maker reads a cell's layers. The engine asks :func:`bound_kernel`
once per pass; a subclass that overrides ``update`` never gets its parent's
kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, NamedTuple

import torch
from torch import Tensor

from ..schedule import LevelPlan
from . import native

__all__ = ["MAKERS", "BoundKernel", "Maker", "bound_kernel"]


class BoundKernel(NamedTuple):
    """A pass's compiled level math, bound to what it runs with.

    ``extension``: the loaded C++ extension (:func:`graphtree.backend.native.native_kernels`), whose level
    loops run the kernel; ``kernel``: the cell's C++ ``LevelKernel`` (``graphtree/csrc/level_loop.h``), made by
    its maker; ``weights``: the cell's ``compiled_weights()``, the tensors whose gradients the kernel's
    backward returns, in that order.
    """

    extension: ModuleType
    kernel: Any
    weights: tuple[Tensor, ...]


# A maker: (cell, the C++ extension, bottom-up or top-down plan of the pass, the cell's compiled_weights() detached)
# -> the kernel, or None where the kernel does not cover the cell's setting or the batch.
Maker = Callable[[torch.nn.Module, ModuleType, LevelPlan, Sequence[Tensor]], Any]


def bound_kernel(cell: torch.nn.Module, inputs: list[Tensor], plan: LevelPlan) -> BoundKernel | None:
    """The compiled level math of ``cell`` for this pass, or ``None`` (the engine runs ``cell.update``).

    ``None`` unless the cell's class names a maker for the very ``update`` it runs, the inputs and the
    cell's parameters are float32 CPU tensors, the kernels are (or can be) built, and the maker accepts the
    cell's setting and the batch. Only such a cell ever causes a build.
    """
    cls = type(cell)
    name = getattr(cls, "compiled_kernel", None)
    if name is None or getattr(cls, "_compiled_update", None) is not cls.update:
        return None
    make = MAKERS.get(name)
    if make is None:
        raise ValueError(f"{cls.__name__}.compiled_kernel is {name!r}, which names no kernel; one of {sorted(MAKERS)}")
    params = [p.detach() for p in cell.parameters()]
    extension = native.native_kernels(*inputs, *params)
    if extension is None:
        return None
    weights = tuple(cell.compiled_weights())
    kernel = make(cell, extension, plan, [w.detach() for w in weights])
    if kernel is None:
        return None
    return BoundKernel(extension, kernel, weights)


def child_sum(cell: Any, extension: ModuleType, plan: LevelPlan, weights: Sequence[Tensor]) -> Any:
    """:class:`~graphtree.nn.ChildSumTreeLSTM`: ``ChildSumLevels`` (``csrc/child_sum_level.cpp``)."""
    return extension.ChildSumLevels(*weights)


def nary(cell: Any, extension: ModuleType, plan: LevelPlan, weights: Sequence[Tensor]) -> Any | None:
    """:class:`~graphtree.nn.NaryTreeLSTM` with full forget maps, either setting: ``NaryLevels``
    (``csrc/nary_level.cpp``). It takes ``U`` transposed, with the candidate's rows doubled (the kernel
    computes tanh(z) as 2 sigmoid(2z) - 1, one activation for all gates), and the children's biases summed.
    In the general setting the pass's inputs are the nodes' ``W x + b``, which the cell computes before it."""
    if cell.forget != "full":
        return None
    U, b_U, *leaf = weights
    d = cell.hidden_channels
    U_t = extension.transposed(U)
    U_t[:, 2 * d:3 * d] *= 2
    gate_bias = b_U.sum(0)[:U.size(0)]
    gate_bias[2 * d:3 * d] *= 2
    if cell.setting == "general":
        none = U.new_empty(0)
        return extension.NaryLevels(U_t, gate_bias, U, none, none, True)
    return extension.NaryLevels(U_t, gate_bias, U, *leaf, False)


def slstm(cell: Any, extension: ModuleType, plan: LevelPlan, weights: Sequence[Tensor]) -> Any:
    """:class:`~graphtree.nn.SLSTM`: ``SLSTMLevels`` (``csrc/peephole_level.cpp``)."""
    return extension.SLSTMLevels(*weights)


# The activation of the LSTM-RNN's gates, as the kernel numbers them.
LSTM_RNN_ACTIVATIONS = {"tanh": 0, "softsign": 1, "sigmoid": 2}


def lstm_rnn(cell: Any, extension: ModuleType, plan: LevelPlan, weights: Sequence[Tensor]) -> Any:
    """:class:`~graphtree.nn.LSTMRNN`: ``LSTMRNNLevels`` (``csrc/lstm_rnn_level.cpp``)."""
    return extension.LSTMRNNLevels(*weights, LSTM_RNN_ACTIVATIONS[cell.activation])


def lexicalized(cell: Any, extension: ModuleType, plan: LevelPlan, weights: Sequence[Tensor]) -> Any:
    """:class:`~graphtree.nn.LexicalizedTreeLSTM`: ``LexicalizedLevels`` (``csrc/peephole_level.cpp``)."""
    return extension.LexicalizedLevels(*weights, cell.lexicalized)


def top_down(cell: Any, extension: ModuleType, plan: LevelPlan, weights: Sequence[Tensor]) -> Any | None:
    """:class:`~graphtree.nn.TopDownTreeLSTM` where no node has several parents (trees, forests):
    ``TopDownLevels`` (``csrc/peephole_level.cpp``)."""
    if any(width > 1 for width in plan.widths):
        return None
    return extension.TopDownLevels(*weights)


# The modes of FixedCombinationLevels: the fixed heads of Teng & Zhang's Table 5, and the leaf sums.
FIXED_HEADS = {"left": 0, "right": 1, "average": 2}
LEAF_SUM = 3


def head_lexicalization(cell: Any, extension: ModuleType, plan: LevelPlan, weights: Sequence[Tensor]) -> Any | None:
    """:class:`~graphtree.nn.HeadLexicalization`: the gated binary method, ``GatedHeadLevels``, and the
    fixed methods (left, right, average), ``FixedCombinationLevels`` (``csrc/head_level.cpp``)."""
    if cell.method in FIXED_HEADS:
        return extension.FixedCombinationLevels(FIXED_HEADS[cell.method])
    if cell.n_ary != 2:
        return None
    return extension.GatedHeadLevels(*weights)


def leaf_sum(cell: Any, extension: ModuleType, plan: LevelPlan, weights: Sequence[Tensor]) -> Any:
    """The sums of leaf rows below each node (BiConTree's span features): ``FixedCombinationLevels``
    (``csrc/head_level.cpp``)."""
    return extension.FixedCombinationLevels(LEAF_SUM)


MAKERS: dict[str, Maker] = {"child_sum": child_sum, "nary": nary, "slstm": slstm, "lstm_rnn": lstm_rnn,
                            "lexicalized": lexicalized, "top_down": top_down,
                            "head_lexicalization": head_lexicalization, "leaf_sum": leaf_sum}
"""Every compiled kernel by the name a cell gives in ``compiled_kernel``: its maker."""
