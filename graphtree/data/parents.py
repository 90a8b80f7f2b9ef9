"""Parent arrays and CoNLL head arrays: the two ways a dependency tree is written as one integer per node.

A **parent array** (:func:`from_parents`) is 0-based: entry ``k`` is the index
of node ``k``'s parent, ``-1`` at the root. It is the ``parents`` field of
JSON Lines files (``docs/data-formats.md``) and what ``Data`` graphs mean by a
parent everywhere in graphtree.

A **head array** (:func:`from_heads`) is CoNLL's numbering, that of the original
Tree-LSTM code's ``a.parents`` files and of CoNLL-U's ``HEAD`` column: entry ``i``
(1-based) is the 1-based index of token ``i``'s head, ``0`` at the root and
``-1`` for a token outside the tree (punctuation the parser left out, say).

Either way every node is a word, nodes are numbered in token order (a head
array skips the tokens outside the tree, which stay in ``data.tokens`` so the
sentence is whole), and a head's dependents are numbered left to right.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch_geometric.data import Data

from ..errors import CycleError, InvalidTypeError, TreeFormatError
from ..levels import topological_levels
from .tree import NO_LABEL, Vocabulary, tree_data

__all__ = ["from_heads", "from_parents"]

_INT_TEXT = re.compile(r"-?[0-9]+")  # ASCII digits only: int() also takes '٣', '３', '1_0' and '+3'
_INT64_MAX = 2**63 - 1


def from_parents(
    parents: Sequence[int] | str,
    tokens: Sequence[str] | str | None = None,
    labels: Sequence[int | None] | None = None,
    vocab: Vocabulary | None = None,
) -> Data:
    """Convert a parent array (0-based, ``-1`` at the root) into a tree ``Data``.

    Node ``k`` of the result is entry ``k`` of ``parents``, so ``from_parents([-1, 0, 0, 1])``
    is a root with two children, the first of which has one child. For CoNLL's
    1-based heads use :func:`from_heads`.

    Args:
        parents: Parent index of each node, ``-1`` at the (one) root. A
            whitespace-separated string is accepted.
        tokens: Optional word of each node (a list, or a whitespace-separated line).
        labels: Optional label per node: an integer ``>= 0`` (Python, NumPy or a
            one-element tensor; a float only if it is a whole number), ``None``
            or ``-1`` for unlabelled.
        vocab: Optional token -> id mapping filling ``data.word``.

    Raises:
        TreeFormatError: a non-integer entry (bools and non-ASCII digits
            included), a parent outside ``-1..n-1``, no root or two roots,
            mismatched lengths, a label that is not an integer ``>= -1`` within
            int64 (with the 0-based node index as ``position``).
        CycleError: the parents form a cycle (names the 0-based nodes on it).
    """
    parent = _int_array(parents, "from_parents", "the parent index of each node (0-based, -1 at the root)", "node",
                        first=0)
    n = len(parent)
    node_labels = _check_sizes(n, tokens, labels, "node", first=0)
    if isinstance(tokens, str):
        tokens = tokens.split()
    roots = []
    for k, up in enumerate(parent):
        if not -1 <= up < n:
            raise TreeFormatError(f"node {k} has parent {up}, outside -1..{n - 1}", position=k)
        if up == k:
            raise CycleError([k], f"node {k} is its own parent")
        if up == -1:
            roots.append(k)
    if not roots:
        raise TreeFormatError("no root: no node has parent -1")
    if len(roots) > 1:
        raise TreeFormatError(f"two roots where one is required: nodes {roots[0]} and {roots[1]} have parent -1",
                              position=roots[1])
    return _tree(parent, list(range(n)), node_labels, tokens, vocab,
                 lambda cycle: CycleError(cycle, "parents form a cycle through nodes " + " -> ".join(map(str, cycle))))


def from_heads(
    heads: Sequence[int] | str,
    tokens: Sequence[str] | str | None = None,
    labels: Sequence[int | None] | None = None,
    vocab: Vocabulary | None = None,
) -> Data:
    """Convert a CoNLL head array (1-based, ``0`` root, ``-1`` outside the tree) into a dependency-tree ``Data``.

    This is the numbering of the Tree-LSTM code's ``a.parents`` files (SICK's
    dependency parses) and of CoNLL-U's ``HEAD`` column: ``from_heads([0, 1, 1, 2])``
    is the tree ``from_parents([-1, 0, 0, 1])`` builds.

    Args:
        heads: Head of each token, 1-based; ``0`` root, ``-1`` outside the tree.
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
    heads = _int_array(heads, "from_heads", "the head of each token (1-based; 0 for the root, -1 outside the tree)",
                       "token", first=1)
    n = len(heads)
    token_labels = _check_sizes(n, tokens, labels, "token", first=1)
    if isinstance(tokens, str):
        tokens = tokens.split()

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

    def cycle_error(nodes: list[int]) -> CycleError:
        tokens_on_it = [kept[node] for node in nodes]
        return CycleError(tokens_on_it, "heads form a cycle through tokens " + " -> ".join(map(str, tokens_on_it)))

    node_labels = [token_labels[t - 1] for t in kept] if token_labels is not None else None
    return _tree(parent, [t - 1 for t in kept], node_labels, tokens, vocab, cycle_error)


