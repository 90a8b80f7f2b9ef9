r"""Your own trees and DAGs as a PyG dataset: CoNLL-U, PTB bracketed trees and JSON Lines files.

:class:`GraphFiles` reads one file (split by a seeded shuffle) or one file per
split, checks every record, and caches the processed graphs like the corpus
datasets do; :func:`read_graph_file` reads a file into a list of ``Data``
without a dataset around it. The formats are described in
:class:`GraphFiles`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch_geometric.data import Data

from .. import settings
from ..data.conllu import conllu_records
from ..data.jsonl import jsonl_records
from ..data.ptb import ptb_records
from ..data.records import FileRecord, attach_fields, located_error, set_text_label, split_tokens
from ..data.tree import NO_LABEL, Vocabulary
from ..errors import TreeFormatError
from .base import CorpusDataset, code_fingerprint
from .download import DatasetError
from .store import OnDiskMixin, encode_graph

__all__ = ["FORMATS", "READERS", "SUFFIXES", "GraphFiles", "default_files_root", "read_graph_file", "split_indices"]

FORMATS = ("conllu", "ptb", "jsonl")
"""The file formats :class:`GraphFiles` reads."""

TARGETS = ("auto", "class", "regression")
"""How graph-level labels are read: see ``target`` in :class:`GraphFiles`."""

SUFFIXES = {".conllu": "conllu", ".conll": "conllu", ".jsonl": "jsonl", ".ndjson": "jsonl", ".ptb": "ptb",
            ".mrg": "ptb"}
"""The file suffixes whose format :class:`GraphFiles` tells by itself."""

READERS: dict[str, Callable[..., list[FileRecord]]] = {
    "conllu": conllu_records, "ptb": ptb_records, "jsonl": jsonl_records}
"""Each format's reader in :mod:`graphtree.data`: ``reader(lines, path, vocab, first_line)`` -> records."""
_SPLITS = ("train", "dev", "test")
_INT64_MAX = 2**63 - 1  # class labels become an int64 tensor


def default_files_root() -> Path:
    """Where :class:`GraphFiles` caches processed graphs without a ``root``: ``<cache>/datasets``, the cache
    folder being :mod:`graphtree.settings`' (``$GRAPHTREE_CACHE``, else ``~/.cache/graphtree``)."""
    return settings.current().cache / "datasets"


