"""The schedule cache: a graph's :class:`~graphtree.schedule.Schedule`, built once and kept on the graph.

Every pass starts by asking for its batch's schedule, so a cache hit must cost
a few attribute reads; and a batch travels (pickled from a ``DataLoader``
worker, moved to a device, cloned) while its schedule must stay valid, or be
rebuilt where the graph changed. This module holds that cache and nothing
else: it knows schedules and graphs, not cells or passes.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch.utils.weak import WeakIdKeyDictionary

from ..errors import ScheduleError
from ..schedule import Schedule

__all__ = ["schedule_of"]


# What Schedule.from_data reads besides num_nodes. A cached schedule is reused only while each of these is
# the very same tensor, unmodified: same object, version counter (bumped by every in-place write) and storage
# pointer (changed by ``t.data = ...``). Sizes alone let a graph whose edges were replaced by another of the
# same size keep running on the old graph's levels.
_SCHEDULE_INPUTS = ("edge_index", "edge_pos", "height", "depth", "batch")


class _CachedSchedule(NamedTuple):
    """A schedule in ``data.__dict__["_schedule"]`` with what it was built from (see :func:`schedule_of`)."""

    key: tuple  # num_nodes, then per input (id, version, data_ptr), or None where the attribute is absent
    tensors: tuple  # the inputs themselves: holding them keeps their ids from being reused by other tensors
    schedule: Schedule

    def __reduce__(self) -> tuple:
        # Pickled with its batch (a DataLoader worker sends one to the main process), the key is made anew on
        # arrival from the unpickled tensors, which pickle keeps the very objects of the batch: the schedule
        # built in the worker is then a cache hit, without comparing values.
        return _rekeyed, (self.key[0], self.tensors, self.schedule)


def _rekeyed(num_nodes: Any, tensors: tuple, schedule: Schedule) -> _CachedSchedule:
    return _CachedSchedule(_schedule_key(tensors, num_nodes), tensors, schedule)


def schedule_of(data: Any, num_nodes: int | None = None, edge_pos: Tensor | None = None) -> Schedule:
    """Return the :class:`Schedule` of ``data``, building and caching it on first use.

    ``data`` may be a ``Schedule`` already, a ``Data``/``Batch``, or a bare
    ``edge_index`` (``[2, E]``, child -> parent) with ``num_nodes`` and
    optionally ``edge_pos`` (each child's position under its parent), as
    PyG layers are called: ``cell(x, edge_index)``. The cached
    schedule is keyed by the tensors it was built from (``edge_index``,
    ``edge_pos``, ``height``, ``depth``, ``batch``: each one's identity, version
    counter and storage) and ``num_nodes``, so a cache hit costs a few attribute
    reads. When the key no longer matches but the tensors were only replaced by
    equal ones (``batch.to(device)`` after the trainer built the schedule on the
    host, ``data.clone()``, which copies the cache along), their values are
    compared with the schedule's own copies once and the schedule is kept;
    otherwise (new edges, new levels, an in-place edit) it is rebuilt.

    A write that bypasses the version counter (through ``.data``, through a
    NumPy view such as ``data.edge_index.numpy()[...] = ...``, or in place
    under ``torch.inference_mode`` on an inference tensor, which has none) is
    not seen: replace the tensor instead, or ``del data.__dict__["_schedule"]``.
    """
    if isinstance(data, Schedule):
        return data
    if isinstance(data, Tensor):
        return _schedule_of_edges(data, num_nodes, edge_pos)
    fixed = getattr(data, "__dict__", {}).get("_fixed_schedule")
    if fixed is not None:  # a batch padded to a bucket shape carries its own plan (graphtree.replay)
        return fixed
    if not hasattr(data, "edge_index"):
        raise ScheduleError(
            f"expected a graphtree Schedule or a torch_geometric Data/Batch, got {type(data).__name__}")
    tensors, num_nodes = _schedule_inputs(data)
    key = _schedule_key(tensors, num_nodes)
    cached = data.__dict__.get("_schedule")
    if type(cached) is _CachedSchedule:
        if cached.key == key:
            return cached.schedule
        if key is not None and _same_graph(cached, tensors, key):
            data.__dict__["_schedule"] = _CachedSchedule(key, tensors, cached.schedule)
            return cached.schedule
    schedule = Schedule.from_data(data)
    if key is not None:
        data.__dict__["_schedule"] = _CachedSchedule(key, tensors, schedule)
    else:
        data.__dict__.pop("_schedule", None)
    return schedule


# Schedules of bare edge_index tensors, held as long as the tensor lives, keyed like a Data's cached schedule.
_EDGE_SCHEDULES: WeakIdKeyDictionary = WeakIdKeyDictionary()


def _schedule_of_edges(edge_index: Tensor, num_nodes: int | None, edge_pos: Tensor | None) -> Schedule:
    """The schedule of a bare ``edge_index``, cached on that tensor (weakly: it goes with the tensor)."""
    if num_nodes is None:
        raise ScheduleError("a bare edge_index needs num_nodes (a cell passes x.size(0))")
    key = _schedule_key((edge_index, edge_pos), num_nodes)
    cached = _EDGE_SCHEDULES.get(edge_index) if key is not None else None
    if cached is not None and cached.key == key:
        return cached.schedule
    schedule = Schedule(edge_index, num_nodes, edge_pos=edge_pos)
    if key is not None:
        _EDGE_SCHEDULES[edge_index] = _CachedSchedule(key, (edge_index, edge_pos), schedule)
    return schedule


def _schedule_inputs(data: Any) -> tuple[tuple, Any]:
    """The schedule's input attributes of ``data`` (``None`` where absent) and its ``num_nodes``.

    Read straight from a PyG ``Data``'s attribute dict where there is one: this runs on every forward, and
    ``Data.__getattr__`` costs several calls per attribute.
    """
    mapping = getattr(data.__dict__.get("_store"), "_mapping", None)
    if type(mapping) is dict:
        get = mapping.get
        num_nodes = get("num_nodes")
        return ((get("edge_index"), get("edge_pos"), get("height"), get("depth"), get("batch")),
                num_nodes if num_nodes is not None else data.num_nodes)
    return tuple(getattr(data, name, None) for name in _SCHEDULE_INPUTS), data.num_nodes


def _schedule_key(tensors: tuple, num_nodes: Any) -> tuple | None:
    """The cache key of these inputs, or ``None`` if one of them is not a tensor (no schedule is cached)."""
    try:
        return (num_nodes, *[None if t is None else (id(t), t._version, t.data_ptr()) for t in tensors])
    except AttributeError:  # not a tensor: Schedule.from_data says what is wrong
        return None
    except RuntimeError:  # an inference tensor has no version counter: it can only be written in inference mode
        if not all(t is None or isinstance(t, Tensor) for t in tensors):
            return None
        return (num_nodes, *[None if t is None else (id(t), -1 if t.is_inference() else t._version, t.data_ptr())
                             for t in tensors])


def _same_graph(cached: _CachedSchedule, tensors: tuple, key: tuple) -> bool:
    """Whether ``tensors`` hold the same values the cached schedule was built from (the key differs).

    Each replaced tensor is compared with the schedule's private copy of it, all of them through one transfer
    to the host: a batch moved to a GPU after its schedule was built pays one small copy on its first pass
    instead of a second build.
    """
    if cached.key[0] != key[0]:  # num_nodes
        return False
    schedule = cached.schedule
    snapshots = (schedule.edge_index, schedule.edge_pos, schedule.height, schedule.depth, schedule.batch)
    changed, expected = [], []
    for new, old, old_key, new_key, snapshot in zip(tensors, cached.tensors, cached.key[1:], key[1:], snapshots):
        if (new is None) != (old is None):
            return False
        if new is None or (new is old and new_key == old_key):
            continue
        # The old tensor passed the build's checks; the new one must look like it to share its schedule.
        if new.shape != old.shape or new.dtype != old.dtype or snapshot is None:
            return False
        changed.append(new)
        expected.append(snapshot)
    if not changed or any(t.device != changed[0].device for t in changed):
        return False
    try:
        values = torch.cat([t.detach().reshape(-1).long() for t in changed]).cpu()
    except (RuntimeError, NotImplementedError):  # e.g. meta tensors: rebuild, and let the build report
        return False
    return torch.equal(values, torch.cat([t.reshape(-1) for t in expected]))

