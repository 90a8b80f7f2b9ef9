"""S-LSTM (Zhu et al., 2015, eqs 1-7) against a per-node recursive reference."""

from __future__ import annotations

import pytest
import torch
from cells import assert_child_order_matters, assert_deep_chain_backpropagates
from torch_geometric.data import Batch

from graphtree.data import from_ptb
from graphtree.errors import ScheduleError
from graphtree.nn.slstm import SLSTM

TREES = [
    "(3 (2 a) (1 b))",
    "(4 z)",  # a tree that is a single leaf
    "(1 (2 (3 a) (4 b)) (0 c))",
    "(1 (2 a) (3 (4 b) (0 (1 c) (2 d))))",
    "(2 (3 (1 a)) (2 b))",  # a unary node over a leaf
    "(2 (3 (4 (1 a) (2 b))) (0 c))",  # a unary node over an inner node
    "(1 (2 (3 (4 a) (0 b)) (1 c)) (2 (3 d) (4 (0 e) (1 f))))",
    "(0 (1 (2 (3 (4 a) (0 b)) (1 c)) (2 d)) (3 e))",
]


def lone_right_child() -> Batch:
    """``(2 (3 (1 a)) (2 b))`` with the unary node's only child in the right slot."""
    data = from_ptb("(2 (3 (1 a)) (2 b))")
    unary_edge = (data.edge_index[1] == 1).nonzero().item()
    data.edge_pos[unary_edge] = 1
    data.child_pos[data.edge_index[0, unary_edge]] = 1
    return data


def mixed_batch() -> Batch:
    return Batch.from_data_list([from_ptb(t) for t in TREES] + [lone_right_child()])


def children_of(data) -> dict[int, list[int | None]]:
    kids: dict[int, list[int | None]] = {}
    for (child, parent), pos in zip(data.edge_index.t().tolist(), data.edge_pos.tolist(), strict=True):
        kids.setdefault(parent, [None, None])[pos] = child
    return kids


def reference(layer: SLSTM, x: torch.Tensor, data) -> tuple[torch.Tensor, torch.Tensor]:
    """Eqs 1-7 node by node, recursing from each node into its children."""
    d = layer.hidden_channels
    zero = x.new_zeros(d)
    gate = {"i": 0, "f_l": 1, "f_r": 2, "x": 3, "o": 4}
    side = {"L": 0, "R": 1}

    def W_h(g: str, s: str) -> torch.Tensor:  # W^s_{hg}
        return layer.W_h[gate[g] * d:(gate[g] + 1) * d, side[s] * d:(side[s] + 1) * d]

    def W_c(g: str, s: str) -> torch.Tensor:  # W^s_{cg}
        return layer.W_c[gate[g] * d:(gate[g] + 1) * d, side[s] * d:(side[s] + 1) * d]

    def b(g: str) -> torch.Tensor:
        return layer.b[gate[g] * d:(gate[g] + 1) * d]

    kids = children_of(data)
    memo: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def node(v: int) -> tuple[torch.Tensor, torch.Tensor]:
        if v in memo:
            return memo[v]
        if v not in kids:
            if layer.leaf == "embedding":
                h, c = x[v], zero
            else:
                W, bias = layer.W_leaf.weight, layer.W_leaf.bias
                c = W[:d] @ x[v] + bias[:d]
                o = torch.sigmoid(W[d:] @ x[v] + bias[d:])
                h = o * torch.tanh(c)
        else:
            left, right = kids[v]
            hL, cL = node(left) if left is not None else (zero, zero)
            hR, cR = node(right) if right is not None else (zero, zero)
            i = torch.sigmoid(W_h("i", "L") @ hL + W_h("i", "R") @ hR
                              + W_c("i", "L") @ cL + W_c("i", "R") @ cR + b("i"))
            fL = torch.sigmoid(W_h("f_l", "L") @ hL + W_h("f_l", "R") @ hR
                               + W_c("f_l", "L") @ cL + W_c("f_l", "R") @ cR + b("f_l"))
            fR = torch.sigmoid(W_h("f_r", "L") @ hL + W_h("f_r", "R") @ hR
                               + W_c("f_r", "L") @ cL + W_c("f_r", "R") @ cR + b("f_r"))
            xt = W_h("x", "L") @ hL + W_h("x", "R") @ hR + b("x")
            c = fL * cL + fR * cR + i * torch.tanh(xt)
            o = torch.sigmoid(W_h("o", "L") @ hL + W_h("o", "R") @ hR + layer.W_co @ c + b("o"))
            h = o * torch.tanh(c)
        memo[v] = (h, c)
        return h, c

    states = [node(v) for v in range(data.num_nodes)]
    return torch.stack([h for h, _ in states]), torch.stack([c for _, c in states])


