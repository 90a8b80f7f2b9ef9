"""Label and structure variants of a treebank for Zhu et al.'s ablations (Tables 3 and 4)."""

from __future__ import annotations

import torch
from torch_geometric.data import Data

from ..data.ptb import from_ptb
from ..data.tree import NO_LABEL, NO_WORD, Vocabulary
from ..errors import InvalidArgumentError

__all__ = ["SUPERVISION", "recursive_tree", "restrict_supervision"]

SUPERVISION = ("all", "root", "root+leaf")
"""Which nodes keep their labels in training: every node, roots only, or roots and words."""


def restrict_supervision(data: Data, supervision: str) -> Data:
    """A copy of ``data`` whose labels survive only where ``supervision`` allows.

    Args:
        data: A labelled tree (``y``, ``is_root``, ``is_leaf``).
        supervision: ``"all"`` (unchanged), ``"root"`` (Zhu's "root labels")
            or ``"root+leaf"`` (roots and leaves, Zhu's "root + leaf labels").

    Raises:
        ValueError: an unknown ``supervision``.
    """
    if supervision not in SUPERVISION:
        raise InvalidArgumentError(f"supervision must be one of {SUPERVISION}, got {supervision!r}")
    if supervision == "all":
        return data
    keep = data.is_root if supervision == "root" else data.is_root | data.is_leaf
    out = data.clone()
    out.y = torch.where(keep, data.y, torch.full_like(data.y, NO_LABEL))
    return out


def recursive_tree(data: Data, direction: str, vocab: Vocabulary | None = None) -> Data:
    """The left- or right-recursive binary tree over the words of ``data`` (Zhu et al. Table 4).

    ``"left"`` reads the words left to right, ``((w1 w2) w3) ...``;
    ``"right"`` reads them right to left, ``w1 (w2 (w3 ...))``. The words keep
    their labels and the root keeps the sentence label; the other internal
    nodes match no treebank phrase and are unlabelled. A one-word sentence is
    returned as it is.

    Args:
        data: A tree from :func:`graphtree.data.from_ptb` (``tokens``, ``word_pos``, ``y``).
        direction: ``"left"`` or ``"right"``.
        vocab: The vocabulary filling ``word`` (as the original tree's).

    Raises:
        ValueError: an unknown ``direction``, or a tree without tokens.
    """
    if direction not in ("left", "right"):
        raise InvalidArgumentError(f"direction must be 'left' or 'right', got {direction!r}")
    tokens = getattr(data, "tokens", None)
    if not tokens:
        raise InvalidArgumentError("recursive_tree needs the sentence's tokens (data.tokens)")
    if len(tokens) == 1:
        return data
    word_label = torch.full((len(tokens),), NO_LABEL, dtype=torch.long)
    has_word = data.word_pos != NO_WORD
    word_label[data.word_pos[has_word]] = data.y[has_word]
    root_label = int(data.y[data.is_root][0])
    # Placeholder label 0 everywhere in the string; the real labels are set below by role.
    leaves = [f"(0 {token})" for token in tokens]
    if direction == "left":
        line = leaves[0]
        for leaf in leaves[1:]:
            line = f"(0 {line} {leaf})"
    else:
        line = leaves[-1]
        for leaf in reversed(leaves[:-1]):
            line = f"(0 {leaf} {line})"
    out = from_ptb(line, vocab)
    y = torch.full((out.num_nodes,), NO_LABEL, dtype=torch.long)
    out_has_word = out.word_pos != NO_WORD
    y[out_has_word] = word_label[out.word_pos[out_has_word]]
    y[out.is_root] = root_label
    out.y = y
    return out
