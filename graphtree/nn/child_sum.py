"""Child-Sum Tree-LSTM (Tai, Socher & Manning, 2015, eqs 2-8)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor
from torch.nn import Linear

from ..engine import Children
from .cell import TreeCell

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

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_channels)
        for param in self.parameters():
            torch.nn.init.uniform_(param, -bound, bound)

    def forward(self, x: Tensor, batch: Any) -> tuple[Tensor, Tensor]:
        """Return ``(h, c)`` for every node of ``batch``."""
        self._check_input(x, self.in_channels)
        Wx = self.W(x)  # hoisted: one matmul for all nodes and gates
        return self.propagate_levels((Wx,), batch)

    def update(self, inputs: tuple[Tensor, ...], children: Children) -> tuple[Tensor, Tensor]:
        (Wx,) = inputs
        h_k, c_k = children.states  # [n, K, d]; empty slots are zero
        d = self.hidden_channels
        h_tilde = h_k.sum(dim=1)  # eq 2
        iou = Wx[:, :3 * d] + self.U_iou(h_tilde)
        i, o, u = iou.split(d, dim=-1)
        i, o, u = torch.sigmoid(i), torch.sigmoid(o), torch.tanh(u)  # eqs 3, 5, 6
        f = torch.sigmoid(Wx[:, 3 * d:].unsqueeze(1) + self.U_f(h_k))  # eq 4, one gate per child
        c = i * u + (f * c_k).sum(dim=1)  # eq 7 (an empty slot has c_k = 0)
        h = o * torch.tanh(c)  # eq 8
        return h, c

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.in_channels}, {self.hidden_channels})"
