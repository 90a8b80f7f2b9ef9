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
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch_geometric.data import Data

from .. import settings
from ..data.networkx import from_networkx
from ..data.parents import _label as _checked_label
from ..data.parents import from_heads, from_parents
from ..data.ptb import from_ptb
from ..data.tree import NO_LABEL, NO_WORD, Vocabulary, lookup_words
from ..errors import CycleError, TreeFormatError
from .base import CorpusDataset, code_fingerprint
from .download import DatasetError
from .store import OnDiskMixin, encode_graph

__all__ = ["FORMATS", "GraphFiles", "default_files_root", "read_graph_file", "split_indices"]

FORMATS = ("conllu", "ptb", "jsonl")
"""The file formats :class:`GraphFiles` reads."""

TARGETS = ("auto", "class", "regression")
"""How graph-level labels are read: see ``target`` in :class:`GraphFiles`."""

_SUFFIXES = {".conllu": "conllu", ".conll": "conllu", ".jsonl": "jsonl", ".ndjson": "jsonl", ".ptb": "ptb",
             ".mrg": "ptb"}
_SPLITS = ("train", "dev", "test")
_INT64_MAX = 2**63 - 1  # class labels become an int64 tensor

_INT_TEXT = re.compile(r"[+-]?[0-9]+")  # ASCII digits only, as the converters: int() also takes '٣'
_FLOAT_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_LABEL_COMMENT = re.compile(r"#\s*label\s*=(.*)")
_CONLLU_COLUMNS = ("ID", "FORM", "LEMMA", "UPOS", "XPOS", "FEATS", "HEAD", "DEPREL", "DEPS", "MISC")
_JSON_GRAPH_KEYS = ("nodes", "parents", "edges", "positions", "y")
_JSON_NODE_KEYS = ("token", "fields", "x", "y")


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
                 force_reload: bool = False, on_disk: bool = False, workers: int | None = None) -> None:
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
                              self._contents)
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
                    vocab: Vocabulary | None = None) -> list[Data]:
    """Read every graph of a CoNLL-U, PTB or JSON Lines file (formats as in :class:`GraphFiles`).

    Args:
        path: The data file.
        format: ``"conllu"``, ``"ptb"`` or ``"jsonl"``; default from the suffix.
        labels: Optional labels file, one graph label per non-blank line.
        target: ``"auto"``, ``"class"`` or ``"regression"`` for the graph labels.
        vocab: Optional token -> id mapping filling ``data.word``.

    Returns:
        One ``Data`` per record, in file order.

    Raises:
        TreeFormatError: a malformed record, naming file, line and field.
        DatasetError: an unknown format or target, a labels count that does not match the graphs.
    """
    if target not in TARGETS:
        raise DatasetError(f"target must be one of {TARGETS}, got {target!r}")
    return _read_graphs(Path(path), _format_of(path, format), Path(labels) if labels is not None else None, target,
                        vocab, {})


def _read_graphs(path: Path, fmt: str, labels: Path | None, target: str, vocab: Vocabulary | None,
                 contents: Mapping[Path, bytes]) -> list[Data]:
    """:func:`read_graph_file` on checked arguments; ``contents`` holds bytes already read (by path)."""
    lines = _lines(path, contents.get(path))
    readers = {"conllu": _read_conllu, "ptb": _read_ptb, "jsonl": _read_jsonl}
    records = readers[fmt](lines, str(path), vocab)
    if labels is not None:
        _side_labels(records, str(path), _lines(labels, contents.get(labels)), str(labels))
    _graph_targets(records, target)
    _same_features(records, str(path))
    _attach_fields(records)
    for record in records:
        record.data.line = torch.tensor([record.line])
    return [record.data for record in records]


# --------------------------------------------------------------------------- shared helpers


