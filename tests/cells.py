"""Checks every binary cell's tests run the same way: child order matters, a 10,000-deep chain backpropagates."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Batch, Data

from graphtree.data import from_heads, from_ptb
from graphtree.errors import ScheduleError


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
        data = from_heads([*range(2, depth + 1), 0])  # token i's head is i + 1: every node has one child
        x = torch.randn(depth, channels, requires_grad=True)
        h, c = layer(x, data)
        (h.sum() + c.sum()).backward()
    finally:
        torch.set_num_threads(threads)
    assert torch.isfinite(h).all() and torch.isfinite(c).all()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    for name, p in layer.named_parameters():
        assert torch.isfinite(p.grad).all(), name


# Binary trees of every shape a binary cell must handle; the last one is added by ``mixed_binary_batch``.
BINARY_TREES = [
    "(3 (2 a) (1 b))",
    "(4 z)",  # a tree that is a single leaf
    "(1 (2 (3 a) (4 b)) (0 c))",
    "(1 (2 a) (3 (4 b) (0 (1 c) (2 d))))",
    "(2 (3 (1 a)) (2 b))",  # a unary node over a leaf
    "(2 (3 (4 (1 a) (2 b))) (0 c))",  # a unary node over an inner node
    "(1 (2 (3 (4 a) (0 b)) (1 c)) (2 (3 d) (4 (0 e) (1 f))))",
    "(0 (1 (2 (3 (4 a) (0 b)) (1 c)) (2 d)) (3 e))",
]


def lone_second_child() -> Data:
    """``(2 (3 (1 a)) (2 b))`` with the unary node's only child in the second (right) slot."""
    data = from_ptb("(2 (3 (1 a)) (2 b))")
    unary_edge = (data.edge_index[1] == 1).nonzero().item()
    data.edge_pos[unary_edge] = 1
    data.child_pos[data.edge_index[0, unary_edge]] = 1
    return data


def mixed_binary_batch() -> Batch:
    return Batch.from_data_list([from_ptb(t) for t in BINARY_TREES] + [lone_second_child()])


def binary_children_of(data: Data) -> dict[int, list[int | None]]:
    """``kids[parent] = [left, right]`` (``None`` for an empty slot), for nodes that have children."""
    kids: dict[int, list[int | None]] = {}
    for (child, parent), pos in zip(data.edge_index.t().tolist(), data.edge_pos.tolist(), strict=True):
        kids.setdefault(parent, [None, None])[pos] = child
    return kids


def assert_matches_reference(layer: torch.nn.Module, x: torch.Tensor, batch: Batch, reference) -> None:
    """``layer(x, batch)`` equals ``reference(layer, x, batch)`` in ``h``, ``c`` and every gradient."""
    h, c = layer(x, batch)
    h_ref, c_ref = reference(layer, x, batch)
    assert h.shape == c.shape == h_ref.shape
    torch.testing.assert_close(h, h_ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(c, c_ref, atol=1e-6, rtol=0)
    weight_h, weight_c = torch.randn_like(h), torch.randn_like(c)
    wrt = [x, *layer.parameters()]
    grads = torch.autograd.grad((h * weight_h).sum() + (c * weight_c).sum(), wrt)
    grads_ref = torch.autograd.grad((h_ref * weight_h).sum() + (c_ref * weight_c).sum(), wrt)
    for (name, _), grad, grad_ref in zip([("x", None), *layer.named_parameters()], grads, grads_ref, strict=True):
        assert grad_ref.abs().sum() > 0, name
        torch.testing.assert_close(grad, grad_ref, atol=1e-6, rtol=0, msg=f"gradient of {name}")


def assert_binary_input_errors(make_layer, channels: int = 5) -> None:
    """A wrong feature width and a node with three children are clear errors naming the problem."""
    layer = make_layer(channels)
    with pytest.raises(ValueError, match=rf"\[num_nodes, {channels}\]"):
        layer(torch.randn(3, channels - 1), from_ptb("(1 (2 a) (3 b))"))
    with pytest.raises(ScheduleError, match=rf"node 0 .*3 children.*{type(layer).__name__} takes at most 2"):
        layer(torch.randn(4, channels), from_ptb("(1 (2 a) (3 b) (4 c))"))
