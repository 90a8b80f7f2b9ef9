"""The hand-written per-level backward of TopDownTreeLSTM (the engine's fused path).

Checked by finite differences (gradcheck), against the engine's generic path
that re-runs ``update`` under autograd (both in float64, on trees and on DAGs
whose nodes have several parents), and, in float32, with the oneDNN prepacked
products on and off.
"""

from __future__ import annotations

import random

import networkx as nx
import pytest
import torch
from torch_geometric.data import Batch, Data
from trees import random_ptb

from graphtree.data import from_networkx, from_ptb
from graphtree.nn.functional import PackedWeights, onednn_available
from graphtree.nn.top_down import TopDownTreeLSTM

needs_onednn = pytest.mark.skipif(not onednn_available(), reason="this PyTorch build has no usable oneDNN")


def random_batch(seed: int, count: int, max_words: int, max_arity: int = 2) -> Batch:
    """Random trees of 1..max_words words: single-node trees and unary nodes included."""
    rng = random.Random(seed)
    return Batch.from_data_list([from_ptb(random_ptb(rng.randint(1, max_words), max_arity, rng))
                                 for _ in range(count)])


def small_dag() -> Data:
    """Node 3 is child 1 of node 1 and child 0 of node 2 (two parents, two positions); node 4 hangs below it.

    Depth 2 holds node 3 (two parent slots) and node 7 (one, and an empty slot);
    a second root, node 5, has a child at position 1 only.
    """
    graph = nx.DiGraph()
    graph.add_nodes_from(range(8))
    for child, parent, position in [(1, 0, 0), (2, 0, 1), (3, 1, 1), (3, 2, 0), (4, 3, 0), (6, 5, 1), (7, 1, 0)]:
        graph.add_edge(child, parent, position=position)
    data = from_networkx(graph)
    assert int(torch.bincount(data.edge_index[0]).max()) == 2
    return slim(data)


def slim(data: Data) -> Data:
    """Only the structure, so that trees and DAGs from different converters batch together."""
    return Data(edge_index=data.edge_index, edge_pos=data.edge_pos, num_nodes=data.num_nodes)


def ternary_dag() -> Data:
    """A three-ary DAG whose node 4 has three parents, at positions 0, 2 and 2."""
    return Data(edge_index=torch.tensor([[1, 2, 3, 3, 4, 4, 4, 5], [0, 0, 1, 2, 1, 2, 0, 3]]),
                edge_pos=torch.tensor([0, 1, 1, 0, 0, 2, 2, 0]), num_nodes=6)


def outputs_and_grads(cell: TopDownTreeLSTM, x: torch.Tensor, batch) -> dict[str, torch.Tensor]:
    """``h``, ``c``, and the gradients of a weighted sum of both for x (if it requires grad) and trained parameters."""
    h, c = cell(x, batch)
    gen = torch.Generator().manual_seed(1)
    loss = ((h * torch.randn(h.shape, generator=gen, dtype=h.dtype)).sum()
            + (c * torch.randn(c.shape, generator=gen, dtype=c.dtype)).sum())
    wrt = ({"x": x} if x.requires_grad else {}) | {name: p for name, p in cell.named_parameters() if p.requires_grad}
    return {"h": h, "c": c, **dict(zip(wrt, torch.autograd.grad(loss, list(wrt.values())), strict=True))}


def assert_all_close(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], **tolerances) -> None:
    assert got.keys() == want.keys()
    for name in got:
        torch.testing.assert_close(got[name], want[name], **tolerances, msg=lambda m, name=name: f"{name}: {m}")


