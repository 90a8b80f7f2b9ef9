"""graphtree.models.Readout against hand-computed pools of a tiny batch, and the sub-token splitter on hand-written
identifiers."""

from __future__ import annotations

import math

import pytest
import torch
from torch_geometric.data import Batch, Data

from graphtree.data.subtokens import split_subtokens
from graphtree.models import READOUTS, Readout

# Two graphs: a tree of three nodes (root 0) and a DAG of two roots (nodes 3 and 4) over one child (node 5).
H = torch.tensor([[1.0, -2.0], [3.0, 0.0], [-1.0, 4.0],
                  [2.0, 2.0], [0.0, -4.0], [6.0, 1.0]])


def tiny_batch() -> Batch:
    tree = Data(edge_index=torch.tensor([[1, 2], [0, 0]]), num_nodes=3, is_root=torch.tensor([True, False, False]))
    dag = Data(edge_index=torch.tensor([[2, 2], [0, 1]]), num_nodes=3, is_root=torch.tensor([True, True, False]))
    return Batch.from_data_list([tree, dag])


HAND = {
    "root": [[1.0, -2.0], [1.0, -1.0]],              # graph 1: the mean of its two roots (2, 2) and (0, -4)
    "mean": [[1.0, 2 / 3], [8 / 3, -1 / 3]],
    "max": [[3.0, 4.0], [6.0, 2.0]],
}


@pytest.mark.parametrize("mode", ["root", "mean", "max"])
def test_pools_by_hand(mode):
    out = Readout(mode, 2)(H, tiny_batch())
    assert torch.allclose(out, torch.tensor(HAND[mode]))


def test_root_mean_max_is_the_three_side_by_side():
    readout = Readout("root-mean-max", 2)
    assert readout.out_channels == 6
    expected = torch.cat([torch.tensor(HAND[m]) for m in ("root", "mean", "max")], dim=1)
    assert torch.allclose(readout(H, tiny_batch()), expected)


def test_attention_is_a_softmax_of_the_gate_over_each_graph():
    readout = Readout("attention", 2)
    gate = readout.attention.gate_nn
    with torch.no_grad():
        gate.weight.copy_(torch.tensor([[0.5, -1.0]]))
        gate.bias.fill_(0.25)
    expected = []
    for rows in ([0, 1, 2], [3, 4, 5]):
        scores = [0.5 * H[k, 0].item() - 1.0 * H[k, 1].item() + 0.25 for k in rows]
        weights = [math.exp(s) for s in scores]
        total = sum(weights)
        expected.append([sum(w / total * H[k, c].item() for w, k in zip(weights, rows)) for c in range(2)])
    assert torch.allclose(readout(H, tiny_batch()), torch.tensor(expected), atol=1e-6)


def test_without_is_root_the_root_is_each_graphs_first_node():
    batch = Batch.from_data_list([Data(num_nodes=3), Data(num_nodes=3)])
    assert torch.equal(Readout("root", 2)(H, batch), H[[0, 3]])


def test_a_single_graph_without_a_batch_vector():
    graph = Data(num_nodes=3, is_root=torch.tensor([False, True, False]))
    assert torch.equal(Readout("root", 2)(H[:3], graph), H[[1]])
    assert torch.allclose(Readout("mean", 2)(H[:3], graph), H[:3].mean(0, keepdim=True))


def test_every_mode_backpropagates_and_an_unknown_one_is_refused():
    for mode in READOUTS:
        h = H.clone().requires_grad_()
        Readout(mode, 2)(h, tiny_batch()).sum().backward()
        assert h.grad is not None and torch.isfinite(h.grad).all()
    with pytest.raises(ValueError, match="readout must be one of"):
        Readout("sum", 2)


@pytest.mark.parametrize("text, words", [
    ("snake_case_name", ["snake", "case", "name"]),
    ("camelCaseName", ["camel", "case", "name"]),
    ("parseHTTPResponse", ["parse", "http", "response"]),
    ("HTTPServer2", ["http", "server", "2"]),
    ("utf8_decode", ["utf", "8", "decode"]),
    ("__init__", ["init"]),
    ("x", ["x"]),
    ("", []),
    ("__", []),
    ("max-nodes.v2", ["max", "nodes", "v", "2"]),
    ("ALL_CAPS", ["all", "caps"]),
])
def test_split_subtokens_by_hand(text, words):
    assert split_subtokens(text) == words
