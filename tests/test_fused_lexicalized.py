"""The hand-written per-level backward of LexicalizedTreeLSTM (the engine's fused path).

Checked three ways: by finite differences (gradcheck), against the engine's
generic path that re-runs ``update`` under autograd, and, in float32, with the
oneDNN prepacked products on and off.
"""

from __future__ import annotations

import random

import pytest
import torch
from fused import fused_and_recomputed, spy_backward_level, with_and_without_onednn
from torch_geometric.data import Batch
from trees import random_ptb

from graphtree.data import from_ptb
from graphtree.nn.functional import onednn_available
from graphtree.nn.lexicalized import LexicalizedTreeLSTM

needs_onednn = pytest.mark.skipif(not onednn_available(), reason="this PyTorch build has no usable oneDNN")


def random_batch(seed: int, count: int, max_words: int, max_arity: int = 2) -> Batch:
    """Random trees of 1..max_words words: single leaves, unary nodes and missing child slots included."""
    rng = random.Random(seed)
    return Batch.from_data_list([from_ptb(random_ptb(rng.randint(1, max_words), max_arity, rng))
                                 for _ in range(count)])


def outputs_and_grads(cell: LexicalizedTreeLSTM, x: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, ...]:
    """``(h, c)``, and the gradients of a weighted sum of both for x (if it requires grad) and trained parameters."""
    h, c = cell(x, batch)
    gen = torch.Generator().manual_seed(1)
    loss = ((h * torch.randn(h.shape, generator=gen, dtype=h.dtype)).sum()
            + (c * torch.randn(c.shape, generator=gen, dtype=c.dtype)).sum())
    wrt = ([x] if x.requires_grad else []) + [p for p in cell.parameters() if p.requires_grad]
    return (h, c, *torch.autograd.grad(loss, wrt))


@pytest.fixture
def backward_calls(monkeypatch) -> list[int]:
    """Counts calls of the hand-written backward, to show which path the engine took."""
    return spy_backward_level(monkeypatch, LexicalizedTreeLSTM)


@pytest.mark.parametrize("lexicalized", [True, False])
def test_gradcheck_through_the_hand_written_backward(lexicalized, backward_calls):
    torch.manual_seed(0)
    batch = random_batch(seed=7, count=4, max_words=5)  # 16 nodes, 5 levels, unary nodes included
    cell = LexicalizedTreeLSTM(3, 2, lexicalized=lexicalized).double()
    x = torch.randn(batch.num_nodes, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, *params: cell(x, batch), (x, *cell.parameters()))
    assert backward_calls, "the engine never called backward_level"


@pytest.mark.parametrize("lexicalized", [True, False])
@pytest.mark.parametrize("n_ary", [1, 2, 3])
@pytest.mark.parametrize("input_grad", [True, False])
def test_fused_equals_recompute(lexicalized, n_ary, input_grad, monkeypatch):
    torch.manual_seed(1)
    if n_ary == 1:  # unary chains of several lengths
        batch = Batch.from_data_list([from_ptb("(0 " * k + "(1 w)" + ")" * k) for k in range(6)])
    else:
        batch = random_batch(seed=n_ary, count=6, max_words=9, max_arity=n_ary)
    cell = LexicalizedTreeLSTM(5, 4, n_ary=n_ary, lexicalized=lexicalized).double()
    x = torch.randn(batch.num_nodes, 5, dtype=torch.float64, requires_grad=input_grad)

    fused, recomputed = fused_and_recomputed(monkeypatch, LexicalizedTreeLSTM,
                                             lambda: outputs_and_grads(cell, x, batch))
    assert len(fused) == len(recomputed) == 2 + int(input_grad) + len(list(cell.parameters()))
    for a, b in zip(fused, recomputed, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("lexicalized", [True, False])
def test_frozen_parameters_get_no_gradient(lexicalized, monkeypatch):
    """Absent names in the engine's gradient dict: the other gradients are unchanged."""
    torch.manual_seed(2)
    batch = random_batch(seed=5, count=5, max_words=8)
    cell = LexicalizedTreeLSTM(3, 4, lexicalized=lexicalized).double()
    x = torch.randn(batch.num_nodes, 3, dtype=torch.float64, requires_grad=True)
    for frozen in (["W_x", "b"], ["W_h", "W_c", "W_co"]):
        for name, p in cell.named_parameters():
            p.requires_grad_(name not in frozen)
        fused = outputs_and_grads(cell, x, batch)
        with monkeypatch.context() as patch:
            patch.setattr(LexicalizedTreeLSTM, "fused_backward", False)
            recomputed = outputs_and_grads(cell, x, batch)
        for a, b in zip(fused, recomputed, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@needs_onednn
@pytest.mark.filterwarnings("ignore:TF32 acceleration")
@pytest.mark.parametrize("lexicalized", [True, False])
@pytest.mark.parametrize("input_grad", [True, False])
def test_onednn_equals_plain_matmuls(lexicalized, input_grad, monkeypatch, backward_calls):
    torch.manual_seed(0)
    batch = random_batch(seed=1, count=30, max_words=20)
    cell = LexicalizedTreeLSTM(24, 16, lexicalized=lexicalized)
    x = torch.randn(batch.num_nodes, 24, requires_grad=input_grad)

    with_onednn, without = with_and_without_onednn(monkeypatch, lambda: outputs_and_grads(cell, x, batch))
    assert backward_calls
    for a, b in zip(with_onednn, without, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)
