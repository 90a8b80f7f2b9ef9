"""Random trees for tests (PTB strings, so every converter path is exercised)."""

from __future__ import annotations

import random


def random_ptb(num_leaves: int, max_arity: int, rng: random.Random, num_labels: int = 5) -> str:
    """A random tree over ``num_leaves`` words whose internal nodes have 1..max_arity children.

    Unary nodes appear only when ``max_arity`` allows grouping a single subtree, so
    shapes vary in depth, balance and arity.
    """
    if max_arity < 2 and num_leaves > 1:
        raise ValueError("several leaves need nodes with at least two children")
    nodes = [f"({rng.randrange(num_labels)} w{k})" for k in range(num_leaves)]
    while len(nodes) > 1 or rng.random() < 0.1:
        arity = rng.randint(1, min(max_arity, len(nodes)))
        if arity == 1 and rng.random() < 0.7:
            arity = min(2, len(nodes), max_arity)
        start = rng.randrange(len(nodes) - arity + 1)
        merged = f"({rng.randrange(num_labels)} " + " ".join(nodes[start:start + arity]) + ")"
        nodes[start:start + arity] = [merged]
        if len(nodes) == 1 and rng.random() < 0.9:
            break
    return nodes[0]


def chain_ptb(length: int) -> str:
    """A unary chain of ``length`` nodes: the leaf at the bottom, every node one child."""
    line = "(0 w)"
    for _ in range(length - 1):
        line = f"(0 {line})"
    return line
