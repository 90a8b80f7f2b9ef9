"""Child-Sum Tree-LSTM (Tai, Socher & Manning, 2015, eqs 2-8)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.nn import Linear

from ..engine import Children, ParamGrads
from .cell import TreeCell
from .functional import fast_tanh
from .native import native_kernels

__all__ = ["ChildSumTreeLSTM"]


class ChildSumTreeLSTM(TreeCell):
    r"""The Child-Sum Tree-LSTM from `"Improved Semantic Representations From
    Tree-Structured Long Short-Term Memory Networks"
    <https://arxiv.org/abs/1503.00075>`_ (Tai et al., 2015), eqs 2-8:

    .. math::
        \tilde{h}_j &= \sum_{k \in C(j)} h_k

        i_j &= \sigma\left(W^{(i)} x_j + U^{(i)} \tilde{h}_j + b^{(i)}\right)

        f_{jk} &= \sigma\left(W^{(f)} x_j + U^{(f)} h_k + b^{(f)}\right)

        o_j &= \sigma\left(W^{(o)} x_j + U^{(o)} \tilde{h}_j + b^{(o)}\right)

        u_j &= \tanh\left(W^{(u)} x_j + U^{(u)} \tilde{h}_j + b^{(u)}\right)

        c_j &= i_j \odot u_j + \sum_{k \in C(j)} f_{jk} \odot c_k

        h_j &= o_j \odot \tanh(c_j)

    Children are unordered and a node may have any number of them, so the cell
    runs on dependency trees and on any DAG (a node with several parents feeds
    each of them). A leaf is an LSTM step from zero child states. As in the
    original code, the input map :math:`W` and the hidden maps :math:`U` each
    carry a bias, which gives exactly the parameter count of Tai's Table 1
    (315,840 for ``in_channels=300, hidden_channels=168``). On a chain the cell
    is the standard LSTM: ``W`` and ``U`` play ``weight_ih`` and ``weight_hh``.

    Args:
        in_channels (int): Size of each node input :math:`x_j`.
        hidden_channels (int): Memory dimension :math:`d`.

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F_{in})`, and the batch
          (a ``Data``/``Batch`` or its :class:`~graphtree.schedule.Schedule`).
        - **output:** :math:`(h, c)`, each :math:`(|\mathcal{V}|, d)`, for every node.
    """

    def __init__(self, in_channels: int, hidden_channels: int) -> None:
        super().__init__()
        self.in_channels = in_channels
        self.hidden_channels = hidden_channels
        self.state_channels = (hidden_channels, hidden_channels)
        d = hidden_channels
        self.W = Linear(in_channels, 4 * d)  # rows: W^(i), W^(o), W^(u), W^(f)
        self.U_iou = Linear(d, 3 * d)  # U^(i), U^(o), U^(u) applied to h~_j
        self.U_f = Linear(d, d)  # U^(f) applied to each child's h_k
        self.reset_parameters()

    def forward(self, x: Tensor, batch: Any) -> tuple[Tensor, Tensor]:
        """Return ``(h, c)`` for every node of ``batch``."""
        self._check_input(x, self.in_channels)
        Wx = self.W(x)  # hoisted: one matmul for all nodes and gates
        return self.propagate_levels((Wx,), batch)

    fused_backward = True  # the engine uses backward_level, the hand-written derivatives below

    def native_level_kernel(self, inputs: tuple[Tensor, ...]) -> tuple[Any, Any] | None:
        """This cell's level math for the engine's compiled level loop (``ChildSumLevels`` in
        ``graphtree/csrc/child_sum_level.cpp``: :meth:`forward_level` and :meth:`backward_level` in C++), with
        the kernels module; ``None`` where the kernels do not apply."""
        return self._compiled_levels(inputs, "ChildSumLevels", self.U_iou.weight, self.U_iou.bias, self.U_f.weight,
                                     self.U_f.bias)

    def forward_level(self, inputs: tuple[Tensor, ...], children: Children) -> tuple[tuple[Tensor, Tensor], tuple]:
        """States of one level, and what :meth:`backward_level` needs."""
        (Wx,) = inputs
        h_k, c_k = children.states  # [n, K, d]; empty slots are zero
        d = self.hidden_channels
        h_tilde = h_k.sum(dim=1)  # eq 2
        weights = self.weights
        kernels = native_kernels(Wx, h_k)
        if kernels is not None:  # eqs 3-8 below, in one pass over the rows (graphtree/csrc/child_sum_level.cpp)
            iou_terms = weights.linear(h_tilde, self.U_iou.weight, self.U_iou.bias)
            U_f_h_k = weights.linear(h_k.reshape(-1, d), self.U_f.weight, self.U_f.bias).view_as(h_k)
            h, c, tanh_c, iou, f = kernels.child_sum_level_forward(Wx, iou_terms, U_f_h_k, c_k)
            return (h, c), ("native", kernels, weights, h_k, c_k, h_tilde, iou, f, tanh_c)
        iou = Wx[:, :3 * d] + weights.linear(h_tilde, self.U_iou.weight, self.U_iou.bias)
        # tanh(z) = 2 sigmoid(2z) - 1: one sigmoid call is much faster than sigmoid + tanh on CPU.
        iou[:, 2 * d:] *= 2
        iou = torch.sigmoid(iou)
        i, o = iou[:, :d], iou[:, d:2 * d]  # eqs 3, 5
        u = 2 * iou[:, 2 * d:] - 1  # eq 6
        U_f_h_k = weights.linear(h_k.reshape(-1, d), self.U_f.weight, self.U_f.bias).view_as(h_k)
        f = torch.sigmoid(Wx[:, 3 * d:].unsqueeze(1) + U_f_h_k)  # eq 4, one gate per child
        c = i * u + (f * c_k).sum(dim=1)  # eq 7 (an empty slot has c_k = 0)
        tanh_c = fast_tanh(c)
        h = o * tanh_c  # eq 8
        return (h, c), ("pytorch", weights, h_k, c_k, h_tilde, i, o, u, f, tanh_c)

    def backward_level(self, context: tuple, grad_states: tuple[Tensor, Tensor], grad_params: ParamGrads,
                       needs_input_grad: tuple[bool, ...] = (True,),
                       ) -> tuple[tuple[Tensor | None], tuple[Tensor, Tensor]]:
        """Hand-written derivatives of :meth:`forward_level`, checked against autograd in the tests."""
        grad_h, grad_c = grad_states
        d = self.hidden_channels
        if context[0] == "native":
            _, kernels, weights, h_k, c_k, h_tilde, iou, f, tanh_c = context
            grad_Wx, grad_f, grad_c_k = kernels.child_sum_level_backward(grad_h, grad_c, iou, f, c_k, tanh_c)
            grad_iou = grad_Wx[:, :3 * d]
        else:
            _, weights, h_k, c_k, h_tilde, i, o, u, f, tanh_c = context
            grad_c = grad_c + grad_h * o * (1 - tanh_c * tanh_c)
            grad_iou = torch.cat([grad_c * u * i * (1 - i), grad_h * tanh_c * o * (1 - o),
                                  grad_c * i * (1 - u * u)], dim=1)
            grad_f = grad_c.unsqueeze(1) * c_k * f * (1 - f)  # [n, K, d]
            grad_c_k = grad_c.unsqueeze(1) * f
            grad_Wx = torch.cat([grad_iou, grad_f.sum(dim=1)], dim=1) if needs_input_grad[0] else None
        grad_params.add_outer("U_iou.weight", grad_iou, h_tilde)
        grad_params.add_sum("U_iou.bias", grad_iou)
        grad_params.add_outer("U_f.weight", grad_f.reshape(-1, d), h_k.reshape(-1, d))
        if "U_f.bias" in grad_params:
            grad_params["U_f.bias"] += grad_f.sum((0, 1))
        grad_h_k = (weights.linear(grad_iou, self.U_iou.weight, transpose=True).unsqueeze(1)
                    + weights.linear(grad_f.reshape(-1, d), self.U_f.weight, transpose=True).view_as(grad_f))
        return (grad_Wx if needs_input_grad[0] else None,), (grad_h_k, grad_c_k)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.in_channels}, {self.hidden_channels})"
