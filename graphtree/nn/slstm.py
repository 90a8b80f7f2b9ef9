"""S-LSTM (Zhu, Sobhani & Guo, 2015, eqs 1-7)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.nn import Linear, Parameter

from ..engine import Children, ParamGrads
from .cell import TreeCell
from .functional import fast_tanh
from .native import native_kernels

__all__ = ["SLSTM"]

LEAF_UNITS = ("embedding", "lstm")


class SLSTM(TreeCell):
    r"""The S-LSTM memory block from `"Long Short-Term Memory Over Recursive
    Structures" <https://arxiv.org/abs/1503.04881>`_ (Zhu et al., 2015),
    eqs 1-7, over binary trees. A node :math:`t` reads the hidden vectors and
    cells of its left child :math:`(h^L_{t-1}, c^L_{t-1})` (``edge_pos`` 0) and
    its right child :math:`(h^R_{t-1}, c^R_{t-1})` (``edge_pos`` 1):

    .. math::
        i_t &= \sigma\left(W^L_{hi} h^L_{t-1} + W^R_{hi} h^R_{t-1}
               + W^L_{ci} c^L_{t-1} + W^R_{ci} c^R_{t-1} + b_i\right)

        f^L_t &= \sigma\left(W^L_{hf_l} h^L_{t-1} + W^R_{hf_l} h^R_{t-1}
               + W^L_{cf_l} c^L_{t-1} + W^R_{cf_l} c^R_{t-1} + b_{f_l}\right)

        f^R_t &= \sigma\left(W^L_{hf_r} h^L_{t-1} + W^R_{hf_r} h^R_{t-1}
               + W^L_{cf_r} c^L_{t-1} + W^R_{cf_r} c^R_{t-1} + b_{f_r}\right)

        x_t &= W^L_{hx} h^L_{t-1} + W^R_{hx} h^R_{t-1} + b_x

        c_t &= f^L_t \odot c^L_{t-1} + f^R_t \odot c^R_{t-1} + i_t \odot \tanh(x_t)

        o_t &= \sigma\left(W^L_{ho} h^L_{t-1} + W^R_{ho} h^R_{t-1} + W_{co} c_t + b_o\right)

        h_t &= o_t \odot \tanh(c_t)

    Internal nodes take no word input: :math:`x_t` is the candidate computed
    from the children (eq 4). The peephole maps :math:`W_{c\cdot}` are full
    :math:`d \times d` matrices (the paper's backward pass, eqs 13-14,
    transposes them), the input and forget gates peek at the children's cells
    and the output gate at the node's own new cell :math:`c_t`. A node with a
    single child gets zero states on the missing side; a node with more than
    two children is an error naming the node.

    Zhu et al. define internal nodes only. The leaf unit is chosen with ``leaf``:

    * ``"embedding"`` (default): :math:`h = x`, :math:`c = 0`; needs
      ``in_channels == hidden_channels``. This is the paper's own setting: the
      S-LSTM block replaces the composition layer of Socher et al.'s (2013)
      recursive network, whose leaves are the word vectors, and §5 speaks of the
      leaves as "word embedding" with the same number of hidden units (100)
      as the memory blocks.
    * ``"lstm"``: the leaf unit of Tai et al.'s constituency Tree-LSTM code,
      :math:`c = W^{(c)} x + b^{(c)}`, :math:`o = \sigma(W^{(o)} x + b^{(o)})`,
      :math:`h = o \odot \tanh(c)`, for any input width.

    Parameters (stacked so that a level costs three matmuls; :math:`g` runs over
    the gates ``i, f_l, f_r, x, o`` of eqs 1-4 and 6, and ``L``/``R`` name the
    child):

    * ``W_h`` :math:`(5d, 2d)`: row block :math:`g`, column block ``L``/``R``
      is :math:`W^L_{hg}` / :math:`W^R_{hg}`, applied to :math:`[h^L, h^R]`.
    * ``W_c`` :math:`(3d, 2d)`: row block ``i, f_l, f_r``, column block
      ``L``/``R`` is :math:`W^L_{cg}` / :math:`W^R_{cg}`, applied to
      :math:`[c^L, c^R]`.
    * ``W_co`` :math:`(d, d)`, and ``b`` :math:`(5d)`: :math:`b_i, b_{f_l},
      b_{f_r}, b_x, b_o`.
    * ``W_leaf`` (``leaf="lstm"`` only): a ``Linear`` with rows
      :math:`W^{(c)}, W^{(o)}`.

    That is :math:`17d^2 + 5d` parameters, plus :math:`2d(F_{in} + 1)` for the
    ``"lstm"`` leaf unit.

    Args:
        in_channels (int): Size of each node input (read at leaves only).
        hidden_channels (int): Memory dimension :math:`d`.
        leaf (str): Leaf unit, ``"embedding"`` or ``"lstm"`` (see above).

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F_{in})`, and the batch
          (a ``Data``/``Batch`` or its :class:`~graphtree.schedule.Schedule`).
        - **output:** :math:`(h, c)`, each :math:`(|\mathcal{V}|, d)`, for every node.
    """

    max_children = 2

    def __init__(self, in_channels: int, hidden_channels: int, leaf: str = "embedding") -> None:
        super().__init__()
        if leaf not in LEAF_UNITS:
            raise ValueError(f"leaf must be one of {LEAF_UNITS}, got {leaf!r}")
        if leaf == "embedding" and in_channels != hidden_channels:
            raise ValueError(f"leaf='embedding' uses the word vector as the leaf's hidden state (h = x), so "
                             f"in_channels must equal hidden_channels; got {in_channels} and {hidden_channels}. "
                             "Use leaf='lstm' for a learned leaf unit of any input width.")
        self.in_channels, self.hidden_channels, self.leaf = in_channels, hidden_channels, leaf
        self.state_channels = (hidden_channels, hidden_channels)
        d = hidden_channels
        self.W_h = Parameter(torch.empty(5 * d, 2 * d))
        self.W_c = Parameter(torch.empty(3 * d, 2 * d))
        self.W_co = Parameter(torch.empty(d, d))
        self.b = Parameter(torch.empty(5 * d))
        self.W_leaf = Linear(in_channels, 2 * d) if leaf == "lstm" else None
        self.reset_parameters()

    def forward(self, x: Tensor, batch: Any) -> tuple[Tensor, Tensor]:
        """Return ``(h, c)`` for every node of ``batch``."""
        self._check_input(x, self.in_channels)
        # Only leaves read x, and level 0 holds exactly the leaves, so the leaf
        # unit is one matmul inside the first level rather than one over all nodes.
        return self.propagate_levels((x,), batch)

    fused_backward = True  # the engine uses backward_level, the hand-written derivatives below

    def native_level_kernel(self, inputs: tuple[Tensor, ...]) -> tuple[Any, Any] | None:
        """This cell's level math for the engine's compiled level loop (``SLSTMLevels`` in
        ``graphtree/csrc/peephole_level.cpp``: :meth:`forward_level` and :meth:`backward_level` in C++), with
        the kernels module; ``None`` where the kernels do not apply."""
        leaf = (self.W_leaf.weight, self.W_leaf.bias) if self.W_leaf is not None else (None, None)
        return self._compiled_levels(inputs, "SLSTMLevels", self.W_h, self.W_c, self.W_co, self.b, *leaf)

    def forward_level(self, inputs: tuple[Tensor, ...], children: Children) -> tuple[tuple[Tensor, Tensor], tuple]:
        """States of one level, and what :meth:`backward_level` needs."""
        (x,) = inputs
        h_LR, c_LR = children.states  # [n, 2, d], or [n, 0, d] at the leaves
        if h_LR.size(1) == 0:
            return self._leaf(x)

        n, d = h_LR.size(0), self.hidden_channels
        h_cat, c_cat = h_LR.reshape(n, 2 * d), c_LR.reshape(n, 2 * d)
        weights = self.weights
        h_terms = weights.linear(h_cat, self.W_h, self.b)  # all W_h· h + b of eqs 1-4, 6
        c_terms = weights.linear(c_cat, self.W_c)  # peepholes on the children's cells, eqs 1-3
        kernels = native_kernels(h_terms, c_terms, c_LR)
        if kernels is not None:  # eqs 1-7 below, in two passes over the rows (graphtree/csrc/peephole_level.cpp)
            activated, c_t = kernels.peephole_level_cell(h_terms, c_terms, c_LR)
            o_t, tanh_c, h_t = kernels.peephole_level_output(h_terms, weights.linear(c_t, self.W_co), c_t)
            return (h_t, c_t), ("native", kernels, weights, h_cat, c_cat, c_LR, activated, c_t, o_t, tanh_c)
        gates = torch.sigmoid(h_terms[:, :3 * d] + c_terms)
        i_t, f_L, f_R = gates[:, :d], gates[:, d:2 * d], gates[:, 2 * d:]  # eqs 1-3
        tanh_x = fast_tanh(h_terms[:, 3 * d:4 * d])  # x_t of eq 4 enters eq 5 through tanh
        c_L, c_R = c_LR[:, 0], c_LR[:, 1]
        c_t = f_L * c_L + f_R * c_R + i_t * tanh_x  # eq 5
        o_t = torch.sigmoid(h_terms[:, 4 * d:] + weights.linear(c_t, self.W_co))  # eq 6: W_co peeks at the new cell
        tanh_c = fast_tanh(c_t)
        h_t = o_t * tanh_c  # eq 7
        return (h_t, c_t), ("node", weights, h_cat, c_cat, c_L, c_R, i_t, f_L, f_R, tanh_x, c_t, o_t, tanh_c)

    def backward_level(self, context: tuple, grad_states: tuple[Tensor, Tensor], grad_params: ParamGrads,
                       needs_input_grad: tuple[bool, ...] = (True,)) -> tuple[tuple[Tensor | None], tuple]:
        """Hand-written derivatives of :meth:`forward_level`, checked against autograd in the tests."""
        grad_h, grad_c = grad_states
        if context[0] == "leaf":
            return self._leaf_backward(context, grad_h, grad_c, grad_params, needs_input_grad[0]), ()
        if context[0] == "native":  # the same derivatives, from the compiled kernels
            _, kernels, weights, h_cat, c_cat, c_LR, activated, c_t, o_t, tanh_c = context
            grad_o = kernels.peephole_level_output_backward(grad_h, o_t, tanh_c)
            grad_c_from_o = weights.linear(grad_o, self.W_co, transpose=True)
            grad_h_terms, grad_c_direct = kernels.peephole_level_cell_backward(
                grad_c, grad_h, o_t, tanh_c, grad_c_from_o, grad_o, activated, c_LR)
        else:
            _, weights, h_cat, c_cat, c_L, c_R, i_t, f_L, f_R, tanh_x, c_t, o_t, tanh_c = context
            grad_o = grad_h * tanh_c * o_t * (1 - o_t)
            grad_c = (grad_c + grad_h * o_t * (1 - tanh_c * tanh_c)
                      + weights.linear(grad_o, self.W_co, transpose=True))
            grad_h_terms = torch.cat([grad_c * tanh_x * i_t * (1 - i_t), grad_c * c_L * f_L * (1 - f_L),
                                      grad_c * c_R * f_R * (1 - f_R), grad_c * i_t * (1 - tanh_x * tanh_x),
                                      grad_o], dim=1)
            grad_c_direct = torch.stack([grad_c * f_L, grad_c * f_R], dim=1)  # through eq 5
        n, d = h_cat.size(0), self.hidden_channels
        grad_ifr = grad_h_terms[:, :3 * d]  # the gates that also read W_c [c^L, c^R]
        grad_params.add_outer("W_co", grad_o, c_t)
        grad_params.add_outer("W_h", grad_h_terms, h_cat)
        grad_params.add_outer("W_c", grad_ifr, c_cat)
        grad_params.add_sum("b", grad_h_terms)
        grad_h_LR = weights.linear(grad_h_terms, self.W_h, transpose=True).view(n, 2, d)
        grad_c_LR = weights.linear(grad_ifr, self.W_c, transpose=True).view(n, 2, d).add_(grad_c_direct)
        return (None,), (grad_h_LR, grad_c_LR)

    def _leaf(self, x: Tensor) -> tuple[tuple[Tensor, Tensor], tuple]:
        if self.W_leaf is None:
            return (x, torch.zeros_like(x)), ("leaf",)
        weights = self.weights
        gates = weights.linear(x, self.W_leaf.weight, self.W_leaf.bias)
        c, o = gates[:, :self.hidden_channels], torch.sigmoid(gates[:, self.hidden_channels:])
        tanh_c = fast_tanh(c)
        return (o * tanh_c, c), ("leaf", x, o, tanh_c, weights)

    def _leaf_backward(self, context: tuple, grad_h: Tensor, grad_c: Tensor, grad_params: ParamGrads,
                       needs_input_grad: bool) -> tuple[Tensor | None]:
        if self.W_leaf is None:
            return (grad_h,)  # h = x; c = 0 does not depend on x
        x, o, tanh_c, weights = context[1:]
        grad_c = grad_c + grad_h * o * (1 - tanh_c * tanh_c)
        grad_gates = torch.cat([grad_c, grad_h * tanh_c * o * (1 - o)], dim=1)
        grad_params.add_outer("W_leaf.weight", grad_gates, x)
        grad_params.add_sum("W_leaf.bias", grad_gates)
        return (weights.linear(grad_gates, self.W_leaf.weight, transpose=True) if needs_input_grad else None,)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.in_channels}, {self.hidden_channels}, leaf={self.leaf!r})"