@dataclass
class _Record:
    """One graph read from a file, with its graph label as written (checked once the whole file is read)."""

    data: Data
    line: int
    label: int | float | None = None
    label_is_int: bool = False
    label_at: tuple[str, int, str] | None = None  # (file, line, field) of the label, for errors
    fields: list[dict[str, list[str]]] | None = None  # JSON Lines: each node's named token lists


def _located(path: str, line: int, field: str, reason: str, position: int | None = None,
            cycle: list | None = None) -> TreeFormatError:
    """A :class:`TreeFormatError` (a :class:`CycleError` with ``cycle``) naming file, line and field.

    The message reads ``<path>: <field>: <reason> (at line <line>)``; the error
    also carries ``path`` and ``field`` as attributes.
    """
    message = f"{path}: {field}: {reason}"
    err = CycleError(cycle, message, line=line) if cycle is not None else TreeFormatError(message, position, line)
    err.path = path
    err.field = field
    return err


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
    fmt = _SUFFIXES.get(Path(path).suffix.lower())
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
        raise _located(str(path), line, "encoding", f"byte {raw[err.start]:#04x} is not UTF-8; save the file as "
                      "UTF-8") from None
    # split("\n"), not splitlines(): the latter also breaks at \x0b, \x1c, \u2028..., which would put every
    # later line number off from what an editor shows.
    return [line.removesuffix("\r") for line in text.split("\n")]


def _number(text: str) -> tuple[int | float, bool] | None:
    """A label written as text: ``(value, written_as_integer)``, or ``None`` if it is not a finite number."""
    text = text.strip()
    if _INT_TEXT.fullmatch(text) and len(text) <= 400:  # int() refuses over 4300 digits; no label is that long
        return int(text), True
    if _FLOAT_TEXT.fullmatch(text):
        value = float(text)
        return (value, False) if math.isfinite(value) else None
    return None


def _text_label(record: _Record, text: str, path: str, line: int, field: str) -> None:
    """Set ``record``'s graph label from text (``_`` = unlabelled)."""
    if text.strip() == "_":
        return
    parsed = _number(text)
    if parsed is None:
        raise _located(path, line, field, f"label {text.strip()!r} is not a number (an integer class or a "
                      "regression target; _ for none)")
    record.label, record.label_is_int = parsed
    record.label_at = (path, line, field)


def _side_labels(records: list[_Record], path: str, lines: list[str], labels_path: str) -> None:
    entries = [(number, line) for number, line in enumerate(lines, start=1) if line.strip()]
    if len(entries) != len(records):
        raise DatasetError(f"{labels_path} has {len(entries)} labels but {path} has {len(records)} graphs; give "
                           "one label per graph (_ for none), in file order")
    for record, (number, text) in zip(records, entries):
        if record.label_at is not None:
            raise _located(labels_path, number, "label", f"the graph at line {record.line} of {path} has a label "
                          f"in that file already ({record.label_at[2]} at line {record.label_at[1]}); give each "
                          "label in one place")
        _text_label(record, text, labels_path, number, "label")


def _graph_targets(records: list[_Record], target: str) -> None:
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
                raise _located(path, line, field, f"label {record.label!r} is not a class (an integer >= 0 within "
                              "int64); pass target='regression' for numeric targets")
            value = number
        else:
            try:
                value = float(record.label)
            except OverflowError:
                path, line, field = record.label_at
                raise _located(path, line, field, f"label {record.label} is too large for a float") from None
        record.data.graph_y = torch.tensor([value], dtype=torch.long if target == "class" else torch.float)


def _same_features(records: list[_Record], path: str) -> None:
    """Node features must have one width across the file (else graphs could not be batched)."""
    first = next((r for r in records if getattr(r.data, "x", None) is not None), None)
    if first is None:
        return
    for record in records:
        x = getattr(record.data, "x", None)
        if x is None:
            raise _located(path, record.line, "x", f"this graph's nodes have no 'x' but those of the "
                          f"graph at line {first.line} do; give every node of every graph features, or none")
        if x.size(1) != first.data.x.size(1):
            raise _located(path, record.line, "x", f"node features have {x.size(1)} values here but "
                          f"{first.data.x.size(1)} in the graph at line {first.line}; every node needs the same "
                          "number")


