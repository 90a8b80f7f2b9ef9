"""Lexicalized bottom-up Tree-LSTM (Teng & Zhang, 2017, eqs 4-7 and 10-11)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from torch.nn import Parameter

from ..engine import Children
from ..errors import InvalidArgumentError
from .cell import TreeCell

if TYPE_CHECKING:
    from ..schedule import LevelPlan

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
          (with ``lexicalized=False`` only the leaves' rows are read), edge indices
          :math:`(2, |\mathcal{E}|)` (child :math:`\to` parent) and positions
          :math:`(|\mathcal{E}|)`, or the ``Data``/``Batch`` (with its ``schedule``, if it carries one),
          or a :class:`~graphtree.schedule.Schedule`.
        - **output:** :math:`(h, c)`, each :math:`(|\mathcal{V}|, d)`, for every node.
    """

    def __init__(self, in_channels: int, hidden_channels: int, n_ary: int = 2, lexicalized: bool = True) -> None:
        super().__init__(state_channels=(hidden_channels, hidden_channels), max_children=n_ary)
        if n_ary < 1:
            raise InvalidArgumentError(f"n_ary must be at least 1, got {n_ary}")
        self.in_channels, self.hidden_channels = in_channels, hidden_channels
        self.n_ary, self.lexicalized = n_ary, lexicalized
        D, d, N = in_channels, hidden_channels, n_ary
        self.W_x = Parameter(torch.empty((4 if lexicalized else 3) * d, D))
        self.W_h = Parameter(torch.empty((N + 3) * d, N * d))
        self.W_c = Parameter(torch.empty((N + 1) * d, N * d))
        self.W_co = Parameter(torch.empty(d, d))
        self.b = Parameter(torch.empty((N + 3) * d))
        self.reset_parameters()

    def compiled_weights(self) -> tuple[Tensor, ...]:
        """The weights of ``LexicalizedLevels``, in its order."""
        return self.W_x, self.W_h, self.W_c, self.W_co, self.b

    def level_kernel(self, kernels: Any, plan: LevelPlan, weights: Sequence[Tensor]) -> Any:
        """The fast path: ``LexicalizedLevels`` (``csrc/peephole_level.cpp``), which takes the weights as they
        are."""
        return kernels.LexicalizedLevels(*weights, self.lexicalized)

    def reset_parameters(self) -> None:
        """Every parameter, weights and biases of the layers inside too, uniform in :math:`\\pm 1/\\sqrt{d}`
        (``d = hidden_channels``), as ``torch.nn.LSTM`` initializes."""
        self._uniform_everywhere(self.hidden_channels)

    def forward(self, x: Tensor, edge_index: Any, edge_pos: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Return ``(h, c)`` for every node; ``x``: the head vectors :math:`x_t` (the word vectors at the leaves);
        ``edge_index``: child -> parent edges (with ``edge_pos``, each child's position) or the ``Data``/``Batch``."""
        self._check_features(x, self.in_channels, edge_index)
        return self.propagate(edge_index, x=x, edge_pos=edge_pos)

    def update(self, children: Children, x: Tensor) -> tuple[Tensor, Tensor]:
        """The equations above for one level's nodes."""
        h_ch, c_ch = children.states  # [n, N, d]: child k in slot k, zeros where missing; [n, 0, d] at leaves
        if h_ch.size(1) == 0:
            return self._leaf(x)
        n, d, N = x.size(0), self.hidden_channels, self.n_ary
        # Row blocks i, f_1..f_N, g, o of the children's terms W_h [h^1..h^N] + b; i, f_1..f_N of the peepholes.
        z_i, z_f, z_g, z_o = torch.addmm(self.b, h_ch.reshape(n, N * d), self.W_h.t()).split([d, N * d, d, d], dim=1)
        p_i, p_f = (c_ch.reshape(n, N * d) @ self.W_c.t()).split([d, N * d], dim=1)
        z_f = (z_f + p_f).view(n, N, d)
        if self.lexicalized:  # every gate reads the head vector; W_xf feeds every forget gate (eq 10)
            x_i, x_f, x_g, x_o = (x @ self.W_x.t()).split(d, dim=1)
            z_i, z_f, z_g, z_o = z_i + x_i, z_f + x_f.unsqueeze(1), z_g + x_g, z_o + x_o
        i = torch.sigmoid(z_i + p_i)
        f = torch.sigmoid(z_f)  # one forget gate per child
        g = torch.tanh(z_g)
        c = (f * c_ch).sum(dim=1) + i * g
        o = torch.sigmoid(z_o + c @ self.W_co.t())  # the output gate peeks at the new cell
        h = o * torch.tanh(c)
        return h, c

    def _leaf(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """A leaf (Figure 1c): no children, so only the gates i, g, o, which read its word vector."""
        d = self.hidden_channels
        # W_x's rows are i, f, g, o (lexicalized) or i, g, o: i leads, g and o close, either way.
        W_i, W_g, W_o = self.W_x[:d], self.W_x[-2 * d:-d], self.W_x[-d:]
        b_i, b_g, b_o = self.b[:d], self.b[-2 * d:-d], self.b[-d:]
        i = torch.sigmoid(x @ W_i.t() + b_i)
        g = torch.tanh(x @ W_g.t() + b_g)
        c = i * g
        o = torch.sigmoid(x @ W_o.t() + c @ self.W_co.t() + b_o)
        return o * torch.tanh(c), c

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.hidden_channels}, n_ary={self.n_ary}, "
                f"lexicalized={self.lexicalized})")
