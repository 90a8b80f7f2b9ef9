"""Head lexicalization's hand-written per-level backward (the engine's fused path).

``test_teng_zhang.py`` checks the heads against a per-node recursive reference;
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
from graphtree.nn.functional import onednn_available
from graphtree.nn.head_lexicalization import HeadLexicalization

# (method, n_ary): the gate of eqs 8-9, its softmax over three children, and the parameter-free baselines.
SETTINGS = [("gated", 2), ("gated", 3), ("left", 2), ("right", 2), ("average", 2), ("left", 3), ("right", 3),
            ("average", 3)]
IDS = [f"{method}-{n}" for method, n in SETTINGS]


def move_child(data, child: int, pos: int):
    """Put ``child`` in slot ``pos`` of its parent (leaving the slots before it empty)."""
    edge = (data.edge_index[0] == child).nonzero().item()
    data.edge_pos[edge] = pos
    data.child_pos[child] = pos
    return data


def small_batch(n_ary: int, seed: int = 0) -> Batch:
    """Random trees of up to ``n_ary`` children with unary nodes (over a leaf, over a phrase, at the root),
    a single leaf, a lone child in the second slot and, for three children, a node with its middle slot empty."""
    rng = random.Random(seed)
    trees = [from_ptb(random_ptb(rng.randint(2, 6), n_ary, rng)) for _ in range(3)]
    trees += [from_ptb("(2 (1 (3 (2 d) (2 e))) (2 f))"), from_ptb("(1 (2 w))"), from_ptb("(4 z)"),
              move_child(from_ptb("(2 (3 (1 a)) (2 b))"), child=2, pos=1)]
    if n_ary == 3:
        trees += [from_ptb("(1 (2 a) (3 b) (4 c))"), move_child(from_ptb("(1 (2 (3 a) (4 b)) (0 c))"), child=4, pos=2)]
    return Batch.from_data_list(trees)


def random_batch(n_ary: int, seed: int, count: int = 30) -> Batch:
    rng = random.Random(seed)
    return Batch.from_data_list([from_ptb(random_ptb(rng.randint(1, 20), n_ary, rng)) for _ in range(count)])


def make(method: str, n_ary: int, channels: int, dtype: torch.dtype = torch.float64) -> HeadLexicalization:
    layer = HeadLexicalization(channels, method, n_ary=n_ary).to(dtype)
    if method == "gated":
        with torch.no_grad():
            layer.b_z.mul_(3)  # gates away from 1/2, so that a swapped child would show
    return layer


def run(layer: HeadLexicalization, x: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, ...]:
    """Head vectors, then the gradients of x (when it needs one) and of every parameter."""
    heads = layer(x, batch)
    weights = torch.randn(heads.shape, generator=torch.Generator().manual_seed(5), dtype=heads.dtype)
    wrt = ([x] if x.requires_grad else []) + list(layer.parameters())
    return (heads, *torch.autograd.grad((heads * weights).sum(), wrt))


@pytest.mark.parametrize(("method", "n_ary"), SETTINGS, ids=IDS)
def test_gradcheck_through_the_fused_backward(method, n_ary, monkeypatch):
    torch.manual_seed(0)
    layer = make(method, n_ary, 3)
    batch = small_batch(n_ary)
    x = torch.randn(batch.num_nodes, 3, dtype=torch.float64, requires_grad=True)
    calls = spy_backward_level(monkeypatch, HeadLexicalization)
    assert torch.autograd.gradcheck(lambda x, *params: layer(x, batch), (x, *layer.parameters()))
    assert calls, "the fused backward was never used"


def test_gradcheck_single_child_arity():
    torch.manual_seed(0)
    layer = HeadLexicalization(3, n_ary=1).double()
    batch = Batch.from_data_list([from_ptb("(1 (2 (3 w)))"), from_ptb("(4 z)")])
    x = torch.randn(batch.num_nodes, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: layer(x, batch), (x,))


# Without an input gradient only the gate has something to differentiate (its parameters).
@pytest.mark.parametrize(("method", "n_ary", "input_grad"),
                         [(method, n, True) for method, n in SETTINGS] + [("gated", 2, False), ("gated", 3, False)],
                         ids=[f"{i}-x" for i in IDS] + ["gated-2-frozen", "gated-3-frozen"])
def test_fused_equals_recompute(method, n_ary, input_grad, monkeypatch):
    torch.manual_seed(1)
    layer = make(method, n_ary, 6)
    batch = small_batch(n_ary, seed=3)
    x = torch.randn(batch.num_nodes, 6, dtype=torch.float64, requires_grad=input_grad)
    fused, recomputed = fused_and_recomputed(monkeypatch, HeadLexicalization, lambda: run(layer, x, batch))
    for k, (a, b) in enumerate(zip(fused, recomputed, strict=True)):
        assert b.abs().sum() > 0, k
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-10, msg=lambda m, k=k: f"output/gradient {k}: {m}")


@pytest.mark.skipif(not onednn_available(), reason="this PyTorch build has no usable oneDNN")
@pytest.mark.filterwarnings("ignore:TF32 acceleration")
@pytest.mark.parametrize("n_ary", [2, 3])
@pytest.mark.parametrize("input_grad", [True, False])
def test_gated_agrees_with_and_without_onednn(n_ary, input_grad, monkeypatch):
    torch.manual_seed(0)
    layer = make("gated", n_ary, 16, torch.float32)
    batch = random_batch(n_ary, seed=1)
    x = torch.randn(batch.num_nodes, 16, requires_grad=input_grad)
    with_onednn, without = with_and_without_onednn(monkeypatch, lambda: run(layer, x, batch))
    for a, b in zip(with_onednn, without, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)
