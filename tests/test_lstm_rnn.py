"""LSTM-RNN (Le & Zuidema, 2015, sections 3-4) against a per-node recursive reference."""

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
from graphtree.nn.lstm_rnn import LSTMRNN

# g, written out here rather than taken from the layer.
ACTIVATIONS = {
    "tanh": torch.tanh,
    "softsign": lambda v: v / (1 + v.abs()),
    "sigmoid": lambda v: 1 / (1 + torch.exp(-v)),
}


def reference(layer: LSTMRNN, x: torch.Tensor, data) -> tuple[torch.Tensor, torch.Tensor]:
    """Section 3's equations node by node, recursing from each node into its children."""
    d = layer.hidden_channels
    g = ACTIVATIONS[layer.activation]
    zero = x.new_zeros(d)

    def blocks(W: torch.Tensor, names: str) -> dict[str, torch.Tensor]:
        return {name: W[k * d:(k + 1) * d] for k, name in enumerate(names.split())}

    leaf_set = blocks(layer.W_leaf, "i1 f1 i2 f2 c1 o1 c2 o2")  # applied to a leaf child's output
    inner_set = blocks(layer.W_inner, "i1 f1 i2 f2 c1 o1 c2 o2")  # applied to an inner child's output
    W = blocks(layer.W_cell, "ci1 cf1 ci2 cf2 co")
    b_i, b_f, b_c, b_o = layer.b.split(d)
    kids = binary_children_of(data)
    memo: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def child(v: int | None) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        if v is None:  # a missing child: zero output and memory (either weight set gives 0)
            return zero, zero, inner_set
        out, mem = node(v)
        return out, mem, leaf_set if v not in kids else inner_set

    def node(v: int) -> tuple[torch.Tensor, torch.Tensor]:
        if v in memo:
            return memo[v]
        if v not in kids:
            p, c_p = x[v], zero  # the leaf output is the word vector, its memory 0
        else:
            x_out, c_x, Wx = child(kids[v][0])
            y_out, c_y, Wy = child(kids[v][1])
            i_1 = torch.sigmoid(Wx["i1"] @ x_out + Wy["i2"] @ y_out + W["ci1"] @ c_x + W["ci2"] @ c_y + b_i)
            i_2 = torch.sigmoid(Wy["i1"] @ y_out + Wx["i2"] @ x_out + W["ci1"] @ c_y + W["ci2"] @ c_x + b_i)
            f_1 = torch.sigmoid(Wx["f1"] @ x_out + Wy["f2"] @ y_out + W["cf1"] @ c_x + W["cf2"] @ c_y + b_f)
            f_2 = torch.sigmoid(Wy["f1"] @ y_out + Wx["f2"] @ x_out + W["cf1"] @ c_y + W["cf2"] @ c_x + b_f)
            c_p = f_1 * c_x + f_2 * c_y + g((Wx["c1"] @ x_out) * i_1 + (Wy["c2"] @ y_out) * i_2 + b_c)
            o = torch.sigmoid(Wx["o1"] @ x_out + Wy["o2"] @ y_out + W["co"] @ c_p + b_o)
            p = o * g(c_p)
        memo[v] = (p, c_p)
        return p, c_p

    states = [node(v) for v in range(data.num_nodes)]
    return torch.stack([p for p, _ in states]), torch.stack([c for _, c in states])


@pytest.mark.parametrize("activation", ["tanh", "softsign", "sigmoid"])
def test_matches_reference_on_a_mixed_batch(activation: str) -> None:
    torch.manual_seed(0)
    batch = mixed_binary_batch()
    layer = LSTMRNN(5, 5, activation=activation).double()
    x = torch.randn(batch.num_nodes, 5, dtype=torch.float64, requires_grad=True)
    assert_matches_reference(layer, x, batch, reference)


def test_leaf_output_is_the_word_vector_and_leaf_memory_zero() -> None:
    data = from_ptb("(1 (2 a) (3 (4 b) (0 c)))")
    x = torch.randn(data.num_nodes, 4)
    h, c = LSTMRNN(4, 4)(x, data)
    torch.testing.assert_close(h[data.is_leaf], x[data.is_leaf])
    assert (c[data.is_leaf] == 0).all()
    assert (c[~data.is_leaf] != 0).all()


def test_leaf_and_inner_weights_are_untied() -> None:
    # A tree without inner children never reads W_inner; one with an inner child does.
    torch.manual_seed(3)
    layer = LSTMRNN(4, 4)
    flat, deep = from_ptb("(1 (2 a) (3 b))"), from_ptb("(1 (2 (3 a) (4 b)) (0 c))")
    x_flat, x_deep = torch.randn(flat.num_nodes, 4), torch.randn(deep.num_nodes, 4)
    h_flat, h_deep = layer(x_flat, flat)[0], layer(x_deep, deep)[0]
    with torch.no_grad():
        layer.W_inner.add_(1.0)
    torch.testing.assert_close(layer(x_flat, flat)[0], h_flat)
    assert not torch.allclose(layer(x_deep, deep)[0][0], h_deep[0], atol=1e-4)


def test_swapping_two_children_changes_the_output() -> None:
    assert_child_order_matters(LSTMRNN(4, 4))


def test_ten_thousand_node_chain() -> None:
    assert_deep_chain_backpropagates(LSTMRNN(4, 4))


def test_bad_input_is_a_clear_error() -> None:
    assert_binary_input_errors(lambda d: LSTMRNN(d, d))
    with pytest.raises(ValueError, match=r"in_channels == hidden_channels.*word vector"):
        LSTMRNN(100, 50)
    with pytest.raises(ValueError, match="activation must be one of"):
        LSTMRNN(5, 5, activation="relu")


def test_parameter_count() -> None:
    d = d_w = 50
    count = (
        8 * d * d_w  # leaf set: W_i1, W_i2, W_f1, W_f2, W_c1, W_c2, W_o1, W_o2 on a leaf child's output
        + 8 * d * d  # inner set: the same eight maps on an inner child's output
        + 4 * d * d  # W_ci1, W_ci2, W_cf1, W_cf2 on the children's memories (a leaf's is 0)
        + d * d  # W_co on the parent's own memory
        + 4 * d  # b_i, b_f, b_c, b_o
    )
    assert count == 52_700
    assert sum(p.numel() for p in LSTMRNN(d_w, d).parameters()) == count


@pytest.mark.parametrize("activation", ["tanh", "softsign", "sigmoid"])
def test_gradcheck(activation: str) -> None:
    torch.manual_seed(2)
    batch = Batch.from_data_list([from_ptb("(1 (2 (3 a)) (4 (0 b) (1 c)))"), from_ptb("(2 a)")])
    layer = LSTMRNN(3, 3, activation=activation).double()
    x = torch.randn(batch.num_nodes, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, *params: layer(x, batch), (x, *layer.parameters()))


def test_repr() -> None:
    assert repr(LSTMRNN(4, 4, activation="softsign")) == "LSTMRNN(4, 4, activation='softsign')"
