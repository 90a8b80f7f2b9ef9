"""The Stanford Sentiment Treebank (Socher et al., 2013) as a PyG dataset."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import torch

from ..data.ptb import from_ptb
from ..data.tree import NO_LABEL
from ..errors import TreeFormatError
from .base import DEFAULT_ROOT, CorpusDataset
from .download import CorruptFileError, DatasetError, RemoteFile, extract_zip, obtain

__all__ = ["SST"]


class SST(CorpusDataset):
    """Stanford Sentiment Treebank: binarized constituency trees with a sentiment label on every node.

    One ``Data`` per sentence, laid out as :func:`graphtree.data.from_ptb` makes
    it (root is node 0; ``data.y[0]`` is the sentence label; ``tokens`` as
    written in the treebank, e.g. ``-LRB-``).

    * ``fine_grained=True``: 5 classes (0 very negative ... 4 very positive) on
      every node; 8544 / 1101 / 2210 sentences.
    * ``fine_grained=False``: the binary task of Tai et al., Zhu et al., Le &
      Zuidema and Teng & Zhang: sentences whose root is neutral (2) are dropped
      (6920 / 872 / 1821 remain), labels 0-1 become 0 and 3-4 become 1, and
      neutral phrases inside the kept sentences become ``NO_LABEL`` (-1), so
      losses and phrase accuracy ignore them.

    Files: ``<root>/sst/raw/trees/{train,dev,test}.txt``, unpacked from
    ``trainDevTestTrees_PTB.zip`` (official URL, or ``sst/trainDevTestTrees_PTB.zip``
    of a mirror; a copy of the zip placed in ``<root>/sst/raw/`` is used as is).
    The archive's SHA-256 and the tree counts are checked before anything is kept.

    Args:
        root: Data root (default ``"datasets"``).
        split: ``"train"``, ``"dev"`` or ``"test"``.
        fine_grained: 5 classes (``True``) or the binary task (``False``).
        vocab: Optional token -> id mapping (a :class:`~graphtree.vocab.Vocab`)
            filling ``data.word``; the processed cache is named after it.
        mirror: Folder or http(s) URL laid out like the data folder; default
            ``$GRAPHTREE_MIRROR``, else the official URL.
        transform, pre_transform, pre_filter, log, force_reload: As in
            :class:`torch_geometric.data.InMemoryDataset`.

    Raises:
        DatasetError: an unknown split, a wrong root, a file that cannot be
            fetched, a corrupt archive, a malformed tree or a label outside
            the classes (each message says how to fix it).
    """

    name = "sst"
    ARCHIVE = RemoteFile("sst/trainDevTestTrees_PTB.zip", "https://nlp.stanford.edu/sentiment/trainDevTestTrees_PTB.zip",
                         "d87ac16d5877f702105caa191f6e971e359629110f5732b573b081a3924edd9e")
    MEMBER_SHA256: ClassVar[dict] = {
        "trees/train.txt": "e2f3f41b0b1e6d4dddc0effe3bfc2d27ed8928079aa9a03d652311614fc5feb7"}
    SPLIT_SIZES: ClassVar[dict] = {"train": 8544, "dev": 1101, "test": 2210}
    BINARY_SIZES: ClassVar[dict] = {"train": 6920, "dev": 872, "test": 1821}
    FINE_CLASSES = ("very negative", "negative", "neutral", "positive", "very positive")
    BINARY_CLASSES = ("negative", "positive")
    remote_files = (ARCHIVE,)

    def __init__(self, root: str | os.PathLike | None = DEFAULT_ROOT, split: str = "train", fine_grained: bool = True,
                 vocab: Any = None, mirror: str | os.PathLike | None = None, transform: Callable | None = None,
                 pre_transform: Callable | None = None, pre_filter: Callable | None = None, log: bool = True,
                 force_reload: bool = False) -> None:
        self.fine_grained = bool(fine_grained)
        super().__init__(root, split, vocab, mirror, transform, pre_transform, pre_filter, log, force_reload)

    @property
    def classes(self) -> tuple[str, ...]:
        """Class names, index = label."""
        return self.FINE_CLASSES if self.fine_grained else self.BINARY_CLASSES

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def options_tag(self) -> str:
        return "fine" if self.fine_grained else "binary"

    @property
    def raw_file_names(self) -> list[str]:
        return [f"trees/{split}.txt" for split in self.splits]

    def download(self) -> None:
        archive = obtain(self.ARCHIVE, Path(self.raw_dir) / self.ARCHIVE.name, self.mirror, log=self.log)
        members = {f"trees/{split}.txt": Path(self.raw_dir) / "trees" / f"{split}.txt" for split in self.splits}
        extract_zip(archive, members, checksums=self.MEMBER_SHA256,
                    line_counts={f"trees/{split}.txt": self.SPLIT_SIZES[split] for split in self.splits})
        archive.unlink()  # the unpacked trees are all that processing reads

    def process(self) -> None:
        path = Path(self.raw_dir) / "trees" / f"{self.split}.txt"
        with open(path, encoding="utf-8") as handle:
            lines = [(number, line) for number, line in enumerate(handle, start=1) if line.strip()]
        expected = self.SPLIT_SIZES.get(self.split)
        if expected is not None and len(lines) != expected:
            raise CorruptFileError(f"{path} holds {len(lines)} trees, expected {expected}: it is damaged; delete "
                                   f"{self.raw_dir} and run again to fetch the treebank afresh")
        data_list = []
        for number, line in lines:
            try:
                data = from_ptb(line, self.vocab)
            except TreeFormatError as err:
                raise DatasetError(f"{path}, line {number}: {err.reason} (position {err.position}); the file is "
                                   f"damaged: delete {self.raw_dir} and run again") from None
            y = data.y
            if y.numel() and (int(y.min()) < 0 or int(y.max()) >= len(self.FINE_CLASSES)):
                bad = int(y[(y < 0) | (y >= len(self.FINE_CLASSES))][0])
                raise DatasetError(f"{path}, line {number}: label {bad} is outside the 5 SST classes 0-4; this is "
                                   f"not the SST release: delete {self.raw_dir} and fetch it again")
            if not self.fine_grained:
                if int(y[0]) == 2:  # node 0 is the root (pre-order)
                    continue
                data.y = torch.where(y < 2, 0, torch.where(y > 2, 1, NO_LABEL))
            data_list.append(data)
        if not self.fine_grained:
            expected = self.BINARY_SIZES.get(self.split)
            if expected is not None and len(data_list) != expected:
                raise CorruptFileError(f"{path}: {len(data_list)} non-neutral sentences, expected {expected}; "
                                       f"delete {self.raw_dir} and run again")
        self.save_processed(data_list)
