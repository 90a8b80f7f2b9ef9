"""Parent arrays, the dependency format of the original Tree-LSTM code (``a.parents``).

For token ``i`` (1-based) the array holds the 1-based index of its head, ``0``
at the root and ``-1`` for a token outside the tree (punctuation the parser left
out, say). Every node is a word; nodes are numbered in token order, skipping
tokens outside the tree, which stay in ``data.tokens`` so the sentence is whole.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch_geometric.data import Data

from ..errors import CycleError, TreeFormatError
from .levels import topological_levels
from .tree import NO_LABEL, Vocabulary, tree_data

__all__ = ["from_parents"]


def from_parents(
    parents: Sequence[int] | str,
    tokens: Sequence[str] | str | None = None,
    labels: Sequence[int | None] | None = None,
    vocab: Vocabulary | None = None,
) -> Data:
    """Convert a parent array into a dependency-tree ``Data``.

    Args:
        parents: Head of each token, 1-based; ``0`` root, ``-1`` outside the tree.
            A whitespace-separated string (a line of ``a.parents``) is accepted.
        tokens: The tokens (a list, or a whitespace-separated line of ``a.toks``).
        labels: Optional label per token (``None`` or ``-1`` for unlabelled).
        vocab: Optional token -> id mapping filling ``data.word``.

    Raises:
        TreeFormatError: a non-integer entry, an index out of range, no root or
            two roots, a head outside the tree, mismatched lengths (with the
            1-based token index).
        CycleError: the heads form a cycle (names the 1-based tokens on it).
    """
    heads = _parse_ints(parents)
    n = len(heads)
    if n == 0:
        raise TreeFormatError("empty parent array")
    if isinstance(tokens, str):
        tokens = tokens.split()
    if tokens is not None and len(tokens) != n:
        raise TreeFormatError(f"{len(tokens)} tokens but {n} parent entries")
    if labels is not None and len(labels) != n:
        raise TreeFormatError(f"{len(labels)} labels but {n} parent entries")

    roots = []
    for i, head in enumerate(heads, start=1):
        if head < -1 or head > n:
            raise TreeFormatError(f"token {i} has head {head}, outside -1..{n}", position=i)
        if head == i:
            raise CycleError([i], f"token {i} is its own head")
        if head == 0:
            roots.append(i)
    if not roots:
        raise TreeFormatError("no root: no token has head 0")
    if len(roots) > 1:
        raise TreeFormatError(f"two roots where one is required: tokens {roots[0]} and {roots[1]} have head 0",
                              position=roots[1])

    kept = [i for i in range(1, n + 1) if heads[i - 1] != -1]
    node_of = {token: node for node, token in enumerate(kept)}
    parent = []
    for token in kept:
        head = heads[token - 1]
        if head > 0 and head not in node_of:
            raise TreeFormatError(f"token {token} has head {head}, which is outside the tree (head -1)",
                                  position=token)
        parent.append(node_of[head] if head > 0 else -1)

    child_pos = [-1] * len(kept)
    seen_children = [0] * len(kept)
    for node, up in enumerate(parent):  # token order, so positions run left to right
        if up >= 0:
            child_pos[node] = seen_children[up]
            seen_children[up] += 1

    edges = [[node for node, up in enumerate(parent) if up >= 0], [up for up in parent if up >= 0]]
    try:
        levels = topological_levels(edges, len(kept))
    except CycleError as err:
        raise CycleError([kept[node] for node in err.nodes],
                         "heads form a cycle through tokens " + " -> ".join(str(kept[v]) for v in err.nodes)
                         ) from None

    node_labels = None
    if labels is not None:
        node_labels = [NO_LABEL if labels[t - 1] is None else int(labels[t - 1]) for t in kept]
    return tree_data(parent, child_pos, node_labels, [t - 1 for t in kept], tokens, vocab, levels)


def _parse_ints(values: Sequence[int] | str) -> list[int]:
    items = values.split() if isinstance(values, str) else list(values)
    out = []
    for i, item in enumerate(items, start=1):
        try:
            if isinstance(item, float) and not item.is_integer():
                raise ValueError
            out.append(int(item))
        except (TypeError, ValueError):
            raise TreeFormatError(f"parent entry {item!r} of token {i} is not an integer", position=i) from None
    return out
