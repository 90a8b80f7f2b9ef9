"""Checks every binary cell's tests run the same way: child order matters, a 10,000-deep chain backpropagates."""

from __future__ import annotations

import torch

from graphtree.data import from_parents, from_ptb


def assert_child_order_matters(layer: torch.nn.Module, channels: int = 4) -> None:
    """Swapping two children (and two subtrees) changes the root's ``h``: the cell is not order-blind."""
    torch.manual_seed(1)
    words = {w: torch.randn(channels) for w in "abc"}

    def root_h(tree: str) -> torch.Tensor:
        data = from_ptb(tree)
        x = torch.stack([words[data.tokens[p]] if p >= 0 else torch.zeros(channels)
                         for p in data.word_pos.tolist()])
        return layer(x, data)[0][0]

    assert not torch.allclose(root_h("(1 (1 a) (1 b))"), root_h("(1 (1 b) (1 a))"), atol=1e-4)
    assert not torch.allclose(root_h("(1 (1 (1 a) (1 b)) (1 c))"), root_h("(1 (1 c) (1 (1 a) (1 b)))"), atol=1e-4)


def assert_deep_chain_backpropagates(layer: torch.nn.Module, depth: int = 10_000, channels: int = 4) -> None:
    """Forward and backward through a ``depth``-node chain: finite states, nonzero input gradients.

    Runs on one thread: ten thousand levels of tiny ops gain nothing from a
    parallel region per op, and stall badly when the cores are busy.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        data = from_parents([*range(2, depth + 1), 0])  # token i's head is i + 1: every node has one child
        x = torch.randn(depth, channels, requires_grad=True)
        h, c = layer(x, data)
        (h.sum() + c.sum()).backward()
    finally:
        torch.set_num_threads(threads)
    assert torch.isfinite(h).all() and torch.isfinite(c).all()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    for name, p in layer.named_parameters():
        assert torch.isfinite(p.grad).all(), name
