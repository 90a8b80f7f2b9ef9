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

:class:`BatchCutter` goes further for training, where every epoch batches the same graphs in a new order: it
concatenates them once (an ``InMemoryDataset``'s storage is that concatenation already, and is read as it is),
and per epoch reorders each attribute in one operation, so that each minibatch is cut out of the reordered
attributes (a view, an offset subtracted) instead of concatenated anew. The minibatches are again exactly PyG's.

:func:`separate_graphs` is the other direction for an ``InMemoryDataset``'s
storage: PyG's ``InMemoryDataset.get`` cuts one graph at a time, asking for
every attribute of every graph how to cut it (about 0.15 ms a graph, seconds
for a corpus, before the first epoch); this cuts every attribute once for all
graphs and gives the same graphs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import accumulate
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import get_worker_info
from torch_geometric import EdgeIndex, Index
from torch_geometric.data import Batch, Data, InMemoryDataset

from ..errors import InvalidArgumentError, OutOfRangeError

__all__ = ["BatchCutter", "batch_of_columns", "collate_graphs", "separate_graphs"]

# PyG's batch class for Data, looked up once: Batch(_base_cls=Data) resolves its metaclass and reads
# Data.__init__'s signature on every call.
DATA_BATCH = type(Batch(_base_cls=Data))


def new_data_batch() -> Batch:
    """An empty ``DataBatch``, made as ``Batch(_base_cls=Data)`` makes it: ``__new__``, then ``Data.__init__``."""
    out = DATA_BATCH.__new__(DATA_BATCH)
    Data.__init__(out)
    return out


def collate_graphs(data_list: Sequence[Data], follow_batch: Iterable[str] | None = None,
                   exclude_keys: Iterable[str] | None = None) -> Batch:
    """``Batch.from_data_list(data_list, follow_batch, exclude_keys)``, faster for plain ``Data`` graphs.

    Raises:
        ValueError: an empty ``data_list``, or a graph that lacks an attribute the first graph has (naming it,
            where PyG's own collate raises a bare ``KeyError``).
    """
    if not data_list:
        raise InvalidArgumentError("cannot batch an empty list of graphs")
    follow_batch = list(follow_batch or [])
    # A graph's own schedule says nothing about the batch's: the batch gets its own (with_schedule).
    exclude_keys = [*(exclude_keys or []), "schedule"]
    columns = _columns(data_list, exclude_keys)
    if columns is None:
        _check_same_attributes(data_list, exclude_keys)
        return Batch.from_data_list(list(data_list), follow_batch, exclude_keys)
    return batch_of_columns(columns, len(data_list), follow_batch)


def batch_of_columns(columns: Mapping[str, list[Any]], num_graphs: int, follow_batch: Iterable[str] = ()) -> Batch:
    """The ``Batch`` of :func:`collate_graphs` from each attribute's values over the graphs (in attribute order,
    ``num_nodes`` among them; dense CPU tensors as plain ``Data`` holds them): for graphs read as columns, e.g.
    from a graph store, never made into ``Data`` one by one."""
    follow_batch = list(follow_batch)
    out = new_data_batch()
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
    out._num_graphs = num_graphs
    out._slice_dict = slice_dict
    out._inc_dict = inc_dict
    return out


def _check_same_attributes(data_list: Sequence[Data], exclude_keys: list[str]) -> None:
    """Name the attribute where PyG's collate would fail with a bare ``KeyError``: one of the first graph's
    attributes that a later graph lacks (PyG batches the first graph's attributes and reads them from all)."""
    if not all(isinstance(data, Data) for data in data_list):
        return
    keys = [key for key in data_list[0].keys() if key not in exclude_keys]
    for k, data in enumerate(data_list[1:], start=1):
        missing = [key for key in keys if key not in data]
        if missing:
            raise InvalidArgumentError(
                f"graph {k} of the batch has no {missing[0]!r}, which graph 0 has: graphs batch together when "
                "they carry the same attributes. Every graphtree converter gives the same ones; drop what only "
                f"some graphs have (del data.{missing[0]}) or pass exclude_keys=[{missing[0]!r}]")


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
        cat_dim = -1 if _is_index(key) else 0  # Data.__cat_dim__ for dense tensors
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
    if _is_index(key):
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


class BatchCutter:
    """Minibatches of a fixed list of plain ``Data`` graphs in any order, each exactly
    ``Batch.from_data_list`` of its graphs, cut from the graphs concatenated once.

    Building a minibatch graph by graph costs the same Python work for five graphs as for fifty (a
    concatenation, offsets and bookkeeping per attribute), so small minibatches (LSTM-RNN's 5 trees) spend much
    of their epoch on it (the ``batches`` phase of ``benchmarks/epoch.py``). Here the graphs are concatenated
    once (:func:`collate_graphs`); each :meth:`batches` call reorders every attribute for its order with one
    ``index_select`` and moves its index attributes' shifts with one addition, and each minibatch is then a
    slice of those.

    Use :meth:`of`, which returns ``None`` for graphs that :func:`collate_graphs` would hand to PyG, and for
    ``batch``-named tensors, whose shift depends on their values.
    """

    def __init__(self, whole: Batch, keys: list[str]) -> None:
        self._whole, self._keys = whole, keys
        self._counts = torch.tensor(whole.stores[0]._num_nodes, dtype=torch.long)
        # PyG's rules (Data.__cat_dim__, Data.__inc__): index tensors join along the last dimension and are
        # shifted by the node count, as are index numbers; nothing else is shifted
        self._dims = {key: -1 if _is_index(key) and isinstance(whole[key], Tensor) else 0 for key in keys}
        self._shifted = {key: _is_index(key) and whole._inc_dict.get(key) is not None for key in keys}
        # attributes with the same extent in every graph (a node's, an edge's) share their slices
        self._extent_of: dict[str, str] = {}
        for key in keys:
            if key != "num_nodes":
                stored = whole._slice_dict[key]
                self._extent_of[key] = next((other for other in self._extent_of.values()
                                             if torch.equal(whole._slice_dict[other], stored)), key)

    @classmethod
    def of(cls, graphs: Sequence[Data]) -> BatchCutter | None:
        """A cutter for ``graphs``, or ``None`` where minibatches must be built graph by graph. An
        ``InMemoryDataset`` (whole, without a ``transform``) is read from its storage, which holds its graphs
        concatenated already: no graph is cut out of it first."""
        stored = _stored_whole(graphs) if isinstance(graphs, InMemoryDataset) else None
        if stored is not None:
            return cls(*stored)
        columns = _columns(graphs, []) if graphs else None
        if columns is None or any("batch" in key and isinstance(values[0], Tensor) for key, values in
                                  columns.items()):
            return None
        return cls(collate_graphs(graphs), list(columns))

    def batches(self, order: Sequence[int], batch_size: int) -> Iterator[Batch]:
        """The minibatches of ``order`` (graph indices), ``batch_size`` graphs each, the last one shorter.

        Attributes of the same minibatch may share their ``_slice_dict`` and ``_inc_dict`` tensors, and its
        attributes are views of tensors made for the whole order; the values are PyG's.
        """
        if batch_size < 1:
            raise InvalidArgumentError(f"batch_size must be positive, got {batch_size}")
        whole, count = self._whole, len(order)
        picked = torch.as_tensor(order, dtype=torch.long)
        if count and not 0 <= int(picked.min()) <= int(picked.max()) < len(self._counts):
            raise OutOfRangeError(f"order holds graph indices outside 0..{len(self._counts) - 1}")
        counts = self._counts[picked]
        node_bounds = _exclusive_cumsum(counts)
        first = torch.arange(count) - torch.arange(count) % batch_size  # where each graph's minibatch begins
        shifts = node_bounds[:-1] - node_bounds[first]  # each graph's shift within its minibatch
        extents: dict[str, tuple[Tensor, list[int]]] = {}  # per extent, its cumsum over the graphs in order
        for key in set(self._extent_of.values()):
            stored = whole._slice_dict[key]
            bounds = _exclusive_cumsum((stored[1:] - stored[:-1])[picked])
            extents[key] = bounds, bounds.tolist()
        columns: dict[str, Any] = {}
        for key, extent in self._extent_of.items():
            value, stored = whole[key], whole._slice_dict[key]
            if not isinstance(value, Tensor):  # a list attribute: one entry per graph
                columns[key] = [value[g] for g in order]
                continue
            bounds = extents[extent][0]
            value = value.index_select(self._dims[key], _ranges(stored[:-1][picked], bounds))
            if self._shifted[key]:
                shift = torch.repeat_interleave(shifts - whole._inc_dict[key][picked], bounds[1:] - bounds[:-1])
                shift = shift.to(value.dtype)
                value = value + (shift if self._dims[key] == 0 else shift.view(*([1] * (value.dim() - 1)), -1))
            columns[key] = value
        node_list = node_bounds.tolist()
        batch_vector = torch.repeat_interleave(torch.arange(count) - first, counts)
        count_list = counts.tolist()
        zeros = torch.zeros(batch_size, dtype=torch.long)
        for begin in range(0, count, batch_size):
            end = min(begin + batch_size, count)
            out = new_data_batch()
            # straight into the store: Data's item assignment would also clear caches that a new batch lacks
            mapping = out.stores[0]._mapping
            slices = {extent: bounds[begin:end + 1] - listed[begin] for extent, (bounds, listed) in extents.items()}
            slice_dict: dict[str, Tensor] = {}
            inc_dict: dict[str, Tensor | None] = {}
            for key in self._keys:
                if key == "num_nodes":
                    store = out.stores[0]
                    store._num_nodes = count_list[begin:end]
                    store.num_nodes = node_list[end] - node_list[begin]
                    continue
                value = columns[key]
                if not isinstance(value, Tensor):
                    mapping[key] = value[begin:end]
                    slice_dict[key], inc_dict[key] = torch.arange(end - begin + 1), None
                    continue
                extent = self._extent_of[key]
                listed = extents[extent][1]
                lo, hi = listed[begin], listed[end]
                mapping[key] = value[lo:hi] if self._dims[key] == 0 else value[..., lo:hi].contiguous()
                slice_dict[key] = slices[extent]
                inc_dict[key] = shifts[begin:end] if self._shifted[key] else zeros[:end - begin]
            mapping["batch"] = batch_vector[node_list[begin]:node_list[end]]
            mapping["ptr"] = node_bounds[begin:end + 1] - node_list[begin]
            out._num_graphs = end - begin
            out._slice_dict = slice_dict
            out._inc_dict = inc_dict
            yield out


def _stored_whole(dataset: InMemoryDataset) -> tuple[Batch, list[str]] | None:
    """What :meth:`BatchCutter.of` builds from ``dataset``'s graphs (the concatenation and its attribute order),
    read from the dataset's storage instead: the storage holds the graphs' attributes in order, cut by its
    slices, with index attributes as each graph holds them (not shifted), so every graph's shift in it is 0.
    ``None`` where the graphs must be read one by one (a view or a transformed dataset, a ``get`` of its own, a
    storage PyG cuts itself, graphs without node counts, a ``batch``-named tensor, a tensor off the CPU)."""
    if dataset.transform is not None or dataset._indices is not None:
        return None
    # Only where dataset[i] is the storage's graph i as PyG cuts it: a get() of a subclass may give other graphs.
    if type(dataset).get is not InMemoryDataset.get and not getattr(dataset, "_gives_stored_graphs", False):
        return None
    data, slices = dataset._data, dataset.slices
    layout = _storage_layout(data, slices) if data is not None and slices is not None else None
    if layout is None:
        return None
    keys, count, num_nodes = layout
    if num_nodes is None or not count:  # no node counts: the graphs' own path refuses them too
        return None
    keys = [key for key in keys if key != "ptr"]
    store = data.stores[0]
    if any(isinstance(store[key], Tensor) and ("batch" in key or store[key].device.type != "cpu") for key in keys):
        return None
    whole = new_data_batch()
    whole.stores[0]._mapping.update((key, store[key]) for key in keys)
    whole.stores[0]._num_nodes = list(num_nodes)
    whole.stores[0].num_nodes = sum(num_nodes)
    whole._slice_dict = {key: slices[key] for key in keys}
    not_shifted = torch.zeros(count, dtype=torch.long)
    whole._inc_dict = {key: not_shifted if isinstance(store[key], Tensor) else None for key in keys}
    return whole, [*keys, "num_nodes"]


def _is_index(key: str) -> bool:
    return "index" in key or key == "face"


def _exclusive_cumsum(sizes: Tensor) -> Tensor:
    """``[0, s0, s0 + s1, ...]``, one longer than ``sizes``."""
    return torch.cat([sizes.new_zeros(1), sizes.cumsum(0)])


def _ranges(starts: Tensor, bounds: Tensor) -> Tensor:
    """``cat(arange(starts[i], starts[i] + size_i))`` for sizes ``bounds.diff()``, without a loop."""
    sizes = bounds[1:] - bounds[:-1]
    return torch.arange(int(bounds[-1])) + torch.repeat_interleave(starts - bounds[:-1], sizes)


def separate_graphs(data: Data, slices: Mapping[str, Any]) -> list[Data] | None:
    """Every graph of an ``InMemoryDataset``'s storage ``(data, slices)``, as PyG's ``InMemoryDataset.get`` gives
    them one by one (``separate`` without decrement): the same attributes in the same order, tensors as views of
    the storage with the same shapes and strides. ``None`` where PyG's own per-graph cut must run (anything but
    plain ``Data`` with strided tensors and lists)."""
    layout = _storage_layout(data, slices)
    if layout is None:
        return None
    keys, _, num_nodes = layout
    store = data.stores[0]
    columns: list[Sequence[Any]] = []
    for key in keys:
        values = store[key]
        if isinstance(values, Tensor):
            bounds = slices[key]
            columns.append(values.split((bounds[1:] - bounds[:-1]).tolist(), dim=data.__cat_dim__(key, values, store)))
        else:
            columns.append(values)  # a list attribute (e.g. tokens): one entry per graph
    graphs = []
    for index, row in enumerate(zip(*columns)):
        graph = Data()
        # straight into the store: Data's item assignment also clears caches that a new graph lacks, and made the
        # whole cut five times slower
        graph._store._mapping.update(zip(keys, row))
        if num_nodes is not None:
            graph.num_nodes = num_nodes[index]
        graphs.append(graph)
    return graphs


def _storage_layout(data: Data, slices: Mapping[str, Any]) -> tuple[list[str], int, list[int] | None] | None:
    """An ``InMemoryDataset`` storage's attributes in PyG's order (the slices'), its graph count and the graphs'
    node counts where it keeps them; ``None`` unless it is plain ``Data`` whose attributes are all strided tensors
    cut along ``Data``'s dimension or lists with one entry per graph."""
    if type(data) is not Data or not slices:
        return None
    store = data.stores[0]
    keys = [key for key in slices if key in store]  # PyG's order: the slices', for the attributes stored
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
        elif not (isinstance(values, list) and len(values) == count and not any(
                isinstance(v, (Tensor, Mapping)) or (isinstance(v, list) and v and isinstance(v[0], Tensor))
                for v in values[:1])):
            return None
    num_nodes = getattr(store, "_num_nodes", None)
    if num_nodes is not None and len(num_nodes) != count:
        return None
    return keys, count, num_nodes