class GraphFiles(OnDiskMixin, CorpusDataset):
    r"""Trees and DAGs of your own, read from CoNLL-U, PTB or JSON Lines files.

    One ``Data`` per record, laid out as the converters of :mod:`graphtree.data`
    make it, plus ``y`` (node classes, ``NO_LABEL`` where unlabelled),
    ``graph_y`` (the graph's class or regression target, where the file has
    graph labels), ``x`` (JSON Lines node features), ``line`` (the record's
    1-based line) and, from CoNLL-U, ``lemmas``, ``upos`` and ``deprel``. A
    batch of them (PyG's ``DataLoader``) runs through every cell.

    The formats, every field, the labels file, the graph-label ``target``, the
    errors and the splits are specified in ``docs/data-formats.md``. In short:
    CoNLL-U (``.conllu``) gives a dependency tree per sentence from ``HEAD``,
    labelled by a ``# label =`` comment; PTB (``.ptb``/``.mrg``) a tree per
    line with a class (or ``_``) at every node; JSON Lines (``.jsonl``) a
    graph per line, ``{"nodes": [...], "parents": [...]}`` for a tree or
    ``"edges": [[child, parent], ...]`` for a DAG, with an optional ``"y"``.
    ``files`` is one file, split by a seeded shuffle into ``split_ratios``, or
    a mapping of one file per split. A malformed record raises
    :class:`~graphtree.errors.TreeFormatError` naming the file, line and field.
    Processed graphs are cached under ``<root>/<name>/processed/``, named by a
    hash of the files read and the settings.

    Args:
        root: Data root, as PyG datasets take it: the processed graphs go to
            ``<root>/<name>/processed/``. Default (``None``): ``datasets`` under
            graphtree's cache folder (:mod:`graphtree.settings`, ``$GRAPHTREE_CACHE``,
            else ``~/.cache/graphtree``), never the working directory.
        split: ``"train"``, ``"dev"``, ``"test"`` (or ``"all"`` with one file).
        files: A file path, or a mapping split -> file path.
        format: ``"conllu"``, ``"ptb"`` or ``"jsonl"``; default from the file
            suffix (``.conllu``/``.conll``, ``.ptb``/``.mrg``, ``.jsonl``/``.ndjson``).
        labels: Optional labels file (or mapping split -> labels file) giving
            ``graph_y``.
        name: Folder name under ``root`` (default: the stem of the train file,
            or of the only file).
        split_ratios: ``(train, dev, test)`` fractions summing to 1, for one file.
        seed: Seed of the split of one file.
        target: ``"auto"``, ``"class"`` or ``"regression"`` (see above).
        vocab: Optional token -> id mapping (a :class:`~graphtree.vocab.Vocab`)
            filling ``data.word``; the processed cache is named after it.
        transform, pre_transform, pre_filter, log, force_reload: As in
            :class:`torch_geometric.data.InMemoryDataset`.
        on_disk: Keep the processed graphs in a :class:`~graphtree.datasets.store.GraphStore` (an SQLite
            file beside the ``.pt`` caches) and read them from there a batch at a time, for corpora larger
            than memory; the file is parsed in chunks by ``workers`` processes, never held whole. With one
            file the store holds every graph and a split is a view of it.
        workers: Processes parsing the file into the store (``on_disk``; default: the CPUs, at most 4).
        subtokens: Split every node's token into sub-tokens (``snake_case``, ``camelCase`` and digits,
            :func:`~graphtree.data.subtokens.split_subtokens`), the field ``subtokens`` of every graph
            (``subtokens_tokens``, ``subtokens_index``), for :class:`~graphtree.models.NodeFields`.

    Raises:
        DatasetError: an unknown split, format or target, a missing file, bad
            split ratios, a labels file whose count does not match, an empty split.
        TreeFormatError: a malformed record (see above).
    """

    def __init__(self, root: str | os.PathLike | None = None, split: str = "train", *,
                 files: str | os.PathLike | Mapping[str, str | os.PathLike],
                 format: str | None = None,
                 labels: str | os.PathLike | Mapping[str, str | os.PathLike] | None = None,
                 name: str | None = None, split_ratios: Sequence[float] = (0.8, 0.1, 0.1), seed: int = 0,
                 target: str = "auto", vocab: Any = None, transform: Callable | None = None,
                 pre_transform: Callable | None = None, pre_filter: Callable | None = None, log: bool = True,
                 force_reload: bool = False, on_disk: bool = False, workers: int | None = None,
                 subtokens: bool = False) -> None:
        self.on_disk, self.workers = bool(on_disk), workers
        self.per_split = isinstance(files, Mapping)
        self.splits = _SPLITS if self.per_split else (*_SPLITS, "all")
        if split not in self.splits:
            raise DatasetError(f"GraphFiles has no split {split!r}; choose one of "
                               f"{', '.join(repr(s) for s in self.splits)}")
        if self.per_split:
            unknown = sorted(set(files) - set(_SPLITS))
            if unknown:
                raise DatasetError(f"files has keys {unknown}; use 'train', 'dev' and 'test'")
            if split not in files:
                raise DatasetError(f"no file for split {split!r}: files names {sorted(files)}")
            if labels is not None and not isinstance(labels, Mapping):
                raise DatasetError("with one file per split, pass labels as a mapping split -> labels file too")
        elif isinstance(labels, Mapping):
            raise DatasetError("with one file, pass labels as one labels file, not a mapping")
        if target not in TARGETS:
            raise DatasetError(f"target must be one of {TARGETS}, got {target!r}")
        self.split_ratios = _check_ratios(split_ratios)
        self.seed = int(seed)
        self.target = target
        self.subtokens = bool(subtokens)
        data_file = files[split] if self.per_split else files
        main_file = files.get("train", data_file) if self.per_split else files
        self.name = name if name is not None else Path(main_file).stem
        if not self.name or os.sep in self.name or self.name in (".", ".."):
            raise DatasetError(f"name {self.name!r} cannot be a folder name; pass name='mydata'")
        self.format = _format_of(data_file, format)
        if root is None:
            # The files read stay where they are: the root only caches what was made of them, so it belongs in
            # the cache folder rather than under whatever directory the dataset is made from.
            root = default_files_root()
        self.root_dir = Path(os.fspath(root)).expanduser()
        self.data_path = self._resolve(data_file)
        label_file = (labels.get(split) if self.per_split else labels) if labels is not None else None
        self.labels_path = self._resolve(label_file) if label_file is not None else None
        # The bytes are read once, here: the cache name holds their hash and processing parses these same
        # bytes, so a file edited in between can never be cached under the hash of its old content.
        # On disk the file is hashed and parsed a chunk at a time, never held whole (a labels file is read whole).
        held = () if self.on_disk and self.labels_path is None else (self.data_path, self.labels_path)
        self._contents = {path: path.read_bytes() for path in held if path}
        self._digest = self._options_digest()
        try:
            super().__init__(root, split, vocab, None, transform, pre_transform, pre_filter, log, force_reload)
        finally:
            self._contents = {}
        if self.on_disk and not self.per_split and split != "all":  # the store holds the file; the split is a view
            self._indices = split_indices(len(self), self.split_ratios, self.seed)[split]

    def _resolve(self, path: str | os.PathLike) -> Path:
        given = Path(path).expanduser()
        if given.is_file():
            return given
        inside = self.root_dir / self.name / "raw" / given
        if not given.is_absolute() and inside.is_file():
            return inside
        tried = f"{given}" + ("" if given.is_absolute() else f" or {inside}")
        raise DatasetError(f"no such file: {tried}")

    def _options_digest(self) -> str:
        options = {
            "code": code_fingerprint(sys.modules[__name__]),  # the reading's own code
            "format": self.format,
            "data": _sha256(self.data_path, self._contents.get(self.data_path)),
            "labels": hashlib.sha256(self._contents[self.labels_path]).hexdigest() if self.labels_path else None,
            "target": self.target,
            "subtokens": self.subtokens,
            # The split of one file depends on the ratios and seed; a file per split does not.
            "ratios": None if self.per_split else self.split_ratios,
            "seed": None if self.per_split else self.seed,
        }
        return hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()[:16]

    def options_tag(self) -> str:
        return f"{self.format}-{self._digest}"

    @property
    def store_split(self) -> str:
        return "all" if not self.per_split else self.split  # one file: one store of every graph (see on_disk)

    @property
    def raw_file_names(self) -> list[str]:
        # Absolute paths: os.path.join(raw_dir, path) is the path itself, so PyG sees the files where they are.
        return [str(p.resolve()) for p in (self.data_path, self.labels_path) if p is not None]

    def process(self) -> None:
        if self.on_disk and self.labels_path is None:
            chunks, finish = _graph_chunks(self)
            self.write_graph_store(chunks, finish=finish)
            return
        graphs = _read_graphs(self.data_path, self.format, self.labels_path, self.target, self.vocab,
                              self._contents, self.subtokens)
        if not self.per_split and self.split != "all" and not self.on_disk:
            keep = split_indices(len(graphs), self.split_ratios, self.seed)[self.split]
            graphs = [graphs[i] for i in keep]
        self.save_processed(graphs)