def _attach_tokens(data: Data, tokens: Sequence[str | None], vocab: Vocabulary | None) -> None:
    """``tokens`` (nodes that have one, in node order), ``word_pos`` and, with a vocab, ``word``."""
    words, word_pos = [], []
    for token in tokens:
        word_pos.append(len(words) if token is not None else NO_WORD)
        if token is not None:
            words.append(token)
    data.word_pos = torch.tensor(word_pos, dtype=torch.long)
    data.tokens = words
    if vocab is not None:
        data.word = lookup_words(words, word_pos, vocab)


# --------------------------------------------------------------------------- CoNLL-U


def _read_conllu(lines: list[str], path: str, vocab: Vocabulary | None, first_line: int = 1) -> list[_Record]:
    records, block = [], []
    for number, line in enumerate(lines, start=first_line):
        if line.strip():
            block.append((number, line))
        elif block:
            records.extend(_conllu_sentence(block, path, vocab))
            block = []
    if block:
        records.extend(_conllu_sentence(block, path, vocab))
    return records


def _conllu_sentence(block: list[tuple[int, str]], path: str, vocab: Vocabulary | None) -> list[_Record]:
    record = _Record(Data(), block[0][0])
    label_text: tuple[int, str] | None = None
    forms, lemmas, upos, deprels, heads, token_lines = [], [], [], [], [], []
    for number, line in block:
        if line.startswith("#"):
            match = _LABEL_COMMENT.fullmatch(line.strip())
            if match:
                if label_text is not None:
                    raise _located(path, number, "label", f"a second '# label =' comment (the first is at line "
                                  f"{label_text[0]})")
                label_text = (number, match.group(1))
            continue
        # Tabs as the format has it; a line with no tab at all is split at spaces, which is unambiguous
        # (a copy of an example from rendered docs has lost its tabs).
        fields = line.split("\t") if "\t" in line else line.split()
        if len(fields) != len(_CONLLU_COLUMNS):
            raise _located(path, number, "columns", f"{len(fields)} columns, expected 10 separated by tabs "
                          f"({' '.join(_CONLLU_COLUMNS)})")
        token_id = fields[0]
        if re.fullmatch(r"[0-9]+-[0-9]+|[0-9]+\.[0-9]+", token_id):
            continue  # a multiword token (1-2) or an empty node (1.1): not a node of the basic tree
        if not re.fullmatch(r"[0-9]+", token_id) or int(token_id) != len(forms) + 1:
            raise _located(path, number, "ID", f"ID {token_id!r} where {len(forms) + 1} was expected (IDs count "
                          "1, 2, 3... in each sentence)")
        head = fields[6]
        # from_heads reads -1 as "outside the tree", which CoNLL-U does not have: a negative HEAD is an error.
        if not re.fullmatch(r"[0-9]+", head):
            raise _located(path, number, "HEAD", f"HEAD {head!r} of token {token_id} is not a token ID or 0 (root)")
        forms.append(fields[1])
        lemmas.append(fields[2])
        upos.append(fields[3])
        heads.append(head)
        deprels.append(fields[7])
        token_lines.append(number)
    if not forms:
        if label_text is not None:
            raise _located(path, label_text[0], "label", "a '# label =' comment with no sentence under it")
        return []  # comments only, e.g. '# newdoc' before a blank line
    for k, head in enumerate(heads):  # from_heads' own range, -1..n, admits the -1 that CoNLL-U does not have
        if int(head) > len(forms):
            raise _located(path, token_lines[k], "HEAD", f"HEAD {head} of token {k + 1} is outside 0..{len(forms)} "
                           f"(0 for the root, 1..{len(forms)} for the sentence's tokens)")
    try:
        data = from_heads(heads, forms, vocab=vocab)
    except CycleError as err:
        # The line of the cycle's first token in the file, the one a reader meets first.
        raise _located(path, token_lines[min(err.nodes) - 1], "HEAD", err.reason, cycle=err.nodes) from None
    except TreeFormatError as err:
        # from_heads counts tokens from 1, as CoNLL-U IDs do: its position is the token ID.
        line = token_lines[err.position - 1] if err.position else token_lines[0]
        raise _located(path, line, "HEAD", err.reason) from None
    data.lemmas, data.upos, data.deprel = lemmas, upos, deprels
    record.data = data
    if label_text is not None:
        _text_label(record, label_text[1], path, label_text[0], "label")
    return [record]


