"""Assembling a tree (or DAG) into a PyG ``Data`` with graphtree's node attributes.

Every converter ends here, so the attribute layout documented in
:mod:`graphtree.data` is produced in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch_geometric.data import Data

from ..levels import topological_levels

__all__ = ["NO_LABEL", "NO_WORD", "Vocabulary", "lookup_words", "tree_data"]

NO_LABEL = -1
"""Value of ``y`` at an unlabelled node (ignored by losses and metrics)."""

NO_WORD = -1
"""Value of ``word`` and ``word_pos`` at a node that carries no word."""

Vocabulary = Mapping[str, int] | Callable[[str], int]
"""Anything that maps a token to an id: a mapping (``vocab[token]``) or a function."""


def lookup_words(tokens: Sequence[str], word_pos: Sequence[int], vocab: Vocabulary) -> torch.Tensor:
    """Word ids of the nodes, ``NO_WORD`` where ``word_pos`` is ``NO_WORD``."""
    lookup = vocab.__getitem__ if isinstance(vocab, Mapping) else vocab
    return torch.tensor([lookup(tokens[p]) if p >= 0 else NO_WORD for p in word_pos], dtype=torch.long)


def tree_data(
    parent: Sequence[int],
    child_pos: Sequence[int],
    labels: Sequence[int] | None,
    word_pos: Sequence[int],
    tokens: Sequence[str] | None,
    vocab: Vocabulary | None = None,
    levels: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> Data:
    """Build the ``Data`` of a tree given per node: parent (-1 at the root), position under it, label, word.

    ``levels`` passes ``(height, depth)`` when the caller has computed them already.
    """
    num_nodes = len(parent)
    child = [i for i, p in enumerate(parent) if p >= 0]
    edge_index = torch.tensor([child, [parent[i] for i in child]], dtype=torch.long).view(2, -1)
    height, depth = levels if levels is not None else topological_levels(edge_index, num_nodes)
    child_pos_t = torch.tensor(child_pos, dtype=torch.long)
    data = Data(
        edge_index=edge_index,
        edge_pos=child_pos_t[edge_index[0]],
        num_nodes=num_nodes,
        y=torch.tensor(labels if labels is not None else [NO_LABEL] * num_nodes, dtype=torch.long),
        word_pos=torch.tensor(word_pos, dtype=torch.long),
        child_pos=child_pos_t,
        height=height,
        depth=depth,
        is_root=depth == 0,
        is_leaf=height == 0,
    )
    # Always a list (empty without words): every converter's graphs carry the same attributes, so any of them
    # batch together (PyG's collate needs every graph to have the first one's attributes).
    data.tokens = list(tokens) if tokens is not None else []
    if tokens is not None and vocab is not None:
        data.word = lookup_words(tokens, word_pos, vocab)
    return data