def split_indices(num: int, ratios: Sequence[float] = (0.8, 0.1, 0.1), seed: int = 0) -> dict[str, list[int]]:
    """The seeded split of ``num`` records that :class:`GraphFiles` uses for one file.

    The records are shuffled with Python's ``random.Random(seed)``; the first
    ``num * ratios[2]`` (rounded, halves up) go to test, the next ``num *
    ratios[1]`` (rounded) to dev, the rest to train; each split lists its
    records in file order. The whole file is read for every split, so a
    malformed record is reported whichever split is asked for.

    Returns:
        ``{"train": [...], "dev": [...], "test": [...]}``, indices into the file's records.
    """
    _, dev, test = _check_ratios(ratios)
    order = list(range(num))
    random.Random(seed).shuffle(order)
    num_test = math.floor(num * test + 0.5)
    num_dev = min(math.floor(num * dev + 0.5), num - num_test)
    return {"test": sorted(order[:num_test]), "dev": sorted(order[num_test:num_test + num_dev]),
            "train": sorted(order[num_test + num_dev:])}


def read_graph_file(path: str | os.PathLike, format: str | None = None,
                    labels: str | os.PathLike | None = None, target: str = "auto",
                    vocab: Vocabulary | None = None, subtokens: bool = False) -> list[Data]:
    """Read every graph of a CoNLL-U, PTB or JSON Lines file (formats as in :class:`GraphFiles`).

    Args:
        path: The data file.
        format: ``"conllu"``, ``"ptb"`` or ``"jsonl"``; default from the suffix.
        labels: Optional labels file, one graph label per non-blank line.
        target: ``"auto"``, ``"class"`` or ``"regression"`` for the graph labels.
        vocab: Optional token -> id mapping filling ``data.word``.
        subtokens: Split every node's token into the field ``subtokens`` (as :class:`GraphFiles`).

    Returns:
        One ``Data`` per record, in file order.

    Raises:
        TreeFormatError: a malformed record, naming file, line and field.
        DatasetError: an unknown format or target, a labels count that does not match the graphs.
    """
    if target not in TARGETS:
        raise DatasetError(f"target must be one of {TARGETS}, got {target!r}")
    return _read_graphs(Path(path), _format_of(path, format), Path(labels) if labels is not None else None, target,
                        vocab, {}, subtokens)


