"""N-ary Tree-LSTM (Tai, Socher & Manning, 2015, eqs 9-14)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from torch.nn import Linear, Parameter

from ..engine import Children
from ..errors import InvalidArgumentError
from .cell import TreeCell

if TYPE_CHECKING:
    from ..schedule import LevelPlan

__all__ = ["NaryTreeLSTM"]


class NaryTreeLSTM(TreeCell):
    r"""The N-ary Tree-LSTM from `"Improved Semantic Representations From
    Tree-Structured Long Short-Term Memory Networks"
    <https://arxiv.org/abs/1503.00075>`_ (Tai et al., 2015), eqs 9-14, for
    ordered children :math:`\ell = 1..N` (the child's ``edge_pos``):

    .. math::
        i_j &= \sigma\Big(W^{(i)} x_j + \sum_{\ell=1}^N U^{(i)}_\ell h_{j\ell} + b^{(i)}\Big)

        f_{jk} &= \sigma\Big(W^{(f)} x_j + \sum_{\ell=1}^N U^{(f)}_{k\ell} h_{j\ell} + b^{(f)}\Big)

        o_j &= \sigma\Big(W^{(o)} x_j + \sum_{\ell=1}^N U^{(o)}_\ell h_{j\ell} + b^{(o)}\Big)

        u_j &= \tanh\Big(W^{(u)} x_j + \sum_{\ell=1}^N U^{(u)}_\ell h_{j\ell} + b^{(u)}\Big)

        c_j &= i_j \odot u_j + \sum_{\ell=1}^N f_{j\ell} \odot c_{j\ell}

        h_j &= o_j \odot \tanh(c_j)

    A node with fewer than :math:`N` children gets zero states in the missing
    positions; one with more is an error naming the node.

    Two settings:

    * ``"constituency"`` (default), Tai's Constituency Tree-LSTM: internal nodes
      take no input (the :math:`W x_j` terms vanish) and leaves use the leaf
      unit of the original code, :math:`c_j = W^{(c)} x_j + b^{(c)}`,
      :math:`o_j = \sigma(W^{(o)} x_j + b^{(o)})`, :math:`h_j = o_j \odot \tanh(c_j)`.
      With ``NaryTreeLSTM(300, 150)`` this has exactly the 316,800 parameters
      of Tai's Table 1.
    * ``"general"``: eqs 9-14 at every node, with an input term wherever a node
      has features; a leaf is an LSTM step from zero child states. With
      ``n_ary=1`` on a chain this is the standard LSTM.

    As in the original code each child's map :math:`U_\ell` carries its own
    bias (``b_U[ℓ]``); these add up to one constant per gate.

    Args:
        in_channels (int): Size of each node input :math:`x_j`.
        hidden_channels (int): Memory dimension :math:`d`.
        n_ary (int): Maximum number of children :math:`N` (default 2).
        setting (str): ``"constituency"`` or ``"general"`` (see above).
        forget (str): Parameterization of the forget gates' off-diagonal
            :math:`U^{(f)}_{k\ell}, k \neq \ell`: ``"full"`` (eq 10 as printed),
            ``"tied"`` (one matrix shared by all off-diagonal pairs) or
            ``"zero"`` (off-diagonal fixed to zero), the options Tai suggests for
            large :math:`N`.

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F_{in})`, edge indices
          :math:`(2, |\mathcal{E}|)` (child :math:`\to` parent) and positions
          :math:`(|\mathcal{E}|)`, or the ``Data``/``Batch`` (with its ``schedule``, if it carries one),
          or a :class:`~graphtree.schedule.Schedule`.
        - **output:** :math:`(h, c)`, each :math:`(|\mathcal{V}|, d)`, for every node.
    """

    def __init__(self, in_channels: int, hidden_channels: int, n_ary: int = 2, setting: str = "constituency",
                 forget: str = "full") -> None:
        super().__init__(state_channels=(hidden_channels, hidden_channels), max_children=n_ary)
        if n_ary < 1:
            raise InvalidArgumentError(f"n_ary must be at least 1, got {n_ary}")
        if setting not in ("constituency", "general"):
            raise InvalidArgumentError(f"setting must be 'constituency' or 'general', got {setting!r}")
        if forget not in ("full", "tied", "zero"):
            raise InvalidArgumentError(f"forget must be 'full', 'tied' or 'zero', got {forget!r}")
        self.in_channels, self.hidden_channels = in_channels, hidden_channels
        self.n_ary, self.setting, self.forget = n_ary, setting, forget
        N, d = n_ary, hidden_channels
        if setting == "constituency":
            self.W_leaf = Linear(in_channels, 2 * d)  # leaf unit: W^(c), W^(o)
        else:
            self.W = Linear(in_channels, 4 * d)  # W^(i), W^(o), W^(u), W^(f)
        # U[:, ℓd:(ℓ+1)d] is child ℓ's block; rows are gates i, o, u, then f_1..f_N when forget="full".
        gate_rows = (3 + N) * d if forget == "full" else 3 * d
        self.U = Parameter(torch.empty(gate_rows, N * d))
        if forget != "full":
            self.U_f_diag = Parameter(torch.empty(N, d, d))  # U^(f)_kk
        if forget == "tied":
            self.U_f_off = Parameter(torch.empty(d, d))  # U^(f)_kl, k != l, shared
        self.b_U = Parameter(torch.empty(N, (3 + N) * d))
        self.reset_parameters()

    def compiled_weights(self) -> tuple[Tensor, ...]:
        """The weights of ``NaryLevels``, in its order: ``U``, ``b_U`` and, in the constituency setting, the leaf
        unit's (in the general setting ``W`` is applied before the pass)."""
        if self.setting == "general":
            return self.U, self.b_U
        return self.U, self.b_U, self.W_leaf.weight, self.W_leaf.bias

    def level_kernel(self, kernels: Any, plan: LevelPlan, weights: Sequence[Tensor]) -> Any | None:
        """The fast path, with full forget maps (either setting): ``NaryLevels`` (``csrc/nary_level.cpp``).

        It takes ``U`` transposed, with the candidate's rows doubled (the kernel computes tanh(z) as
        2 sigmoid(2z) - 1, one activation for all gates), and the children's biases summed. In the general
        setting the pass's inputs are the nodes' ``W x + b``, which :meth:`forward` computes before it."""
        if self.forget != "full":
            return None
        U, b_U, *leaf = weights
        d = self.hidden_channels
        U_t = kernels.transposed(U)
        U_t[:, 2 * d:3 * d] *= 2
        gate_bias = b_U.sum(0)[:U.size(0)]
        gate_bias[2 * d:3 * d] *= 2
        if self.setting == "general":
            none = U.new_empty(0)
            return kernels.NaryLevels(U_t, gate_bias, U, none, none, True)
        return kernels.NaryLevels(U_t, gate_bias, U, *leaf, False)

    def reset_parameters(self) -> None:
        """Every parameter, weights and biases of the layers inside too, uniform in :math:`\\pm 1/\\sqrt{d}`
        (``d = hidden_channels``), as ``torch.nn.LSTM`` initializes."""
        self._uniform_everywhere(self.hidden_channels)

    def forward(self, x: Tensor, edge_index: Any, edge_pos: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Return ``(h, c)`` for every node; ``edge_index``: child -> parent edges (with ``edge_pos``, each
        child's position ℓ - 1) or the ``Data``/``Batch``."""
        self._check_features(x, self.in_channels, edge_index)
        # Constituency: only leaves read x (the leaf unit, in their level). General: W x_j + b for all nodes.
        return self.propagate(edge_index, x=x if self.setting == "constituency" else self.W(x), edge_pos=edge_pos)

    def update(self, children: Children, x: Tensor) -> tuple[Tensor, Tensor]:
        r"""Eqs 9-14 for one level's nodes (``x``: their :math:`W^{(\cdot)} x_j + b^{(\cdot)}` in the general
        setting, their features in the constituency setting, where only leaves read them)."""
        h_jl, c_jl = children.states  # [n, N, d], child ℓ in slot ℓ - 1, zeros where missing
        n, d, N = x.size(0), self.hidden_channels, self.n_ary
        if h_jl.size(1) == 0:  # leaves
            if self.setting == "constituency":
                return self._leaf_unit(x)
            h_jl = c_jl = x.new_zeros(n, N, d)  # an LSTM step from zero child states
        gates = torch.addmm(self.b_U.sum(0)[:self.U.size(0)], h_jl.reshape(n, N * d), self.U.t())  # sum U_ℓ h_jℓ + b
        if self.forget != "full":
            gates = torch.cat([gates, (self._forget_terms(h_jl) + self.b_U[:, 3 * d:].sum(0).view(N, d))
                               .reshape(n, N * d)], dim=1)
        z_i, z_o, z_u = gates[:, :3 * d].split(d, dim=1)
        z_f = gates[:, 3 * d:].view(n, N, d)  # row block k: the forget gate of child k
        if self.setting == "general":
            Wx_i, Wx_o, Wx_u, Wx_f = x.split(d, dim=1)
            z_i, z_o, z_u, z_f = z_i + Wx_i, z_o + Wx_o, z_u + Wx_u, z_f + Wx_f.unsqueeze(1)
        i = torch.sigmoid(z_i)  # eq 9
        f = torch.sigmoid(z_f)  # eq 10
        o = torch.sigmoid(z_o)  # eq 11
        u = torch.tanh(z_u)  # eq 12
        c = i * u + (f * c_jl).sum(dim=1)  # eq 13
        h = o * torch.tanh(c)  # eq 14
        return h, c

    def _leaf_unit(self, x: Tensor) -> tuple[Tensor, Tensor]:
        r"""The leaf unit of Tai et al.'s constituency code: :math:`c = W^{(c)} x + b^{(c)}`,
        :math:`h = \sigma(W^{(o)} x + b^{(o)}) \odot \tanh(c)`."""
        c, z_o = self.W_leaf(x).split(self.hidden_channels, dim=1)
        return torch.sigmoid(z_o) * torch.tanh(c), c

    def _forget_terms(self, h_jl: Tensor) -> Tensor:
        r""":math:`\sum_\ell U^{(f)}_{k\ell} h_{j\ell}` for every k under the tied or zero parameterization."""
        diagonal = torch.einsum("nkd,ked->nke", h_jl, self.U_f_diag)  # U_kk h_jk
        if self.forget == "zero":
            return diagonal
        others = h_jl.sum(dim=1, keepdim=True) - h_jl  # sum over l != k
        return diagonal + others @ self.U_f_off.t()

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.hidden_channels}, n_ary={self.n_ary}, "
                f"setting={self.setting!r}, forget={self.forget!r})")
