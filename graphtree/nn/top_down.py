"""Top-down Tree-LSTM (Teng & Zhang, 2017, eqs 13-14)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from torch.nn import Parameter

from ..engine import Children, Pass
from ..errors import InvalidArgumentError, ScheduleError
from ..schedule import Schedule
from .cell import TreeCell

if TYPE_CHECKING:
    from ..schedule import LevelPlan

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
        - **input:** head vectors :math:`(|\mathcal{V}|, D)` for every node, edge indices
          :math:`(2, |\mathcal{E}|)` (child :math:`\to` parent) and positions
          :math:`(|\mathcal{E}|)`, or the ``Data``/``Batch`` (with its ``schedule``, if it carries one),
          or a :class:`~graphtree.schedule.Schedule`.
        - **output:** :math:`(h, c)`, each :math:`(|\mathcal{V}|, d)`, for every node.
    """

    def __init__(self, in_channels: int, hidden_channels: int, n_ary: int = 2,
                 share_input_weights: bool = False) -> None:
        super().__init__(state_channels=(hidden_channels, hidden_channels), direction="top_down")
        if n_ary < 1:
            raise InvalidArgumentError(f"n_ary must be at least 1, got {n_ary}")
        self.in_channels, self.hidden_channels = in_channels, hidden_channels
        self.n_ary, self.share_input_weights = n_ary, share_input_weights
        D, d, N = in_channels, hidden_channels, n_ary
        P = 1 if share_input_weights else N
        self.W_x = Parameter(torch.empty(P, 4 * d, D))
        self.b = Parameter(torch.empty(P, 4 * d))
        self.W_h = Parameter(torch.empty(N, 4 * d, d))
        self.W_c = Parameter(torch.empty(N, 2 * d, d))
        self.W_co = Parameter(torch.empty(N, d, d))
        self.reset_parameters()

    # Its update steps the filled parent slots only, so an empty slot costs it a gather: a level of its own pays
    # only where a node has hundreds of parents.
    level_cost_slots = 4096
    def compiled_weights(self) -> tuple[Tensor, ...]:
        """The weights of ``TopDownLevels``, in its order."""
        return self.W_x, self.b, self.W_h, self.W_c, self.W_co

    def level_kernel(self, kernels: Any, plan: LevelPlan, weights: Sequence[Tensor]) -> Any | None:
        """The fast path where no node has several parents (trees, forests): ``TopDownLevels``
        (``csrc/peephole_level.cpp``), which takes the weights as they are."""
        if any(width > 1 for width in plan.widths):
            return None
        return kernels.TopDownLevels(*weights)

    def reset_parameters(self) -> None:
        """Every parameter, weights and biases of the layers inside too, uniform in :math:`\\pm 1/\\sqrt{d}`
        (``d = hidden_channels``), as ``torch.nn.LSTM`` initializes."""
        self._uniform_everywhere(self.hidden_channels)

    def forward(self, x: Tensor, edge_index: Any, edge_pos: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Return ``(h, c)`` for every node; ``x``: the head vectors; ``edge_index``: child -> parent edges (with
        ``edge_pos``, each child's position, which picks its parameter set) or the ``Data``/``Batch``."""
        self._check_features(x, self.in_channels, edge_index)
        return self.propagate(edge_index, x=x, edge_pos=edge_pos)

    def pass_of(self, edge_index: Any, *, edge_pos: Tensor | None = None, **inputs: Tensor) -> Pass:
        """:meth:`TreeCell.pass_of`, once every child's position has a parameter set."""
        made = super().pass_of(edge_index, edge_pos=edge_pos, **inputs)
        self._check_positions(made.schedule)
        return made

    def update(self, parents: Children, x: Tensor) -> tuple[Tensor, Tensor]:
        """Eq 13 for one level's nodes, from each parent (the mean over several parents); in this top-down pass
        the slots hold each node's parents."""
        h_par, c_par = parents.states  # [n, K, d]: the parents' states, zeros in empty slots
        n, K, d = h_par.shape
        if K == 0:  # a root: zero predecessor, parameter set U_L (position 0)
            zeros = x.new_zeros(n, d)
            return self._step(0, x, zeros, zeros)
        if K == 1 and parents.every_slot_filled:
            # Every node has one parent (a tree's level): the plan gives the level's rows grouped by their position
            # under it (LevelPlan.position_groups), so each position's rows are one slice, stepped as they are.
            # The same arithmetic as below, whose mean over one parent and sum into zeros change no bit.
            steps, start = [], 0
            for p, count in enumerate(parents.position_counts):
                if count:
                    group = slice(start, start + count)
                    steps.append(self._step(p, x[group], h_par[group, 0], c_par[group, 0]))
                start += count
            if len(steps) == 1:
                return steps[0]
            return torch.cat([s[0] for s in steps]), torch.cat([s[1] for s in steps])
        # One row per filled (node, parent) slot, run in groups by the node's position under that parent, each group
        # with its position's parameter set; empty slots are never stepped. The group sizes come from the schedule
        # on the host (position_counts), so a GPU never waits to learn them.
        filled = sum(parents.position_counts)
        by_position = torch.where(parents.mask, parents.position, self.n_ary).reshape(-1)  # empty slots sort last
        rows = torch.argsort(by_position, stable=True)[:filled]
        node = torch.div(rows, K, rounding_mode="floor")
        x_rows, h_rows, c_rows = x[node], h_par.reshape(n * K, d)[rows], c_par.reshape(n * K, d)[rows]
        steps, start = [], 0
        for p, count in enumerate(parents.position_counts):
            group = slice(start, start + count)
            steps.append(self._step(p, x_rows[group], h_rows[group], c_rows[group]))
            start += count
        share = 1 / parents.mask.sum(dim=1, keepdim=True).to(x.dtype)  # 1 / P for each of a node's P parents
        h = x.new_zeros(n, d).index_add(0, node, torch.cat([s[0] for s in steps]))
        c = x.new_zeros(n, d).index_add(0, node, torch.cat([s[1] for s in steps]))
        return share * h, share * c

    def _step(self, p: int, x: Tensor, h_prev: Tensor, c_prev: Tensor) -> tuple[Tensor, Tensor]:
        """One LSTM step of eq 13 with the parameter set U_p of position p (its own input set, eq 14, unless
        shared)."""
        k = 0 if self.share_input_weights else p
        z_i, z_f, z_g, z_o = (torch.addmm(self.b[k], x, self.W_x[k].t()) + h_prev @ self.W_h[p].t()).chunk(4, dim=1)
        p_i, p_f = (c_prev @ self.W_c[p].t()).chunk(2, dim=1)  # the peepholes on the parent's cell
        i = torch.sigmoid(z_i + p_i)
        f = torch.sigmoid(z_f + p_f)
        g = torch.tanh(z_g)
        c = f * c_prev + i * g
        o = torch.sigmoid(z_o + c @ self.W_co[p].t())  # the output gate peeks at the new cell
        return o * torch.tanh(c), c

    def _check_positions(self, schedule: Schedule) -> None:
        if schedule.edge_pos.numel() and int(schedule.edge_pos.max()) >= self.n_ary:
            e = int(schedule.edge_pos.argmax())
            child, parent = int(schedule.edge_index[0, e]), int(schedule.edge_index[1, e])
            raise ScheduleError(f"{schedule.describe_node(child)} is child {int(schedule.edge_pos[e])} of "
                                f"{schedule.describe_node(parent)}, but {type(self).__name__} has parameter "
                                f"sets for positions 0..{self.n_ary - 1} only")

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.hidden_channels}, n_ary={self.n_ary}, "
                f"share_input_weights={self.share_input_weights})")
