"""The paper cells' fast path: their level math compiled, run by the engine's level loop in C++.

A cell's ``update`` is its definition. Where a paper cell runs on CPU in
float32 and the kernels are built (:mod:`graphtree.backend.native`), the engine
instead hands the whole pass to the cell's ``LevelKernel`` in
``graphtree/csrc`` (``level_loop.h``): the same levels, buffers, slot gathers
and child-gradient accumulation as the Python loop, each level's forward and
hand-written derivatives in one pass over its rows, without the interpreter
between a level's small operators (on a tree level's few rows those calls cost
as much as the arithmetic). ``tests/test_fast_paths.py`` checks every kernel
against its cell's ``update``: states and gradients.

This module is the one place that ties a cell to its kernel. A cell class
names its maker in ``compiled_levels`` (e.g. ``compiled_levels =
compiled.child_sum``); a maker reads the cell's weights and settings and
returns the kernel, or ``None`` where the kernel does not cover the cell's
setting or the batch. The engine asks :func:`level_kernel` once per pass; a
subclass that overrides ``update`` never gets its parent's kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any, NamedTuple

import torch
from torch import Tensor

from ..schedule import LevelPlan
from . import native

__all__ = ["LevelKernel", "Maker", "level_kernel"]


class LevelKernel(NamedTuple):
    """A pass's compiled level math: the kernels module and its ``LevelKernel`` object.

    ``parameters``: the cell's parameters in the order in which the kernel returns their gradients.
    """

    kernels: ModuleType
    kernel: Any
    parameters: tuple[Tensor, ...]


# A maker: (cell, kernels module, bottom-up or top-down plan of the pass) -> (kernel, parameters in the order of
# the kernel's gradients), or None where the kernel does not cover the cell's setting or the batch.
Maker = Callable[[torch.nn.Module, ModuleType, LevelPlan], "tuple[Any, tuple[Tensor, ...]] | None"]


def level_kernel(cell: torch.nn.Module, inputs: list[Tensor], plan: LevelPlan) -> LevelKernel | None:
    """The compiled level math of ``cell`` for this pass, or ``None`` (the engine runs ``cell.update``).

    ``None`` unless the cell's class names a maker for the very ``update`` it runs, the inputs and the
    cell's parameters are float32 CPU tensors, the kernels are (or can be) built, and the maker accepts the
    cell's setting and the batch. Only such a cell ever causes a build.
    """
    cls = type(cell)
    make = getattr(cls, "compiled_levels", None)
    if make is None or getattr(cls, "_compiled_update", None) is not cls.update:
        return None
    params = [p.detach() for p in cell.parameters()]
    kernels = native.native_kernels(*inputs, *params)
    if kernels is None:
        return None
    made = make(cell, kernels, plan)
    if made is None:
        return None
    kernel, parameters = made
    return LevelKernel(kernels, kernel, parameters)


def _detached(*tensors: Tensor) -> list[Tensor]:
    return [t.detach() for t in tensors]


def child_sum(cell: Any, kernels: ModuleType, plan: LevelPlan) -> tuple[Any, tuple[Tensor, ...]]:
    """:class:`~graphtree.nn.ChildSumTreeLSTM`: ``ChildSumLevels`` (``csrc/child_sum_level.cpp``)."""
    weights = (cell.U_iou.weight, cell.U_iou.bias, cell.U_f.weight, cell.U_f.bias)
    return kernels.ChildSumLevels(*_detached(*weights)), weights


def nary(cell: Any, kernels: ModuleType, plan: LevelPlan) -> tuple[Any, tuple[Tensor, ...]] | None:
    """:class:`~graphtree.nn.NaryTreeLSTM` with full forget maps, either setting: ``NaryLevels``
    (``csrc/nary_level.cpp``). It takes ``U`` transposed, with the candidate's rows doubled (the kernel
    computes tanh(z) as 2 sigmoid(2z) - 1, one activation for all gates), and the children's biases summed.
    In the general setting the pass's inputs are the nodes' ``W x + b``, which the cell computes before it."""
    if cell.forget != "full":
        return None
    U, d = cell.U.detach(), cell.hidden_channels
    U_t = kernels.transposed(U)
    U_t[:, 2 * d:3 * d] *= 2
    gate_bias = cell.b_U.detach().sum(0)[:U.size(0)]
    gate_bias[2 * d:3 * d] *= 2
    if cell.setting == "general":
        none = U.new_empty(0)
        return kernels.NaryLevels(U_t, gate_bias, U, none, none, True), (cell.U, cell.b_U)
    weights = (cell.U, cell.b_U, cell.W_leaf.weight, cell.W_leaf.bias)
    return kernels.NaryLevels(U_t, gate_bias, U, *_detached(cell.W_leaf.weight, cell.W_leaf.bias), False), weights


def slstm(cell: Any, kernels: ModuleType, plan: LevelPlan) -> tuple[Any, tuple[Tensor, ...]]:
    """:class:`~graphtree.nn.SLSTM`: ``SLSTMLevels`` (``csrc/peephole_level.cpp``)."""
    leaf = (cell.W_leaf.weight, cell.W_leaf.bias) if cell.W_leaf is not None else ()
    weights = (cell.W_h, cell.W_c, cell.W_co, cell.b, *leaf)
    return kernels.SLSTMLevels(*_detached(*weights)), weights


# The activation of the LSTM-RNN's gates, as the kernel numbers them.
LSTM_RNN_ACTIVATIONS = {"tanh": 0, "softsign": 1, "sigmoid": 2}


def lstm_rnn(cell: Any, kernels: ModuleType, plan: LevelPlan) -> tuple[Any, tuple[Tensor, ...]]:
    """:class:`~graphtree.nn.LSTMRNN`: ``LSTMRNNLevels`` (``csrc/lstm_rnn_level.cpp``)."""
    weights = (cell.W_leaf, cell.W_inner, cell.W_cell, cell.b)
    return kernels.LSTMRNNLevels(*_detached(*weights), LSTM_RNN_ACTIVATIONS[cell.activation]), weights


def lexicalized(cell: Any, kernels: ModuleType, plan: LevelPlan) -> tuple[Any, tuple[Tensor, ...]]:
    """:class:`~graphtree.nn.LexicalizedTreeLSTM`: ``LexicalizedLevels`` (``csrc/peephole_level.cpp``)."""
    weights = (cell.W_x, cell.W_h, cell.W_c, cell.W_co, cell.b)
    return kernels.LexicalizedLevels(*_detached(*weights), cell.lexicalized), weights


def top_down(cell: Any, kernels: ModuleType, plan: LevelPlan) -> tuple[Any, tuple[Tensor, ...]] | None:
    """:class:`~graphtree.nn.TopDownTreeLSTM` where no node has several parents (trees, forests):
    ``TopDownLevels`` (``csrc/peephole_level.cpp``)."""
    if any(width > 1 for width in plan.widths):
        return None
    weights = (cell.W_x, cell.b, cell.W_h, cell.W_c, cell.W_co)
    return kernels.TopDownLevels(*_detached(*weights)), weights


# The fixed heads of Teng & Zhang's Table 5, as the kernel numbers them.
FIXED_HEADS = {"left": 0, "right": 1, "average": 2}


def head_lexicalization(cell: Any, kernels: ModuleType, plan: LevelPlan) -> tuple[Any, tuple[Tensor, ...]] | None:
    """:class:`~graphtree.nn.HeadLexicalization`: the gated binary method, ``GatedHeadLevels``, and the
    fixed methods (left, right, average), ``FixedHeadLevels`` (``csrc/head_level.cpp``)."""
    if cell.method in FIXED_HEADS:
        return kernels.FixedHeadLevels(FIXED_HEADS[cell.method]), ()
    if cell.n_ary != 2:
        return None
    weights = (cell.W_zx, cell.b_z)
    return kernels.GatedHeadLevels(*_detached(*weights)), weights


def leaf_sum(cell: Any, kernels: ModuleType, plan: LevelPlan) -> tuple[Any, tuple[Tensor, ...]]:
    """The sums of leaf rows below each node (BiConTree's span features): ``LeafSumLevels``
    (``csrc/head_level.cpp``)."""
    return kernels.LeafSumLevels(), ()
