"""LSTM-RNN's hand-written per-level backward (the engine's fused path).

``test_lstm_rnn.py`` checks the cell against a per-node recursive reference;
here the fused derivatives are checked by finite differences, against the
engine's generic recompute path (autograd through ``update``), and in float32
with the oneDNN products on and off.
"""

from __future__ import annotations

import random

import pytest
import torch
from fused import fused_and_recomputed, spy_backward_level, with_and_without_onednn
from torch_geometric.data import Batch
from trees import random_ptb

from graphtree.data import from_ptb
from graphtree.nn import LSTMRNN
from graphtree.nn.functional import onednn_available

ACTIVATIONS = ["tanh", "softsign", "sigmoid"]


def move_child(data, child: int, pos: int):
    """Put ``child`` in slot ``pos`` of its parent (e.g. a unary node's only child in the second slot)."""
    edge = (data.edge_index[0] == child).nonzero().item()
    data.edge_pos[edge] = pos
    data.child_pos[child] = pos
    return data


def small_batch(seed: int = 0) -> Batch:
    """Random binary trees with unary nodes, a single leaf and a lone child in the second slot."""
    rng = random.Random(seed)
    trees = [from_ptb(random_ptb(rng.randint(2, 5), 2, rng)) for _ in range(3)]
    trees += [from_ptb("(2 (3 (4 (1 a) (2 b))) (0 c))"), from_ptb("(4 z)"),
              move_child(from_ptb("(2 (3 (1 a)) (2 b))"), child=2, pos=1)]
    return Batch.from_data_list(trees)


def random_batch(seed: int, count: int = 30) -> Batch:
    rng = random.Random(seed)
    return Batch.from_data_list([from_ptb(random_ptb(rng.randint(1, 20), 2, rng)) for _ in range(count)])


def run(cell: LSTMRNN, x: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, ...]:
    """Outputs, then the gradients of x (when it needs one) and of every parameter."""
    h, c = cell(x, batch)
    gen = torch.Generator().manual_seed(5)
    loss = (h * torch.randn(h.shape, generator=gen, dtype=h.dtype)).sum()
    loss = loss + (c * torch.randn(c.shape, generator=gen, dtype=c.dtype)).sum()
    wrt = [x, *cell.parameters()] if x.requires_grad else list(cell.parameters())
    return (h, c, *torch.autograd.grad(loss, wrt))


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_gradcheck_through_the_fused_backward(activation, monkeypatch):
    torch.manual_seed(0)
    cell = LSTMRNN(3, 3, activation=activation).double()
    batch = small_batch()
    x = torch.randn(batch.num_nodes, 3, dtype=torch.float64, requires_grad=True)
    calls = spy_backward_level(monkeypatch, LSTMRNN)
    assert torch.autograd.gradcheck(lambda x, *params: cell(x, batch), (x, *cell.parameters()))
    assert calls, "the fused backward was never used"


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("input_grad", [True, False])
def test_fused_equals_recompute(activation, input_grad, monkeypatch):
    torch.manual_seed(1)
    cell = LSTMRNN(6, 6, activation=activation).double()
    batch = random_batch(seed=2, count=8)
    x = torch.randn(batch.num_nodes, 6, dtype=torch.float64, requires_grad=input_grad)
    fused, recomputed = fused_and_recomputed(monkeypatch, LSTMRNN, lambda: run(cell, x, batch))
    for k, (a, b) in enumerate(zip(fused, recomputed, strict=True)):
        assert b.abs().sum() > 0, k
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-8, msg=lambda m, k=k: f"output/gradient {k}: {m}")


@pytest.mark.skipif(not onednn_available(), reason="this PyTorch build has no usable oneDNN")
@pytest.mark.filterwarnings("ignore:TF32 acceleration")
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("input_grad", [True, False])
def test_agrees_with_and_without_onednn(activation, input_grad, monkeypatch):
    torch.manual_seed(0)
    cell = LSTMRNN(16, 16, activation=activation)
    batch = random_batch(seed=1)
    x = torch.randn(batch.num_nodes, 16, requires_grad=input_grad)
    with_onednn, without = with_and_without_onednn(monkeypatch, lambda: run(cell, x, batch))
    for a, b in zip(with_onednn, without, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)