def _tree(parent: list[int], word_pos: list[int], labels: list[int] | None, tokens: Sequence[str] | None,
          vocab: Vocabulary | None, cycle_error: Callable[[list[int]], CycleError]) -> Data:
    """The ``Data`` of a checked 0-based parent array with one root; a cycle is reported by ``cycle_error``."""
    child_pos = [-1] * len(parent)
    seen_children = [0] * len(parent)
    for node, up in enumerate(parent):  # token order, so positions run left to right
        if up >= 0:
            child_pos[node] = seen_children[up]
            seen_children[up] += 1
    edges = [[node for node, up in enumerate(parent) if up >= 0], [up for up in parent if up >= 0]]
    try:
        levels = topological_levels(edges, len(parent))
    except CycleError as err:
        raise cycle_error(list(err.nodes)) from None
    return tree_data(parent, child_pos, labels, word_pos, tokens, vocab, levels)


def _int_array(values: object, function: str, expected: str, noun: str, first: int) -> list[int]:
    if not isinstance(values, (str, Sequence, np.ndarray, torch.Tensor)) or getattr(values, "ndim", 1) != 1:
        raise InvalidTypeError(f"{function} expects {expected} as a sequence or a whitespace-separated string, "
                               f"got {type(values).__name__}")
    out = _parse_ints(values, noun, first)
    if not out:
        raise TreeFormatError(f"empty {'parent' if noun == 'node' else 'head'} array")
    return out


def _check_sizes(n: int, tokens: Sequence[str] | str | None, labels: Sequence[int | None] | None, noun: str,
                 first: int) -> list[int] | None:
    """Check the lengths of ``tokens`` and ``labels`` against ``n`` entries; the checked labels."""
    if isinstance(tokens, str):
        tokens = tokens.split()
    entries = "parent" if noun == "node" else "head"
    if tokens is not None and len(tokens) != n:
        raise TreeFormatError(f"{len(tokens)} tokens but {n} {entries} entries")
    if labels is not None and len(labels) != n:
        raise TreeFormatError(f"{len(labels)} labels but {n} {entries} entries")
    # Every label is checked, those of tokens outside the tree too: int() used to turn 1.5 into 1, True into
    # 1 and "3" into 3 without a word, and to fail on "a" without naming the token.
    if labels is None:
        return None
    return [_label(value, k, noun) for k, value in enumerate(labels, start=first)]


def _parse_ints(values: Sequence[int] | str, noun: str = "token", first: int = 1) -> list[int]:
    items = values.split() if isinstance(values, str) else list(values)
    out = []
    for i, item in enumerate(items, start=first):
        value = _as_int(item)
        if value is None:
            entry = "parent" if noun == "node" else "head"
            raise TreeFormatError(f"{entry} entry {item!r} of {noun} {i} is not an integer", position=i)
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


def _label(value: object, token: int, noun: str = "token") -> int:
    """The label of ``token`` (named ``noun``): ``NO_LABEL`` for ``None``, else an integer in ``-1..int64 max``."""
    if value is None:
        return NO_LABEL
    number = None if isinstance(value, str) else _as_int(value)  # "3" is text, not a label
    if number is None:
        raise TreeFormatError(f"label {value!r} of {noun} {token} is not an integer; labels are integers >= 0, "
                              f"None or {NO_LABEL} for unlabelled", position=token)
    if number < NO_LABEL:
        raise TreeFormatError(f"label {value!r} of {noun} {token} is negative; labels are integers >= 0, None or "
                              f"{NO_LABEL} for unlabelled", position=token)
    if number > _INT64_MAX:  # the labels become an int64 tensor
        raise TreeFormatError(f"label {value!r} of {noun} {token} is larger than the int64 maximum {_INT64_MAX}",
                              position=token)
    return number