# --------------------------------------------------------------------------- PTB


def _read_ptb(lines: list[str], path: str, vocab: Vocabulary | None, first_line: int = 1) -> list[_Record]:
    records = []
    for number, line in enumerate(lines, start=first_line):
        if not line.strip():
            continue
        text, unlabelled = _blank_labels(line)
        try:
            data = from_ptb(text, vocab)
        except TreeFormatError as err:
            raise _located(path, number, "tree", err.reason, err.position) from None
        if unlabelled:
            data.y[unlabelled] = NO_LABEL
        records.append(_Record(data, number))
    return records


def _blank_labels(line: str) -> tuple[str, list[int]]:
    """Replace each ``_`` label by ``0`` for :func:`from_ptb`, returning the pre-order nodes that had one.

    Every ``(`` opens a node (a raw ``(`` inside a word is an error from_ptb reports), so the ``k``-th ``(``
    is node ``k``; the replacement has the same length, so from_ptb's character positions stay right.
    """
    chars = list(line)
    unlabelled = []
    node = 0
    for i, char in enumerate(line):
        if char != "(":
            continue
        if line[i + 1:i + 2] == "_" and (i + 2 == len(line) or line[i + 2] in " \t\r\n()"):
            chars[i + 1] = "0"
            unlabelled.append(node)
        node += 1
    return ("".join(chars), unlabelled) if unlabelled else (line, [])


# --------------------------------------------------------------------------- JSON Lines


class _DuplicateKeyError(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    # json.loads keeps the last of two equal keys without a word; a repeated field is a mistake to report.
    out = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKeyError(key)
        out[key] = value
    return out


def _read_jsonl(lines: list[str], path: str, vocab: Vocabulary | None, first_line: int = 1) -> list[_Record]:
    records = []
    for number, line in enumerate(lines, start=first_line):
        if not line.strip():
            continue
        try:
            obj = json.loads(line, object_pairs_hook=_no_duplicates)
        except json.JSONDecodeError as err:
            raise _located(path, number, "JSON", f"not valid JSON: {err.msg} (column {err.colno})",
                          err.pos) from None
        except _DuplicateKeyError as err:
            raise _located(path, number, str(err), f"field {str(err)!r} appears twice in one object") from None
        records.append(_json_graph(obj, path, number, vocab))
    return records


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # JSON true/false are bools, not 1/0


def _is_number(value: Any) -> bool:
    """A finite JSON number that fits a float (not a boolean)."""
    if _is_int(value):
        try:
            float(value)
        except OverflowError:
            return False
        return True
    return isinstance(value, float) and math.isfinite(value)


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null",
             int: "an integer", float: "a number"}
    return names.get(type(value), type(value).__name__)


