"""Train, dev and test graphs of one's own files: one file split by a seeded shuffle, or a folder of
split files (:func:`load_graph_splits`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch_geometric.data import Data

from graphtree.datasets.files import SUFFIXES, GraphFiles, split_indices

from ..runs import fail, note, quick_sample

__all__ = ["SPLITS", "GraphSplits", "load_graph_splits"]

SPLITS = ("train", "dev", "test")



@dataclass
class GraphSplits:
    """Train, dev and test graphs and where each came from.

    Attributes:
        name: The data's name (the file's stem, or the folder's name), for run names.
        format: ``"conllu"``, ``"ptb"`` or ``"jsonl"``.
        files: The file each split was read from.
        graphs: The graphs of each split.
        indices: Each graph's 0-based index among the graphs of its file.
        tags: Each split's :meth:`GraphFiles.options_tag` (format and hash of the bytes read).
    """

    name: str
    format: str
    files: dict[str, Path]
    graphs: dict[str, list[Data]]
    indices: dict[str, list[int]]
    tags: dict[str, str]

    @property
    def one_file(self) -> bool:
        """Whether the splits come from one file (split by a seeded shuffle)."""
        return len(set(self.files.values())) == 1

    def where(self, split: str, graph: Data) -> str:
        """``<file>, line <n>``: where ``graph`` of ``split`` starts."""
        return f"{self.files[split]}, line {int(graph.line)}"

    def sample(self, sizes: Mapping[str, int]) -> GraphSplits:
        """A fixed random subset of each split (:func:`~lab.runs.quick_sample`), for ``--quick``."""
        graphs, indices = {}, {}
        for split in SPLITS:
            if getattr(self.graphs[split], "reads_from_disk", False):  # a view of the store: nothing read
                kept = quick_sample(list(range(len(self.graphs[split]))), sizes[split])
                indices[split] = [self.indices[split][k] for k in kept]
                graphs[split] = self.graphs[split].index_select(kept)
                continue
            kept = quick_sample(list(zip(self.indices[split], self.graphs[split])), sizes[split])
            indices[split], graphs[split] = [k for k, _ in kept], [g for _, g in kept]
        return GraphSplits(self.name, self.format, self.files, graphs, indices, self.tags)

    def identity(self) -> dict[str, Any]:
        """What identifies the data of a run (stored in its settings): files, bytes, sizes."""
        return {"files": {s: str(p) for s, p in self.files.items()}, "tags": dict(self.tags),
                "sizes": {s: len(g) for s, g in self.graphs.items()}}


def _run_name_part(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "data"


def _split_files(folder: Path, format: str | None) -> dict[str, Path]:
    """The ``train.*``, ``dev.*`` and ``test.*`` file of ``folder`` (without ``format``: of a known suffix)."""
    files = {}
    for split in SPLITS:
        found = sorted(p for p in folder.iterdir() if p.is_file() and p.stem == split
                       and (format is not None or p.suffix.lower() in SUFFIXES))
        if not found:
            wanted = ", ".join(f"{split}{s}" for s, f in SUFFIXES.items() if format in (None, f))
            fail(f"{folder}: no {split} file; a folder of splits holds train, dev and test files such as {wanted}"
                 + ("" if format is not None else " (or any suffix with --format)"))
        if len(found) > 1:
            fail(f"{folder}: {len(found)} {split} files ({', '.join(p.name for p in found)}); keep one, or choose "
                 "with --format")
        files[split] = found[0]
    return files


def load_graph_splits(data: str | os.PathLike, *, format: str | None = None,
                      labels: str | os.PathLike | None = None, target: str = "auto",
                      ratios: Sequence[float] = (0.8, 0.1, 0.1), seed: int = 0,
                      root: str | os.PathLike | None = None, on_disk: bool = False,
                      subtokens: bool = False) -> GraphSplits:
    """Train, dev and test graphs of ``data``: a file (split by a seeded shuffle) or a folder of split files.

    A folder holds one ``train.*``, ``dev.*`` and ``test.*`` file each (the
    suffix gives the format, or ``format``). With one file per split, the kind
    of graph labels the training file has (classes or numbers) is asked of the
    dev and test files too, so the three agree.

    Args:
        data: The file, or the folder.
        format: ``"conllu"``, ``"ptb"`` or ``"jsonl"``; default from the suffix.
        labels: A labels file (one graph label per line; one data file only).
        target: ``"auto"``, ``"class"`` or ``"regression"``, as in :class:`GraphFiles`.
        ratios: ``(train, dev, test)`` fractions for one file; a file of fewer graphs than splits is every split
            (where every fraction is positive).
        seed: Seed of the split of one file.
        root: Data root of the processed caches (default: :func:`~graphtree.datasets.files.default_files_root`).
        on_disk: Keep the graphs in graph stores (:class:`GraphFiles` ``on_disk``) and give each split as a
            dataset read from there, a batch at a time, instead of a list in memory.
        subtokens: Split the nodes' tokens into the field ``subtokens`` (:class:`GraphFiles` ``subtokens``).

    Raises:
        RunError: no such file or folder, a folder without its split files, labels with a folder.
        DatasetError, TreeFormatError: as :class:`GraphFiles` raises them (a located malformed record).
    """
    path = Path(data).expanduser()
    if not path.exists():
        fail(f"--data {data}: no such file or folder")
    per_split = path.is_dir()
    if per_split and labels is not None:
        fail("--labels goes with one data file; with a folder of splits, put the labels in the data files")
    name = _run_name_part(path.resolve().name if per_split else path.stem)
    if not per_split:
        # The whole file once, split here as GraphFiles splits it (split_indices): an empty split is told in
        # terms of the file and --split.
        dataset = GraphFiles(root, "all", files=path, format=format, labels=labels, target=target, name=name,
                             log=False, on_disk=on_disk, subtokens=subtokens)
        graphs = dataset if on_disk else list(dataset)
        indices = split_indices(len(graphs), ratios, seed)
        if 0 < len(graphs) < len(SPLITS) and min(ratios) > 0:
            # Too few graphs for one in each split, whatever the fractions (examples/trees.conllu has two): every
            # split is the whole file, so that a tiny example still runs the whole pipeline; the note says so. (A
            # split asked to be empty, fraction 0, stays an error: training needs dev and test graphs.)
            note(f"{path}: {len(graphs)} graph(s), too few to split into train, dev and test: each of the three is "
                 "the whole file (the run shows the pipeline, its scores measure nothing)")
            indices = {split: list(range(len(graphs))) for split in SPLITS}
        for split in SPLITS:
            if not indices[split]:
                fail(f"{path}: its {len(graphs)} graphs leave the {split} split empty with --split "
                     f"{' '.join(f'{r:g}' for r in ratios)}; give more graphs, other fractions, or a folder with "
                     "train, dev and test files")
        return GraphSplits(name, dataset.format, dict.fromkeys(SPLITS, path),
                           {s: dataset.index_select(indices[s]) if on_disk else [graphs[k] for k in indices[s]]
                            for s in SPLITS}, indices,
                           dict.fromkeys(SPLITS, dataset.options_tag()))
    files = _split_files(path, format)
    graphs, tags = {}, {}
    for split in SPLITS:
        dataset = GraphFiles(root, split, files=files, format=format, target=target, name=name, log=False,
                             on_disk=on_disk, subtokens=subtokens)
        graphs[split], tags[split] = dataset if on_disk else list(dataset), dataset.options_tag()
        if split == "train" and target == "auto" and graphs[split]:
            graph_y = getattr(graphs[split][0], "graph_y", None)
            if graph_y is not None:  # dev and test read their labels as the training file has them
                target = "regression" if graph_y.is_floating_point() else "class"
    return GraphSplits(name, dataset.format, files, graphs, {s: list(range(len(graphs[s]))) for s in SPLITS}, tags)


