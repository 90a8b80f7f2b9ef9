r"""Graphs on disk: a PyG :class:`~torch_geometric.data.OnDiskDataset` in one SQLite file, read a batch at a time.

A corpus larger than memory cannot be an ``InMemoryDataset``: every process
would hold all of it. :class:`GraphStore` keeps the processed graphs in an
SQLite file (PyG's :class:`~torch_geometric.data.SQLiteDatabase`, one row a
graph) and reads them a batch at a time (:meth:`GraphStore.multi_get`, one
query a batch), so a process holds only the batches it works on. It is made for
:class:`~graphtree.data.TreeLoader`-style loading: each loader worker opens the
file itself, read-only (a connection never crosses a ``fork``), reads its
batch, collates it and builds its schedule. The file is written once
(:func:`write_store`: one transaction, to a temporary name renamed into place
at the end, so a killed build leaves no store behind) and never changed after.

A store records its layout's version (:data:`STORE_FORMAT`), the graphtree
version that wrote it, and a fingerprint of what it was built from (the source
files' hash and the processing settings), and is checked against them when
opened: a truncated or corrupt file, a store of another version or of other
files is a :class:`StoreError` naming the file, never a silently partial epoch.

Any dataset class takes the store through :class:`OnDiskMixin` (``on_disk=True``):
:class:`~graphtree.datasets.GraphFiles` does.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import struct
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data, OnDiskDataset, SQLiteDatabase

from .. import version
from ..errors import InvalidTypeError, OutOfRangeError
from .download import DatasetError

__all__ = ["STORE_FORMAT", "EncodedGraphs", "GraphStore", "OnDiskMixin", "StoreError", "decode_graph", "encode_graph",
           "write_store"]

STORE_FORMAT = 1
"""Version of the store's layout (tables, and the bytes of a graph: :func:`encode_graph`)."""

_TABLE = "graphs"
_MAGIC = b"GT1\x00"  # first bytes of every encoded graph
_SQLITE_HEADER = b"SQLite format 3\x00"


class StoreError(DatasetError):
    """A graph store cannot be read or written: missing, truncated, corrupt, of another version or other files,
    or on a path that cannot be written. The message names the file; ``path`` holds it."""

    def __init__(self, path: str | os.PathLike, reason: str) -> None:
        self.path = str(path)
        super().__init__(f"{path}: {reason}")


def _graphtree_version() -> str:
    return version.__version__  # read when asked, so that a test can play another version


# --------------------------------------------------------------------------- one graph as bytes


def encode_graph(data: Data) -> bytes:
    """``data`` as bytes: a JSON header (each attribute's name and kind, a tensor's dtype and shape; lists of
    strings and numbers as they are) and the tensors' raw bytes. Safe to read (no pickle) and about as fast as
    ``pickle``; read back by :func:`decode_graph`.

    Raises:
        TypeError: an attribute that is neither a tensor nor JSON (a string, a number, a list of them).
    """
    fields, payload = [], []
    for key, value in data.to_dict().items():
        if isinstance(value, Tensor):
            value = value.detach().cpu().contiguous()
            raw = (value if value.dtype != torch.bfloat16 else value.view(torch.int16)).numpy().tobytes()
            fields.append([key, str(value.dtype).removeprefix("torch."), list(value.shape), len(raw)])
            payload.append(raw)
        else:
            try:
                json.dumps(value)
            except (TypeError, ValueError):
                raise InvalidTypeError(
                    f"cannot store attribute {key!r} of type {type(value).__name__} on disk; a graph's "
                    "attributes must be tensors, strings, numbers or lists of them") from None
            fields.append([key, value])
    header = json.dumps(fields, separators=(",", ":")).encode()
    return b"".join([_MAGIC, struct.pack("<I", len(header)), header, *payload])


def decode_graph(blob: bytes) -> Data:
    """The ``Data`` that :func:`encode_graph` wrote.

    Raises:
        DatasetError: bytes that are not an encoded graph (corrupt), with the reason (a ValueError).
    """
    data = Data()
    # The attributes straight into the storage: Data's __setattr__ checks cost more than reading the graph.
    data._store._mapping.update(_decoded_fields(blob))
    return data


