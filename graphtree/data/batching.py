"""Minibatches of trees and DAGs: PyG's ``Batch``, built with a fraction of the Python work; and the reverse, a
dataset's graphs cut from its storage in one pass.

``Batch.from_data_list`` is general: for every attribute of every graph it
asks the graph how to concatenate and how far to shift it, and shifts each
graph's index tensor on its own, in every minibatch of every epoch.
:func:`collate_graphs` builds the same ``Batch`` (same
attributes in the same order, same ``batch`` and ``ptr``, same
``_slice_dict``/``_inc_dict``, so ``get_example`` and ``to_data_list`` work)
from plain ``Data`` graphs with PyG's default rules, asking per attribute
instead of per graph and shifting each index tensor once after the
concatenation. Anything else (subclasses with their own rules, sparse or
nested tensors, PyG's ``Index``/``EdgeIndex``, graphs with different
attributes, loader worker processes, where PyG writes into shared memory) goes
to ``Batch.from_data_list`` unchanged.

:func:`separate_graphs` is the other direction for an ``InMemoryDataset``'s
storage: PyG's ``InMemoryDataset.get`` cuts one graph at a time, asking for
every attribute of every graph how to cut it (about 0.15 ms a graph, seconds
for a corpus, before the first epoch); this cuts every attribute once for all
graphs and gives the same graphs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import accumulate
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import get_worker_info
from torch_geometric import EdgeIndex, Index
from torch_geometric.data import Batch, Data

__all__ = ["collate_graphs", "separate_graphs"]

# PyG's batch class for Data, looked up once: Batch(_base_cls=Data) resolves its metaclass and reads
# Data.__init__'s signature on every call.
_DataBatch = type(Batch(_base_cls=Data))


def _new_batch() -> Batch:
    """An empty ``DataBatch``, made as ``Batch(_base_cls=Data)`` makes it: ``__new__``, then ``Data.__init__``."""
    out = _DataBatch.__new__(_DataBatch)
    Data.__init__(out)
    return out


def collate_graphs(data_list: Sequence[Data], follow_batch: Iterable[str] | None = None,
                   exclude_keys: Iterable[str] | None = None) -> Batch:
    """``Batch.from_data_list(data_list, follow_batch, exclude_keys)``, faster for plain ``Data`` graphs.

    Raises:
        ValueError: an empty ``data_list``.
    """
    if not data_list:
        raise ValueError("cannot batch an empty list of graphs")
    follow_batch = list(follow_batch or [])
    exclude_keys = list(exclude_keys or [])
    columns = _columns(data_list, exclude_keys)
    if columns is None:
        return Batch.from_data_list(list(data_list), follow_batch, exclude_keys)

    out = _new_batch()
    slice_dict: dict[str, Tensor] = {}
    inc_dict: dict[str, Tensor | None] = {}
    counts = list(columns["num_nodes"])
    cumsums: dict[tuple[int, ...], Tensor] = {}  # most attributes share their sizes: one tensor made each
    for key, values in columns.items():
        if key == "num_nodes":  # summed, as PyG does, with the per-graph counts kept
            store = out.stores[0]
            store._num_nodes = counts
            store.num_nodes = sum(counts)
            continue
        value, slices, incs = _collate(key, values, counts, cumsums)
        out[key] = value
        slice_dict[key], inc_dict[key] = slices, incs
        if key in follow_batch:
            sizes = (slices[1:] - slices[:-1]).tolist()
            out[f"{key}_batch"] = _repeat_interleave(sizes)
            out[f"{key}_ptr"] = _cumsum(sizes)
    out.batch = _repeat_interleave(counts)
    out.ptr = _cumsum(counts)
    out._num_graphs = len(data_list)
    out._slice_dict = slice_dict
    out._inc_dict = inc_dict
    return out


def _columns(data_list: Sequence[Data], exclude_keys: list[str]) -> dict[str, list[Any]] | None:
    """Each attribute's values over the graphs, in the first graph's attribute order; ``None`` where PyG's own
    collate must run."""
    if get_worker_info() is not None:  # PyG's collate writes straight into shared memory there
        return None
    stores = []
    for data in data_list:
        if type(data) is not Data:
            return None
        stores.append(data.to_dict())  # the attributes in the order they were set, as PyG's collate reads them
    keys = [key for key in stores[0] if key not in exclude_keys and key != "ptr"]
    if "num_nodes" not in keys or any(store.keys() - {"ptr", *exclude_keys} != set(keys) for store in stores):
        return None
    columns = {key: [store[key] for store in stores] for key in keys}
    for values in columns.values():
        elem = values[0]
        if isinstance(elem, Tensor) and (elem.layout != torch.strided or elem.is_nested or elem.device.type != "cpu"
                                         or isinstance(elem, (Index, EdgeIndex))):
            return None
        if isinstance(elem, Tensor) and not all(isinstance(v, Tensor) for v in values):
            return None
    return columns


def _collate(key: str, values: list[Any], counts: list[int],
             cumsums: dict[tuple[int, ...], Tensor]) -> tuple[Any, Tensor, Tensor | None]:
    """One attribute, by PyG's rules for ``Data``: ``(value, slices, incs)`` as ``Batch.from_data_list``."""
    elem = values[0]
    if isinstance(elem, Tensor):
        cat_dim = -1 if ("index" in key or key == "face") else 0  # Data.__cat_dim__ for dense tensors
        if elem.dim() == 0:
            value = torch.stack(values)
            sizes = [1] * len(values)
        else:
            value = torch.cat(values, dim=cat_dim)
            sizes = [v.size(cat_dim) for v in values]
        shifts = _increments(key, values, counts)
        if sum(shifts[:-1]) != 0:
            # One shift after the concatenation instead of one per graph: the same integers. Cast first: PyG
            # adds each graph's shift as a 0-dim tensor, which keeps the attribute's dtype.
            offsets = list(accumulate(shifts[:-1], initial=0))
            shift = torch.repeat_interleave(torch.tensor(offsets, dtype=value.dtype), torch.tensor(sizes), dim=0)
            value = value + (shift if cat_dim == 0 else shift.view(*([1] * (value.dim() - 1)), -1))
        return value, _cumsum(sizes, cumsums), _cumsum(shifts[:-1], cumsums)
    if isinstance(elem, (int, float)):  # bools too, as in PyG
        value = torch.tensor(values)
        shifts = _increments(key, values, counts)
        incs = _cumsum(shifts[:-1], cumsums)
        if sum(shifts[:-1]) != 0:
            value.add_(incs)
        return value, torch.arange(len(values) + 1), incs
    return values, torch.arange(len(values) + 1), None