def _json_graph(obj: Any, path: str, line: int, vocab: Vocabulary | None) -> _Record:
    def error(field: str, reason: str, cycle: list | None = None) -> TreeFormatError:
        return _located(path, line, field, reason, cycle=cycle)

    if not isinstance(obj, dict):
        raise error("record", f"a line must hold one JSON object (a graph), got {_kind(obj)}")
    unknown = [key for key in obj if key not in _JSON_GRAPH_KEYS]
    if unknown:
        raise error(unknown[0], f"unknown field {unknown[0]!r}; a graph has {', '.join(_JSON_GRAPH_KEYS)}")
    if "nodes" not in obj:
        raise error("nodes", "missing field 'nodes' (a list of node objects)")
    nodes = obj["nodes"]
    if not isinstance(nodes, list) or not nodes:
        raise error("nodes", f"'nodes' must be a non-empty list of node objects, got {_kind(nodes)}"
                    + (" (empty)" if nodes == [] else ""))
    tokens, features, node_labels, node_fields = [], [], [], []
    for k, node in enumerate(nodes):
        field = f"nodes[{k}]"
        if not isinstance(node, dict):
            raise error(field, f"a node must be an object like {{\"token\": \"word\"}}, got {_kind(node)}")
        unknown = [key for key in node if key not in _JSON_NODE_KEYS]
        if unknown:
            raise error(f"{field}.{unknown[0]}", f"unknown field {unknown[0]!r}; a node has "
                        f"{', '.join(_JSON_NODE_KEYS)}")
        token = node.get("token")
        if token is not None and not isinstance(token, str):
            raise error(f"{field}.token", f"token must be a string, got {_kind(token)} {token!r}")
        tokens.append(token)
        node_fields.append(_node_fields(node.get("fields"), f"{field}.fields", error))
        features.append(_node_features(node, k, features, error))
        node_labels.append(_node_label(node.get("y"), f"{field}.y", error))

    if "parents" in obj and "edges" in obj:
        raise error("parents", "both 'parents' (a tree) and 'edges' (a DAG); give one")
    if "parents" in obj:
        if "positions" in obj:
            raise error("positions", "'positions' goes with 'edges'; under 'parents' children are ordered by "
                        "node index")
        data = _json_tree(obj["parents"], len(nodes), error)
    elif "edges" in obj:
        data = _json_dag(obj["edges"], obj.get("positions"), len(nodes), error)
    else:
        raise error("parents", "missing field 'parents' (a tree: parent index per node, -1 at the root) or "
                    "'edges' (a DAG: [child, parent] pairs)")

    data.y = torch.tensor(node_labels, dtype=torch.long)
    _attach_tokens(data, tokens, vocab)
    if features[0] is not None:
        data.x = torch.tensor(features, dtype=torch.float)
    record = _Record(data, line, fields=node_fields)
    label = obj.get("y")
    if label is not None:
        if not _is_number(label):
            raise error("y", f"the graph label must be a number (an integer class or a regression target) or "
                        f"null, got {_kind(label)} {label!r}")
        record.label, record.label_is_int, record.label_at = label, _is_int(label), (path, line, "y")
    return record