@pytest.mark.parametrize(("in_channels", "leaf"), [(5, "embedding"), (4, "lstm")])
def test_matches_reference_on_a_mixed_batch(in_channels: int, leaf: str) -> None:
    torch.manual_seed(0)
    batch = mixed_batch()
    layer = SLSTM(in_channels, 5, leaf=leaf).double()
    x = torch.randn(batch.num_nodes, in_channels, dtype=torch.float64, requires_grad=True)
    h, c = layer(x, batch)
    h_ref, c_ref = reference(layer, x, batch)
    assert h.shape == c.shape == (batch.num_nodes, 5)
    torch.testing.assert_close(h, h_ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(c, c_ref, atol=1e-6, rtol=0)

    weight_h, weight_c = torch.randn_like(h), torch.randn_like(c)
    wrt = [x, *layer.parameters()]
    grads = torch.autograd.grad((h * weight_h).sum() + (c * weight_c).sum(), wrt)
    grads_ref = torch.autograd.grad((h_ref * weight_h).sum() + (c_ref * weight_c).sum(), wrt)
    for (name, _), g, g_ref in zip([("x", None), *layer.named_parameters()], grads, grads_ref, strict=True):
        assert g_ref.abs().sum() > 0, name
        torch.testing.assert_close(g, g_ref, atol=1e-6, rtol=0, msg=f"gradient of {name}")


def test_leaves_are_the_word_vectors_by_default() -> None:
    data = from_ptb("(1 (2 a) (3 b))")
    layer = SLSTM(3, 3)
    x = torch.randn(3, 3)
    h, c = layer(x, data)
    torch.testing.assert_close(h[data.is_leaf], x[data.is_leaf])
    assert (c[data.is_leaf] == 0).all()


@pytest.mark.parametrize("leaf", ["embedding", "lstm"])
def test_swapping_two_children_changes_the_output(leaf: str) -> None:
    assert_child_order_matters(SLSTM(4, 4, leaf=leaf))


def test_ten_thousand_node_chain() -> None:
    assert_deep_chain_backpropagates(SLSTM(4, 4))


def test_bad_input_is_a_clear_error() -> None:
    data = from_ptb("(1 (2 a) (3 b))")
    with pytest.raises(ValueError, match=r"\[num_nodes, 5\]"):
        SLSTM(5, 5)(torch.randn(3, 4), data)
    with pytest.raises(ScheduleError, match=r"node 0 .*3 children.*SLSTM takes at most 2"):
        SLSTM(5, 5)(torch.randn(4, 5), from_ptb("(1 (2 a) (3 b) (4 c))"))
    with pytest.raises(ValueError, match="in_channels must equal hidden_channels"):
        SLSTM(300, 150)
    with pytest.raises(ValueError, match="leaf must be one of"):
        SLSTM(5, 5, leaf="zero")


def test_parameter_count() -> None:
    d, x = 100, 300
    internal = (
        5 * 2 * d * d  # W^L_{hg}, W^R_{hg} for g in i, f_l, f_r, x, o (eqs 1-4, 6)
        + 3 * 2 * d * d  # W^L_{cg}, W^R_{cg} for g in i, f_l, f_r (eqs 1-3)
        + d * d  # W_co (eq 6)
        + 5 * d  # b_i, b_{f_l}, b_{f_r}, b_x, b_o
    )
    leaf_unit = 2 * d * x + 2 * d  # W^(c), W^(o) and their biases
    assert internal == 170_500
    assert sum(p.numel() for p in SLSTM(d, d).parameters()) == internal
    assert sum(p.numel() for p in SLSTM(x, d, leaf="lstm").parameters()) == internal + leaf_unit == 230_700


@pytest.mark.parametrize(("in_channels", "leaf"), [(3, "embedding"), (2, "lstm")])
def test_gradcheck(in_channels: int, leaf: str) -> None:
    torch.manual_seed(2)
    batch = Batch.from_data_list([from_ptb("(1 (2 (3 a)) (4 (0 b) (1 c)))"), from_ptb("(2 a)")])
    layer = SLSTM(in_channels, 3, leaf=leaf).double()
    x = torch.randn(batch.num_nodes, in_channels, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, *params: layer(x, batch), (x, *layer.parameters()))


def test_repr() -> None:
    assert repr(SLSTM(4, 6, leaf="lstm")) == "SLSTM(4, 6, leaf='lstm')"
