"""Top-down Tree-LSTM (Teng & Zhang, 2017, eqs 13-14)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.nn import Parameter

from ..engine import Children, schedule_of
from ..errors import ScheduleError
from ..schedule import Schedule
from .cell import TreeCell

__all__ = ["TopDownTreeLSTM"]


class TopDownTreeLSTM(TreeCell):
    r"""The top-down Tree-LSTM from `"Head-Lexicalized Bidirectional Tree
    LSTMs" <https://aclanthology.org/Q17-1012/>`_ (Teng & Zhang, TACL 2017),
    Section 4.3. The path from the root to any node is a sequential LSTM whose
    predecessor is the parent, with the parameter set :math:`\mathbf{U}_N` of
    the node's position under it (:math:`N = L` for a left child, :math:`R`
    for a right child; for ``n_ary`` positions one set per position):

    .. math::
        i_t &= \sigma(W_{xi\downarrow}^N x_t + W_{hi\downarrow}^N h_{t-1}
        + W_{ci\downarrow}^N c_{t-1} + b_{i\downarrow}^N)

        f_t &= \sigma(W_{xf\downarrow}^N x_t + W_{hf\downarrow}^N h_{t-1}
        + W_{cf\downarrow}^N c_{t-1} + b_{f\downarrow}^N)

        g_t &= \tanh(W_{xg\downarrow}^N x_t + W_{hg\downarrow}^N h_{t-1} + b_{g\downarrow}^N)

        c_t &= f_t \otimes c_{t-1} + i_t \otimes g_t

        o_t &= \sigma(W_{xo\downarrow}^N x_t + W_{ho\downarrow}^N h_{t-1}
        + W_{co\downarrow}^N c_t + b_{o\downarrow}^N)

        h_t &= o_t \otimes \tanh(c_t)

    where :math:`h_{t-1}, c_{t-1}` are the parent's states and :math:`x_t` the
    node's own head vector (e.g. from :class:`~graphtree.nn.HeadLexicalization`).
    This is the standard LSTM form the text describes; eq 13 as printed has
    :math:`h_t = o_t \otimes \tanh(c_{t-1})` and feeds :math:`x_{t-1}` to
    :math:`g_t`, a misprint. The root has no predecessor: its :math:`h_{t-1},
    c_{t-1}` are zero, its input is its head vector, and it uses
    :math:`\mathbf{U}_L` (position 0). With the peepholes :math:`W_{c\cdot}`
    set to zero, a chain is exactly ``torch.nn.LSTM`` run from the root down.

    **Several parents (DAGs).** A node with parents :math:`p_1, \ldots, p_P`
    runs the step above once from each parent's :math:`(h, c)`, with the
    parameter set of its position under that parent, and takes the mean of the
    :math:`P` resulting :math:`(h_t, c_t)` pairs. On a tree (:math:`P = 1`) this
    is the equations above.

    **Table 4 parameter count.** Eq 14 gives each position its own
    :math:`W_{x\cdot\downarrow}^N` and :math:`b_{\cdot\downarrow}^N`, which is
    the default. The sizes in Table 4 are only reached if :math:`\mathbf{U}_L`
    and :math:`\mathbf{U}_R` share the input maps and biases and differ in
    their :math:`7 d^2` hidden and peephole matrices
    (``share_input_weights=True``): BiConTree minus ConTree+Lex is
    :math:`14 d^2 + 1204 d` plus the wider classifier at both :math:`|h| = 75`
    and :math:`|h| = 150`.

    Parameter layout (gate blocks of :math:`d` rows, in the order
    :math:`i, f, g, o` of ``torch.nn.LSTM``; the first index is the position):

    * ``W_x[N]`` :math:`[W_{xi\downarrow}^N; W_{xf\downarrow}^N; W_{xg\downarrow}^N;
      W_{xo\downarrow}^N]` and ``b[N]`` likewise (one set when shared);
    * ``W_h[N]`` :math:`[W_{hi\downarrow}^N; W_{hf\downarrow}^N; W_{hg\downarrow}^N;
      W_{ho\downarrow}^N]`;
    * ``W_c[N]`` :math:`[W_{ci\downarrow}^N; W_{cf\downarrow}^N]`, ``W_co[N]``
      :math:`W_{co\downarrow}^N`.

    Args:
        in_channels (int): Size :math:`D` of the head vectors.
        hidden_channels (int): Size :math:`d` of :math:`h` and :math:`c`.
        n_ary (int): Number of child positions, each with its own parameter
            set (default 2: :math:`\mathbf{U}_L, \mathbf{U}_R`). A child at a
            higher position is an error naming the node.
        share_input_weights (bool): Share :math:`W_{x\cdot\downarrow}` and
            :math:`b_{\cdot\downarrow}` between positions (the Table 4 count).
            Default ``False``.

    Shapes:
        - **input:** head vectors :math:`(|\mathcal{V}|, D)` for every node, and
          the batch (a ``Data``/``Batch`` or its :class:`~graphtree.schedule.Schedule`).
        - **output:** :math:`(h, c)`, each :math:`(|\mathcal{V}|, d)`, for every node.
    """

    direction = "top_down"

    def __init__(self, in_channels: int, hidden_channels: int, n_ary: int = 2,
                 share_input_weights: bool = False) -> None:
        super().__init__()
        if n_ary < 1:
            raise ValueError(f"n_ary must be at least 1, got {n_ary}")
        self.in_channels, self.hidden_channels = in_channels, hidden_channels
        self.n_ary, self.share_input_weights = n_ary, share_input_weights
        self.state_channels = (hidden_channels, hidden_channels)
        D, d, N = in_channels, hidden_channels, n_ary
        P = 1 if share_input_weights else N
        self.W_x = Parameter(torch.empty(P, 4 * d, D))
        self.b = Parameter(torch.empty(P, 4 * d))
        self.W_h = Parameter(torch.empty(N, 4 * d, d))
        self.W_c = Parameter(torch.empty(N, 2 * d, d))
        self.W_co = Parameter(torch.empty(N, d, d))
        self.reset_parameters()

    def forward(self, x: Tensor, batch: Any) -> tuple[Tensor, Tensor]:
        """Return ``(h, c)`` for every node of ``batch``."""
        self._check_input(x, self.in_channels)
        schedule = schedule_of(batch)
        self._check_positions(schedule)
        P, d = self.W_x.size(0), self.hidden_channels
        if P == 1:
            Wx = x @ self.W_x[0].t() + self.b[0]  # hoisted: one matmul for all nodes
        else:
            # Hoisted per position, and only for the nodes that sit at that position
            # under some parent (the roots count as position 0): a tree node needs
            # one set's projection, so this costs one matmul's worth, not P.
            child, position = schedule.edge_index[0], schedule.edge_pos
            roots = (schedule.depth == 0).nonzero().view(-1)
            blocks = []
            for p in range(P):
                rows = torch.unique(child[position == p])
                rows = (torch.cat([roots, rows]) if p == 0 else rows).to(x.device)
                blocks.append(x.new_zeros(x.size(0), 4 * d).index_copy(0, rows, x[rows] @ self.W_x[p].t() + self.b[p]))
            Wx = torch.stack(blocks, dim=1).view(x.size(0), P * 4 * d)
        return self.propagate_levels((Wx,), schedule)

    def _check_positions(self, schedule: Schedule) -> None:
        if schedule.edge_pos.numel() and int(schedule.edge_pos.max()) >= self.n_ary:
            e = int(schedule.edge_pos.argmax())
            child, parent = int(schedule.edge_index[0, e]), int(schedule.edge_index[1, e])
            raise ScheduleError(f"{schedule.describe_node(child)} is child {int(schedule.edge_pos[e])} of "
                                f"{schedule.describe_node(parent)}, but {type(self).__name__} has parameter "
                                f"sets for positions 0..{self.n_ary - 1} only")

    def update(self, inputs: tuple[Tensor, ...], children: Children) -> tuple[Tensor, Tensor]:
        (Wx,) = inputs  # [n, P * 4d]: W_x^N x_t + b^N for the parameter sets N the node needs
        h_par, c_par = children.states  # [n, K, d]: the parents' states
        n, K, d = h_par.size(0), h_par.size(1), self.hidden_channels
        position = children.position
        if K == 0:  # roots: a zero predecessor, parameter set U_L
            h_par, c_par = h_par.new_zeros(n, 1, d), c_par.new_zeros(n, 1, d)
            position = torch.zeros(n, 1, dtype=torch.long, device=h_par.device)
            K = 1
        # One row per (node, parent) slot; empty slots (DAG levels only) take
        # position 0 and are dropped by the mean below.
        m, P = n * K, self.W_x.size(0)
        pos = position.clamp(min=0).reshape(m)
        rows = [(pos == p).nonzero().view(-1) for p in range(self.n_ary)]
        h_prev, c_prev = h_par.reshape(m, d), c_par.reshape(m, d)
        Wx = Wx.view(n, 1, P, 4 * d).expand(n, K, P, 4 * d).reshape(m, P, 4 * d)
        x_part = Wx[:, 0] if P == 1 else Wx[torch.arange(m, device=pos.device), pos]
        a = x_part + _per_position(h_prev, self.W_h, rows)
        a_c = _per_position(c_prev, self.W_c, rows)
        a_i, a_f, a_g, a_o = a.split(d, dim=-1)
        c_i, c_f = a_c.split(d, dim=-1)
        i, f, g = torch.sigmoid(a_i + c_i), torch.sigmoid(a_f + c_f), torch.tanh(a_g)
        c = f * c_prev + i * g
        o = torch.sigmoid(a_o + _per_position(c, self.W_co, rows))
        h = o * torch.tanh(c)
        if K == 1:
            return h, c
        weight = children.mask.to(h.dtype)
        weight = (weight / weight.sum(dim=1, keepdim=True)).unsqueeze(-1)
        return (weight * h.view(n, K, d)).sum(dim=1), (weight * c.view(n, K, d)).sum(dim=1)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.hidden_channels}, n_ary={self.n_ary}, "
                f"share_input_weights={self.share_input_weights})")


def _per_position(v: Tensor, W: Tensor, rows: list[Tensor]) -> Tensor:
    """``W[pos] @ v`` for every row of ``v``, with ``rows[p]`` the rows at position ``p``.

    Each position's rows are multiplied by that position's matrix alone, so the
    cost is one matmul's worth whatever the number of positions.
    """
    out = None
    for p, index in enumerate(rows):
        if index.numel() == v.size(0):
            return v @ W[p].t()  # the whole level sits at one position
        if index.numel():
            out = v.new_zeros(v.size(0), W.size(1)) if out is None else out
            out = out.index_copy(0, index, v[index] @ W[p].t())
    assert out is not None
    return out