def _node_fields(value: Any, field: str, error: Callable) -> dict[str, list[str]]:
    """A node's ``"fields"``: an object of named token lists (a string counts as a list of one)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise error(field, f"fields must be an object like {{\"subtokens\": [\"get\", \"value\"]}}, got {_kind(value)}")
    out = {}
    for name, tokens in value.items():
        tokens = [tokens] if isinstance(tokens, str) else tokens
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise error(f"{field}.{name}", f"a field is a string or a list of strings, got {_kind(tokens)}")
        out[name] = tokens
    return out


def _attach_fields(records: list[_Record]) -> None:
    """Every field named by any node of the file, on every graph: ``<name>_tokens`` (the tokens, node by node)
    and ``<name>_index`` (the node of each; PyG's batching offsets it), empty where a graph's nodes have none."""
    names = sorted({name for r in records for node in r.fields or () for name in node})
    for record in records:
        for name in names:
            pairs = [(k, t) for k, node in enumerate(record.fields or ()) for t in node.get(name, ())]
            record.data[f"{name}_tokens"] = [t for _, t in pairs]
            record.data[f"{name}_index"] = torch.tensor([k for k, _ in pairs], dtype=torch.long)


def _node_features(node: dict, k: int, previous: list, error: Callable) -> list[float] | None:
    has = "x" in node
    if previous and (previous[0] is not None) != has:
        missing = k if not has else 0
        raise error(f"nodes[{missing}].x", f"node {missing} has no 'x' but node {k if missing == 0 else 0} has; "
                    "give every node features, or none")
    if not has:
        return None
    x = node["x"]
    if not isinstance(x, list) or not x or not all(_is_number(v) for v in x):
        raise error(f"nodes[{k}].x", f"'x' must be a non-empty list of finite numbers, got {x!r}")
    if previous and len(x) != len(previous[0]):
        raise error(f"nodes[{k}].x", f"node {k} has {len(x)} features but node 0 has {len(previous[0])}; every "
                    "node needs the same number")
    return x


def _node_label(value: Any, field: str, error: Callable) -> int:
    if value is None:
        return NO_LABEL
    try:
        # The converters' own label check (integers >= -1; whole floats, not bools or strings); the message is
        # ours because it names the JSON field rather than a 1-based token.
        return _checked_label(value, 0)
    except TreeFormatError:
        raise error(field, f"node label {value!r} is not a class (an integer >= 0; null or -1 for "
                    "unlabelled)") from None


def _json_tree(parents: Any, num_nodes: int, error: Callable) -> Data:
    if not isinstance(parents, list):
        raise error("parents", f"'parents' must be a list (one parent index per node), got {_kind(parents)}")
    if len(parents) != num_nodes:
        raise error("parents", f"{len(parents)} parents for {num_nodes} nodes; give one per node (-1 at the root)")
    # Checked here rather than left to from_parents, whose messages name nodes but not the JSON field.
    for k, parent in enumerate(parents):
        if not _is_int(parent):
            raise error(f"parents[{k}]", f"parent of node {k} must be an integer node index, got {_kind(parent)} "
                        f"{parent!r}")
        if not -1 <= parent < num_nodes:
            raise error(f"parents[{k}]", f"parent {parent} of node {k} is outside -1..{num_nodes - 1}")
    roots = [k for k, parent in enumerate(parents) if parent == -1]
    if len(roots) != 1:
        raise error("parents", "no node has parent -1 (the root)" if not roots else
                    f"nodes {roots[0]} and {roots[1]} both have parent -1: a tree has one root (use 'edges' "
                    "for a DAG or forest)")
    try:
        return from_parents(parents)
    except CycleError as err:
        raise error("parents", "parents form a cycle through nodes " + " -> ".join(map(str, err.nodes)),
                    cycle=list(err.nodes)) from None


def _json_dag(edges: Any, positions: Any, num_nodes: int, error: Callable) -> Data:
    import networkx as nx

    if not isinstance(edges, list):
        raise error("edges", f"'edges' must be a list of [child, parent] pairs, got {_kind(edges)}")
    if positions is not None and (not isinstance(positions, list) or len(positions) != len(edges)):
        raise error("positions", f"'positions' must be a list with one entry per edge ({len(edges)}), got "
                    f"{_kind(positions)}" + (f" of {len(positions)}" if isinstance(positions, list) else ""))
    graph = nx.DiGraph()
    graph.add_nodes_from(range(num_nodes))  # node k of the Data is nodes[k]
    for k, edge in enumerate(edges):
        # Checked here: networkx would add a node for an index out of range, and merge a repeated edge.
        if not isinstance(edge, list) or len(edge) != 2 or not all(_is_int(v) for v in edge):
            raise error(f"edges[{k}]", f"an edge is a pair [child, parent] of node indices, got {edge!r}")
        if not all(0 <= v < num_nodes for v in edge):
            raise error(f"edges[{k}]", f"edge {edge} names a node outside 0..{num_nodes - 1}")
        if graph.has_edge(*edge):
            raise error(f"edges[{k}]", f"edge {edge} is listed twice")
        attrs = {} if positions is None or positions[k] is None else {"position": positions[k]}
        graph.add_edge(*edge, **attrs)
    try:
        data = from_networkx(graph)
    except CycleError as err:
        raise error("edges", err.reason, cycle=err.nodes) from None
    except TreeFormatError as err:  # only positions can be wrong now: no node attributes were given
        raise error("positions", err.reason) from None
    return data


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


_CHUNK_CONTEXT: tuple = ()  # (path, format, target, vocab, pre_filter, pre_transform) of the file being parsed


def _parse_chunk(job: tuple[int, list[bytes]]) -> tuple[list[bytes], dict[str, Any]]:
    """Parse one chunk of lines as :func:`_read_graphs` parses a file, in a worker process: the encoded graphs,
    and what the checks across the whole file need (graph labels, feature widths). The file's settings come in
    :data:`_CHUNK_CONTEXT`, inherited through ``fork`` (a ``pre_filter`` may be a lambda, which cannot be sent)."""
    path, fmt, target, vocab, pre_filter, pre_transform = _CHUNK_CONTEXT
    first, raw_lines = job
    lines = []
    for k, raw in enumerate(raw_lines):
        try:
            text = raw.decode("utf-8-sig" if first + k == 1 else "utf-8")
        except UnicodeDecodeError as err:
            raise _located(path, first + k, "encoding", f"byte {raw[err.start]:#04x} is not UTF-8; save the file "
                           "as UTF-8") from None
        lines.append(text.removesuffix("\n").removesuffix("\r"))
    readers = {"conllu": _read_conllu, "ptb": _read_ptb, "jsonl": _read_jsonl}
    records = readers[fmt](lines, path, vocab, first)
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
    with_x = next((r for r in records if getattr(r.data, "x", None) is not None), None)
    blobs = []
    for record in records:
        record.data.line = torch.tensor([record.line])
        if pre_filter is not None and not pre_filter(record.data):
            continue
        blobs.append(encode_graph(pre_transform(record.data) if pre_transform is not None else record.data))
    summary = {"first_line": records[0].line if records else first, "labelled": bool(labelled), "all_int": all_int,
               "target": chunk_target if labelled else None, "deferred": deferred, "count": len(blobs),
               "width": None if with_x is None else int(with_x.data.x.size(1))}
    return blobs, summary


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

    def chunks() -> Any:
        global _CHUNK_CONTEXT
        _CHUNK_CONTEXT = (str(path), fmt, dataset.target, dataset.vocab, dataset.pre_filter, dataset.pre_transform)
        if workers <= 1:
            results = map(_parse_chunk, jobs)
            for blobs, summary in results:
                summaries.append(summary)
                yield blobs
            return
        # fork: the workers need no imports of their own; a bounded number of chunks in flight keeps memory flat.
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            pending: list[Any] = []
            for job in jobs:
                pending.append(pool.submit(_parse_chunk, job))
                if len(pending) > 2 * workers:
                    blobs, summary = pending.pop(0).result()
                    summaries.append(summary)
                    yield blobs
            for future in pending:
                blobs, summary = future.result()
                summaries.append(summary)
                yield blobs

    def finish(connection: Any) -> dict[str, Any]:
        if digest.hexdigest() != _sha256(path, None):
            raise DatasetError(f"{path} changed while it was being read; run again")
        _check_chunk_features(summaries, str(path))
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
            raise _located(path, summary["first_line"], "x", f"this graph's nodes have no 'x' but those of the "
                           f"graph at line {first['first_line']} do; give every node of every graph features, or none")
        raise _located(path, summary["first_line"], "x", f"node features have {summary['width']} values here but "
                       f"{first['width']} in the graph at line {first['first_line']}; every node needs the same number")


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