def _read_graphs(path: Path, fmt: str, labels: Path | None, target: str, vocab: Vocabulary | None,
                 contents: Mapping[Path, bytes], subtokens: bool = False) -> list[Data]:
    """:func:`read_graph_file` on checked arguments; ``contents`` holds bytes already read (by path)."""
    lines = _lines(path, contents.get(path))
    records = READERS[fmt](lines, str(path), vocab)
    if subtokens:
        split_tokens(records, str(path))
    if labels is not None:
        _side_labels(records, str(path), _lines(labels, contents.get(labels)), str(labels))
    _graph_targets(records, target)
    _same_features(records, str(path))
    attach_fields(records)
    for record in records:
        record.data.line = torch.tensor([record.line])
    return [record.data for record in records]


def _check_ratios(ratios: Sequence[float]) -> tuple[float, float, float]:
    values = tuple(ratios)
    if (len(values) != 3 or not all(isinstance(r, (int, float)) and not isinstance(r, bool) for r in values)
            or not all(math.isfinite(r) and r >= 0 for r in values) or abs(sum(values) - 1) > 1e-6):
        raise DatasetError(f"split_ratios must be three non-negative numbers (train, dev, test) summing to 1, "
                           f"got {ratios!r}")
    return tuple(float(r) for r in values)


def _format_of(path: str | os.PathLike, format: str | None) -> str:
    if format is not None:
        if format not in FORMATS:
            raise DatasetError(f"format must be one of {FORMATS}, got {format!r}")
        return format
    fmt = SUFFIXES.get(Path(path).suffix.lower())
    if fmt is None:
        raise DatasetError(f"cannot tell the format of {path} from its suffix; pass format= one of {FORMATS}")
    return fmt


