"""Top-down Tree-LSTM (Teng & Zhang, 2017, eqs 13-14)."""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch.nn import Parameter

from ..engine import Children, ParamGrads, schedule_of
from ..errors import ScheduleError
from ..schedule import Schedule
from .cell import TreeCell
from .functional import PackedWeights, fast_tanh
from .native import native_kernels

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
        # Built once per pass on first use (so that :attr:`weights` packs each matrix once) by the Python level
        # loop; the compiled one takes the parameters as they are and never asks.
        self._pass_stacked = _BUILD_ON_FIRST_USE
        # The compiled level loop takes passes where no node has several parents (trees, forests).
        self._pass_one_parent = all(slots.size(1) <= 1 for slots in schedule.plan("top_down").slots)
        try:
            return self.propagate_levels((x,), schedule)
        finally:
            self._pass_stacked = None
            self._pass_one_parent = False

    def native_level_kernel(self, inputs: tuple[Tensor, ...]) -> tuple[Any, Any] | None:
        """This cell's level math for the engine's compiled level loop (``TopDownLevels`` in
        ``graphtree/csrc/peephole_level.cpp``: :meth:`forward_level` and :meth:`backward_level` in C++), with
        the kernels module; ``None`` where the kernels do not apply or a node has several parents."""
        if not getattr(self, "_pass_one_parent", False):
            return None
        return self._compiled_levels(inputs, "TopDownLevels", self.W_x, self.b, self.W_h, self.W_c,
                                     self.W_co)

    def _check_positions(self, schedule: Schedule) -> None:
        if schedule.edge_pos.numel() and int(schedule.edge_pos.max()) >= self.n_ary:
            e = int(schedule.edge_pos.argmax())
            child, parent = int(schedule.edge_index[0, e]), int(schedule.edge_index[1, e])
            raise ScheduleError(f"{schedule.describe_node(child)} is child {int(schedule.edge_pos[e])} of "
                                f"{schedule.describe_node(parent)}, but {type(self).__name__} has parameter "
                                f"sets for positions 0..{self.n_ary - 1} only")

    fused_backward = True  # the engine uses backward_level, the hand-written derivatives below

    def forward_level(self, inputs: tuple[Tensor, ...], children: Children) -> tuple[tuple[Tensor, Tensor], tuple]:
        """States of one level, and what :meth:`backward_level` needs.

        One row per (node, parent) slot. The rows are sorted by position, so
        that each position's parameter set multiplies one contiguous block: all
        of a row's products with its set (``W_x x_t``, ``W_h h_{t-1}``,
        ``W_c c_{t-1}``) are one matmul per position on ``[x_t, h_{t-1}, c_{t-1}]``.
        """
        (x,) = inputs  # [n, D]: the nodes' own head vectors
        h_par, c_par = children.states  # [n, K, d]: the parents' states
        n, K, d = h_par.size(0), h_par.size(1), self.hidden_channels
        stacked = self._stacked_weights()
        weights = self.weights
        mean = None
        if K == 0:  # roots: a zero predecessor, parameter set U_L (position 0)
            xhc = torch.cat([x, x.new_zeros(n, 2 * d)], dim=1)
            route = _Route(None, None, [(0, 0, n)])
        else:
            # Empty slots (DAG levels only) take position 0 and are dropped by the mean below.
            m = n * K
            position = children.position.reshape(m)
            position = position.clamp(min=0) if K > 1 else position
            route = _route(position, self.n_ary, children.position_counts)
            xhc = torch.cat([x.unsqueeze(1).expand(n, K, x.size(1)), h_par, c_par], dim=2).view(m, -1)
            if route.perm is not None:
                xhc = xhc[route.perm]
            if K > 1:
                mean = children.mask.to(xhc.dtype)
                mean = (mean / mean.sum(dim=1, keepdim=True)).unsqueeze(-1)
        a = _apply(weights, xhc, stacked.V, route.slices, stacked.b)
        c_prev = xhc[:, -d:]  # the predecessor's cell (zero at the roots)
        kernels = native_kernels(a, xhc)
        if kernels is not None:  # eq 13 in two passes over the rows (graphtree/csrc/peephole_level.cpp)
            c_prev = c_prev.contiguous().view(-1, 1, d)
            s, c = kernels.peephole_level_cell(a, None, c_prev)  # s: i, f, tanh(g)
            o, tanh_c, h = kernels.peephole_level_output(a, _apply(weights, c, stacked.W_co, route.slices), c)
            g = None
        else:
            # tanh(z) = 2 sigmoid(2z) - 1: one sigmoid over i, f, g is much faster than sigmoid + tanh on CPU.
            a[:, 2 * d:3 * d] *= 2
            s = torch.sigmoid(a[:, :3 * d])
            i, f = s[:, :d], s[:, d:2 * d]
            g = 2 * s[:, 2 * d:] - 1
            c = i * g if K == 0 else torch.addcmul(i * g, f, c_prev)
            a_o = _apply(weights, c, stacked.W_co, route.slices)  # the peephole reads the new cell
            a_o += a[:, 3 * d:]
            o = torch.sigmoid(a_o)
            tanh_c = fast_tanh(c)
            h = o * tanh_c
        context = (weights, stacked, route, xhc, c_prev, s, g, c, o, tanh_c, mean, K, kernels)
        if route.perm is not None:  # back to the level's node order
            h, c = h[route.inverse], c[route.inverse]
        if mean is None:
            return (h, c), context
        return ((mean * h.view(n, K, d)).sum(dim=1), (mean * c.view(n, K, d)).sum(dim=1)), context

    def backward_level(self, context: tuple, grad_states: tuple[Tensor, Tensor], grad_params: ParamGrads,
                       needs_input_grad: tuple[bool, ...] = (True,),
                       ) -> tuple[tuple[Tensor | None], tuple[Tensor, Tensor] | tuple]:
        """Hand-written derivatives of :meth:`forward_level`, checked against autograd in the tests."""
        weights, stacked, route, xhc, c_prev, s, g, c, o, tanh_c, mean, K, kernels = context
        grad_h, grad_c = grad_states
        n, d, D = grad_h.size(0), self.hidden_channels, self.in_channels
        if mean is not None:  # each slot's step gets its share of the mean's gradient
            grad_h = (mean * grad_h.unsqueeze(1)).view(-1, d)
            grad_c = (mean * grad_c.unsqueeze(1)).view(-1, d)
        if route.perm is not None:
            grad_h, grad_c = grad_h[route.perm], grad_c[route.perm]
        if kernels is not None:
            grad_o = kernels.peephole_level_output_backward(grad_h, o, tanh_c)
            grad_c_from_o = _apply(weights, grad_o, stacked.W_co, route.slices, transpose=True)
            grad_a, grad_c_prev = kernels.peephole_level_cell_backward(grad_c, grad_h, o, tanh_c, grad_c_from_o,
                                                                       grad_o, s, c_prev)
            grad_c_prev = grad_c_prev.view(-1, d)
        else:
            grad_o = grad_h * tanh_c * o * (1 - o)
            grad_c = (grad_c + grad_h * o * (1 - tanh_c * tanh_c)
                      + _apply(weights, grad_o, stacked.W_co, route.slices, transpose=True))
            i, f = s[:, :d], s[:, d:2 * d]
            grad_i = grad_c * g * i * (1 - i)
            grad_g = grad_c * i * (1 - g * g)
            grad_f = torch.zeros_like(grad_i) if K == 0 else grad_c * c_prev * f * (1 - f)
            grad_a = torch.cat([grad_i, grad_f, grad_g, grad_o], dim=1)
            grad_c_prev = grad_c * f if K else None  # roots have no predecessor to pass it to

        for p, start, stop in route.slices:
            rows, set_x = slice(start, stop), stacked.input_set[p]
            grad_params.add_outer(_grad_key(grad_params, "W_co", p), grad_o[rows], c[rows])
            grad_params.add_outer(_grad_key(grad_params, "W_x", set_x), grad_a[rows], xhc[rows, :D])
            grad_params.add_sum(_grad_key(grad_params, "b", set_x), grad_a[rows])
            if K:
                grad_params.add_outer(_grad_key(grad_params, "W_h", p), grad_a[rows], xhc[rows, D:D + d])
                grad_params.add_outer(_grad_key(grad_params, "W_c", p), grad_a[rows, :2 * d], xhc[rows, D + d:])

        needs_x = needs_input_grad[0]
        if K == 0 and not needs_x:
            return (None,), ()
        # [dL/dx, dL/dh_{t-1}, dL/dc_{t-1}] of every row in one matmul per position (without x if not needed).
        grad_xhc = _apply(weights, grad_a, stacked.V if needs_x else stacked.U, route.slices, transpose=True)
        if K:
            grad_xhc[:, -d:] += grad_c_prev
        if route.perm is not None:
            grad_xhc = grad_xhc[route.inverse]
        grad_x = None
        if needs_x:
            grad_x = grad_xhc[:, :D] if K <= 1 else grad_xhc[:, :D].reshape(n, K, D).sum(dim=1)
        if K == 0:
            return (grad_x,), ()
        grad_hc = grad_xhc[:, -2 * d:]
        return (grad_x,), (grad_hc[:, :d].view(n, K, d), grad_hc[:, d:].view(n, K, d))

    def _stacked_weights(self) -> _Stacked:
        """Each position's parameters as the level multiplies them (see :class:`_Stacked`).

        Within :meth:`forward` they are built once per pass, without autograd,
        when the Python level loop first asks (so that :attr:`weights` packs each
        matrix once); outside a pass (the engine's recompute path) they are built
        here, differentiably.
        """
        stacked = getattr(self, "_pass_stacked", None)
        if stacked is _BUILD_ON_FIRST_USE:
            self._pass_stacked = None
            with torch.no_grad():
                stacked = self._pass_stacked = self._stacked_weights()
        if stacked is not None:
            return stacked
        N, d = self.n_ary, self.hidden_channels
        input_set = list(range(N)) if self.W_x.size(0) == N else [0] * N
        W_c = torch.nn.functional.pad(self.W_c, (0, 0, 0, 2 * d))  # W_c feeds i and f only
        W_x = self.W_x if self.W_x.size(0) == N else self.W_x.expand(N, -1, -1)  # a view: no index copy to the GPU
        V = torch.cat([W_x, self.W_h, W_c], dim=2)  # [N, 4d, D + 2d]
        V = list(V.unbind(0))
        return _Stacked(V, [v[:, -2 * d:] for v in V], list(self.W_co.unbind(0)), [self.b[k] for k in input_set],
                        input_set)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.hidden_channels}, n_ary={self.n_ary}, "
                f"share_input_weights={self.share_input_weights})")


