"""The order in which a training epoch visits its examples: a pure function of the seed and the epoch.

* :func:`epoch_order` — the shuffled order of the plain trainer;
* :func:`height_grouped_order` — the same windows of it with trees of similar height in one minibatch
  (``Trainer(group_by_height=W)``), so that a minibatch runs fewer levels;
* :func:`tree_levels` — the levels a bottom-up pass over one example runs, read from the height the converters
  stored (computed from the edges only where a graph carries none);
* :class:`EpochOrder` — a trainer's choice of the two, with its training examples' levels read once per fit.

Being functions of ``(seed, epoch)``, the orders need no loader state: a resumed run, or every rank of a job,
visits the data exactly as an uninterrupted single process does.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch_geometric.data import Data

from ..errors import InvalidArgumentError
from ..levels import topological_levels

__all__ = ["EpochOrder", "epoch_order", "height_grouped_order", "tree_levels"]


def epoch_order(num_examples: int, seed: int, epoch: int) -> Tensor:
    """The shuffled order of the training examples in ``epoch``.

    A pure function of ``(seed, epoch)``, so a resumed run visits the data in
    the same order as an uninterrupted one without storing any loader state.
    """
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(num_examples, generator=generator)


def tree_levels(example: Data) -> int:
    """The levels a bottom-up pass over ``example`` runs: its height plus one (the taller side of a pair; 0 for a
    graph without nodes). Read from the stored ``height`` (``height_a`` and ``height_b`` of a pair) where the
    converters left it, else computed from the edges."""
    if getattr(example, "height", None) is not None:
        return int(example.height.max()) + 1 if example.height.numel() else 0
    if getattr(example, "height_a", None) is not None and getattr(example, "height_b", None) is not None:
        return max(int(h.max()) + 1 if h.numel() else 0 for h in (example.height_a, example.height_b))
    if getattr(example, "edge_index", None) is None:
        raise InvalidArgumentError(f"cannot tell the height of {type(example).__name__} without height or edge_index")
    if not example.num_nodes:
        return 0
    return int(topological_levels(example.edge_index, example.num_nodes)[0].max()) + 1


def height_grouped_order(levels: Tensor | Sequence[int], batch_size: int, window: int, seed: int,
                         epoch: int) -> Tensor:
    """The order of the training examples in ``epoch`` with trees of similar height in one minibatch.

    :func:`epoch_order`'s permutation is cut into windows of ``window`` minibatches; each window is sorted by
    ``levels`` (stably: ties keep the permutation's order) and cut into minibatches of ``batch_size``; the full
    minibatches are then shuffled, and the short one (if any: the last window's lowest trees) comes last, as in
    the plain order. Each window holds the same trees as in :func:`epoch_order`, and no cut of them into
    minibatches of these sizes runs fewer levels in all. A minibatch
    runs as many levels as its tallest tree, so fewer levels are run in all, while every tree still meets a
    different set of others each epoch (within a window of ``window * batch_size`` random ones). A pure function
    of its arguments, like :func:`epoch_order`, so a resumed run or every rank of a job cuts the same minibatches.

    Args:
        levels: Levels of each training example (:func:`tree_levels`), in dataset order.
        batch_size: Examples per minibatch.
        window: Minibatches per sorted window (1: each minibatch is the plain order's, in a shuffled order).
        seed, epoch: As for :func:`epoch_order`.
    """
    if batch_size < 1 or window < 1:
        raise InvalidArgumentError(f"batch_size and window must be positive, got {batch_size} and {window}")
    levels = torch.as_tensor(levels, dtype=torch.long)
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)  # epoch_order's permutation, then more
    order = torch.randperm(levels.numel(), generator=generator)
    windows = [chunk[torch.sort(levels[chunk], stable=True).indices] for chunk in order.split(window * batch_size)]
    # The short minibatch (the last window's remainder) takes that window's lowest trees: the tallest then sit
    # in full minibatches, which keeps every window's summed levels at their least.
    short = windows[-1][:len(windows[-1]) % batch_size] if windows else order
    if windows:
        windows[-1] = windows[-1][short.numel():]
    full = torch.cat(windows).view(-1, batch_size) if windows else order.view(0, batch_size)
    return torch.cat([full[torch.randperm(full.size(0), generator=generator)].reshape(-1), short])


class EpochOrder:
    """A trainer's epoch orders: :func:`epoch_order`, or with ``group_by_height`` (minibatches per window)
    :func:`height_grouped_order`, whose levels of the training examples are read at the first epoch and kept
    until :meth:`forget` (a new fit, whose training set may be another)."""

    def __init__(self, seed: int, batch_size: int, group_by_height: int | None = None) -> None:
        self.seed, self.batch_size, self.group_by_height = seed, batch_size, group_by_height
        self._levels: Tensor | None = None

    def forget(self) -> None:
        """Read the training examples' levels anew at the next epoch."""
        self._levels = None

    def __call__(self, train: Sequence[Data], epoch: int) -> Tensor:
        """The order in which ``epoch`` (0-based) visits ``train``, its minibatches consecutive runs of
        ``batch_size``."""
        if self.group_by_height is None:
            return epoch_order(len(train), self.seed, epoch)
        if self._levels is None or self._levels.numel() != len(train):
            self._levels = torch.tensor([tree_levels(train[k]) for k in range(len(train))], dtype=torch.long)
        return height_grouped_order(self._levels, self.batch_size, self.group_by_height, self.seed, epoch)