@pytest.fixture
def backward_calls(monkeypatch) -> list[int]:
    """Counts calls of the hand-written backward, to show which path the engine took."""
    calls: list[int] = []
    original = TopDownTreeLSTM.backward_level

    def spy(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(TopDownTreeLSTM, "backward_level", spy)
    return calls


@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("graph", ["trees", "dag"])
def test_gradcheck_through_the_hand_written_backward(graph, share, backward_calls):
    torch.manual_seed(0)
    batch = random_batch(seed=7, count=4, max_words=5) if graph == "trees" else small_dag()
    cell = TopDownTreeLSTM(3, 2, share_input_weights=share).double()
    x = torch.randn(batch.num_nodes, 3, dtype=torch.float64, requires_grad=True)

    def run(x_in, *params):
        return cell(x_in, batch)

    assert torch.autograd.gradcheck(run, (x, *cell.parameters()))
    assert backward_calls, "the engine did not take the fused path"


CASES = {
    "binary trees": lambda: (random_batch(seed=3, count=12, max_words=12), 2),
    "ternary trees": lambda: (random_batch(seed=4, count=8, max_words=9, max_arity=3), 3),
    "chains (one position per level)": lambda: (Batch.from_data_list([from_ptb("(1 (2 (3 (4 w))))")] * 3), 1),
    "single words (roots only)": lambda: (Batch.from_data_list([from_ptb("(1 w)"), from_ptb("(3 v)")]), 2),
    "dag": lambda: (Batch.from_data_list([small_dag(), *map(slim, random_batch(seed=5, count=3, max_words=6)
                                                                      .to_data_list())]), 2),
    "ternary dag": lambda: (Batch.from_data_list([ternary_dag(), ternary_dag()]), 3),
    "chain at positions 2, 1": lambda: (Data(edge_index=torch.tensor([[1, 2], [0, 1]]), edge_pos=torch.tensor([2, 1]),
                                             num_nodes=3), 3),
}


@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("case", list(CASES))
def test_fused_path_equals_recompute_path(case, share, monkeypatch, backward_calls):
    torch.manual_seed(1)
    batch, n_ary = CASES[case]()
    cell = TopDownTreeLSTM(5, 4, n_ary=n_ary, share_input_weights=share).double()
    x = torch.randn(batch.num_nodes, 5, dtype=torch.float64, requires_grad=True)
    fused = outputs_and_grads(cell, x, batch)
    assert backward_calls
    monkeypatch.setattr(TopDownTreeLSTM, "fused_backward", False)
    backward_calls.clear()
    recomputed = outputs_and_grads(cell, x, batch)
    assert not backward_calls, "the recompute path called backward_level"
    assert_all_close(fused, recomputed, rtol=1e-10, atol=1e-10)


def test_frozen_input_and_parameters_get_no_gradient(backward_calls):
    torch.manual_seed(2)
    batch = random_batch(seed=6, count=5, max_words=8)
    cell = TopDownTreeLSTM(5, 4).double()
    reference = TopDownTreeLSTM(5, 4).double()
    reference.load_state_dict(cell.state_dict())
    cell.W_x.requires_grad_(False)
    cell.W_co.requires_grad_(False)
    x = torch.randn(batch.num_nodes, 5, dtype=torch.float64)  # no gradient: the backward skips dL/dx
    got = outputs_and_grads(cell, x, batch)
    want = outputs_and_grads(reference, x, batch)
    assert backward_calls
    assert set(got) == {"h", "c", "b", "W_h", "W_c"}
    assert_all_close(got, {name: want[name] for name in got})


@needs_onednn
def test_each_matrix_is_packed_once_per_pass(monkeypatch):
    """The per-pass packs are keyed by the matrix object: a new view per level would pack again every level."""
    created: list[PackedWeights] = []
    init = PackedWeights.__init__

    def record(self):
        init(self)
        created.append(self)

    monkeypatch.setattr(PackedWeights, "__init__", record)
    batch = random_batch(seed=8, count=10, max_words=15)
    cell = TopDownTreeLSTM(6, 4)
    x = torch.randn(batch.num_nodes, 6, requires_grad=True)
    h, c = cell(x, batch)
    (h.sum() + c.sum()).backward()
    assert len(created) == 1, "the levels did not share the pass's PackedWeights"
    assert 0 < len(created[0]._packed) <= 4 * cell.n_ary  # [W_x, W_h, W_c] and W_co per position, and transposed


@needs_onednn
@pytest.mark.filterwarnings("ignore:TF32 acceleration")
@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("input_grad", [True, False])
def test_agrees_with_and_without_onednn(input_grad, share, monkeypatch):
    torch.manual_seed(0)
    batch = random_batch(seed=1, count=30, max_words=20)
    cell = TopDownTreeLSTM(24, 16, share_input_weights=share)
    x = torch.randn(batch.num_nodes, 24, requires_grad=input_grad)

    taken: list[bool] = []
    fast = PackedWeights._fast
    monkeypatch.setattr(PackedWeights, "_fast", lambda self, *a: taken.append(fast(self, *a)) or taken[-1])
    with_onednn = outputs_and_grads(cell, x, batch)
    assert any(taken), "the oneDNN path was never taken"
    with torch.backends.mkldnn.flags(enabled=False):
        taken.clear()
        without = outputs_and_grads(cell, x, batch)
        assert not any(taken)
    assert_all_close(with_onednn, without, atol=2e-5, rtol=1e-4)