def _decoded_fields(blob: bytes) -> list[tuple[str, Any]]:
    """The ``(name, value)`` pairs of an encoded graph, its tensors views of one writable copy of its bytes."""
    if not isinstance(blob, (bytes, bytearray, memoryview)) or bytes(blob[:4]) != _MAGIC or len(blob) < 8:
        raise DatasetError("not an encoded graph (bad leading bytes)")
    (size,) = struct.unpack_from("<I", blob, 4)
    try:
        fields = json.loads(bytes(blob[8:8 + size]))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DatasetError(f"unreadable header ({err})") from None
    buffer = bytearray(blob[8 + size:])  # writable, so tensors are views of it, not copies
    out, offset, end = [], 0, len(buffer)
    for field in fields:  # a loader worker's inner loop: a batch of 25 graphs of 11 attributes runs it 275 times
        if len(field) == 2:
            out.append((field[0], field[1]))
            continue
        key, dtype_name, shape, nbytes = field
        dtype = _DTYPES.get(dtype_name)
        if dtype is None or offset + nbytes > end:
            raise DatasetError(f"attribute {key!r}: {'bytes missing' if dtype is not None else 'bad dtype'}")
        stored = torch.int16 if dtype is torch.bfloat16 else dtype
        if nbytes:
            tensor = torch.frombuffer(buffer, dtype=stored, count=nbytes // stored.itemsize, offset=offset)
            tensor = tensor.view(dtype) if stored is not dtype else tensor
        else:
            tensor = torch.empty(0, dtype=dtype)
        count = nbytes // stored.itemsize if nbytes else 0
        if count != math.prod(shape):
            raise DatasetError(f"attribute {key!r}: {count} values for shape {shape}")
        out.append((key, tensor.view(shape) if len(shape) != 1 else tensor))
        offset += nbytes
    if offset != end:
        raise DatasetError(f"{end - offset} stray bytes after the last tensor")
    return out


# A stored dtype's name (str(dtype) without "torch.") to the dtype, looked up once rather than per attribute read.
_DTYPES = {str(dtype).removeprefix("torch."): dtype for dtype in (
    getattr(torch, name) for name in dir(torch)) if isinstance(dtype, torch.dtype)}


class EncodedGraphs:
    """A batch of graphs as read from a store, still bytes: what a loader worker fetches. :meth:`collate_encoded`
    makes their ``Batch`` straight from the bytes, an attribute at a time (the batch of
    :func:`~graphtree.data.batching.collate_graphs`), never a ``Data`` per graph; :meth:`graphs` decodes them.

    Raises (both methods):
        StoreError: a corrupt graph, naming the store and the graph.
    """

    def __init__(self, blobs: list[bytes], path: Path, positions: Sequence[int]) -> None:
        self.blobs, self.path, self.positions = blobs, path, list(positions)

    def __len__(self) -> int:
        return len(self.blobs)

    def _fields(self) -> list[list[tuple[str, Any]]]:
        out = []
        for position, blob in zip(self.positions, self.blobs):
            try:
                out.append(_decoded_fields(blob))
            except ValueError as err:
                raise StoreError(self.path, f"graph {position} is corrupt ({err}); delete the file to rebuild") \
                    from None
        return out

    def graphs(self) -> list[Data]:
        graphs = []
        for fields in self._fields():
            data = Data()
            data._store._mapping.update(fields)
            graphs.append(data)
        return graphs

    def collate_encoded(self, follow_batch: Sequence[str] = (), exclude_keys: Sequence[str] = ()) -> Any:
        from ..data.batching import batch_of_columns, collate_graphs

        decoded = self._fields()
        keys = [key for key, _ in decoded[0]]
        kinds = [(type(v), v.dtype, v.dim()) if isinstance(v, Tensor) else type(v) for _, v in decoded[0]]
        same = all([key for key, _ in fields] == keys and [
            (type(v), v.dtype, v.dim()) if isinstance(v, Tensor) else type(v) for _, v in fields] == kinds
            for fields in decoded[1:])
        if not same or exclude_keys or "num_nodes" not in keys or {"ptr", "schedule", "batch"} & set(keys):
            return collate_graphs(self.graphs(), follow_batch, exclude_keys)  # PyG's rules, graph by graph
        columns = {key: [fields[k][1] for fields in decoded] for k, key in enumerate(keys)}
        return batch_of_columns(columns, len(decoded), follow_batch)


# --------------------------------------------------------------------------- writing


def write_store(path: str | os.PathLike, chunks: Iterable[Sequence[bytes]], meta: Mapping[str, Any], *,
                log: bool = False, finish: Callable[[sqlite3.Connection], Mapping[str, Any]] | None = None
                ) -> dict[str, Any]:
    """Write a store of the encoded graphs (:func:`encode_graph`) that ``chunks`` yields, in that order.

    The rows go in as one transaction (SQLite's bulk path; no journal, since the file only becomes the store
    once complete) into ``<path>.part``, which is synced and renamed to ``path`` at the end: a killed build
    leaves no file at ``path``. ``chunks`` may come from worker processes (a pool's ``imap``): the writes
    overlap their parsing.

    Args:
        path: The store's file.
        chunks: Lists of encoded graphs.
        meta: Recorded in the store with the format, the graphtree version and the count (``fingerprint``:
            what the graphs were made from, checked by :class:`GraphStore`).
        log: Print progress on stderr.
        finish: Called on the open connection after the last row, before the count is recorded; what it
            returns is recorded too (a dataset fixing rows whose content depends on the whole corpus).

    Returns:
        ``{"count", "seconds", "bytes"}``.

    Raises:
        StoreError: the folder cannot be written (read-only, not a folder).
    """
    path = Path(path)
    part = path.with_name(path.name + ".part")
    began = time.perf_counter()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        part.unlink(missing_ok=True)
        connection = sqlite3.connect(part, isolation_level=None)
    except (OSError, sqlite3.OperationalError) as err:
        reason = err.strerror if isinstance(err, OSError) else err
        raise StoreError(path, f"cannot write the graph store here ({reason}); give a writable data root (root=, "
                         "--data-root)") from None
    count = 0
    try:
        connection.execute("PRAGMA journal_mode=OFF")
        connection.execute("PRAGMA synchronous=OFF")
        connection.execute(f"CREATE TABLE {_TABLE} (id INTEGER PRIMARY KEY, COL_graph BLOB NOT NULL)")
        connection.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        connection.execute("BEGIN")
        for chunk in chunks:
            connection.executemany(f"INSERT INTO {_TABLE} (id, COL_graph) VALUES (?, ?)",
                                   zip(range(count, count + len(chunk)), chunk))
            count += len(chunk)
            if log:
                print(f"\rwriting {path.name}: {count:,} graphs", end="", file=sys.stderr, flush=True)
        extra = dict(finish(connection)) if finish is not None else {}
        record = {**meta, **extra, "format": STORE_FORMAT, "graphtree": _graphtree_version(), "count": count}
        connection.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                               [(k, json.dumps(v)) for k, v in record.items()])
        connection.execute("COMMIT")
        connection.close()
        with open(part, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(part, path)
    except sqlite3.OperationalError as err:
        connection.close()
        part.unlink(missing_ok=True)
        raise StoreError(path, f"writing the graph store failed ({err}); is the disk full or read-only?") from None
    except BaseException:
        connection.close()
        part.unlink(missing_ok=True)
        raise
    if log:
        print(file=sys.stderr)
    return {"count": count, "seconds": time.perf_counter() - began, "bytes": path.stat().st_size}


# --------------------------------------------------------------------------- reading


class _ReadOnlySQLite(SQLiteDatabase):
    """PyG's ``SQLiteDatabase`` on a finished store: opened read-only and ``immutable`` (no locks, so any number
    of loader workers read at once, from a read-only folder too), rows passed through as bytes, and a batch read
    as one ``WHERE id IN (...)`` query (PyG's ``multi_get`` writes a temporary table per call)."""

    def __init__(self, path: str) -> None:  # not SQLiteDatabase.__init__: it would create the table
        self.schema = {"graph": object}
        self.path, self.name = path, _TABLE
        self._connection = self._cursor = None
        self.connect()

    def connect(self) -> None:
        uri = f"file:{urllib.parse.quote(os.path.abspath(self.path))}?mode=ro&immutable=1"
        self._connection = sqlite3.connect(uri, uri=True, check_same_thread=False)
        self._cursor = self._connection.cursor()

    def close(self) -> None:  # nothing to commit
        if self._connection is not None:
            self._connection.close()
            self._connection = self._cursor = None

    def _serialize(self, row: Any) -> list[Any]:
        return [row]

    def _deserialize(self, row: tuple[Any, ...]) -> Any:
        return row[0]

    def multi_get(self, indices: Any, batch_size: int | None = None) -> list[Any]:
        if isinstance(indices, Tensor):
            indices = indices.tolist()
        wanted = [int(i) for i in indices]
        found: dict[int, bytes] = {}
        for begin in range(0, len(wanted), 30_000):  # SQLite's limit of bound values is 32,766
            part = wanted[begin:begin + 30_000]
            query = f"SELECT id, COL_graph FROM {_TABLE} WHERE id IN ({','.join('?' * len(part))})"
            found.update(self.cursor.execute(query, part).fetchall())
        return [found.get(i) for i in wanted]


class GraphStore(OnDiskDataset):
    r"""The graphs of a store written by :func:`write_store`, as a PyG ``OnDiskDataset``.

    ``store[i]`` reads one graph; ``store.multi_get(indices)`` (and a
    ``DataLoader``'s batch fetch, through ``__getitems__``) reads a batch in one
    query; ``store[indices]`` is a view of some of the graphs (PyG's
    ``index_select``), reading nothing. Iterating reads a thousand graphs a
    query. Each process opens the file itself, on first use, read-only: a
    store (or its view) handed to ``fork``-ed loader workers reopens there.

    Args:
        path: The store's file.
        expect: Recorded values the store must have (``fingerprint``: what it
            was built from); a mismatch is a :class:`StoreError`.
        transform: Applied to every graph read, as in PyG.

    Raises:
        StoreError: no such file, not a graph store, a truncated or corrupt
            file, another store format or graphtree version, other ``expect``
            values (see the module docstring).
    """

    reads_from_disk = True  # trainers read it a batch at a time, in loader workers

    def __init__(self, path: str | os.PathLike, *, expect: Mapping[str, Any] | None = None,
                 transform: Callable | None = None) -> None:
        self.path = Path(path)
        self.meta = _check_store(self.path, expect or {})
        self._pid = None
        super().__init__(str(self.path.parent), transform, log=False)
        self._numel = int(self.meta["count"])

    # The store is given by its path: no raw/processed folders, nothing to download or process.
    @property
    def processed_dir(self) -> str:
        return str(self.path.parent)

    @property
    def processed_file_names(self) -> str:
        return self.path.name

    @property
    def db(self) -> _ReadOnlySQLite:
        """This process's read-only connection (opened on first use in each process)."""
        if self._db is None or self._pid != os.getpid():
            # A connection inherited through fork is never used (SQLite forbids it): the child opens its own.
            self._db, self._pid = _ReadOnlySQLite(str(self.path)), os.getpid()
        return self._db

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_db"] = None
        return state

    def len(self) -> int:
        return self._numel

    def get(self, idx: int) -> Data:
        return self._read([int(idx)])[0]

    def multi_get(self, indices: Iterable[int] | Tensor | slice | range, batch_size: int | None = None) -> list[Data]:
        """The graphs at store positions ``indices`` (one query), in that order, transformed."""
        if isinstance(indices, slice):
            indices = range(*indices.indices(self._numel))
        graphs = self._read(indices.tolist() if isinstance(indices, Tensor) else list(indices))
        return [self.transform(g) for g in graphs] if self.transform is not None else graphs

    def __getitems__(self, indices: Sequence[int]) -> list[Data]:
        """A batch by positions in this dataset (or view): what a ``DataLoader`` fetches."""
        mapped = self.indices()
        if not isinstance(mapped, range) or mapped != range(self._numel):
            indices = [int(mapped[int(i)]) for i in indices]
        return self.multi_get(indices)

    def read_encoded(self, indices: Sequence[int]) -> EncodedGraphs | list[Data]:
        """The graphs at positions ``indices`` of this dataset (or view), still encoded (decoded and transformed
        where there is a ``transform``): a loader's fetch."""
        if self.transform is not None:
            return self.__getitems__(indices)
        mapped = self.indices()
        positions = [int(mapped[int(i)]) for i in indices]
        return EncodedGraphs(self._rows(positions), self.path, positions)

    def __iter__(self) -> Iterator[Data]:
        mapped = self.indices()
        for begin in range(0, len(mapped), 1024):
            yield from self.multi_get([int(i) for i in mapped[begin:begin + 1024]])

    def _read(self, indices: list[int]) -> list[Data]:
        return EncodedGraphs(self._rows(indices), self.path, indices).graphs()

    def _rows(self, indices: list[int]) -> list[bytes]:
        """The encoded graphs at store positions ``indices``, one query; a missing one is an error."""
        bad = [i for i in indices if not 0 <= i < self._numel]
        if bad:
            raise OutOfRangeError(f"{self.path}: graph {bad[0]} is outside 0..{self._numel - 1}")
        try:
            rows = self.db.multi_get(indices)
        except sqlite3.DatabaseError as err:
            raise StoreError(self.path, f"corrupt graph store ({err}); delete it to rebuild it") from None
        for index, row in zip(indices, rows):
            if row is None:
                raise StoreError(self.path, f"graph {index} is missing from a store of {self._numel}: the file is "
                                 "damaged; delete it to rebuild it")
        return rows

    def __repr__(self) -> str:
        return f"GraphStore({self.path.name}, {len(self)} graphs)"


def _check_store(path: Path, expect: Mapping[str, Any]) -> dict[str, Any]:
    """The store's recorded values, after the checks :class:`GraphStore` promises (cheap: no full scan)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            head = handle.read(100)
    except FileNotFoundError:
        raise StoreError(path, "no such graph store") from None
    except OSError as err:
        raise StoreError(path, f"cannot read the graph store ({err.strerror})") from None
    if not head.startswith(_SQLITE_HEADER):
        raise StoreError(path, "not a graph store (not an SQLite file)" if size else "empty file, not a graph store")
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    if len(head) == 100 and pages and size < page_size * pages:
        raise StoreError(path, f"truncated: {size:,} bytes where the store holds {page_size * pages:,}; delete it to "
                         "rebuild it")
    try:
        db = _ReadOnlySQLite(str(path))
        try:
            meta = {k: json.loads(v) for k, v in db.cursor.execute("SELECT key, value FROM meta")}
            low, high = db.cursor.execute(f"SELECT min(id), max(id) FROM {_TABLE}").fetchone()
        finally:
            db.close()
    except (sqlite3.DatabaseError, json.JSONDecodeError) as err:
        raise StoreError(path, f"corrupt or not a graph store ({err}); delete it to rebuild it") from None
    if meta.get("format") != STORE_FORMAT:
        raise StoreError(path, f"a graph store of format {meta.get('format')!r}; this graphtree reads format "
                         f"{STORE_FORMAT}: delete it to rebuild it")
    if meta.get("graphtree") != _graphtree_version():
        raise StoreError(path, f"built by graphtree {meta.get('graphtree')}, this is {_graphtree_version()}: delete it "
                         "to rebuild it")
    for key, value in expect.items():
        if meta.get(key) != value:
            raise StoreError(path, f"built from other files or settings ({key} {meta.get(key)!r}, expected "
                             f"{value!r}): delete it to rebuild it, or pass force_reload=True")
    count = meta.get("count")
    if not isinstance(count, int) or (count and (low, high) != (0, count - 1)) or (not count and high is not None):
        raise StoreError(path, f"damaged: records {count!r} graphs but holds ids {low}..{high}; delete it to "
                         "rebuild it")
    return meta


# --------------------------------------------------------------------------- datasets on disk


class OnDiskMixin:
    """``on_disk=True`` for a :class:`~graphtree.datasets.base.CorpusDataset`: its processed graphs in a
    :class:`GraphStore` (``<processed name>.sqlite``) instead of an in-memory ``.pt``; the dataset reads them
    from there, a batch at a time.

    A subclass puts this before its ``CorpusDataset`` base and sets ``self.on_disk`` before calling its
    ``__init__``; :meth:`save_processed` then writes the store from a list of graphs, or a subclass's
    ``process`` calls :meth:`write_graph_store` with chunks of encoded graphs (a streamed build that never
    holds the corpus). Without ``on_disk`` every method is the base class's. :meth:`store_fingerprint` (default:
    the processed file's name, which holds the options' and sources' hash) is recorded and checked.
    """

    on_disk: bool = False
    _store: GraphStore | None = None

    @property
    def reads_from_disk(self) -> bool:
        """Whether graphs are read from a store (loaders then read them a batch at a time, in workers)."""
        return self.on_disk

    @property
    def store_split(self) -> str:
        """The split whose graphs the store holds (a dataset whose splits are views of one store: ``"all"``)."""
        return self.split  # type: ignore[attr-defined]

    def store_fingerprint(self) -> str:
        name = Path(super().processed_file_names[0]).stem  # type: ignore[misc]
        return f"{self.store_split}-{name.split('-', 1)[1]}" if "-" in name else name

    @property
    def processed_file_names(self) -> list[str]:
        names = super().processed_file_names  # type: ignore[misc]
        return [f"{self.store_fingerprint()}-s{STORE_FORMAT}.sqlite"] if self.on_disk else names

    def write_graph_store(self, chunks: Iterable[Sequence[bytes]], **kwargs: Any) -> dict[str, Any]:
        """Write the store of this dataset from chunks of encoded graphs (see :func:`write_store`)."""
        return write_store(self.processed_paths[0], chunks, {"fingerprint": self.store_fingerprint()},  # type: ignore
                           log=getattr(self, "log", False), **kwargs)

    def save_processed(self, data_list: list[Data]) -> None:
        if not self.on_disk:
            return super().save_processed(data_list)  # type: ignore[misc]
        if self.pre_filter is not None:  # type: ignore[attr-defined]
            data_list = [d for d in data_list if self.pre_filter(d)]  # type: ignore[attr-defined]
        if self.pre_transform is not None:  # type: ignore[attr-defined]
            data_list = [self.pre_transform(d) for d in data_list]  # type: ignore[attr-defined]
        self.write_graph_store([[encode_graph(d) for d in data_list]])

    def load(self, path: str, data_cls: type = Data) -> None:
        if not self.on_disk:
            return super().load(path, data_cls)  # type: ignore[misc]
        self._store = GraphStore(path, expect={"fingerprint": self.store_fingerprint()})

    def len(self) -> int:
        return self._store.len() if self.on_disk else super().len()  # type: ignore[misc]

    def get(self, idx: int) -> Data:
        return self._store.get(int(idx)) if self.on_disk else super().get(idx)  # type: ignore[misc]

    def __getitems__(self, indices: Sequence[int]) -> list[Data]:
        """A batch by positions in this dataset (or view), one query, transformed: a ``DataLoader``'s fetch."""
        if not self.on_disk:
            return [self[int(i)] for i in indices]  # type: ignore[index]
        mapped = self.indices()  # type: ignore[attr-defined]
        graphs = self._store.multi_get([int(mapped[int(i)]) for i in indices])
        transform = self.transform  # type: ignore[attr-defined]
        return [transform(g) for g in graphs] if transform is not None else graphs

    def read_encoded(self, indices: Sequence[int]) -> EncodedGraphs | list[Data]:
        """As :meth:`GraphStore.read_encoded`, by positions in this dataset (or view)."""
        if self.transform is not None:  # type: ignore[attr-defined]
            return self.__getitems__(indices)
        mapped = self.indices()  # type: ignore[attr-defined]
        return self._store.read_encoded([int(mapped[int(i)]) for i in indices])

    def __iter__(self) -> Iterator[Data]:
        if not self.on_disk:
            yield from super().__iter__()  # type: ignore[misc]
            return
        for begin in range(0, len(self), 1024):  # type: ignore[arg-type]
            yield from self.__getitems__(range(begin, min(begin + 1024, len(self))))  # type: ignore[arg-type]
