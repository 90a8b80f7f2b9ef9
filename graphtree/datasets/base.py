"""What SST, SICK and TREC share: the folder layout, split and root checks, cache names, atomic saves."""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Callable, Mapping, Sequence
from itertools import accumulate, pairwise
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch_geometric.data import Data, InMemoryDataset
from torch_geometric.data.data import BaseData
from torch_geometric.io import fs

from ..data.batching import separate_graphs
from ..errors import InvalidTypeError
from ..vocab import Vocab
from .download import DatasetError, RemoteFile, atomic_torch_save, resolve_mirror

__all__ = ["DEFAULT_ROOT", "CorpusDataset", "code_fingerprint", "vocab_tag"]


# The modules that turn text and generated structures into graphs: every cache of graphs depends on them.
_CONVERTERS = ("graphtree.levels", "graphtree.data.networkx", "graphtree.data.parents", "graphtree.data.ptb",
               "graphtree.data.tree", "graphtree.data.records", "graphtree.data.conllu", "graphtree.data.jsonl",
               "graphtree.data.subtokens")


def code_fingerprint(module: ModuleType) -> str:
    """A digest of the source of ``module`` and of the graph converters (:mod:`graphtree.data`,
    :mod:`graphtree.levels`): a cache of graphs named by it is made anew whenever the code that made them
    changes, with nobody to remember to bump a version (a comment's edit rebuilds it too: a rebuild costs
    seconds, a stale cache wrong results)."""
    import importlib

    digest = hashlib.sha256()
    for source in (module, *(importlib.import_module(name) for name in _CONVERTERS)):
        digest.update(Path(source.__file__).read_bytes())
    return digest.hexdigest()[:12]

DEFAULT_ROOT = "datasets"
"""Default data root: ``<root>/<corpus>/raw`` holds the fetched files, ``<root>/<corpus>/processed`` the caches."""

PROCESSED_FORMAT = 2
"""Version of the processed files' layout, in their names: 2 packs the string lists (:func:`pack_string_lists`)."""


def vocab_tag(vocab: Any) -> str:
    """Name of a vocabulary in processed file names: ``tokens`` without one, else ``vocab-<hash>``.

    Raises:
        TypeError: ``vocab`` is neither ``None`` nor a ``Mapping`` (a function
            cannot be fingerprinted, so a cache built with it could be reused wrongly).
    """
    if vocab is None:
        return "tokens"
    if isinstance(vocab, Vocab):
        return f"vocab-{vocab.fingerprint}"
    if isinstance(vocab, Mapping):
        items = sorted((str(k), int(v)) for k, v in vocab.items())
        return "vocab-" + hashlib.sha256(json.dumps(items, ensure_ascii=False).encode()).hexdigest()[:12]
    raise InvalidTypeError(f"datasets take a Vocab or a dict token -> id as vocab, got {type(vocab).__name__}; "
                           f"build one with graphtree.vocab.Vocab.build")


