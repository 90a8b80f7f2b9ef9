"""S-LSTM (Zhu, Sobhani & Guo, 2015, eqs 1-7)."""

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
        - **input:** node features :math:`(|\mathcal{V}|, F_{in})`, edge indices
          :math:`(2, |\mathcal{E}|)` (child :math:`\to` parent) and positions
          :math:`(|\mathcal{E}|)`, or the ``Data``/``Batch`` (with its ``schedule``, if it carries one),
          or a :class:`~graphtree.schedule.Schedule`.
        - **output:** :math:`(h, c)`, each :math:`(|\mathcal{V}|, d)`, for every node.
    """

    def __init__(self, in_channels: int, hidden_channels: int, leaf: str = "embedding") -> None:
        super().__init__(state_channels=(hidden_channels, hidden_channels), max_children=2)
        if leaf not in LEAF_UNITS:
            raise InvalidArgumentError(f"leaf must be one of {LEAF_UNITS}, got {leaf!r}")
        if leaf == "embedding" and in_channels != hidden_channels:
            raise InvalidArgumentError(
                f"leaf='embedding' uses the word vector as the leaf's hidden state (h = x), so "
                f"in_channels must equal hidden_channels; got {in_channels} and {hidden_channels}. "
                "Use leaf='lstm' for a learned leaf unit of any input width.")
        self.in_channels, self.hidden_channels, self.leaf = in_channels, hidden_channels, leaf
        d = hidden_channels
        self.W_h = Parameter(torch.empty(5 * d, 2 * d))
        self.W_c = Parameter(torch.empty(3 * d, 2 * d))
        self.W_co = Parameter(torch.empty(d, d))
        self.b = Parameter(torch.empty(5 * d))
        self.W_leaf = Linear(in_channels, 2 * d) if leaf == "lstm" else None
        self.reset_parameters()

    def compiled_weights(self) -> tuple[Tensor, ...]:
        """The weights of ``SLSTMLevels``, in its order, the leaf LSTM's last where the leaves have one."""
        leaf = (self.W_leaf.weight, self.W_leaf.bias) if self.W_leaf is not None else ()
        return self.W_h, self.W_c, self.W_co, self.b, *leaf

    def level_kernel(self, kernels: Any, plan: LevelPlan, weights: Sequence[Tensor]) -> Any:
        """The fast path: ``SLSTMLevels`` (``csrc/peephole_level.cpp``), which takes the weights as they are."""
        return kernels.SLSTMLevels(*weights)

    def reset_parameters(self) -> None:
        """Every parameter, weights and biases of the layers inside too, uniform in :math:`\\pm 1/\\sqrt{d}`
        (``d = hidden_channels``), as ``torch.nn.LSTM`` initializes."""
        self._uniform_everywhere(self.hidden_channels)

    def forward(self, x: Tensor, edge_index: Any, edge_pos: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Return ``(h, c)`` for every node; ``edge_index``: child -> parent edges (with ``edge_pos``: 0 for a
        left child, 1 for a right one) or the ``Data``/``Batch``."""
        self._check_features(x, self.in_channels, edge_index)
        return self.propagate(edge_index, x=x, edge_pos=edge_pos)  # only the leaves read x

    def update(self, children: Children, x: Tensor) -> tuple[Tensor, Tensor]:
        """Eqs 1-7 for one level's nodes; the leaf unit at the leaves."""
        h_LR, c_LR = children.states  # [n, 2, d]: left child in slot 0, right in slot 1; [n, 0, d] at leaves
        if h_LR.size(1) == 0:
            return self._leaf_unit(x)
        n, d = x.size(0), self.hidden_channels
        c_L, c_R = c_LR[:, 0], c_LR[:, 1]
        # Row blocks i, f_l, f_r, x, o of W_h [h^L, h^R] + b, and i, f_l, f_r of the peepholes W_c [c^L, c^R].
        z_i, z_fl, z_fr, z_x, z_o = torch.addmm(self.b, h_LR.reshape(n, 2 * d), self.W_h.t()).split(d, dim=1)
        p_i, p_fl, p_fr = (c_LR.reshape(n, 2 * d) @ self.W_c.t()).split(d, dim=1)
        i_t = torch.sigmoid(z_i + p_i)  # eq 1
        f_L = torch.sigmoid(z_fl + p_fl)  # eq 2
        f_R = torch.sigmoid(z_fr + p_fr)  # eq 3
        x_t = z_x  # eq 4
        c_t = f_L * c_L + f_R * c_R + i_t * torch.tanh(x_t)  # eq 5
        o_t = torch.sigmoid(z_o + c_t @ self.W_co.t())  # eq 6: the output gate peeks at the new cell
        h_t = o_t * torch.tanh(c_t)  # eq 7
        return h_t, c_t

    def _leaf_unit(self, x: Tensor) -> tuple[Tensor, Tensor]:
        if self.W_leaf is None:  # "embedding": the word vector is the leaf's hidden state
            return x, torch.zeros_like(x)
        c, z_o = self.W_leaf(x).split(self.hidden_channels, dim=1)  # "lstm": Tai et al.'s leaf unit
        return torch.sigmoid(z_o) * torch.tanh(c), c

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.in_channels}, {self.hidden_channels}, leaf={self.leaf!r})"