def _increments(key: str, values: list[Any], counts: list[int]) -> list[int]:
    """Data.__inc__ of each graph: ``max + 1`` for a ``batch`` tensor, the node count for an index, else 0."""
    if "batch" in key and isinstance(values[0], Tensor):
        return [int(v.max()) + 1 for v in values]
    if "index" in key or key == "face":
        return counts
    return [0] * len(values)


def _cumsum(sizes: list[int], made: dict[tuple[int, ...], Tensor] | None = None) -> Tensor:
    """``[0, s0, s0 + s1, ...]`` as a ``long`` tensor, as PyG's ``cumsum``; a copy of one in ``made`` if there."""
    if made is None:
        return torch.tensor(list(accumulate(sizes, initial=0)), dtype=torch.long)
    key = tuple(sizes)
    if key not in made:
        made[key] = _cumsum(sizes)
    return made[key].clone()  # every attribute its own tensor, as from PyG


def _repeat_interleave(repeats: list[int]) -> Tensor:
    return torch.repeat_interleave(torch.arange(len(repeats)), torch.tensor(repeats, dtype=torch.long))


def separate_graphs(data: Data, slices: Mapping[str, Any]) -> list[Data] | None:
    """Every graph of an ``InMemoryDataset``'s storage ``(data, slices)``, as PyG's ``InMemoryDataset.get`` gives
    them one by one (``separate`` without decrement): the same attributes in the same order, tensors as views of
    the storage with the same shapes and strides. ``None`` where PyG's own per-graph cut must run (anything but
    plain ``Data`` with strided tensors and lists)."""
    if type(data) is not Data or not slices:
        return None
    store = data.stores[0]
    keys = [key for key in slices if key in store]  # PyG's order: the slices', for the attributes stored
    columns: list[Sequence[Any]] = []
    count = len(slices[keys[0]]) - 1 if keys else 0
    for key in keys:
        values, bounds = store[key], slices[key]
        if not isinstance(bounds, Tensor) or bounds.dim() != 1 or len(bounds) != count + 1:
            return None
        if isinstance(values, Tensor):
            if values.layout != torch.strided or values.is_nested or isinstance(values, (Index, EdgeIndex)):
                return None
            cat_dim = data.__cat_dim__(key, values, store)  # Data's rule: None only for sparse attributes
            if cat_dim is None or int(bounds[0]) != 0 or int(bounds[-1]) != values.size(cat_dim):
                return None
            columns.append(values.split((bounds[1:] - bounds[:-1]).tolist(), dim=cat_dim))
        elif isinstance(values, list) and len(values) == count and not any(
                isinstance(v, (Tensor, Mapping)) or (isinstance(v, list) and v and isinstance(v[0], Tensor))
                for v in values[:1]):
            columns.append(values)  # a list attribute (e.g. tokens): one entry per graph
        else:
            return None
    num_nodes = getattr(store, "_num_nodes", None)
    if num_nodes is not None and len(num_nodes) != count:
        return None
    graphs = []
    for index in range(count):
        graph = Data()
        for key, column in zip(keys, columns):
            graph[key] = column[index]
        if num_nodes is not None:
            graph.num_nodes = num_nodes[index]
        graphs.append(graph)
    return graphs
