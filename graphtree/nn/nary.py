"""N-ary Tree-LSTM (Tai, Socher & Manning, 2015, eqs 9-14)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.nn import Linear, Parameter

from ..engine import Children, ParamGrads
from .cell import TreeCell
from .functional import fast_tanh
from .native import native_kernels

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
        - **input:** node features :math:`(|\mathcal{V}|, F_{in})`, and the batch
          (a ``Data``/``Batch`` or its :class:`~graphtree.schedule.Schedule`).
        - **output:** :math:`(h, c)`, each :math:`(|\mathcal{V}|, d)`, for every node.
    """

    def __init__(self, in_channels: int, hidden_channels: int, n_ary: int = 2, setting: str = "constituency",
                 forget: str = "full") -> None:
        super().__init__()
        if n_ary < 1:
            raise ValueError(f"n_ary must be at least 1, got {n_ary}")
        if setting not in ("constituency", "general"):
            raise ValueError(f"setting must be 'constituency' or 'general', got {setting!r}")
        if forget not in ("full", "tied", "zero"):
            raise ValueError(f"forget must be 'full', 'tied' or 'zero', got {forget!r}")
        self.in_channels, self.hidden_channels = in_channels, hidden_channels
        self.n_ary, self.setting, self.forget = n_ary, setting, forget
        self.max_children = n_ary
        self.state_channels = (hidden_channels, hidden_channels)
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

    def forward(self, x: Tensor, batch: Any) -> tuple[Tensor, Tensor]:
        """Return ``(h, c)`` for every node of ``batch``."""
        self._check_input(x, self.in_channels)
        # Constituency: only leaves read x, and level 0 holds all leaves, so the
        # leaf unit runs as one matmul inside the first level.
        inputs = x if self.setting == "constituency" else self.W(x)
        return self.propagate_levels((inputs,), batch)

    @property
    def fused_backward(self) -> bool:
        """The engine uses :meth:`backward_level` (hand-written derivatives) for the full parameterization."""
        return self.forget == "full"

    def native_level_kernel(self, inputs: tuple[Tensor, ...]) -> tuple[Any, Any] | None:
        """The constituency setting's level math for the engine's compiled level loop (``NaryLevels`` in
        ``graphtree/csrc/nary_level.cpp``: :meth:`forward_level` and :meth:`backward_level` in C++), with the
        kernels module; ``None`` where it does not apply (the engine then runs its Python loop)."""
        if self.setting != "constituency" or self.forget != "full":
            return None
        if native_kernels(*inputs, self.U) is None:  # before building the transposed weights
            return None
        # Rescaled and transposed (the level products then read the weights row by row) once per change of
        # U or b_U: once per pass in training, once in all in inference.
        U_t, b = self.derived_weights("gates_t", (self.U, self.b_U), self._gate_weights_t)
        return self._compiled_levels(inputs, "NaryLevels", U_t, b, self.U.detach(), self.W_leaf.weight.detach(),
                                     self.W_leaf.bias.detach())

    def _gate_weights_t(self) -> tuple[Tensor, Tensor]:
        """:meth:`_gate_weights` with ``U`` transposed, in one pass over it (detached: for the compiled loop)."""
        U, d = self.U.detach(), self.hidden_channels
        scale = torch.ones(U.size(0), dtype=U.dtype, device=U.device)
        scale[2 * d:3 * d] = 2
        U_t = torch.empty(U.size(1), U.size(0), dtype=U.dtype, device=U.device)
        torch.mul(U.t(), scale, out=U_t)
        return U_t, self.b_U.detach().sum(0)[:U.size(0)] * scale

    def forward_level(self, inputs: tuple[Tensor, ...], children: Children) -> tuple[tuple[Tensor, Tensor], tuple]:
        """States of one level, and what :meth:`backward_level` needs."""
        (x_or_Wx,) = inputs
        h_jl, c_jl = children.states  # [n, N, d], or [n, 0, d] at the leaves
        d, N = self.hidden_channels, self.n_ary
        if h_jl.size(1) == 0:
            return self._leaf(x_or_Wx)

        n = h_jl.size(0)
        h_cat = h_jl.reshape(n, N * d)
        weights = self.weights
        # One matmul gives sum_l U_l h_jl for all gates; rows are i, o, u, f_1..f_N. The u
        # rows are doubled: tanh(z) = 2 sigmoid(2z) - 1, so one sigmoid serves every gate
        # (several times faster on CPU than separate sigmoid and tanh calls).
        U, b = weights.memo("gates", self._gate_weights)
        gates = weights.linear(h_cat, U, b)
        if self.forget != "full":
            f_terms = self._forget_terms(h_jl) + self.b_U[:, 3 * d:].sum(0).view(N, d)
            gates = torch.cat([gates, f_terms.reshape(n, N * d)], dim=1)
        if self.setting == "general":
            x_u = x_or_Wx[:, 2 * d:3 * d]
            gates = gates + torch.cat([x_or_Wx[:, :2 * d], x_u + x_u, x_or_Wx[:, 3 * d:].repeat(1, N)], dim=1)
        kernels = native_kernels(gates, c_jl)
        if kernels is not None:  # eqs 9-14 below, in one pass over the rows (graphtree/csrc/nary_level.cpp)
            h, c, tanh_c = kernels.nary_level_forward(gates, c_jl)
            return (h, c), ("node", weights, h_cat, c_jl, gates, tanh_c, kernels)
        activated = gates.sigmoid_()
        i, o = activated[:, :d], activated[:, d:2 * d]  # eqs 9, 11
        u = activated[:, 2 * d:3 * d].mul(2).sub_(1)  # eq 12
        f = activated[:, 3 * d:].view(n, N, d)  # eq 10
        c = (f * c_jl).sum(dim=1).addcmul_(i, u)  # eq 13
        tanh_c = fast_tanh(c)
        h = o * tanh_c  # eq 14
        return (h, c), ("node", weights, h_cat, c_jl, activated, tanh_c, None)

    def _gate_weights(self) -> tuple[Tensor, Tensor]:
        """``U`` and the summed biases ``b_U``, their u rows doubled (see :meth:`forward_level`)."""
        d, rows = self.hidden_channels, self.U.size(0)
        scale = torch.ones(rows, 1, dtype=self.U.dtype, device=self.U.device)
        scale[2 * d:3 * d] = 2
        return self.U * scale, self.b_U.sum(0)[:rows] * scale.view(-1)

    def backward_level(self, context: tuple, grad_states: tuple[Tensor, Tensor], grad_params: ParamGrads,
                       needs_input_grad: tuple[bool, ...] = (True,),
                       ) -> tuple[tuple[Tensor | None], tuple[Tensor, Tensor] | tuple]:
        """Hand-written derivatives of :meth:`forward_level` (forget="full"), checked against autograd in tests."""
        grad_h, grad_c = grad_states
        d, N = self.hidden_channels, self.n_ary
        if context[0] != "node":
            return self._leaf_backward(context, grad_h, grad_c, grad_params, needs_input_grad[0]), ()
        _, weights, h_cat, c_jl, activated, tanh_c, kernels = context
        n = h_cat.size(0)
        if kernels is not None:  # the forward pass ran on the compiled kernels: so do its derivatives
            grad_gates, grad_c_jl = kernels.nary_level_backward(grad_h, grad_c, activated, c_jl, tanh_c)
        else:
            grad_gates, grad_c_jl = self._gate_backward(grad_h, grad_c, activated, c_jl, tanh_c)
        grad_params.add_outer("U", grad_gates, h_cat)
        grad_params.add_sum("b_U", grad_gates)
        grad_h_jl = weights.linear(grad_gates, self.U, transpose=True).view(n, N, d)
        grad_input = None
        if self.setting == "general" and needs_input_grad[0]:
            grad_input = torch.cat([grad_gates[:, :3 * d], grad_gates[:, 3 * d:].view(n, N, d).sum(1)], dim=1)
        return (grad_input,), (grad_h_jl, grad_c_jl)

    def _gate_backward(self, grad_h: Tensor, grad_c: Tensor, activated: Tensor, c_jl: Tensor,
                       tanh_c: Tensor) -> tuple[Tensor, Tensor]:
        """Gradients of the gates' pre-activations and of the children's memories, in PyTorch operators."""
        d, N, n = self.hidden_channels, self.n_ary, activated.size(0)
        i, o, f = activated[:, :d], activated[:, d:2 * d], activated[:, 3 * d:].view(n, N, d)
        u = activated[:, 2 * d:3 * d].mul(2).sub_(1)
        grad_c = grad_c.addcmul(grad_h * o, 1 - tanh_c * tanh_c)
        # Every gate is s = sigmoid(a z) with ds/dz = a s (1 - s); u = 2 s - 1 with a = 2
        # has du/dz = 4 s (1 - s). So one product with s (1 - s) gives all pre-activation
        # gradients, the factor 4 going into u's upstream gradient.
        upstream = torch.cat([grad_c * u, grad_h * tanh_c, grad_c * i * 4,
                              (grad_c.unsqueeze(1) * c_jl).view(n, N * d)], dim=1)
        grad_gates = upstream.mul_(activated).mul_(1 - activated)
        return grad_gates, grad_c.unsqueeze(1) * f

    def _forget_terms(self, h_jl: Tensor) -> Tensor:
        r""":math:`\sum_\ell U^{(f)}_{k\ell} h_{j\ell}` for every k under the tied or zero parameterization."""
        diagonal = torch.einsum("nkd,ked->nke", h_jl, self.U_f_diag)  # U_kk h_jk
        if self.forget == "zero":
            return diagonal
        others = h_jl.sum(dim=1, keepdim=True) - h_jl  # sum over l != k
        return diagonal + others @ self.U_f_off.t()

    def _leaf(self, x_or_Wx: Tensor) -> tuple[tuple[Tensor, Tensor], tuple]:
        d = self.hidden_channels
        if self.setting == "constituency":
            weights = self.weights
            gates = weights.linear(x_or_Wx, self.W_leaf.weight, self.W_leaf.bias)
            c, o = gates[:, :d], torch.sigmoid(gates[:, d:])
            tanh_c = fast_tanh(c)
            return (o * tanh_c, c), ("leaf", x_or_Wx, o, tanh_c, weights)
        # An LSTM step from zero child states: U h = 0, only the biases remain.
        gates = x_or_Wx[:, :3 * d] + self.b_U[:, :3 * d].sum(0)
        io = torch.sigmoid(gates[:, :2 * d])
        i, o, u = io[:, :d], io[:, d:], fast_tanh(gates[:, 2 * d:])
        c = i * u
        tanh_c = fast_tanh(c)
        return (o * tanh_c, c), ("leaf", None, o, tanh_c, i, u)

    def _leaf_backward(self, context: tuple, grad_h: Tensor, grad_c: Tensor, grad_params: ParamGrads,
                       needs_input_grad: bool) -> tuple[Tensor | None]:
        d = self.hidden_channels
        x, o, tanh_c = context[1:4]
        grad_c = grad_c + grad_h * o * (1 - tanh_c * tanh_c)
        grad_o = grad_h * tanh_c * o * (1 - o)
        if self.setting == "constituency":
            grad_gates = torch.cat([grad_c, grad_o], dim=1)
            grad_params.add_outer("W_leaf.weight", grad_gates, x)
            grad_params.add_sum("W_leaf.bias", grad_gates)
            if not needs_input_grad:
                return (None,)
            return (context[4].linear(grad_gates, self.W_leaf.weight, transpose=True),)
        i, u = context[4:]
        grad_gates = torch.cat([grad_c * u * i * (1 - i), grad_o, grad_c * i * (1 - u * u)], dim=1)
        if "b_U" in grad_params:
            grad_params["b_U"][:, :3 * d] += grad_gates.sum(0)
        return (torch.cat([grad_gates, torch.zeros_like(grad_c)], dim=1),)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.hidden_channels}, n_ary={self.n_ary}, "
                f"setting={self.setting!r}, forget={self.forget!r})")