class CorpusDataset(InMemoryDataset):
    """Base of the corpus datasets: ``<root>/<name>/raw`` and ``<root>/<name>/processed``, one split each.

    Subclasses set :attr:`name`, :attr:`splits`, :attr:`remote_files` (for the
    root check) and implement ``raw_file_names``, ``download``, ``process`` and
    :meth:`options_tag`.
    """

    name: str = ""
    splits: Sequence[str] = ("train", "dev", "test")
    remote_files: Sequence[RemoteFile] = ()
    data_cls: type[Data] = Data
    # get() gives the storage's graphs as PyG's InMemoryDataset.get cuts them (BatchCutter reads the storage)
    _gives_stored_graphs = True

    def __init__(self, root: str | os.PathLike | None, split: str, vocab: Any, mirror: str | os.PathLike | None,
                 transform: Callable | None, pre_transform: Callable | None, pre_filter: Callable | None,
                 log: bool, force_reload: bool) -> None:
        if split not in self.splits:
            raise DatasetError(f"{type(self).__name__} has no split {split!r}; choose one of "
                               f"{', '.join(repr(s) for s in self.splits)}")
        root = os.fspath(root) if root is not None else DEFAULT_ROOT
        self._check_root(Path(root).expanduser())
        self.split = split
        self.vocab = vocab
        self._vocab_tag = vocab_tag(vocab)
        self.mirror = mirror
        if mirror is not None:
            resolve_mirror(mirror)  # fail early on a mirror folder that does not exist
        # The graphs cut from the storage, with the slices they were cut by: one dict for this dataset and every
        # view made of it (PyG's index_select copies a dataset shallowly), so that the views cut it once.
        self._shared_cut: dict[str, Any] = {}
        super().__init__(root, transform, pre_transform, pre_filter, log=log, force_reload=force_reload)
        self.load(self.processed_paths[0], self.data_cls)

    def _check_root(self, root: Path) -> None:
        if root.exists() and not root.is_dir():
            raise DatasetError(f"root {root} is a file; pass a folder (it will hold {self.name}/raw and "
                               f"{self.name}/processed), e.g. root='{DEFAULT_ROOT}'")
        if root.name == self.name and ((root / "raw").is_dir() or (root / "processed").is_dir()):
            raise DatasetError(f"root {root} is the {self.name} folder itself; pass its parent ({root.parent}) "
                               f"as root")
        for remote in self.remote_files:
            if (root / remote.path).is_file():
                raise DatasetError(
                    f"root {root} looks like a data mirror (it holds {remote.path}); pass it as mirror=, and "
                    f"give root a folder of your own for the raw/ and processed/ files, e.g. root='{DEFAULT_ROOT}'")

    @property
    def raw_dir(self) -> str:
        return os.path.join(self.root, self.name, "raw")

    @property
    def processed_dir(self) -> str:
        return os.path.join(self.root, self.name, "processed")

    def options_tag(self) -> str:
        """The options that shape the processed data, as a file-name fragment (e.g. ``binary``)."""
        raise NotImplementedError

    @property
    def processed_file_names(self) -> list[str]:
        # Every option that changes the content is in the name, so changing one builds a new cache
        # instead of silently reusing the old one.
        # The layout's version too: a file of another layout is never read as this one.
        return [f"{self.split}-{self.options_tag()}-{self._vocab_tag}-f{PROCESSED_FORMAT}.pt"]

    def save_processed(self, data_list: list[Data]) -> None:
        """Apply ``pre_filter``/``pre_transform`` and save atomically to the processed path.

        Raises:
            DatasetError: nothing is left to save (every example filtered out).
        """
        if self.pre_filter is not None:
            data_list = [d for d in data_list if self.pre_filter(d)]
        if self.pre_transform is not None:
            data_list = [self.pre_transform(d) for d in data_list]
        if not data_list:
            raise DatasetError(f"{type(self).__name__} {self.split}: no examples left after pre_filter")
        data, slices = self.collate(data_list)
        stored = {key: pack_string_lists(value) for key, value in data.to_dict().items()}
        atomic_torch_save((stored, slices, data.__class__), self.processed_paths[0])

    def load(self, path: str, data_cls: type[BaseData] = Data) -> None:
        """Read a file of :meth:`save_processed` (``InMemoryDataset.load``, with the string lists unpacked)."""
        stored, self.slices, data_cls = fs.torch_load(path)
        self.data = data_cls.from_dict({key: unpack_string_lists(value) for key, value in stored.items()})

    def len(self) -> int:
        """``InMemoryDataset.len``, counted once per storage: PyG's walks the slices on each call, and reading one
        graph calls it three times (half the time of iterating over SST's training set)."""
        counted = getattr(self, "_counted", None)
        if counted is None or counted[0] is not self.slices:
            self._counted = counted = (self.slices, super().len())
        return counted[1]

    def get(self, idx: int) -> BaseData:
        """Graph ``idx``, as ``InMemoryDataset.get`` gives it; the first call cuts every graph from the storage
        in one pass (:func:`~graphtree.data.batching.separate_graphs`) instead of one graph per call, for this
        dataset and the views made of it (``dataset[a:b]``: iterating several of them cuts once)."""
        if getattr(self, "_data_list", None) is None and self.len() > 1:
            shared = self._shared_cut
            if shared.get("slices") is not self.slices:  # not cut yet, or another storage loaded since
                # The collector is left alone (a script that wants it quieter says so: experiments/lab/process.py)
                shared["graphs"] = separate_graphs(self._data, self.slices)  # None: PyG cuts one by one
                shared["slices"] = self.slices
            self._data_list = shared["graphs"]
        return super().get(idx)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.split!r}, {len(self)} examples, {self.options_tag()})"


_PACKED = "graphtree.packed_string_lists"


def pack_string_lists(value: Any) -> Any:
    """A list of string lists (e.g. every graph's ``tokens``) as one string and two length tensors; any other value
    as it is. PyTorch's safe loader (``weights_only``, which PyG uses) reads each Python object of a file one by
    one in Python: SST's training tokens, 160,000 strings, took 0.4 s to load, and the packed form 0.02 s."""
    if not (isinstance(value, list) and value and all(
            isinstance(strings, list) and all(isinstance(s, str) for s in strings) for strings in value)):
        return value
    flat = [s for strings in value for s in strings]
    return {_PACKED: "".join(flat), "lengths": torch.tensor([len(s) for s in flat], dtype=torch.long),
            "counts": torch.tensor([len(strings) for strings in value], dtype=torch.long)}


def unpack_string_lists(value: Any) -> Any:
    """The inverse of :func:`pack_string_lists`."""
    if not (isinstance(value, dict) and _PACKED in value):
        return value
    text, lengths = value[_PACKED], value["lengths"].tolist()
    ends = list(accumulate(lengths))
    flat = [text[end - length:end] for end, length in zip(ends, lengths)]
    bounds = [0, *accumulate(value["counts"].tolist())]
    return [flat[begin:end] for begin, end in pairwise(bounds)]


SPLIT_ORDER = ("test", "dev", "train")  # the order generated splits are drawn in


def split_sizes(train: int, dev: int, test: int) -> dict[str, int]:
    """The sizes of a generated dataset's splits, checked to be non-negative."""
    sizes = {"test": int(test), "dev": int(dev), "train": int(train)}
    if min(sizes.values()) < 0:
        raise DatasetError(f"split sizes must be non-negative, got {sizes}")
    return sizes


def generated_split(split: str, sizes: Mapping[str, int], seed: int,
                    generate: Callable[[int, int, set], list]) -> list:
    """The examples of ``split`` of a generated dataset: ``generate(count, seed, exclude)`` for each split in
    :data:`SPLIT_ORDER`, each with a seed of its own drawn from ``seed`` and avoiding the examples of the splits
    before it (``generate`` adds what it makes to ``exclude``). A split so depends only on the settings and the
    sizes of the splits before it: a smaller training set keeps the same test set."""
    seen: set = set()
    seeds = random.Random(seed)
    examples: list = []
    for name in SPLIT_ORDER:
        try:
            examples = generate(sizes[name], seeds.randrange(2**63), seen)
        except ValueError as err:
            raise DatasetError(str(err)) from None
        if name == split:
            break
    return examples
