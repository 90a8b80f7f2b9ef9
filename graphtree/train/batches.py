"""Where a trainer's batches come from: the training minibatches of an epoch and the evaluation batches.

A training epoch's minibatches (:class:`TrainingBatches`) come from one of three sources, the same batches
whichever it is:

* graphs in memory in one process, of plain ``Data`` (no ``transform``): cut from the training graphs
  concatenated once per fit (:class:`~graphtree.data.batching.BatchCutter`), a fraction of the work of
  collating them graph by graph;
* graphs in memory otherwise (under ``torchrun``, or a dataset with a ``transform``, which may give other
  graphs at every access): each rank's share of a minibatch collated graph by graph;
* a dataset on disk (:func:`reads_from_disk`): loader workers read each share in one query, collate it from
  the stored bytes and build its schedule.

Evaluation batches are made once (:func:`collate`) or, on disk, read when used (:class:`StoredBatches`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Batch, Data

from ..data.batching import BatchCutter, collate_graphs
from ..data.loader import ScheduleCollater, unpacked
from ..errors import OutOfRangeError
from . import distributed

__all__ = ["Minibatch", "StoredBatches", "TrainingBatches", "collate", "reads_from_disk"]

Minibatch = tuple[list[int], list[int], Batch]
"""A training minibatch: its examples' positions in the dataset, this rank's share of them (empty for a rank left
without one, which then trains on the minibatch's first example weighted zero), and that share as a ``Batch``."""


def collate(examples: Sequence[Data], batch_size: int) -> list[Batch]:
    """Consecutive ``Batch`` es of ``batch_size`` examples (for evaluation, where order does not matter)."""
    return [collate_graphs(examples[k:k + batch_size]) for k in range(0, len(examples), batch_size)]


def reads_from_disk(data: Any) -> bool:
    """Whether ``data`` is a dataset read from a graph store (:class:`~graphtree.datasets.store.GraphStore`, or a
    dataset with ``on_disk=True``): held a batch at a time, never whole."""
    return bool(getattr(data, "reads_from_disk", False))


class _MinibatchShares(torch.utils.data.Sampler):
    """The epoch's minibatches of ``order`` (a tensor), each as this rank's share (:func:`distributed.shard`; a rank
    without one gets the minibatch's first example, weighted zero by the trainer): the batches a loader's workers
    read from disk. The order stays a tensor: a list of a million Python ints would be most of a reader's memory."""

    def __init__(self, order: Tensor, batch_size: int) -> None:
        self.order, self.batch_size = order, batch_size

    def __len__(self) -> int:
        return math.ceil(len(self.order) / self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        for start in range(0, len(self.order), self.batch_size):
            minibatch = self.order[start:start + self.batch_size].tolist()
            yield distributed.shard(minibatch) or minibatch[:1]


class _EncodedReads(torch.utils.data.Dataset):
    """A dataset on disk as a loader fetches it: each batch read as bytes in one query and collated from them
    (:meth:`~graphtree.datasets.store.GraphStore.read_encoded`), not a ``Data`` per graph."""

    def __init__(self, data: Any) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitems__(self, indices: Sequence[int]) -> Any:
        return self.data.read_encoded(indices)


class StoredBatches(Sequence):
    """The evaluation batches of a dataset on disk, read when used (never all held): ``batches[k]`` reads batch
    ``k`` in this process; iterating reads them in ``workers`` loader processes, which collate and schedule them.
    ``finish`` (e.g. moving to the device) is applied to each."""

    def __init__(self, data: Sequence[Data], batch_size: int, finish: Callable[[Batch], Batch],
                 workers: int = 0) -> None:
        self.data, self.batch_size, self.finish, self.workers = data, batch_size, finish, workers

    def __len__(self) -> int:
        return math.ceil(len(self.data) / self.batch_size)

    def _indices(self, k: int) -> range:
        return range(k * self.batch_size, min((k + 1) * self.batch_size, len(self.data)))

    def __getitem__(self, k: int) -> Batch:  # type: ignore[override]
        if not 0 <= k < len(self):
            raise OutOfRangeError(k)
        return self.finish(ScheduleCollater(self.data)(_EncodedReads(self.data).__getitems__(self._indices(k))))

    def __iter__(self) -> Iterator[Batch]:
        if self.workers == 0:
            yield from (self[k] for k in range(len(self)))
            return
        loader = torch.utils.data.DataLoader(_EncodedReads(self.data),
                                             batch_sampler=[self._indices(k) for k in range(len(self))],
                                             collate_fn=ScheduleCollater(self.data, packed=True),
                                             num_workers=self.workers)
        for batch in unpacked(loader):
            yield self.finish(batch)


_NOT_YET = object()  # TrainingBatches._cutter before the first epoch has made it


class TrainingBatches:
    """The minibatches of one fit's epochs over ``train``, each ``prepare`` d (its schedule built on the host, and
    moved to the device or not, as the epoch's path takes it), as :data:`Minibatch` es.

    Args:
        train: The training set: graphs in memory, or a dataset on disk (:func:`reads_from_disk`).
        batch_size: Examples per minibatch: the epoch's order is cut into consecutive runs of it.
        prepare: What each minibatch's ``Batch`` goes through before the step takes it.
        loader_workers: Processes reading a dataset on disk (0: this one).
    """

    def __init__(self, train: Sequence[Data], batch_size: int, prepare: Callable[[Batch], Batch],
                 loader_workers: int = 0) -> None:
        self.train, self.batch_size, self.prepare, self.loader_workers = train, batch_size, prepare, loader_workers
        self._cutter: BatchCutter | object | None = _NOT_YET  # made in the first epoch's time (see __call__)

    def __call__(self, order: Tensor | list[int]) -> Iterator[Minibatch]:
        """The minibatches of ``order`` (a tensor for a dataset on disk, a list of positions otherwise). In one
        process, from plain ``Data`` graphs, they are cut from the training graphs concatenated at the first
        minibatch of the fit (:class:`BatchCutter`)."""
        if reads_from_disk(self.train):
            yield from self._from_disk(order)
            return
        if self._cutter is _NOT_YET:
            cuttable = distributed.world_size() == 1 and getattr(self.train, "transform", None) is None
            self._cutter = BatchCutter.of(self.train) if cuttable else None
        cutter = self._cutter
        if not isinstance(cutter, BatchCutter):
            yield from self._graph_by_graph(order)
            return
        for start, batch in zip(range(0, len(order), self.batch_size), cutter.batches(order, self.batch_size)):
            minibatch = order[start:start + self.batch_size]
            yield minibatch, minibatch, self.prepare(batch)

    def _graph_by_graph(self, order: list[int]) -> Iterator[Minibatch]:
        """This rank's share of each minibatch collated from its graphs. A rank left without examples (a last
        minibatch smaller than the job) still joins the gradient all-reduce, with one example weighted zero."""
        for start in range(0, len(order), self.batch_size):
            minibatch = order[start:start + self.batch_size]
            mine = distributed.shard(minibatch)
            yield minibatch, mine, self.prepare(collate_graphs([self.train[i] for i in mine or minibatch[:1]]))

    def _from_disk(self, order: Tensor) -> Iterator[Minibatch]:
        """``loader_workers`` processes each read a share of a minibatch in one query, collate it and build its
        schedule (:class:`~graphtree.data.ScheduleCollater`); under ``torchrun`` each rank reads its own shares
        only, so the ranks read disjoint parts of the store."""
        shares = _MinibatchShares(order, self.batch_size)
        loader = torch.utils.data.DataLoader(_EncodedReads(self.train), batch_sampler=shares,
                                             collate_fn=ScheduleCollater(self.train, packed=self.loader_workers > 0),
                                             num_workers=self.loader_workers,
                                             prefetch_factor=4 if self.loader_workers else None)
        for start, batch in zip(range(0, len(order), self.batch_size), unpacked(loader)):
            minibatch = order[start:start + self.batch_size].tolist()
            yield minibatch, distributed.shard(minibatch), self.prepare(batch)
