"""The bucket policy: which static shape a batch is padded to, so that a handful of shapes serve an epoch.

A batch's bottom-up levels are padded to widths from a short list: the number of levels is rounded up to a
multiple of ``level_step``, the levels are cut into dyadic segments (level 0, level 1, levels 2-3, 4-7, 8-15,
...), and every level of a segment gets the segment's widest level rounded up to the grid
``exact_below * growth**k``. A top-down plan's levels are rounded on the same segments and grid
(:meth:`Buckets.top_down`). Nothing here reads a batch: the policy maps counts to counts.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..errors import HostValueError, InvalidArgumentError

__all__ = ["BucketShape", "Buckets", "ReplayError"]


class ReplayError(HostValueError):
    """A model's step cannot run on a padded, static-shape plan (e.g. it reads host values of the batch)."""


@dataclass(frozen=True)
class Buckets:
    """How level widths are padded, so that few shapes serve an epoch.

    Args:
        growth: Ratio of successive widths on the grid (above ``exact_below``).
        exact_below: Widths up to this are kept as they are.
        level_step: The number of levels is rounded up to a multiple of this.
    """

    growth: float = 2.0
    exact_below: int = 8
    level_step: int = 8

    def __post_init__(self) -> None:
        if self.growth <= 1:
            raise InvalidArgumentError(f"growth must be above 1, got {self.growth}")
        if self.exact_below < 1 or self.level_step < 1:
            raise InvalidArgumentError("exact_below and level_step must be at least 1")

    def width(self, n: int) -> int:
        """``n`` rounded up to the grid (at least 1)."""
        if n <= self.exact_below:
            return max(int(n), 1)
        k = math.ceil(math.log(n / self.exact_below, self.growth) - 1e-9)
        width = math.ceil(self.exact_below * self.growth ** k)
        return width if width >= n else math.ceil(self.exact_below * self.growth ** (k + 1))

    def shape(self, level_sizes: Sequence[int], slots: int) -> BucketShape:
        """The padded shape of a plan with these level sizes and at most ``slots`` predecessors per node."""
        if not level_sizes:
            raise ReplayError("an empty batch has no levels to replay")
        num_levels = math.ceil(len(level_sizes) / self.level_step) * self.level_step
        widths: list[int] = []
        for start, stop in _segments(num_levels):
            widest = max(level_sizes[start:stop], default=1)
            widths += [self.width(widest)] * (stop - start)
        # Slots stay exact: a fixed-arity cell takes no more than its arity, and a batch's widest node varies little.
        return BucketShape(tuple(widths), int(slots))

    def top_down(self, num_levels: int, level_sizes: Sequence[int], filled: Sequence[Sequence[int]],
                 slots: int) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
        """The padded top-down levels of a plan with these level sizes (by depth), ``filled[l][p]`` filled slots
        of level ``l`` at position ``p`` and at most ``slots`` parents per node, over ``num_levels`` levels (the
        bottom-up shape's: a batch has as many depths as heights): each level's rows, and its filled slots by
        position, ``P = len(filled[l])`` of them.

        The slots at each position are what is rounded, on the same segments and grid as the bottom-up widths
        (0 stays 0): a position's group of a segment's levels is as wide as its widest. A level's rows are its
        slots, less the parents past the first of its nodes that have several (a DAG's; none in a forest), so
        that each padded row has one parent: a top-down cell that groups its rows by position then sees counts
        fixed by the shape. The roots (level 0) have no slots: their rows are rounded as a bottom-up level's."""
        positions = len(filled[0]) if len(filled) else 0
        real = len(level_sizes)
        if real > num_levels:
            raise ReplayError(f"the batch has {real} levels, its shape {num_levels}")
        table = np.zeros((num_levels, positions), dtype=np.int64)
        table[:real] = np.asarray(filled, dtype=np.int64).reshape(real, positions)
        sizes = np.zeros(num_levels, dtype=np.int64)
        sizes[:real] = level_sizes
        # A DAG's nodes' parents past their first (none in a forest, and none past the deepest level).
        extra = table.sum(axis=1) - sizes
        widths: list[int] = []
        counts: list[tuple[int, ...]] = []
        for start, stop in _segments(num_levels):
            if start == 0 or slots == 0:  # no parents: rows as bottom-up, no slots
                widths += [self.width(int(sizes[start:stop].max()))] * (stop - start)
                counts += [(0,) * positions] * (stop - start)
                continue
            group = [self.width(int(count)) if count else 0 for count in table[start:stop].max(axis=0)]
            if not any(group):  # levels past the batch's deepest: one replica each, as bottom-up
                group[0] = 1
            widths += (sum(group) - extra[start:stop]).tolist()
            counts += [tuple(group)] * (stop - start)
        return tuple(widths), tuple(counts)


def _segments(num_levels: int) -> Iterator[tuple[int, int]]:
    """The dyadic segments of ``num_levels`` levels: [0], [1], [2, 3], [4, 7], ... (the last cut short)."""
    start = 0
    while start < num_levels:
        stop = min(max(2 * start, 1), num_levels)
        yield start, stop
        start = stop


class BucketShape(NamedTuple):
    """A padded plan's shape: each level's width, and the slots (predecessors) of every node above level 0;
    with a top-down plan (:func:`~graphtree.replay.padded_batch` with ``top_down=True``) its levels' widths,
    slots (parents), and filled slots by position (:meth:`Buckets.top_down`), else empty."""

    widths: tuple[int, ...]
    slots: int
    down_widths: tuple[int, ...] = ()
    down_slots: int = 0
    down_counts: tuple[tuple[int, ...], ...] = ()

    @property
    def num_nodes(self) -> int:
        return sum(self.widths)