_BUILD_ON_FIRST_USE = object()  # TopDownTreeLSTM._pass_stacked before the pass's first level asks for it


class _Stacked(NamedTuple):
    """Per position ``p``: ``V[p]`` = ``[W_x, W_h, W_c]`` as one ``[4d, D + 2d]`` matrix on
    ``[x_t, h_{t-1}, c_{t-1}]`` (zero where W_c would feed g and o), ``U[p]`` its
    ``[W_h, W_c]`` columns, ``W_co[p]``, the bias ``b[p]``, and ``input_set[p]``,
    the index of the input set (``W_x``, ``b``) that position uses."""

    V: list[Tensor]
    U: list[Tensor]
    W_co: list[Tensor]
    b: list[Tensor]
    input_set: list[int]


class _Route(NamedTuple):
    """A level's rows grouped by position: ``perm`` sorts them so that each position is one slice."""

    perm: Tensor | None  # None: the rows are in order already
    inverse: Tensor | None
    slices: list[tuple[int, int, int]]  # (position, start, stop) of the sorted rows


def _route(position: Tensor, n_ary: int, counts: tuple[int, ...]) -> _Route:
    """Group the rows of a level by ``position``.

    The slice bounds come from ``counts``, which the engine reads from the
    schedule on the host (see :class:`~graphtree.engine.Children`), so a GPU
    pass never stops to learn them.
    """
    m = position.numel()
    if n_ary == 1:
        return _Route(None, None, [(0, 0, m)])
    counts = list(counts) + [0] * max(0, n_ary - len(counts))
    if max(counts) == m:
        return _Route(None, None, [(counts.index(m), 0, m)])
    perm = torch.argsort(position, stable=True)
    slices, start = [], 0
    for p, count in enumerate(counts):
        if count:
            slices.append((p, start, start + count))
        start += count
    return _Route(perm, torch.argsort(perm), slices)


def _apply(weights: PackedWeights, x: Tensor, matrices: list[Tensor], slices: list[tuple[int, int, int]],
           biases: list[Tensor] | None = None, transpose: bool = False) -> Tensor:
    """Each slice of rows times its position's matrix: ``x W_p^T + b_p`` (``x W_p`` with ``transpose``)."""
    parts = [weights.linear(x[start:stop], matrices[p], None if biases is None else biases[p], transpose=transpose)
             for p, start, stop in slices]
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _grad_key(grad_params: ParamGrads, name: str, index: int) -> str:
    """Key of ``grad_params[name][index]`` (one position's block) for ``add_outer`` and ``add_sum``.

    The entry is a view of the gradient, so what is collected under it lands in
    the parameter's gradient when the engine flushes.
    """
    key = f"{name}[{index}]"
    if key not in grad_params and name in grad_params:
        grad_params[key] = grad_params[name][index]
    return key
