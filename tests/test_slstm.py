"""S-LSTM (Zhu et al., 2015, eqs 1-7) against a per-node recursive reference."""

from __future__ import annotations

import pytest
import torch
from cells import (
    assert_binary_input_errors,
    assert_child_order_matters,
    assert_deep_chain_backpropagates,
    assert_matches_reference,
    binary_children_of,
    mixed_binary_batch,
)
from torch_geometric.data import Batch

from graphtree.data import from_ptb
from graphtree.nn.slstm import SLSTM


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

    kids = binary_children_of(data)
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
    batch = mixed_binary_batch()
    layer = SLSTM(in_channels, 5, leaf=leaf).double()
    x = torch.randn(batch.num_nodes, in_channels, dtype=torch.float64, requires_grad=True)
    assert_matches_reference(layer, x, batch, reference)


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
    assert_binary_input_errors(lambda d: SLSTM(d, d))
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