def _lines(path: Path, raw: bytes | None) -> list[str]:
    """The file's lines (without line ends); a byte that is not UTF-8 is a located error."""
    if raw is None:
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise DatasetError(f"no such file: {path}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = raw[:err.start].count(b"\n") + 1
        raise located_error(str(path), line, "encoding", f"byte {raw[err.start]:#04x} is not UTF-8; save the file as "
                      "UTF-8") from None
    # split("\n"), not splitlines(): the latter also breaks at \x0b, \x1c, \u2028..., which would put every
    # later line number off from what an editor shows.
    return [line.removesuffix("\r") for line in text.split("\n")]


def _side_labels(records: list[FileRecord], path: str, lines: list[str], labels_path: str) -> None:
    entries = [(number, line) for number, line in enumerate(lines, start=1) if line.strip()]
    if len(entries) != len(records):
        raise DatasetError(f"{labels_path} has {len(entries)} labels but {path} has {len(records)} graphs; give "
                           "one label per graph (_ for none), in file order")
    for record, (number, text) in zip(records, entries):
        if record.label_at is not None:
            raise located_error(labels_path, number, "label", f"the graph at line {record.line} of {path} has a label "
                          f"in that file already ({record.label_at[2]} at line {record.label_at[1]}); give each "
                          "label in one place")
        set_text_label(record, text, labels_path, number, "label")


def _graph_targets(records: list[FileRecord], target: str) -> None:
    """Check the graph labels against ``target`` and store them as ``graph_y``."""
    labelled = [r for r in records if r.label_at is not None]
    if not labelled:
        return
    if target == "auto":
        target = "class" if all(r.label_is_int for r in labelled) else "regression"
    for record in records:
        if record.label_at is None:
            value = NO_LABEL if target == "class" else math.nan
        elif target == "class":
            number = record.label
            if not isinstance(number, int):
                number = int(number) if float(number).is_integer() else None
            if number is None or not 0 <= number <= _INT64_MAX:
                path, line, field = record.label_at
                raise located_error(path, line, field, f"label {record.label!r} is not a class (an integer >= 0 within "
                              "int64); pass target='regression' for numeric targets")
            value = number
        else:
            try:
                value = float(record.label)
            except OverflowError:
                path, line, field = record.label_at
                raise located_error(path, line, field, f"label {record.label} is too large for a float") from None
        record.data.graph_y = torch.tensor([value], dtype=torch.long if target == "class" else torch.float)


def _same_features(records: list[FileRecord], path: str) -> None:
    """Node features must have one width across the file (else graphs could not be batched)."""
    first = next((r for r in records if getattr(r.data, "x", None) is not None), None)
    if first is None:
        return
    for record in records:
        x = getattr(record.data, "x", None)
        if x is None:
            raise located_error(path, record.line, "x", f"this graph's nodes have no 'x' but those of the "
                          f"graph at line {first.line} do; give every node of every graph features, or none")
        if x.size(1) != first.data.x.size(1):
            raise located_error(path, record.line, "x", f"node features have {x.size(1)} values here but "
                          f"{first.data.x.size(1)} in the graph at line {first.line}; every node needs the same "
                          "number")


# --------------------------------------------------------------------------- on disk: the file in chunks


_CHUNK_LINES = 20_000  # lines a worker parses at a time: a few MB of graphs in flight per worker


def _sha256(path: Path, raw: bytes | None) -> str:
    """The file's SHA-256: of ``raw`` where read already, else read a MiB at a time (a corpus on disk is not
    held whole to be hashed)."""
    if raw is not None:
        return hashlib.sha256(raw).hexdigest()
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except FileNotFoundError:
        raise DatasetError(f"no such file: {path}") from None
    return digest.hexdigest()


def _line_chunks(path: Path, fmt: str, digest: Any) -> Any:
    """``(first line number, raw lines)`` of ``path``, about :data:`_CHUNK_LINES` lines each, cut where a record
    ends (any line in JSON Lines and PTB, a blank line in CoNLL-U); ``digest`` is fed every byte."""
    chunk: list[bytes] = []
    first = 1
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            digest.update(raw)
            chunk.append(raw)
            if len(chunk) >= _CHUNK_LINES and (fmt != "conllu" or not raw.strip()):
                yield first, chunk
                first, chunk = number + 1, []
    if chunk:
        yield first, chunk


@dataclass(frozen=True)
class ChunkContext:
    """What parsing a chunk of a file needs besides its lines, sent with each chunk to the worker parsing it.

    ``pre_filter`` and ``pre_transform`` travel only where they can be pickled (a lambda cannot); else they are
    ``None`` here and the parent applies them to the parsed graphs (:func:`_hooks_in_parent`)."""

    path: str
    fmt: str
    target: str
    vocab: Any = None
    subtokens: bool = False
    pre_filter: Callable | None = field(default=None, compare=False)
    pre_transform: Callable | None = field(default=None, compare=False)


def _picklable(value: Any) -> bool:
    import pickle

    try:
        pickle.dumps(value)
    except Exception:
        return False
    return True


def _parse_chunk(context: ChunkContext, job: tuple[int, list[bytes]]) -> tuple[list[bytes], dict[str, Any]]:
    """Parse one chunk of lines as :func:`_read_graphs` parses a file (in a worker process): the encoded graphs,
    and what the checks across the whole file need (graph labels, feature widths, field names)."""
    path, fmt, target, vocab = context.path, context.fmt, context.target, context.vocab
    pre_filter, pre_transform = context.pre_filter, context.pre_transform
    first, raw_lines = job
    lines = []
    for k, raw in enumerate(raw_lines):
        try:
            text = raw.decode("utf-8-sig" if first + k == 1 else "utf-8")
        except UnicodeDecodeError as err:
            raise located_error(path, first + k, "encoding", f"byte {raw[err.start]:#04x} is not UTF-8; save the file "
                           "as UTF-8") from None
        lines.append(text.removesuffix("\n").removesuffix("\r"))
    records = READERS[fmt](lines, path, vocab, first)
    if context.subtokens:
        split_tokens(records, path)
    labelled = [r for r in records if r.label_at is not None]
    all_int = all(r.label_is_int for r in labelled)
    deferred, chunk_target = None, target
    if target != "auto":
        _graph_targets(records, target)
    elif labelled:
        # The whole file decides "auto" (classes only if every label is an integer): a chunk decides for itself,
        # and the store is fixed at the end where the file's decision differs (see _graph_chunks).
        chunk_target = "class" if all_int else "regression"
        if chunk_target == "class":
            try:
                _graph_targets(records, "class")
            except TreeFormatError as err:  # an error only if the whole file turns out to be classes
                deferred, chunk_target = str(err), "regression"
        if chunk_target == "regression":
            _graph_targets(records, "regression")
    _same_features(records, path)
    attach_fields(records)
    fields = sorted({name for r in records for node in r.fields or () for name in node})
    with_x = next((r for r in records if getattr(r.data, "x", None) is not None), None)
    blobs = []
    for record in records:
        record.data.line = torch.tensor([record.line])
        if pre_filter is not None and not pre_filter(record.data):
            continue
        blobs.append(encode_graph(pre_transform(record.data) if pre_transform is not None else record.data))
    summary = {"first_line": records[0].line if records else first, "labelled": bool(labelled), "all_int": all_int,
               "target": chunk_target if labelled else None, "deferred": deferred, "count": len(blobs),
               "width": None if with_x is None else int(with_x.data.x.size(1)), "fields": fields}
    return blobs, summary


def _hooks_in_parent(blobs: list[bytes], summary: dict[str, Any], pre_filter: Callable | None,
                     pre_transform: Callable | None) -> list[bytes]:
    """A chunk's graphs through the ``pre_filter`` and ``pre_transform`` that could not be sent to its worker."""
    from .store import decode_graph

    kept = []
    for blob in blobs:
        data = decode_graph(blob)
        if pre_filter is not None and not pre_filter(data):
            continue
        kept.append(encode_graph(pre_transform(data) if pre_transform is not None else data))
    summary["count"] = len(kept)
    return kept


def _graph_chunks(dataset: GraphFiles) -> tuple[Any, Callable]:
    """What :meth:`OnDiskMixin.write_graph_store` takes to write ``dataset``'s store from its file parsed in
    chunks by worker processes: the chunks, and a ``finish`` that checks the whole file (feature widths, the
    graph-label target) and fixes the rows of chunks whose own decision of the target was not the file's."""
    import concurrent.futures
    import multiprocessing

    path, fmt = dataset.data_path, dataset.format
    summaries: list[dict[str, Any]] = []
    digest = hashlib.sha256()
    workers = dataset.workers or min(4, os.cpu_count() or 1)
    jobs = _line_chunks(path, fmt, digest)

    hooks = (dataset.pre_filter, dataset.pre_transform)
    travel = workers <= 1 or _picklable(hooks)  # in one process nothing is sent
    context = ChunkContext(str(path), fmt, dataset.target, dataset.vocab, dataset.subtokens,
                           *(hooks if travel else (None, None)))

    def finished(blobs: list[bytes], summary: dict[str, Any]) -> list[bytes]:
        summaries.append(summary)
        return blobs if travel or hooks == (None, None) else _hooks_in_parent(blobs, summary, *hooks)

    def chunks() -> Any:
        if workers <= 1:
            for job in jobs:
                yield finished(*_parse_chunk(context, job))
            return
        # fork: the workers need no imports of their own; a bounded number of chunks in flight keeps memory flat.
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            pending: list[Any] = []
            for job in jobs:
                pending.append(pool.submit(_parse_chunk, context, job))
                if len(pending) > 2 * workers:
                    yield finished(*pending.pop(0).result())
            for future in pending:
                yield finished(*future.result())

    def finish(connection: Any) -> dict[str, Any]:
        if digest.hexdigest() != _sha256(path, None):
            raise DatasetError(f"{path} changed while it was being read; run again")
        _check_chunk_features(summaries, str(path))
        _check_chunk_fields(summaries, str(path))
        labelled = [s for s in summaries if s["labelled"]]
        if not labelled:
            return {}
        target = dataset.target
        if target == "auto":
            target = "class" if all(s["all_int"] for s in labelled) else "regression"
        deferred = next((s["deferred"] for s in labelled if s["deferred"]), None)
        if target == "class" and deferred:
            raise TreeFormatError(deferred)
        first = 0
        for summary in summaries:
            if summary["target"] != target:  # unlabelled chunk (no graph_y yet), or classes where the file has numbers
                _fix_graph_y(connection, range(first, first + summary["count"]), target)
            first += summary["count"]
        return {}

    return chunks(), finish


def _check_chunk_features(summaries: list[dict[str, Any]], path: str) -> None:
    """:func:`_same_features` across chunks (each chunk checked itself already)."""
    first = next((s for s in summaries if s["width"] is not None), None)
    if first is None:
        return
    for summary in summaries:
        if not summary["count"] or summary["width"] == first["width"]:
            continue
        if summary["width"] is None:
            raise located_error(path, summary["first_line"], "x", f"this graph's nodes have no 'x' but those of the "
                           f"graph at line {first['first_line']} do; give every node of every graph features, or none")
        raise located_error(path, summary["first_line"], "x", f"node features have {summary['width']} values here but "
                       f"{first['width']} in the graph at line {first['first_line']}; every node needs the same number")


def _check_chunk_fields(summaries: list[dict[str, Any]], path: str) -> None:
    """Every chunk's graphs have the same fields (each chunk gives its graphs every field named in it, so that
    its graphs batch together; those of two chunks batch only where the chunks name the same fields)."""
    named = [s for s in summaries if s["count"]]
    for summary in named[1:]:
        if summary["fields"] != named[0]["fields"]:
            raise located_error(path, summary["first_line"], "fields", f"the nodes from here on name the fields "
                                f"{summary['fields'] or 'none'}, those from line {named[0]['first_line']} "
                                f"{named[0]['fields'] or 'none'}; on disk every part of the file must name the same "
                                "fields (give each graph's nodes every field, empty where they have no tokens)")


def _fix_graph_y(connection: Any, rows: range, target: str) -> None:
    """Give the stored graphs of ``rows`` the file's ``graph_y``: unlabelled where they have none, numbers where
    their chunk read classes."""
    from .store import _TABLE, decode_graph

    for begin in range(0, len(rows), 1024):
        ids = list(rows[begin:begin + 1024])
        found = connection.execute(f"SELECT id, COL_graph FROM {_TABLE} WHERE id IN ({','.join('?' * len(ids))})",
                                   ids).fetchall()
        updates = []
        for index, blob in found:
            data = decode_graph(blob)
            old = getattr(data, "graph_y", None)
            if old is None:
                data.graph_y = (torch.tensor([NO_LABEL]) if target == "class" else torch.tensor([math.nan]))
            else:
                data.graph_y = torch.where(old == NO_LABEL, math.nan, old.double()).float()
            updates.append((encode_graph(data), index))
        connection.executemany(f"UPDATE {_TABLE} SET COL_graph = ? WHERE id = ?", updates)
