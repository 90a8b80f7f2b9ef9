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

import io
import pickle
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch_geometric.data import Batch, Data
from torch_geometric.loader import DataLoader
from torch_geometric.loader.dataloader import Collater

from ..errors import InvalidArgumentError, UsageError
from ..schedule import DIRECTIONS, SPLIT_COST_SLOTS, Schedule
from .batching import DATA_BATCH, collate_graphs, new_data_batch

__all__ = ["PackedBatch", "ScheduleCollater", "TreeLoader", "with_schedule"]


def _check_directions(directions: Sequence[str]) -> tuple[str, ...]:
    directions = (directions,) if isinstance(directions, str) else tuple(directions)
    unknown = [d for d in directions if d not in DIRECTIONS]
    if unknown:
        raise InvalidArgumentError(f"directions must be among {DIRECTIONS}, got {unknown[0]!r}")
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


def _packed_tensor(where: Any) -> torch.Tensor:
    """Stands in a packed batch's pickle for a tensor of its buffer: :class:`_TensorUnpacker` resolves the name to
    its own reader of the buffer, so this is never called."""
    raise UsageError("a packed tensor is read by PackedBatch.unpack")


class _TensorPacker(pickle.Pickler):
    """Pickles an object with its plain CPU tensors' bytes laid end to end in one buffer (8-byte aligned).

    Tensors are caught by ``reducer_override``, which pickle calls for objects of other than its built-in types,
    rather than by ``persistent_id``, which it calls for every object: a batch's token strings alone are a
    thousand calls, a fifth of a worker's time for a batch of 25 ASTs. Pickle's memo makes a tensor met twice one
    object again when read back."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.parts: list[bytes] = []
        self.size = 0

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is torch.Tensor and obj.device.type == "cpu" and not obj.requires_grad:
            tensor = obj.contiguous()
            raw = (tensor.numpy() if tensor.dtype != torch.bfloat16 else tensor.view(torch.int16).numpy()).tobytes()
            where = (self.size, str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape), len(raw))
            pad = -len(raw) % 8
            self.parts.append(raw + bytes(pad))
            self.size += len(raw) + pad
            return _packed_tensor, (where,)
        # PyG pickles a Batch of Data graphs as a call of its metaclass, which reads Data.__init__'s signature and
        # runs it: a fifth of a batch's unpacking. The same object state on an empty batch made directly.
        if type(obj) is DATA_BATCH:
            return new_data_batch, (), obj.__reduce__()[2]
        return NotImplemented


class _TensorUnpacker(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, buffer: bytearray) -> None:
        super().__init__(file)
        self.buffer = buffer

    def find_class(self, module: str, name: str) -> Any:
        if module == __name__ and name == "_packed_tensor":
            return self.tensor_at
        return super().find_class(module, name)

    def tensor_at(self, where: Any) -> torch.Tensor:
        offset, dtype_name, shape, nbytes = where
        dtype = getattr(torch, dtype_name)
        if not nbytes:
            return torch.empty(shape, dtype=dtype)
        stored = torch.int16 if dtype == torch.bfloat16 else dtype
        tensor = torch.frombuffer(self.buffer, dtype=stored, count=nbytes // stored.itemsize, offset=offset)
        tensor = tensor.view(dtype) if stored is not dtype else tensor
        return tensor if len(shape) == 1 else tensor.view(shape)


class PackedBatch:
    """A batch (with its schedule) as two byte strings, for the trip from a loader worker to the training process:
    its plain tensors end to end in one buffer, the rest pickled around references into it.

    PyTorch sends each tensor of a worker's batch through a shared-memory segment of its own; a batch of 25 trees
    with its schedule holds hundreds of small tensors, and receiving them cost 40 ms a batch (25 ASTs read from a
    store, one thread; an ad-hoc timing), more than the training step. Unpacked, every tensor is a view of the one
    buffer: 2 ms.
    """

    def __init__(self, obj: Any) -> None:
        file = io.BytesIO()
        packer = _TensorPacker(file)
        packer.dump(obj)
        self.meta, self.data = file.getvalue(), b"".join(packer.parts)

    def unpack(self) -> Any:
        """The object packed (its tensors views of one writable buffer)."""
        return _TensorUnpacker(io.BytesIO(self.meta), bytearray(self.data)).load()


def unpacked(batches: Any) -> Iterator[Any]:
    """``batches`` with every :class:`PackedBatch` unpacked."""
    for batch in batches:
        yield batch.unpack() if isinstance(batch, PackedBatch) else batch


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
        packed: Return each batch as a :class:`PackedBatch` (set by the loaders
            that use worker processes, which unpack it on arrival).
    """

    def __init__(self, dataset: Any, follow_batch: list[str] | None = None, exclude_keys: list[str] | None = None,
                 directions: Sequence[str] = ("bottom_up",), packed: bool = False) -> None:
        super().__init__(dataset, follow_batch, exclude_keys)
        self.directions = _check_directions(directions)
        self.packed = packed

    def __call__(self, batch: list[Any]) -> Any:
        if hasattr(batch, "collate_encoded"):  # graphs read from a store as bytes (graphtree.datasets.store)
            out = batch.collate_encoded(self.follow_batch or (), self.exclude_keys or ())
        else:
            out = (collate_graphs(batch, self.follow_batch, self.exclude_keys) if batch and isinstance(batch[0], Data)
                   else super().__call__(batch))
        out = with_schedule(out, self.directions) if isinstance(out, Batch) else out
        return PackedBatch(out) if self.packed else out


class TreeLoader(DataLoader):
    """PyG's :class:`~torch_geometric.loader.DataLoader` whose batches come with their level schedules.

    Takes every argument PyG's loader takes (``num_workers``, ``shuffle``,
    ``follow_batch``...), plus ``directions``; each batch is collated and
    scheduled by :class:`ScheduleCollater`, in the worker that built it, and
    sent from there as one :class:`PackedBatch`. A dataset whose
    ``__getitems__`` reads a batch at once (a
    :class:`~graphtree.datasets.store.GraphStore`) is read so.

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
        self.collate_fn = ScheduleCollater(dataset, follow_batch, exclude_keys, directions,
                                           packed=self.num_workers > 0)

    def __iter__(self) -> Iterator[Any]:
        return unpacked(super().__iter__())
