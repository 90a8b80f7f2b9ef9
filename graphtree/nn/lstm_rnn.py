"""LSTM-RNN composition (Le & Zuidema, 2015, sections 3-4)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Parameter

from ..engine import Children, ParamGrads
from .cell import TreeCell
from .functional import fast_tanh
from .native import native_kernels

__all__ = ["LSTMRNN"]


def _tanh_chain(grad: Tensor, g: Tensor) -> Tensor:
    return torch.addcmul(grad, grad * g, g, value=-1)  # tanh' = 1 - tanh^2


def _sigmoid_chain(grad: Tensor, g: Tensor) -> Tensor:
    grad_g = grad * g
    return torch.addcmul(grad_g, grad_g, g, value=-1)  # sigmoid' = sigmoid (1 - sigmoid)


def _softsign_chain(grad: Tensor, g: Tensor) -> Tensor:
    return grad * (1 - g.abs()).square()  # softsign'(v) = 1 / (1 + |v|)^2 = (1 - |softsign(v)|)^2


# The activation's number in the compiled kernels (graphtree/csrc/lstm_rnn_level.cpp).
ACTIVATION_CODES = {"tanh": 0, "softsign": 1, "sigmoid": 2}

# g, and grad -> grad * g'(v) written in terms of g's output (which is all backward keeps).
ACTIVATIONS: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[Tensor, Tensor], Tensor]]] = {
    "tanh": (fast_tanh, _tanh_chain),
    "softsign": (F.softsign, _softsign_chain),
    "sigmoid": (torch.sigmoid, _sigmoid_chain),
}


class LSTMRNN(TreeCell):
    r"""The LSTM-RNN composition from `"Compositional Distributional Semantics
    with Long Short Term Memory" <https://aclanthology.org/S15-1002/>`_
    (Le & Zuidema, 2015), sections 3-4. A parent :math:`p` with first child
    :math:`x` (``edge_pos`` 0) and second child :math:`y` (``edge_pos`` 1), of
    outputs :math:`\mathbf{x}, \mathbf{y}` and memories :math:`\mathbf{c}_x,
    \mathbf{c}_y`, computes

    .. math::
        \mathbf{i}_1 &= \sigma(\mathbf{W}_{i1} \mathbf{x} + \mathbf{W}_{i2} \mathbf{y}
            + \mathbf{W}_{ci1} \mathbf{c}_x + \mathbf{W}_{ci2} \mathbf{c}_y + \mathbf{b}_i)

        \mathbf{i}_2 &= \sigma(\mathbf{W}_{i1} \mathbf{y} + \mathbf{W}_{i2} \mathbf{x}
            + \mathbf{W}_{ci1} \mathbf{c}_y + \mathbf{W}_{ci2} \mathbf{c}_x + \mathbf{b}_i)

        \mathbf{f}_1 &= \sigma(\mathbf{W}_{f1} \mathbf{x} + \mathbf{W}_{f2} \mathbf{y}
            + \mathbf{W}_{cf1} \mathbf{c}_x + \mathbf{W}_{cf2} \mathbf{c}_y + \mathbf{b}_f)

        \mathbf{f}_2 &= \sigma(\mathbf{W}_{f1} \mathbf{y} + \mathbf{W}_{f2} \mathbf{x}
            + \mathbf{W}_{cf1} \mathbf{c}_y + \mathbf{W}_{cf2} \mathbf{c}_x + \mathbf{b}_f)

        \mathbf{c}_p &= \mathbf{f}_1 \odot \mathbf{c}_x + \mathbf{f}_2 \odot \mathbf{c}_y
            + g(\mathbf{W}_{c1} \mathbf{x} \odot \mathbf{i}_1 + \mathbf{W}_{c2} \mathbf{y} \odot \mathbf{i}_2
            + \mathbf{b}_c)

        \mathbf{o} &= \sigma(\mathbf{W}_{o1} \mathbf{x} + \mathbf{W}_{o2} \mathbf{y}
            + \mathbf{W}_{co} \mathbf{c}_p + \mathbf{b}_o)

        \mathbf{p} &= \mathbf{o} \odot g(\mathbf{c}_p)

    with one input gate and one forget gate per child (the paper's
    :math:`\mathbf{W}_{co} \mathbf{c}` is read as the parent's new memory
    :math:`\mathbf{c}_p`, as in its LSTM of section 2.3); :math:`\mathbf{i}_2,
    \mathbf{f}_2` reuse the weights of :math:`\mathbf{i}_1, \mathbf{f}_1` with
    the children swapped. :math:`g` is ``activation`` (tanh, softsign or
    sigmoid); the gates are always logistic. A leaf :math:`w` has output
    :math:`\mathbf{w}` (its word vector, the node input) and memory
    :math:`\mathbf{c}_w = 0`; internal nodes take no input. Leaf and inner
    weights are untied (section 4): the maps :math:`\mathbf{W}_{i1}, \dots,
    \mathbf{W}_{o2}` applied to a child's output come from one set when that
    child is a leaf and from another when it is an inner node. The peephole maps
    :math:`\mathbf{W}_{ci\cdot}, \mathbf{W}_{cf\cdot}` only ever see inner
    memories (a leaf's is 0), and :math:`\mathbf{W}_{co}` sees the node's own
    memory, so each exists once. All maps are full matrices, as the paper's
    complexity count (section 4.1) implies. A node with one child gets zero
    output and memory on the missing side; more than two children is an error
    naming the node.

    **How it runs.** Besides :math:`(\mathbf{p}, \mathbf{c}_p)` every node
    carries a third state :math:`\mathbf{m}`: its output and memory already
    projected by every map a parent will apply to them, in eight blocks of
    :math:`d`,

    .. math::
        \mathbf{m}_u = [\mathbf{W}_{i1} \mathbf{u} + \mathbf{W}_{ci1} \mathbf{c}_u,\;
        \mathbf{W}_{f1} \mathbf{u} + \mathbf{W}_{cf1} \mathbf{c}_u,\;
        \mathbf{W}_{i2} \mathbf{u} + \mathbf{W}_{ci2} \mathbf{c}_u,\;
        \mathbf{W}_{f2} \mathbf{u} + \mathbf{W}_{cf2} \mathbf{c}_u,\;
        \mathbf{W}_{c1} \mathbf{u},\; \mathbf{W}_{o1} \mathbf{u},\;
        \mathbf{W}_{c2} \mathbf{u},\; \mathbf{W}_{o2} \mathbf{u}]

    computed with the leaf set for all leaves in one matmul at the first level,
    and with the inner set for each inner node at its own level. A parent then
    only adds blocks of its children's :math:`\mathbf{m}` (e.g.
    :math:`\mathbf{i}_2 = \sigma(\mathbf{m}^{i1}_y + \mathbf{m}^{i2}_x + \mathbf{b}_i)`,
    naming each block by its map), so the leaf/inner choice costs no gather and
    the weight sharing of :math:`\mathbf{i}_2, \mathbf{f}_2` is exact by
    construction. A child's parent reads only six of the blocks (the
    :math:`\mathbf{W}_{c\cdot}, \mathbf{W}_{o\cdot}` of the child's own position),
    and the compiled level loop computes only those: the schedule groups each
    level's rows by their position under their parents
    (:attr:`~graphtree.schedule.LevelPlan.position_groups`), so the first
    children of a level get :math:`\mathbf{W}_{i1} .. \mathbf{W}_{o1}` and the
    second children :math:`\mathbf{W}_{i1} .. \mathbf{W}_{f2}, \mathbf{W}_{c2},
    \mathbf{W}_{o2}` in one product each, roots get none, and a DAG node that is
    a first and a second child gets all eight. That is section 4.1's
    :math:`17 N d^2` multiply-adds for a binary tree of :math:`N` leaves; the
    Python level loop computes all eight blocks everywhere (:math:`21 N d^2`).
    :math:`\mathbf{m}` is internal and is not returned.

    Parameters:

    * ``W_leaf`` (applied to leaf children) and ``W_inner`` (applied to inner
      children), each :math:`(8d, d)`: row blocks
      :math:`\mathbf{W}_{i1}, \mathbf{W}_{f1}, \mathbf{W}_{i2}, \mathbf{W}_{f2},
      \mathbf{W}_{c1}, \mathbf{W}_{o1}, \mathbf{W}_{c2}, \mathbf{W}_{o2}`.
    * ``W_cell`` :math:`(5d, d)`: row blocks :math:`\mathbf{W}_{ci1},
      \mathbf{W}_{cf1}, \mathbf{W}_{ci2}, \mathbf{W}_{cf2}, \mathbf{W}_{co}`.
    * ``b`` :math:`(4d)`: :math:`\mathbf{b}_i, \mathbf{b}_f, \mathbf{b}_c, \mathbf{b}_o`.

    That is :math:`21d^2 + 4d` parameters.

    Args:
        in_channels (int): Size of the word vectors :math:`d_w`. Must equal
            ``hidden_channels``: a leaf's output is its word vector, and every
            node's output :math:`h` has one width.
        hidden_channels (int): Dimension :math:`d` of outputs and memories.
        activation (str): :math:`g`, one of ``"tanh"`` (default), ``"softsign"``
            or ``"sigmoid"``.

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, d)` (read at leaves
          only), and the batch (a ``Data``/``Batch`` or its
          :class:`~graphtree.schedule.Schedule`).
        - **output:** :math:`(h, c)` = :math:`(\mathbf{p}, \mathbf{c}_p)`, each
          :math:`(|\mathcal{V}|, d)`, for every node (leaves included).
    """

    max_children = 2

    def __init__(self, in_channels: int, hidden_channels: int, activation: str = "tanh") -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {tuple(ACTIVATIONS)}, got {activation!r}")
        if in_channels != hidden_channels:
            raise ValueError(f"LSTMRNN needs in_channels == hidden_channels (got {in_channels} and "
                             f"{hidden_channels}): a leaf's output is its word vector itself (Le & Zuidema, "
                             "section 4), and leaf and inner outputs share one h tensor. Project the word "
                             "vectors to hidden_channels first if they differ.")
        self.in_channels, self.hidden_channels, self.activation = in_channels, hidden_channels, activation
        self.g, self._chain = ACTIVATIONS[activation]
        d = hidden_channels
        self.state_channels = (d, d, 8 * d)  # (p, c_p, m)
        self.output_states = 2  # m is internal: the engine neither returns it nor takes a gradient for it
        self.W_leaf = Parameter(torch.empty(8 * d, in_channels))
        self.W_inner = Parameter(torch.empty(8 * d, d))
        self.W_cell = Parameter(torch.empty(5 * d, d))
        self.b = Parameter(torch.empty(4 * d))
        self.reset_parameters()

    def forward(self, x: Tensor, batch: Any) -> tuple[Tensor, Tensor]:
        """Return ``(h, c)`` for every node of ``batch`` (``h`` is the node output :math:`\\mathbf{p}`)."""
        self._check_input(x, self.in_channels)
        p, c = self.propagate_levels((x,), batch)
        return p, c

    fused_backward = True  # the engine uses backward_level, the hand-written derivatives below

    def native_level_kernel(self, inputs: tuple[Tensor, ...]) -> tuple[Any, Any] | None:
        """This cell's level math for the engine's compiled level loop (``LSTMRNNLevels`` in
        ``graphtree/csrc/lstm_rnn_level.cpp``: :meth:`forward_level` and :meth:`backward_level` in C++), with
        the kernels module; ``None`` where the kernels do not apply."""
        return self._compiled_levels(inputs, "LSTMRNNLevels", self.W_leaf, self.W_inner, self.W_cell, self.b,
                                     ACTIVATION_CODES[self.activation])

    def forward_level(self, inputs: tuple[Tensor, ...],
                      children: Children) -> tuple[tuple[Tensor, Tensor, Tensor], tuple]:
        """States ``(p, c_p, m)`` of one level, and what :meth:`backward_level` needs."""
        (x,) = inputs
        _, c_xy, m_xy = children.states  # [n, 2, ·], or [n, 0, ·] at the leaves
        weights = self.weights
        if m_xy.size(1) == 0:
            # Leaves: output w, memory 0, so m is the leaf set applied to w alone.
            return (x, torch.zeros_like(x), weights.linear(x, self.W_leaf)), ("leaf", weights, x)

        n, d = m_xy.size(0), self.hidden_channels
        kernels = native_kernels(m_xy, c_xy)
        if kernels is not None:  # the equations below, in two passes over the rows (graphtree/csrc/lstm_rnn_level.cpp)
            kind = ACTIVATION_CODES[self.activation]
            gates, g_a, c_p = kernels.lstm_rnn_level_cell(m_xy, c_xy, self.b, kind)
            cell_terms = weights.linear(c_p, self.W_cell)
            o, g_c, p = kernels.lstm_rnn_level_output(m_xy, cell_terms, c_p, self.b, kind)
            m_p = weights.linear(p, self.W_inner)
            m_p[:, :4 * d] += cell_terms[:, :4 * d]
            return (p, c_p, m_p), ("native", weights, c_xy, gates, m_xy, g_a, c_p, o, g_c, p, kernels)
        g = self.g
        b_if, b_c, b_o = self.b.split((2 * d, d, d))
        # Row k of [n, 2, ·] is child k: "first" holds its (W_i1, W_f1) blocks, "second"
        # its (W_i2, W_f2) blocks, "own" its (W_c1, W_o1, W_c2, W_o2) blocks.
        first, second, own = m_xy.split((2 * d, 2 * d, 4 * d), dim=-1)
        # Child k's gates (i_k, f_k) add its own first blocks to the other child's
        # second blocks, so i_2 and f_2 reuse W_i1, W_f1 with the children swapped.
        gates = torch.sigmoid(first + second.flip(1) + b_if)  # [n, 2, 2d]: (i_k, f_k) per child
        i, f = gates[..., :d], gates[..., d:]
        # W_c1, W_o1 apply to the first child, W_c2, W_o2 to the second: the diagonal of (child, position).
        Wco_u = own.reshape(n, 2, 2, 2 * d).diagonal(dim1=1, dim2=2).transpose(1, 2)
        Wc_u, Wo_u = Wco_u[..., :d], Wco_u[..., d:]
        g_a = g((Wc_u * i).sum(dim=1) + b_c)
        c_p = (f * c_xy).sum(dim=1) + g_a
        # W_ci1 .. W_cf2 feed this node's m; W_co feeds its own output gate.
        cell_terms = weights.linear(c_p, self.W_cell)
        o = torch.sigmoid(Wo_u.sum(dim=1) + cell_terms[:, 4 * d:] + b_o)
        g_c = g(c_p)
        p = o * g_c
        m_p = weights.linear(p, self.W_inner)
        m_p[:, :4 * d] += cell_terms[:, :4 * d]
        return (p, c_p, m_p), ("node", weights, c_xy, gates, Wc_u, g_a, c_p, o, g_c, p)

    def backward_level(self, context: tuple, grad_states: tuple[Tensor, Tensor, Tensor], grad_params: ParamGrads,
                       needs_input_grad: tuple[bool, ...] = (True,),
                       ) -> tuple[tuple[Tensor | None], tuple[Tensor | None, Tensor, Tensor] | tuple]:
        """Hand-written derivatives of :meth:`forward_level`, checked against autograd in the tests."""
        grad_p, grad_c, grad_m = grad_states
        if context[0] == "leaf":
            _, weights, x = context
            grad_params.add_outer("W_leaf", grad_m, x)
            if not needs_input_grad[0]:
                return (None,), ()
            # A leaf's memory is the constant 0, so grad_c does not reach x.
            return (grad_p + weights.linear(grad_m, self.W_leaf, transpose=True),), ()

        weights, p = context[1], context[9]
        grad_params.add_outer("W_inner", grad_m, p)
        grad_p = weights.linear(grad_m, self.W_inner, transpose=True).add_(grad_p)
        if context[0] == "native":  # the forward pass ran on the compiled kernels: so do its derivatives
            return self._native_backward(context, grad_p, grad_c, grad_m, grad_params)
        _, weights, c_xy, gates, Wc_u, g_a, c_p, o, g_c, p = context
        n, d = c_xy.size(0), self.hidden_channels
        chain = self._chain
        grad_o = grad_p * g_c
        grad_o = torch.addcmul(grad_o, grad_o, o, value=-1).mul_(o)  # sigma' = o (1 - o)
        # The peephole blocks of m and the output gate's W_co term are one product with W_cell.
        grad_cell = torch.cat([grad_m[:, :4 * d], grad_o], dim=1)
        grad_params.add_outer("W_cell", grad_cell, c_p)
        grad_c = weights.linear(grad_cell, self.W_cell, transpose=True).add_(grad_c).add_(chain(grad_p * o, g_c))
        grad_a = chain(grad_c, g_a)
        grad_gates = torch.cat([grad_a.unsqueeze(1) * Wc_u, grad_c.unsqueeze(1) * c_xy], dim=-1).mul_(gates)
        grad_gates = torch.addcmul(grad_gates, grad_gates, gates, value=-1)  # sigma' = s (1 - s)
        grad_params.add_sum("b", torch.cat([grad_gates.sum(dim=1), grad_a, grad_o], dim=1))
        # Child k's m: its first blocks feed its own gates, its second blocks the sibling's,
        # and of its own blocks only the (W_c, W_o) pair of its position is read.
        grad_m_xy = torch.cat([grad_gates, grad_gates.flip(1), grad_m.new_zeros(n, 2, 4 * d)], dim=-1)
        own = grad_m_xy[..., 4 * d:].view(n, 2, 2, 2 * d).diagonal(dim1=1, dim2=2).transpose(1, 2)
        torch.mul(grad_a.unsqueeze(1), gates[..., :d], out=own[..., :d])
        own[..., d:] = grad_o.unsqueeze(1)
        # The children's outputs p reach this node only through their m: no gradient for them here.
        return (None,), (None, grad_c.unsqueeze(1) * gates[..., d:], grad_m_xy)

    def _native_backward(self, context: tuple, grad_p: Tensor, grad_c: Tensor, grad_m: Tensor,
                         grad_params: ParamGrads) -> tuple[tuple[None], tuple[None, Tensor, Tensor]]:
        """:meth:`backward_level` below ``W_inner``, on the compiled kernels."""
        _, weights, c_xy, gates, m_xy, g_a, c_p, o, g_c, _, kernels = context
        grad_cell = kernels.lstm_rnn_level_output_backward(grad_m, grad_p, o, g_c)  # peephole blocks, then o's
        grad_params.add_outer("W_cell", grad_cell, c_p)
        grad_c_from_cell = weights.linear(grad_cell, self.W_cell, transpose=True)
        grad_b, grad_m_xy, grad_c_xy = kernels.lstm_rnn_level_cell_backward(
            grad_c, grad_c_from_cell, grad_p, grad_cell, o, g_c, g_a, gates, m_xy, c_xy,
            ACTIVATION_CODES[self.activation])
        grad_params.add_sum("b", grad_b)
        return (None,), (None, grad_c_xy, grad_m_xy)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.hidden_channels}, "
                f"activation={self.activation!r})")
