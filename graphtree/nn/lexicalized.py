"""Lexicalized bottom-up Tree-LSTM (Teng & Zhang, 2017, eqs 4-7 and 10-11)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch
from torch import Tensor
from torch.nn import Parameter

from ..engine import Children, ParamGrads
from .cell import TreeCell
from .functional import PackedWeights, fast_tanh
from .native import native_kernels

__all__ = ["LexicalizedTreeLSTM"]


class LexicalizedTreeLSTM(TreeCell):
    r"""The head-lexicalized constituent Tree-LSTM from `"Head-Lexicalized
    Bidirectional Tree LSTMs" <https://aclanthology.org/Q17-1012/>`_ (Teng &
    Zhang, TACL 2017), Section 4.2: the binary Tree-LSTM of Zhu et al. (2015)
    with peephole connections, whose every gate and candidate also reads the
    node's head lexicon vector :math:`x_t` (eqs 4, 10, 11, 1):

    .. math::
        i_t &= \sigma\Big(W_{xi} x_t + \sum_{N \in \{L,R\}} (W_{hi}^N h_{t-1}^N
        + W_{ci}^N c_{t-1}^N) + b_i\Big)

        f_t^L &= \sigma\Big(W_{xf} x_t + \sum_{N \in \{L,R\}} (W_{hf_l}^N h_{t-1}^N
        + W_{cf_l}^N c_{t-1}^N) + b_{f_l}\Big)

        f_t^R &= \sigma\Big(W_{xf} x_t + \sum_{N \in \{L,R\}} (W_{hf_r}^N h_{t-1}^N
        + W_{cf_r}^N c_{t-1}^N) + b_{f_r}\Big)

        g_t &= \tanh\Big(W_{xg} x_t + \sum_{N \in \{L,R\}} W_{hg}^N h_{t-1}^N + b_g\Big)

        c_t &= f_t^L \otimes c_{t-1}^L + f_t^R \otimes c_{t-1}^R + i_t \otimes g_t

        o_t &= \sigma\Big(W_{xo} x_t + \sum_{N \in \{L,R\}} W_{ho}^N h_{t-1}^N
        + W_{co} c_t + b_o\Big)

        h_t &= o_t \otimes \tanh(c_t)

    As in eq 10, both forget gates share :math:`W_{xf}`. The input :math:`x` is
    the head vector of every node, e.g. from
    :class:`~graphtree.nn.HeadLexicalization` (eqs 8-9). A leaf runs the same
    equations from zero child states, with its word vector as :math:`x_t`
    (Figure 1c): :math:`c_t = i_t \otimes g_t`.

    With ``lexicalized=False`` this is the unlexicalized baseline (ConTree,
    eqs 4-7): internal nodes take no input (the :math:`W_x` terms vanish and
    :math:`W_{xf}` does not exist); leaves still read their word vector through
    :math:`W_{xi}, W_{xg}, W_{xo}`.

    For ``n_ary = N > 2`` children the sums run over the :math:`N` positions
    and each child :math:`k` has its own forget gate :math:`f_t^k` with its own
    :math:`W_{hf_k}^{N}, W_{cf_k}^{N}, b_{f_k}`; a node with fewer children
    gets zero states in the missing positions, one with more is an error.

    Parameter layout (gate blocks of :math:`d` rows, child blocks of
    :math:`d` columns, :math:`L` = child 0, :math:`R` = child 1):

    * ``W_x`` :math:`[W_{xi}; W_{xf}; W_{xg}; W_{xo}]`, or
      :math:`[W_{xi}; W_{xg}; W_{xo}]` when ``lexicalized=False``;
    * ``W_h`` rows :math:`i, f_1, \ldots, f_N, g, o`, e.g. ``W_h[0:d, d:2d]``
      is :math:`W_{hi}^R`;
    * ``W_c`` rows :math:`i, f_1, \ldots, f_N` (the peepholes on the children's
      cells), ``W_co`` the peephole on :math:`c_t`;
    * ``b`` :math:`[b_i; b_{f_1}; \ldots; b_{f_N}; b_g; b_o]`.

    The binary cell has :math:`17 d^2 + 4 d D + 5 d` parameters
    (:math:`17 d^2 + 3 d D + 5 d` unlexicalized), the counts behind Table 4.

    Args:
        in_channels (int): Size :math:`D` of the head (word) vectors.
        hidden_channels (int): Size :math:`d` of :math:`h` and :math:`c`.
        n_ary (int): Maximum number of children (default 2).
        lexicalized (bool): If ``False``, only leaves read their input
            (the ConTree baseline). Default ``True``.

    Shapes:
        - **input:** head vectors :math:`(|\mathcal{V}|, D)` for every node
          (with ``lexicalized=False`` only the leaves' rows are read), and the
          batch (a ``Data``/``Batch`` or its :class:`~graphtree.schedule.Schedule`).
        - **output:** :math:`(h, c)`, each :math:`(|\mathcal{V}|, d)`, for every node.
    """

    def __init__(self, in_channels: int, hidden_channels: int, n_ary: int = 2, lexicalized: bool = True) -> None:
        super().__init__()
        if n_ary < 1:
            raise ValueError(f"n_ary must be at least 1, got {n_ary}")
        self.in_channels, self.hidden_channels = in_channels, hidden_channels
        self.n_ary, self.lexicalized = n_ary, lexicalized
        self.max_children = n_ary
        self.state_channels = (hidden_channels, hidden_channels)
        D, d, N = in_channels, hidden_channels, n_ary
        self.W_x = Parameter(torch.empty((4 if lexicalized else 3) * d, D))
        self.W_h = Parameter(torch.empty((N + 3) * d, N * d))
        self.W_c = Parameter(torch.empty((N + 1) * d, N * d))
        self.W_co = Parameter(torch.empty(d, d))
        self.b = Parameter(torch.empty((N + 3) * d))
        self.reset_parameters()

    def forward(self, x: Tensor, batch: Any) -> tuple[Tensor, Tensor]:
        """Return ``(h, c)`` for every node of ``batch``."""
        self._check_input(x, self.in_channels)
        # W_x x_t runs level by level, not hoisted into one autograd matmul over
        # all nodes: on CPU the per-level products with prepacked weights run at
        # about twice that matmul's rate, and the engine then sorts and
        # accumulates D-wide rather than 4d-wide input rows. Unlexicalized, only
        # the leaves (level 0) read x at all.
        return self.propagate_levels((x,), batch)

    fused_backward = True  # the engine uses backward_level, the hand-written derivatives below

    def native_level_kernel(self, inputs: tuple[Tensor, ...]) -> tuple[Any, Any] | None:
        """This cell's level math for the engine's compiled level loop (``LexicalizedLevels`` in
        ``graphtree/csrc/peephole_level.cpp``: :meth:`forward_level` and :meth:`backward_level` in C++), with
        the kernels module; ``None`` where the kernels do not apply."""
        return self._compiled_levels(inputs, "LexicalizedLevels", self.W_x, self.W_h, self.W_c, self.W_co, self.b,
                                     self.lexicalized)

    def forward_level(self, inputs: tuple[Tensor, ...], children: Children) -> tuple[tuple[Tensor, Tensor], tuple]:
        """States of one level, and what :meth:`backward_level` needs."""
        (x,) = inputs
        h_ch, c_ch = children.states  # [n, N, d], or [n, 0, d] at the leaves
        if h_ch.size(1) == 0:
            return self._leaf(x)

        n, d, N = h_ch.size(0), self.hidden_channels, self.n_ary
        h_cat, c_cat = h_ch.reshape(n, N * d), c_ch.reshape(n, N * d)
        weights = self.weights
        # Columns i, f_1..f_N, g, o: the W_h and W_c sums over children of all gates at once.
        gates = weights.linear(h_cat, self.W_h, self.b)
        c_terms = weights.linear(c_cat, self.W_c)  # peepholes on the children's cells: i, f_1..f_N
        if self.lexicalized:
            Wx = weights.linear(x, self.W_x)  # i, f, g, o
            gates += torch.cat([Wx[:, :d], *[Wx[:, d:2 * d]] * N, Wx[:, 2 * d:]], dim=1)  # W_xf feeds every f_k
        kernels = native_kernels(gates, c_terms, c_ch)
        if kernels is not None:  # eqs 4, 10, 11 and 1 in two passes over the rows (graphtree/csrc/peephole_level.cpp)
            activated, c = kernels.peephole_level_cell(gates, c_terms, c_ch)
            o, tanh_c, h = kernels.peephole_level_output(gates, weights.linear(c, self.W_co), c)
            return (h, c), ("node", weights, x, h_cat, c_cat, c_ch, activated, None, c, o, tanh_c, kernels)
        gates[:, :(N + 1) * d] += c_terms
        # tanh(z) = 2 sigmoid(2z) - 1: one sigmoid over i, f, g is much faster than sigmoid + tanh on CPU.
        gates[:, (N + 1) * d:(N + 2) * d] *= 2
        activated = torch.sigmoid(gates[:, :(N + 2) * d])
        i, f = activated[:, :d], activated[:, d:(N + 1) * d].view(n, N, d)
        g = 2 * activated[:, (N + 1) * d:] - 1
        c = torch.addcmul((f * c_ch).sum(dim=1), i, g)  # eq 4
        o, tanh_c = self._output(weights, c, gates[:, (N + 2) * d:])
        return (o * tanh_c, c), ("node", weights, x, h_cat, c_cat, c_ch, activated, g, c, o, tanh_c, None)

    def backward_level(self, context: tuple, grad_states: tuple[Tensor, Tensor], grad_params: ParamGrads,
                       needs_input_grad: tuple[bool, ...] = (True,),
                       ) -> tuple[tuple[Tensor | None], tuple[Tensor, Tensor] | tuple]:
        """Hand-written derivatives of :meth:`forward_level`, checked against autograd in the tests."""
        grad_h, grad_c = grad_states
        if context[0] == "leaf":
            return self._leaf_backward(context, grad_h, grad_c, grad_params, needs_input_grad[0]), ()
        _, weights, x, h_cat, c_cat, c_ch, activated, g, c, o, tanh_c, kernels = context
        n, d, N = h_cat.size(0), self.hidden_channels, self.n_ary
        grad_gates, grad_c_direct = self._gate_backward(weights, grad_h, grad_c, c_ch, activated, g, c, o, tanh_c,
                                                        grad_params, kernels)
        grad_if = grad_gates[:, :(N + 1) * d]  # the gates that also read W_c [c^1 .. c^N]
        grad_params.add_outer("W_h", grad_gates, h_cat)
        grad_params.add_outer("W_c", grad_if, c_cat)
        grad_params.add_sum("b", grad_gates)
        grad_h_ch = weights.linear(grad_gates, self.W_h, transpose=True).view(n, N, d)
        grad_c_ch = weights.linear(grad_if, self.W_c, transpose=True).view(n, N, d).add_(grad_c_direct)
        grad_x = None
        if self.lexicalized:
            grad_f = grad_if[:, d:].view(n, N, d).sum(dim=1)  # W_xf x_t feeds every forget gate
            grad_Wx = torch.cat([grad_if[:, :d], grad_f, grad_gates[:, (N + 1) * d:]], dim=1)
            grad_params.add_outer("W_x", grad_Wx, x)
            if needs_input_grad[0]:
                grad_x = weights.linear(grad_Wx, self.W_x, transpose=True)
        return (grad_x,), (grad_h_ch, grad_c_ch)

    def _gate_backward(self, weights: PackedWeights, grad_h: Tensor, grad_c: Tensor, c_ch: Tensor,
                       activated: Tensor, g: Tensor | None, c: Tensor, o: Tensor, tanh_c: Tensor,
                       grad_params: ParamGrads, kernels: ModuleType | None) -> tuple[Tensor, Tensor]:
        """Gradients of the pre-activations ``[i, f_1..f_N, g, o]`` and of the children's cells through eq 4.

        ``activated`` holds ``i, f_1..f_N`` and then ``tanh(g)`` (from the kernels) or the sigmoid that
        ``g`` was made from (PyTorch path); ``c_ch`` is ``[n, N, d]`` (``N = 0`` at the leaves).
        """
        if kernels is not None:
            grad_o = kernels.peephole_level_output_backward(grad_h, o, tanh_c)
            grad_params.add_outer("W_co", grad_o, c)
            grad_c_from_o = weights.linear(grad_o, self.W_co, transpose=True)
            return kernels.peephole_level_cell_backward(grad_c, grad_h, o, tanh_c, grad_c_from_o, grad_o,
                                                        activated, c_ch)
        n, N, d = c_ch.size(0), c_ch.size(1), self.hidden_channels
        grad_o, grad_c = self._output_backward(weights, grad_h, grad_c, c, o, tanh_c, grad_params)
        # Gates i, f_1..f_N in one go: sigma' times what each multiplies in eq 4 (g for i, c^k for f_k).
        i_f = activated[:, :(N + 1) * d]
        grad_if = ((i_f * (1 - i_f) * torch.cat([g, c_ch.reshape(n, N * d)], dim=1)).view(n, N + 1, d)
                   * grad_c.unsqueeze(1)).view(n, (N + 1) * d)
        i = activated[:, :d]
        grad_gates = torch.cat([grad_if, grad_c * i * (1 - g * g), grad_o], dim=1)
        return grad_gates, grad_c.unsqueeze(1) * activated[:, d:(N + 1) * d].view(n, N, d)

    def _output(self, weights: PackedWeights, c: Tensor, pre_o: Tensor) -> tuple[Tensor, Tensor]:
        """o_t (its peephole reads the new cell c_t) and tanh(c_t)."""
        a_o = weights.linear(c, self.W_co)
        a_o += pre_o
        return torch.sigmoid(a_o), fast_tanh(c)

    def _output_backward(self, weights: PackedWeights, grad_h: Tensor, grad_c: Tensor, c: Tensor, o: Tensor,
                         tanh_c: Tensor, grad_params: ParamGrads) -> tuple[Tensor, Tensor]:
        """Gradients of the output gate's pre-activation and of c_t (through h_t, and o_t's peephole)."""
        grad_o = grad_h * tanh_c * o * (1 - o)
        grad_params.add_outer("W_co", grad_o, c)
        grad_c = grad_c + grad_h * o * (1 - tanh_c * tanh_c) + weights.linear(grad_o, self.W_co, transpose=True)
        return grad_o, grad_c

    def _leaf(self, x: Tensor) -> tuple[tuple[Tensor, Tensor], tuple]:
        # No children: no W_h, W_c or forget terms, only gates i, g, o (Figure 1c).
        d, N = self.hidden_channels, self.n_ary
        W_igo = torch.cat([self.W_x[:d], self.W_x[2 * d:]]) if self.lexicalized else self.W_x  # no W_xf
        weights = self.weights
        gates = weights.linear(x, W_igo, torch.cat([self.b[:d], self.b[(N + 1) * d:]]))
        no_children = gates.new_empty(x.size(0), 0, d)
        kernels = native_kernels(gates)
        if kernels is not None:
            activated, c = kernels.peephole_level_cell(gates, None, no_children)
            o, tanh_c, h = kernels.peephole_level_output(gates, weights.linear(c, self.W_co), c)
            return (h, c), ("leaf", weights, W_igo, x, no_children, activated, None, c, o, tanh_c, kernels)
        gates[:, d:2 * d] *= 2  # tanh via sigmoid, as in forward_level
        activated = torch.sigmoid(gates[:, :2 * d])
        i, g = activated[:, :d], 2 * activated[:, d:] - 1
        c = i * g
        o, tanh_c = self._output(weights, c, gates[:, 2 * d:])
        return (o * tanh_c, c), ("leaf", weights, W_igo, x, no_children, activated, g, c, o, tanh_c, None)

    def _leaf_backward(self, context: tuple, grad_h: Tensor, grad_c: Tensor, grad_params: ParamGrads,
                       needs_input_grad: bool) -> tuple[Tensor | None]:
        _, weights, W_igo, x, no_children, activated, g, c, o, tanh_c, kernels = context
        d, N = self.hidden_channels, self.n_ary
        grad_igo, _ = self._gate_backward(weights, grad_h, grad_c, no_children, activated, g, c, o, tanh_c,
                                          grad_params, kernels)
        if not self.lexicalized:
            grad_params.add_outer("W_x", grad_igo, x)
        elif "W_x" in grad_params:  # rows i and g, o of W_x; W_xf gets nothing from the leaves
            grad_params["W_x"][:d].addmm_(grad_igo[:, :d].t(), x)
            grad_params["W_x"][2 * d:].addmm_(grad_igo[:, d:].t(), x)
        if "b" in grad_params:
            grad_b = grad_igo.sum(dim=0)
            grad_params["b"][:d] += grad_b[:d]
            grad_params["b"][(N + 1) * d:] += grad_b[d:]
        return (weights.linear(grad_igo, W_igo, transpose=True) if needs_input_grad else None,)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.hidden_channels}, n_ary={self.n_ary}, "
                f"lexicalized={self.lexicalized})")
