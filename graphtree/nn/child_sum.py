"""Child-Sum Tree-LSTM (Tai, Socher & Manning, 2015, eqs 2-8)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from torch.nn import Linear

from ..engine import Children
from .cell import TreeCell

if TYPE_CHECKING:
    from ..schedule import LevelPlan

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

    Weights: ``W`` (a ``Linear``, :math:`4d \times F_{in}`) stacks the rows of
    :math:`W^{(i)}, W^{(o)}, W^{(u)}, W^{(f)}`; ``U_iou`` (:math:`3d \times d`)
    those of :math:`U^{(i)}, U^{(o)}, U^{(u)}`; ``U_f`` is :math:`U^{(f)}`.

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F_{in})`, edge indices
          :math:`(2, |\mathcal{E}|)` (child :math:`\to` parent) or the
          ``Data``/``Batch`` (with its ``schedule``, if it carries one),
          or a :class:`~graphtree.schedule.Schedule`.
        - **output:** :math:`(h, c)`, each :math:`(|\mathcal{V}|, d)`, for every node.
    """

    def __init__(self, in_channels: int, hidden_channels: int) -> None:
        super().__init__(state_channels=(hidden_channels, hidden_channels))
        self.in_channels, self.hidden_channels = in_channels, hidden_channels
        d = hidden_channels
        self.W = Linear(in_channels, 4 * d)  # rows: W^(i), W^(o), W^(u), W^(f)
        self.U_iou = Linear(d, 3 * d)  # U^(i), U^(o), U^(u) applied to h~_j
        self.U_f = Linear(d, d)  # U^(f) applied to each child's h_k
        self.reset_parameters()

    def compiled_weights(self) -> tuple[Tensor, ...]:
        """The weights of ``ChildSumLevels``, in its order (``W`` is applied before the pass, as ``Wx``)."""
        return self.U_iou.weight, self.U_iou.bias, self.U_f.weight, self.U_f.bias

    def level_kernel(self, kernels: Any, plan: LevelPlan, weights: Sequence[Tensor]) -> Any:
        """The fast path: ``ChildSumLevels`` (``csrc/child_sum_level.cpp``), which takes the weights as they are."""
        return kernels.ChildSumLevels(*weights)

    def reset_parameters(self) -> None:
        """Every parameter, weights and biases of the layers inside too, uniform in :math:`\\pm 1/\\sqrt{d}`
        (``d = hidden_channels``), as ``torch.nn.LSTM`` initializes."""
        self._uniform_everywhere(self.hidden_channels)

    def forward(self, x: Tensor, edge_index: Any) -> tuple[Tensor, Tensor]:
        """Return ``(h, c)`` for every node; ``edge_index``: child -> parent edges, or the ``Data``/``Batch``."""
        self._check_features(x, self.in_channels, edge_index)
        return self.propagate(edge_index, Wx=self.W(x))  # W x_j + b for all nodes and gates: one product

    def update(self, children: Children, Wx: Tensor) -> tuple[Tensor, Tensor]:
        r"""Eqs 2-8 for one level's nodes; ``Wx``: their :math:`W^{(\cdot)} x_j + b^{(\cdot)}`."""
        h_k, c_k = children.states  # [n, K, d]: the children's states (K: the level's most children)
        d = self.hidden_channels
        h_tilde = children.sum(0)  # eq 2
        # W x_j + U h~_j for the gates i, o, u at once (one addition for the three), then each gate's rows.
        z_i, z_o, z_u = (self.U_iou(h_tilde) + Wx[:, :3 * d]).split(d, dim=1)
        i = torch.sigmoid(z_i)  # eq 3
        f = torch.sigmoid(Wx[:, 3 * d:].unsqueeze(1) + self.U_f(h_k))  # eq 4: one forget gate per child k
        o = torch.sigmoid(z_o)  # eq 5
        u = torch.tanh(z_u)  # eq 6
        c = i * u + children.sum(f * c_k)  # eq 7, over the children there are
        h = o * torch.tanh(c)  # eq 8
        return h, c

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.in_channels}, {self.hidden_channels})"
