"""LSTM-RNN composition (Le & Zuidema, 2015, sections 3-4)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Parameter

from ..engine import Children
from ..errors import InvalidArgumentError
from .cell import TreeCell

if TYPE_CHECKING:
    from ..schedule import LevelPlan

__all__ = ["LSTMRNN"]

# The gates' activation as the compiled kernel (LSTMRNNLevels) numbers it.
KERNEL_ACTIVATIONS = {"tanh": 0, "softsign": 1, "sigmoid": 2}


# g, the activation of the memory and the output (the gates are always logistic).
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"tanh": torch.tanh, "softsign": F.softsign,
                                                      "sigmoid": torch.sigmoid}


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
          only), edge indices
          :math:`(2, |\mathcal{E}|)` (child :math:`\to` parent) and positions
          :math:`(|\mathcal{E}|)`, or the ``Data``/``Batch`` (with its ``schedule``, if it carries one),
          or a :class:`~graphtree.schedule.Schedule`.
        - **output:** :math:`(h, c)` = :math:`(\mathbf{p}, \mathbf{c}_p)`, each
          :math:`(|\mathcal{V}|, d)`, for every node (leaves included).
    """

    def __init__(self, in_channels: int, hidden_channels: int, activation: str = "tanh") -> None:
        # m is internal (output_states=2): the engine neither returns it nor takes a gradient for it.
        d = hidden_channels
        super().__init__(state_channels=(d, d, 8 * d), max_children=2, output_states=2)  # (p, c_p, m)
        if activation not in ACTIVATIONS:
            raise InvalidArgumentError(f"activation must be one of {tuple(ACTIVATIONS)}, got {activation!r}")
        if in_channels != hidden_channels:
            raise InvalidArgumentError(f"LSTMRNN needs in_channels == hidden_channels (got {in_channels} and "
                                       f"{hidden_channels}): a leaf's output is its word vector itself (Le & Zuidema, "
                                       "section 4), and leaf and inner outputs share one h tensor. Project the word "
                                       "vectors to hidden_channels first if they differ.")
        self.in_channels, self.hidden_channels, self.activation = in_channels, hidden_channels, activation
        self.g = ACTIVATIONS[activation]
        self.W_leaf = Parameter(torch.empty(8 * d, in_channels))
        self.W_inner = Parameter(torch.empty(8 * d, d))
        self.W_cell = Parameter(torch.empty(5 * d, d))
        self.b = Parameter(torch.empty(4 * d))
        self.reset_parameters()

    def compiled_weights(self) -> tuple[Tensor, ...]:
        """The weights of ``LSTMRNNLevels``, in its order."""
        return self.W_leaf, self.W_inner, self.W_cell, self.b

    def level_kernel(self, kernels: Any, plan: LevelPlan, weights: Sequence[Tensor]) -> Any:
        """The fast path: ``LSTMRNNLevels`` (``csrc/lstm_rnn_level.cpp``), the gates' activation by its number."""
        return kernels.LSTMRNNLevels(*weights, KERNEL_ACTIVATIONS[self.activation])

    def reset_parameters(self) -> None:
        """Every parameter, weights and biases of the layers inside too, uniform in :math:`\\pm 1/\\sqrt{d}`
        (``d = hidden_channels``), as ``torch.nn.LSTM`` initializes."""
        self._uniform_everywhere(self.hidden_channels)

    def forward(self, x: Tensor, edge_index: Any, edge_pos: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Return ``(h, c)`` for every node (``h`` is the node output :math:`\\mathbf{p}`); ``edge_index``:
        child -> parent edges (with ``edge_pos``: 0 for the first child, 1 for the second) or the
        ``Data``/``Batch``."""
        self._check_features(x, self.in_channels, edge_index)
        p, c = self.propagate(edge_index, x=x, edge_pos=edge_pos)  # only the leaves read x
        return p, c

    def update(self, children: Children, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The equations above for one level's nodes: their ``(p, c_p, m)``."""
        _, c_xy, m_xy = children.states  # [n, 2, ·]: child x in slot 0, child y in slot 1
        if m_xy.size(1) == 0:  # a leaf w: output w, memory 0, maps from the leaf set
            return x, torch.zeros_like(x), x @ self.W_leaf.t()
        d, g = self.hidden_channels, self.g
        b_i, b_f, b_c, b_o = self.b.split(d)
        c_x, c_y = c_xy[:, 0], c_xy[:, 1]
        # Each child u's m: W_i1 u + W_ci1 c_u, W_f1 u + W_cf1 c_u, W_i2 u + W_ci2 c_u, W_f2 u + W_cf2 c_u,
        # W_c1 u, W_o1 u, W_c2 u, W_o2 u (see "How it runs").
        i1x, f1x, i2x, f2x, c1x, o1x, _, _ = m_xy[:, 0].split(d, dim=1)
        i1y, f1y, i2y, f2y, _, _, c2y, o2y = m_xy[:, 1].split(d, dim=1)
        i_1 = torch.sigmoid(i1x + i2y + b_i)
        i_2 = torch.sigmoid(i1y + i2x + b_i)  # the weights of i_1, the children swapped
        f_1 = torch.sigmoid(f1x + f2y + b_f)
        f_2 = torch.sigmoid(f1y + f2x + b_f)
        c_p = f_1 * c_x + f_2 * c_y + g(c1x * i_1 + c2y * i_2 + b_c)
        peepholes, W_co_c = (c_p @ self.W_cell.t()).split((4 * d, d), dim=1)
        o = torch.sigmoid(o1x + o2y + W_co_c + b_o)
        p = o * g(c_p)
        m_p = p @ self.W_inner.t() + F.pad(peepholes, (0, 4 * d))  # this node's maps, for its parent
        return p, c_p, m_p

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.hidden_channels}, "
                f"activation={self.activation!r})")
