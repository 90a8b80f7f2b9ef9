"""PyG's ``DataLoader`` with each batch's level schedule built where the batch is built.

A cell needs the level schedule of its batch (:class:`~graphtree.schedule.Schedule`:
which nodes run at each level, which states they read). Called on a bare
batch, the cell builds it at its first pass, in the training step. With
:class:`TreeLoader` (or :class:`ScheduleCollater` as the ``collate_fn`` of any
``torch.utils.data.DataLoader``) the batch arrives with its schedule and the
plans of the directions asked for already built: in the loader's worker
processes when ``num_workers > 0``, beside the next batch's collation.

The schedule travels with the batch: it is cached in
``batch.__dict__["_schedule"]`` (:func:`graphtree.engine.schedule_of`), and a
PyG ``Batch`` pickles its whole ``__dict__``, so a worker's batch reaches the
main process with it. There the cache's key (which names the worker's tensor
objects) no longer matches, and :func:`~graphtree.engine.schedule_of` compares
the batch's tensors with the schedule's own copies once, finds them equal and
keeps the schedule: a comparison of a few integer tensors, not a rebuild.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch_geometric.data import Batch, Data
from torch_geometric.loader import DataLoader
from torch_geometric.loader.dataloader import Collater

from .batching import collate_graphs

__all__ = ["ScheduleCollater", "TreeLoader", "with_schedule"]


def _check_directions(directions: Sequence[str]) -> tuple[str, ...]:
    from ..schedule import DIRECTIONS  # here, not above: graphtree.schedule imports graphtree.data

    directions = (directions,) if isinstance(directions, str) else tuple(directions)
    unknown = [d for d in directions if d not in DIRECTIONS]
    if unknown:
        raise ValueError(f"directions must be among {DIRECTIONS}, got {unknown[0]!r}")
    return directions


def with_schedule(batch: Any, directions: Sequence[str] = ("bottom_up",)) -> Any:
    """``batch`` with its schedule cached on it and the plans of ``directions`` built; returns ``batch``.

    A ``Batch`` without ``edge_index`` (e.g. a pair batch, whose sides are
    scheduled by the model) is returned as it is.
    """
    from ..engine import schedule_of  # here, not above: the engine imports graphtree.data

    directions = _check_directions(directions)
    if getattr(batch, "edge_index", None) is None:
        return batch
    schedule = schedule_of(batch)
    for direction in directions:
        schedule.plan(direction)
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
