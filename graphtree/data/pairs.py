"""The trees of one side of a sentence pair, as the batch a cell runs on.

A pair (:class:`graphtree.datasets.PairData`) holds two trees in one ``Data``:
every per-tree attribute of :mod:`graphtree.data` (:data:`TREE_KEYS`) twice, with
the suffix ``_a`` (first sentence) or ``_b`` (second). :func:`pair_side` cuts a
pair, or a ``DataLoader``'s batch of them, into the ``Batch`` of its a trees, its
b trees, or both in one (a schedule for both sides at once), with
``batch``/``ptr`` rebuilt from ``num_nodes_a``/``num_nodes_b``, so no
``follow_batch`` is needed. The datasets make pairs; the similarity models read
them through this.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.data import Batch, Data

from ..errors import InvalidArgumentError

__all__ = ["TREE_KEYS", "pair_side"]

TREE_KEYS = ("edge_index", "edge_pos", "y", "word_pos", "word", "tokens", "child_pos", "height", "depth",
             "is_root", "is_leaf")
"""Per-tree attributes of :mod:`graphtree.data` that a pair holds once per side."""


def pair_side(pairs: Data, side: str) -> Batch:
    """The trees of one side of a (batched) pair, as a ``Batch`` the cells and ``schedule_of`` accept.

    Args:
        pairs: A :class:`~graphtree.datasets.PairData` or a ``Batch`` of them (from a ``DataLoader``).
        side: ``"a"``, ``"b"``, or ``"both"``: the a trees of all pairs then
            the b trees, as one batch of ``2B`` graphs (graph ``i`` is side a of
            pair ``i``, graph ``B + i`` its side b), so one pass runs both sides.

    Returns:
        A ``Batch`` with the tree attributes of :mod:`graphtree.data` (``tokens``
        a list per tree), ``batch``, ``ptr`` and ``num_nodes``.

    Raises:
        ValueError: ``side`` is not ``"a"``, ``"b"`` or ``"both"``, or ``pairs`` is not a pair.
    """
    if side not in ("a", "b", "both"):
        raise InvalidArgumentError(f"side must be 'a', 'b' or 'both', got {side!r}")
    if getattr(pairs, "edge_index_a", None) is None:
        raise InvalidArgumentError("pair_side expects a PairData (or a batch of them) with edge_index_a/edge_index_b")
    if side == "both":
        a, b = pair_side(pairs, "a"), pair_side(pairs, "b")
        out = {}
        for key in TREE_KEYS:
            va, vb = getattr(a, key, None), getattr(b, key, None)
            if va is None or vb is None:
                continue
            if key == "tokens":
                out[key] = va + vb
            elif key == "edge_index":
                out[key] = torch.cat([va, vb + a.num_nodes], dim=1)
            else:
                out[key] = torch.cat([va, vb])
        counts = torch.cat([_side_counts(pairs, "a"), _side_counts(pairs, "b")])
        return _batch_from_counts(out, counts)
    out = {}
    for key in TREE_KEYS:
        value = getattr(pairs, f"{key}_{side}", None)
        if value is not None:
            out[key] = value
    if isinstance(out.get("tokens"), list) and out["tokens"] and isinstance(out["tokens"][0], str):
        out["tokens"] = [out["tokens"]]  # an unbatched pair: one tree
    return _batch_from_counts(out, _side_counts(pairs, side))


def _side_counts(pairs: Data, side: str) -> Tensor:
    counts = getattr(pairs, f"num_nodes_{side}")
    return torch.as_tensor(counts, dtype=torch.long).reshape(-1)


def _batch_from_counts(attrs: dict, counts: Tensor) -> Batch:
    ptr = torch.zeros(counts.numel() + 1, dtype=torch.long)
    ptr[1:] = counts.cumsum(0)
    batch = torch.repeat_interleave(torch.arange(counts.numel()), counts)
    return Batch(**attrs, num_nodes=int(ptr[-1]), batch=batch, ptr=ptr)
