"""The plainest level loop of every paper cell, and of README's cell of one's own, on the cell's own weights.

What a user would write instead of graphtree: the nodes grouped by height
(depth for the top-down cell) once per batch, then one loop over the levels
with, per level, one ``index_select`` of the predecessors' states from a
buffer whose last row is the zero state of a missing predecessor, the cell's
products and gate arithmetic, the new states written into the buffers with
``h[nodes] = ...``, and autograd for the backward pass. No custom autograd
function, no compiled kernel, no masking (an empty slot holds zero states, and
each loop below is written so that a zero state adds nothing, as a user who
knows the cell would write it).

Each loop reads the parameters of a graphtree cell (``PLAIN_LOOPS[name](cell)``),
so both compute from the same weights; :func:`check_equal` compares their
states in float64. ``plain_level_loop.py`` is the N-ary model of the step
benchmark in the same style, with its own layers, embedding and classifier.

The loops handle what the benchmark runs: trees (one parent a node), and for
the fixed-arity cells at most their arity of children.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphtree.nn import TreeCell

__all__ = ["PLAIN_LOOPS", "ChildSumGRU", "PlainLevels", "check_equal", "plain_levels"]


class ChildSumGRU(TreeCell):
    """README's and docs/engine.md's cell of one's own, as written there: a GRU over trees and DAGs with one
    reset gate per child."""

    def __init__(self, in_channels: int, hidden_channels: int):
        super().__init__(state_channels=(hidden_channels,))
        self.W = nn.Linear(in_channels, 3 * hidden_channels)                    # W_r, W_z, W_n
        self.U = nn.Linear(hidden_channels, 3 * hidden_channels, bias=False)    # U_r, U_z, U_n

    def update(self, children, x):
        W_r, W_z, W_n = self.W(x).chunk(3, dim=-1)
        U_r, U_z, U_n = children.map(self.U).chunk(3, dim=-1)   # [n, K, d] each: per child, 0 in empty slots
        r = torch.sigmoid(W_r.unsqueeze(1) + U_r)                # one reset gate per child
        z = torch.sigmoid(W_z + children.sum(U_z))
        n = torch.tanh(W_n + children.sum(r * U_n))              # sums over the children there are
        return ((1 - z) * n + z * children.sum(),)


@dataclass
class PlainLevels:
    """One batch's levels as a plain loop keeps them: the first level's nodes (no predecessor), then per level
    its nodes and the ``[n * K]`` predecessor of each slot (``num_nodes`` where empty), with ``K``; top-down,
    per level and child position ``p`` the nodes at that position and their parents."""

    num_nodes: int
    first: Tensor
    levels: list[tuple[Tensor, Tensor, int]]
    by_position: list[list[tuple[int, Tensor, Tensor]]]


def plain_levels(edge_index: Tensor, edge_pos: Tensor, num_nodes: int, direction: str = "bottom_up",
                 arity: int | None = None) -> PlainLevels:
    """The levels of a forest (child -> parent edges, each child's position under its parent)."""
    child, parent = edge_index
    N = num_nodes
    if direction == "top_down":
        depth = torch.zeros(N, dtype=torch.long)
        parent_of = torch.full((N,), -1, dtype=torch.long)
        parent_of[child] = parent
        position = torch.zeros(N, dtype=torch.long)
        position[child] = edge_pos
        for _ in range(N):  # one sweep a level: a node is one deeper than its parent
            new = torch.where(parent_of >= 0, depth[parent_of.clamp(min=0)] + 1, 0)
            if torch.equal(new, depth):
                break
            depth = new
        first = (depth == 0).nonzero().view(-1)
        levels, by_position = [], []
        for level in range(1, int(depth.max()) + 1 if N else 0):
            nodes = (depth == level).nonzero().view(-1)
            groups = []
            for p in range(int(position[nodes].max()) + 1):
                at = nodes[position[nodes] == p]
                groups.append((p, at, parent_of[at]))
            levels.append((nodes, parent_of[nodes], 1))
            by_position.append(groups)
        return PlainLevels(N, first, levels, by_position)
    height = torch.zeros(N, dtype=torch.long)
    for _ in range(N):  # one sweep a level: a node is one above its highest child
        new = torch.zeros(N, dtype=torch.long).scatter_reduce(0, parent, height[child] + 1, "amax")
        if torch.equal(new, height):
            break
        height = new
    width = arity if arity is not None else int(edge_pos.max()) + 1 if edge_pos.numel() else 0
    slots = torch.full((N, max(width, 1)), N, dtype=torch.long)
    slots[parent, edge_pos] = child
    first = (height == 0).nonzero().view(-1)
    levels = []
    for level in range(1, int(height.max()) + 1 if N else 0):
        nodes = (height == level).nonzero().view(-1)
        K = arity if arity is not None else int((slots[nodes] != N).nonzero()[:, 1].max()) + 1
        levels.append((nodes, slots[nodes, :K].reshape(-1), K))
    return PlainLevels(N, first, levels, [])


def _buffers(like: Tensor, N: int, *widths: int) -> list[Tensor]:
    return [like.new_zeros(N + 1, d) for d in widths]  # row N: the zero state of a missing predecessor


def child_sum_loop(cell) -> Callable[[Tensor, PlainLevels], tuple[Tensor, ...]]:
    """Tai et al.'s Child-Sum Tree-LSTM (eqs 2-8)."""
    d = cell.hidden_channels

    def run(x: Tensor, lv: PlainLevels) -> tuple[Tensor, ...]:
        N = lv.num_nodes
        Wx = cell.W(x)
        h, c = _buffers(Wx, N, d, d)
        wx = Wx.index_select(0, lv.first)
        z = wx[:, :3 * d] + cell.U_iou.bias  # a leaf: no children, U h~ = its bias alone
        i, o, u = z.split(d, dim=1)
        c_new = torch.sigmoid(i) * torch.tanh(u)
        h[lv.first], c[lv.first] = torch.sigmoid(o) * torch.tanh(c_new), c_new
        for nodes, slots, K in lv.levels:
            n = nodes.numel()
            wx = Wx.index_select(0, nodes)
            h_k = h.index_select(0, slots).view(n, K, d)
            c_k = c.index_select(0, slots).view(n, K, d)
            z = torch.addmm(cell.U_iou.bias, h_k.sum(dim=1), cell.U_iou.weight.t()) + wx[:, :3 * d]
            i, o, u = z.split(d, dim=1)
            f = torch.sigmoid(F.linear(h_k, cell.U_f.weight, cell.U_f.bias) + wx[:, 3 * d:].unsqueeze(1))
            c_new = torch.sigmoid(i) * torch.tanh(u) + (f * c_k).sum(dim=1)  # c_k is 0 in an empty slot
            h[nodes], c[nodes] = torch.sigmoid(o) * torch.tanh(c_new), c_new
        return h[:N], c[:N]

    return run


def nary_loop(cell) -> Callable[[Tensor, PlainLevels], tuple[Tensor, ...]]:
    """Tai et al.'s Constituency Tree-LSTM (eqs 9-14, constituency setting, full forget maps)."""
    d, M = cell.hidden_channels, cell.n_ary
    assert cell.setting == "constituency" and cell.forget == "full"

    def run(x: Tensor, lv: PlainLevels) -> tuple[Tensor, ...]:
        N = lv.num_nodes
        h, c = _buffers(x, N, d, d)
        c_leaf, z_o = F.linear(x.index_select(0, lv.first), cell.W_leaf.weight, cell.W_leaf.bias).split(d, dim=1)
        h[lv.first], c[lv.first] = torch.sigmoid(z_o) * torch.tanh(c_leaf), c_leaf
        bias = cell.b_U.sum(0)
        for nodes, slots, _ in lv.levels:
            n = nodes.numel()
            gates = torch.addmm(bias, h.index_select(0, slots).view(n, M * d), cell.U.t())
            i, o, u = gates[:, :3 * d].split(d, dim=1)
            f = torch.sigmoid(gates[:, 3 * d:].view(n, M, d))
            c_new = torch.sigmoid(i) * torch.tanh(u) + (f * c.index_select(0, slots).view(n, M, d)).sum(dim=1)
            h[nodes], c[nodes] = torch.sigmoid(o) * torch.tanh(c_new), c_new
        return h[:N], c[:N]

    return run


def slstm_loop(cell) -> Callable[[Tensor, PlainLevels], tuple[Tensor, ...]]:
    """Zhu et al.'s S-LSTM (eqs 1-7), the word vector as a leaf's ``h`` (``leaf="embedding"``)."""
    d = cell.hidden_channels
    assert cell.leaf == "embedding"

    def run(x: Tensor, lv: PlainLevels) -> tuple[Tensor, ...]:
        N = lv.num_nodes
        h, c = _buffers(x, N, d, d)
        h[lv.first] = x.index_select(0, lv.first)
        for nodes, slots, _ in lv.levels:
            n = nodes.numel()
            c_LR = c.index_select(0, slots).view(n, 2 * d)
            z_i, z_fl, z_fr, z_x, z_o = torch.addmm(cell.b, h.index_select(0, slots).view(n, 2 * d),
                                                    cell.W_h.t()).split(d, dim=1)
            p_i, p_fl, p_fr = (c_LR @ cell.W_c.t()).split(d, dim=1)
            c_new = (torch.sigmoid(z_fl + p_fl) * c_LR[:, :d] + torch.sigmoid(z_fr + p_fr) * c_LR[:, d:]
                     + torch.sigmoid(z_i + p_i) * torch.tanh(z_x))
            h[nodes] = torch.sigmoid(z_o + c_new @ cell.W_co.t()) * torch.tanh(c_new)
            c[nodes] = c_new
        return h[:N], c[:N]

    return run


def lstm_rnn_loop(cell) -> Callable[[Tensor, PlainLevels], tuple[Tensor, ...]]:
    """Le & Zuidema's LSTM-RNN: each node's eight maps for its parent, computed at its own level."""
    d, g = cell.hidden_channels, cell.g

    def run(x: Tensor, lv: PlainLevels) -> tuple[Tensor, ...]:
        N = lv.num_nodes
        p, c, m = _buffers(x, N, d, d, 8 * d)
        leaves = x.index_select(0, lv.first)
        p[lv.first], m[lv.first] = leaves, leaves @ cell.W_leaf.t()
        b_i, b_f, b_c, b_o = cell.b.split(d)
        for nodes, slots, _ in lv.levels:
            n = nodes.numel()
            m_xy = m.index_select(0, slots).view(n, 2, 8 * d)
            c_xy = c.index_select(0, slots).view(n, 2, d)
            i1x, f1x, i2x, f2x, c1x, o1x, _, _ = m_xy[:, 0].split(d, dim=1)
            i1y, f1y, i2y, f2y, _, _, c2y, o2y = m_xy[:, 1].split(d, dim=1)
            c_p = (torch.sigmoid(f1x + f2y + b_f) * c_xy[:, 0] + torch.sigmoid(f1y + f2x + b_f) * c_xy[:, 1]
                   + g(c1x * torch.sigmoid(i1x + i2y + b_i) + c2y * torch.sigmoid(i1y + i2x + b_i) + b_c))
            peepholes, W_co_c = (c_p @ cell.W_cell.t()).split((4 * d, d), dim=1)
            p_new = torch.sigmoid(o1x + o2y + W_co_c + b_o) * g(c_p)
            p[nodes], c[nodes] = p_new, c_p
            m[nodes] = p_new @ cell.W_inner.t() + F.pad(peepholes, (0, 4 * d))
        return p[:N], c[:N]

    return run


def lexicalized_loop(cell) -> Callable[[Tensor, PlainLevels], tuple[Tensor, ...]]:
    """Teng & Zhang's head-lexicalized binary Tree-LSTM (Section 4.2), every node reading its head vector."""
    d, M = cell.hidden_channels, cell.n_ary
    assert cell.lexicalized

    def run(x: Tensor, lv: PlainLevels) -> tuple[Tensor, ...]:
        N = lv.num_nodes
        h, c = _buffers(x, N, d, d)
        W_x, b = cell.W_x, cell.b
        xl = x.index_select(0, lv.first)  # a leaf: gates i, g, o of its word vector
        i = torch.sigmoid(torch.addmm(b[:d], xl, W_x[:d].t()))
        c_new = i * torch.tanh(torch.addmm(b[-2 * d:-d], xl, W_x[-2 * d:-d].t()))
        o = torch.sigmoid(torch.addmm(b[-d:], xl, W_x[-d:].t()) + c_new @ cell.W_co.t())
        h[lv.first], c[lv.first] = o * torch.tanh(c_new), c_new
        for nodes, slots, _ in lv.levels:
            n = nodes.numel()
            c_ch = c.index_select(0, slots).view(n, M * d)
            z_i, z_f, z_g, z_o = torch.addmm(b, h.index_select(0, slots).view(n, M * d),
                                             cell.W_h.t()).split([d, M * d, d, d], dim=1)
            p_i, p_f = (c_ch @ cell.W_c.t()).split([d, M * d], dim=1)
            x_i, x_f, x_g, x_o = (x.index_select(0, nodes) @ W_x.t()).split(d, dim=1)
            f = torch.sigmoid((z_f + p_f).view(n, M, d) + x_f.unsqueeze(1))
            c_new = (f * c_ch.view(n, M, d)).sum(dim=1) + torch.sigmoid(z_i + x_i + p_i) * torch.tanh(z_g + x_g)
            h[nodes] = torch.sigmoid(z_o + x_o + c_new @ cell.W_co.t()) * torch.tanh(c_new)
            c[nodes] = c_new
        return h[:N], c[:N]

    return run


def top_down_loop(cell) -> Callable[[Tensor, PlainLevels], tuple[Tensor, ...]]:
    """Teng & Zhang's top-down Tree-LSTM (eq 13) on trees: one LSTM step from the parent, with the parameter
    set of the node's position under it."""
    d = cell.hidden_channels

    def step(p: int, x: Tensor, h_prev: Tensor, c_prev: Tensor) -> tuple[Tensor, Tensor]:
        k = 0 if cell.share_input_weights else p
        z_i, z_f, z_g, z_o = (torch.addmm(cell.b[k], x, cell.W_x[k].t()) + h_prev @ cell.W_h[p].t()).chunk(4, 1)
        p_i, p_f = (c_prev @ cell.W_c[p].t()).chunk(2, dim=1)
        c_new = torch.sigmoid(z_f + p_f) * c_prev + torch.sigmoid(z_i + p_i) * torch.tanh(z_g)
        return torch.sigmoid(z_o + c_new @ cell.W_co[p].t()) * torch.tanh(c_new), c_new

    def run(x: Tensor, lv: PlainLevels) -> tuple[Tensor, ...]:
        N = lv.num_nodes
        h, c = _buffers(x, N, d, d)
        zeros = x.new_zeros(lv.first.numel(), d)
        h[lv.first], c[lv.first] = step(0, x.index_select(0, lv.first), zeros, zeros)
        for groups in lv.by_position:
            for p, nodes, parents in groups:
                h[nodes], c[nodes] = step(p, x.index_select(0, nodes), h.index_select(0, parents),
                                          c.index_select(0, parents))
        return h[:N], c[:N]

    return run


def head_gated_loop(cell) -> Callable[[Tensor, PlainLevels], tuple[Tensor, ...]]:
    """Teng & Zhang's gated head lexicalization (eqs 8-9) on binary trees: ``z x_L + (1 - z) x_R``."""
    D = cell.channels
    assert cell.method == "gated" and cell.n_ary == 2

    def run(x: Tensor, lv: PlainLevels) -> tuple[Tensor, ...]:
        N = lv.num_nodes
        (head,) = _buffers(x, N, D)
        head[lv.first] = x.index_select(0, lv.first)
        for nodes, slots, _ in lv.levels:
            n = nodes.numel()
            x_LR = head.index_select(0, slots).view(n, 2, D)
            z = torch.sigmoid(F.linear(x_LR.view(n, 2 * D), cell.W_zx, cell.b_z))
            head[nodes] = torch.lerp(x_LR[:, 1], x_LR[:, 0], z)
        return (head[:N],)

    return run


def gru_loop(cell) -> Callable[[Tensor, PlainLevels], tuple[Tensor, ...]]:
    """:class:`ChildSumGRU`: ``U`` has no bias, so an empty slot's zero state gives zero terms. As in the cell,
    ``W`` is applied level by level."""
    d = cell.state_channels[0]

    def run(x: Tensor, lv: PlainLevels) -> tuple[Tensor, ...]:
        N = lv.num_nodes
        (h,) = _buffers(x, N, d)
        _, W_z, W_n = cell.W(x.index_select(0, lv.first)).chunk(3, dim=1)  # a leaf: no children, no U terms
        z = torch.sigmoid(W_z)
        h[lv.first] = (1 - z) * torch.tanh(W_n)
        for nodes, slots, K in lv.levels:
            n = nodes.numel()
            W_r, W_z, W_n = cell.W(x.index_select(0, nodes)).chunk(3, dim=1)
            h_k = h.index_select(0, slots).view(n, K, d)
            U_r, U_z, U_n = (h_k @ cell.U.weight.t()).chunk(3, dim=-1)
            z = torch.sigmoid(W_z + U_z.sum(dim=1))
            n_new = torch.tanh(W_n + (torch.sigmoid(W_r.unsqueeze(1) + U_r) * U_n).sum(dim=1))
            h[nodes] = (1 - z) * n_new + z * h_k.sum(dim=1)
        return (h[:N],)

    return run


PLAIN_LOOPS: dict[str, Callable] = {
    "childsum": child_sum_loop, "nary": nary_loop, "slstm": slstm_loop, "lstmrnn": lstm_rnn_loop,
    "lexicalized": lexicalized_loop, "topdown": top_down_loop, "head_gated": head_gated_loop, "gru": gru_loop,
}


def levels_for(cell, edge_index: Tensor, edge_pos: Tensor, num_nodes: int) -> PlainLevels:
    """The plain levels a loop over ``cell`` runs on."""
    return plain_levels(edge_index, edge_pos, num_nodes, cell.direction,
                        cell.max_children if cell.direction == "bottom_up" else None)


def check_equal(name: str, cell, batch, x: Tensor) -> float:
    """Largest difference, in float64, between the states of ``cell`` and of its plain loop (and of their
    gradients of the states' sum with respect to the parameters and ``x``), scaled by the largest value."""
    cell64 = cell.double() if next(cell.parameters(), torch.empty(0)).dtype != torch.float64 else cell
    x = x.double().detach().requires_grad_()
    lv = levels_for(cell64, batch.edge_index, batch.edge_pos, batch.num_nodes)
    worst = 0.0
    results = []
    for run in (lambda: cell64(x, batch), lambda: PLAIN_LOOPS[name](cell64)(x, lv)):
        out = run()
        params = [p for p in cell64.parameters() if p.requires_grad]
        grads = torch.autograd.grad(sum(o.sum() for o in out), [x, *params], allow_unused=True)
        results.append([*out, *grads])
    for a, b in zip(*results, strict=True):
        if a is None or b is None:
            if (a is None) != (b is None):
                return float("inf")
            continue
        a, b = a.detach(), b.detach()
        worst = max(worst, float((a - b).abs().max()) / max(1.0, float(a.abs().max())))
    cell.float()
    return worst
