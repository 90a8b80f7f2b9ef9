"""Parent arrays, the dependency format of the original Tree-LSTM code (``a.parents``).

For token ``i`` (1-based) the array holds the 1-based index of its head, ``0``
at the root and ``-1`` for a token outside the tree (punctuation the parser left
out, say). Every node is a word; nodes are numbered in token order, skipping
tokens outside the tree, which stay in ``data.tokens`` so the sentence is whole.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Sequence

import numpy as np
import torch
from torch_geometric.data import Data

from ..errors import CycleError, TreeFormatError
from ..levels import topological_levels
from .tree import NO_LABEL, Vocabulary, tree_data

__all__ = ["from_parents"]

_INT_TEXT = re.compile(r"-?[0-9]+")  # ASCII digits only: int() also takes '٣', '３', '1_0' and '+3'
_INT64_MAX = 2**63 - 1


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
        labels: Optional label per token: an integer ``>= 0`` (Python, NumPy or a
            one-element tensor; a float only if it is a whole number), ``None``
            or ``-1`` for unlabelled.
        vocab: Optional token -> id mapping filling ``data.word``.

    Raises:
        TreeFormatError: a non-integer entry (bools and non-ASCII digits
            included), an index out of range, no root or two roots, a head
            outside the tree, mismatched lengths, a label that is not an integer
            ``>= -1`` within int64 (with the 1-based token index).
        CycleError: the heads form a cycle (names the 1-based tokens on it).
    """
    if not isinstance(parents, (str, Sequence, np.ndarray, torch.Tensor)) or getattr(parents, "ndim", 1) != 1:
        raise TypeError("from_parents expects the head of each token (1-based; 0 for the root, -1 outside the "
                        f"tree) as a sequence or a whitespace-separated string, got {type(parents).__name__}")
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
    # Every label is checked, those of tokens outside the tree too: int() used to turn 1.5 into 1, True into
    # 1 and "3" into 3 without a word, and to fail on "a" without naming the token.
    token_labels = [_label(value, i) for i, value in enumerate(labels, start=1)] if labels is not None else None

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
    if token_labels is not None:
        node_labels = [token_labels[t - 1] for t in kept]
    return tree_data(parent, child_pos, node_labels, [t - 1 for t in kept], tokens, vocab, levels)


def _parse_ints(values: Sequence[int] | str) -> list[int]:
    items = values.split() if isinstance(values, str) else list(values)
    out = []
    for i, item in enumerate(items, start=1):
        value = _as_int(item)
        if value is None:
            raise TreeFormatError(f"parent entry {item!r} of token {i} is not an integer", position=i)
        out.append(value)
    return out


def _as_int(value: object) -> int | None:
    """``value`` as an ``int`` if it is exactly one, else ``None``.

    Accepts Python and NumPy integers, one-element integer tensors, whole floats (``2.0``) and ASCII integer
    strings (``"-1"``, as in ``a.parents``). Refuses bools (``int(True)`` is 1), fractional and non-finite
    floats (``int()`` truncates) and other scripts' digits.
    """
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            return None
        value = value.item()
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, str):
        return int(value) if _INT_TEXT.fullmatch(value) else None
    if isinstance(value, (float, np.floating)):
        return int(value) if math.isfinite(value) and float(value).is_integer() else None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _label(value: object, token: int) -> int:
    """The label of 1-based ``token``: ``NO_LABEL`` for ``None``, else an integer in ``-1..int64 max``."""
    if value is None:
        return NO_LABEL
    number = None if isinstance(value, str) else _as_int(value)  # "3" is text, not a label
    if number is None:
        raise TreeFormatError(f"label {value!r} of token {token} is not an integer; labels are integers >= 0, "
                              f"None or {NO_LABEL} for unlabelled", position=token)
    if number < NO_LABEL:
        raise TreeFormatError(f"label {value!r} of token {token} is negative; labels are integers >= 0, None or "
                              f"{NO_LABEL} for unlabelled", position=token)
    if number > _INT64_MAX:  # the labels become an int64 tensor
        raise TreeFormatError(f"label {value!r} of token {token} is larger than the int64 maximum {_INT64_MAX}",
                              position=token)
    return number
