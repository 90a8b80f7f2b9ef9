"""PyG's ``DataLoader`` with each batch's level schedule built where the batch is built.

A cell runs on the level schedule of its batch (:class:`~graphtree.schedule.Schedule`:
which nodes run at each level, which states they read). With
:class:`TreeLoader` (or :class:`ScheduleCollater` as the ``collate_fn`` of any
``torch.utils.data.DataLoader``) every batch arrives carrying it, as
``batch.schedule``, with the plans of the directions asked for already built:
in the loader's worker processes when ``num_workers > 0``, beside the next
batch's collation. It is a plain attribute: pickled with the batch from a
worker, kept by ``batch.to(device)`` (a schedule stays on the host), left out
of the graphs ``batch.to_data_list()`` gives back. Called on a batch without
one, a cell builds a schedule for that call only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch_geometric.data import Batch, Data
from torch_geometric.loader import DataLoader
from torch_geometric.loader.dataloader import Collater

from ..schedule import DIRECTIONS, SPLIT_COST_SLOTS, Schedule
from .batching import collate_graphs

__all__ = ["ScheduleCollater", "TreeLoader", "with_schedule"]


def _check_directions(directions: Sequence[str]) -> tuple[str, ...]:
    directions = (directions,) if isinstance(directions, str) else tuple(directions)
    unknown = [d for d in directions if d not in DIRECTIONS]
    if unknown:
        raise ValueError(f"directions must be among {DIRECTIONS}, got {unknown[0]!r}")
    return directions


def with_schedule(batch: Any, directions: Sequence[str] = ("bottom_up",)) -> Any:
    """``batch`` carrying its schedule as ``batch.schedule``, with the plans of ``directions`` built; returns
    ``batch``.

    A schedule the batch already carries is kept (after a check that it fits the batch's numbers of nodes and
    edges); otherwise one is built from the batch's edges. A ``Batch`` without ``edge_index`` (e.g. a pair
    batch, whose sides are scheduled by the model) is returned as it is.
    """
    directions = _check_directions(directions)
    if getattr(batch, "edge_index", None) is None:
        return batch
    schedule = getattr(batch, "schedule", None)
    if isinstance(schedule, Schedule):
        schedule.check_fits(batch)
    else:
        schedule = batch.schedule = Schedule.from_data(batch)
    for direction in directions:  # the plain plan, and the plan split by width that cells of any arity take
        schedule.plan(direction)
        schedule.plan(direction, SPLIT_COST_SLOTS)
    return batch


class ScheduleCollater(Collater):
    """PyG's collate (``Batch.from_data_list``, through :func:`~graphtree.data.batching.collate_graphs`), then
    :func:`with_schedule` on the batch.

    Picklable, so it runs inside the loader's worker processes; use it as the
    ``collate_fn`` of a ``torch.utils.data.DataLoader``, or take
    :class:`TreeLoader`, which sets it up.

    Args:
        dataset: The dataset (as PyG's ``Collater`` takes it).
        follow_batch, exclude_keys: As in PyG's ``DataLoader``.
        directions: The plans to build: ``"bottom_up"`` (every bottom-up cell),
            ``"top_down"`` (:class:`~graphtree.nn.TopDownTreeLSTM`), or both.
    """

    def __init__(self, dataset: Any, follow_batch: list[str] | None = None, exclude_keys: list[str] | None = None,
                 directions: Sequence[str] = ("bottom_up",)) -> None:
        super().__init__(dataset, follow_batch, exclude_keys)
        self.directions = _check_directions(directions)

    def __call__(self, batch: list[Any]) -> Any:
        out = (collate_graphs(batch, self.follow_batch, self.exclude_keys) if batch and isinstance(batch[0], Data)
               else super().__call__(batch))
        return with_schedule(out, self.directions) if isinstance(out, Batch) else out


class TreeLoader(DataLoader):
    """PyG's :class:`~torch_geometric.loader.DataLoader` whose batches come with their level schedules.

    Takes every argument PyG's loader takes (``num_workers``, ``shuffle``,
    ``follow_batch``...), plus ``directions``; each batch is collated and
    scheduled by :class:`ScheduleCollater`, in the worker that built it.

    Example::

        loader = TreeLoader(dataset, batch_size=25, shuffle=True, num_workers=2)
        for batch in loader:
            h, c = cell(embedding(batch.word), batch)   # no schedule built here
    """

    def __init__(self, dataset: Any, batch_size: int = 1, shuffle: bool = False,
                 follow_batch: list[str] | None = None, exclude_keys: list[str] | None = None,
                 directions: Sequence[str] = ("bottom_up",), **kwargs: Any) -> None:
        super().__init__(dataset, batch_size, shuffle, follow_batch, exclude_keys, **kwargs)
        # PyG's loader drops a collate_fn argument and sets its own Collater; the iterators read this attribute.
        self.collate_fn = ScheduleCollater(dataset, follow_batch, exclude_keys, directions)
