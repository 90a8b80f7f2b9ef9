"""Root and all-phrase accuracy, as Tai, Zhu, Le & Zuidema and Teng & Zhang report them.

* **Root accuracy**: the fraction of sentences whose root is classified
  correctly (the "Roots" / "sentence" columns).
* **All-phrase accuracy**: the fraction of labelled nodes, roots and words
  included, classified correctly (Zhu's and Teng's "Phrases" columns).

Only labelled nodes count (``y != NO_LABEL``). For the binary task the SST
dataset already drops neutral sentences and marks neutral phrases unlabelled,
so "neutral excluded" needs nothing here.

A :class:`Tally` also keeps the counts by sentence length (roots; Tai et al.
Fig. 3), by node height (all nodes; the longest path down to a leaf, Zhu et
al.'s "depth" of Fig. 4) and by span length (the number of words under a
node; Zhu's Fig. 4, lower), so the plots are drawn from the raw counts.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ..data.tree import NO_LABEL, NO_WORD

__all__ = ["Tally", "evaluate", "span_lengths"]


def span_lengths(batch: Any) -> Tensor:
    """Number of words under every node of ``batch`` (a word node counts itself).

    Children are summed into their parents in increasing order of the child's
    height, so a child's count is complete before it is added (its own
    children all have smaller heights).
    """
    span = (batch.word_pos != NO_WORD).long()
    child, parent = batch.edge_index
    if child.numel() == 0:
        return span
    child_height = batch.height[child]
    for level in range(int(child_height.max()) + 1):
        at = child_height == level
        span = span.index_add(0, parent[at], span[child[at]])
    return span


def _bump(table: dict[int, list[int]], keys: Tensor, correct: Tensor) -> None:
    for key, hit in zip(keys.tolist(), correct.tolist()):
        entry = table[key]
        entry[0] += int(hit)
        entry[1] += 1


@dataclass
class Tally:
    """Counts of correct and labelled nodes; add batches with :meth:`add`."""

    root_correct: int = 0
    root_total: int = 0
    phrase_correct: int = 0
    phrase_total: int = 0
    by_length: dict[int, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    by_height: dict[int, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    by_span: dict[int, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))

    def add(self, logits: Tensor, batch: Any, breakdown: bool = False) -> None:
        """Count the predictions ``logits.argmax(-1)`` against ``batch.y``.

        Args:
            logits: ``[num_nodes, C]`` scores of every node of ``batch``.
            batch: A ``Data``/``Batch`` with ``y``, ``is_root`` and (for
                ``breakdown``) ``word_pos``, ``height``, ``edge_index``.
            breakdown: Also count by sentence length, height and span length.
        """
        y = batch.y
        labelled = y != NO_LABEL
        correct = (logits.argmax(-1) == y) & labelled
        roots = batch.is_root & labelled
        self.root_correct += int(correct[roots].sum())
        self.root_total += int(roots.sum())
        self.phrase_correct += int(correct.sum())
        self.phrase_total += int(labelled.sum())
        if breakdown:
            span = span_lengths(batch)
            _bump(self.by_length, span[roots], correct[roots])
            _bump(self.by_height, batch.height[labelled], correct[labelled])
            _bump(self.by_span, span[labelled], correct[labelled])

    @property
    def root(self) -> float:
        """Root accuracy in percent (``nan`` without labelled roots)."""
        return 100.0 * self.root_correct / self.root_total if self.root_total else float("nan")

    @property
    def phrase(self) -> float:
        """All-phrase accuracy in percent (``nan`` without labelled nodes)."""
        return 100.0 * self.phrase_correct / self.phrase_total if self.phrase_total else float("nan")

    def as_dict(self) -> dict[str, Any]:
        """Accuracies, counts and (when collected) breakdowns, JSON-ready (keys as strings, sorted)."""
        out: dict[str, Any] = {"root": self.root, "phrase": self.phrase, "root_correct": self.root_correct,
                               "root_total": self.root_total, "phrase_correct": self.phrase_correct,
                               "phrase_total": self.phrase_total}
        for name in ("by_length", "by_height", "by_span"):
            table = getattr(self, name)
            if table:
                out[name] = {str(k): list(table[k]) for k in sorted(table)}
        return out


@torch.no_grad()
def evaluate(model: torch.nn.Module, batches: Iterable[Any], breakdown: bool = False) -> Tally:
    """Accuracy of ``model`` (``model(batch) -> logits`` on every node) over ``batches``, in eval mode."""
    was_training = model.training
    model.eval()
    tally = Tally()
    try:
        for batch in batches:
            tally.add(model(batch), batch, breakdown=breakdown)
    finally:
        model.train(was_training)
    return tally
