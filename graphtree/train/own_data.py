"""Training on trees and DAGs of your own (CoNLL-U, PTB, JSON Lines): what ``experiments/train.py`` is made of.

* :func:`load_graph_splits` reads train, dev and test with
  :class:`~graphtree.datasets.GraphFiles`: one file split by a seeded shuffle,
  or a folder holding ``train.*``, ``dev.*`` and ``test.*``.
* :func:`find_task` decides what is learnt from the labels there are
  (:class:`Task`): a class or a number per graph, or a class per node.
* :func:`attach_words` gives the nodes word ids; :class:`NodeInputs` turns
  them (and numeric features ``x``) into node vectors.
* :func:`model_settings` checks that a cell fits the data (children per node,
  where the inputs are) and :func:`build_model` builds it under an output
  layer (:class:`GraphModel`).
* :class:`TaskTrainer` is :class:`~graphtree.train.Trainer` with the task's
  loss and dev selection (accuracy, or mean squared error);
  :func:`write_predictions` writes one line per test graph.

A problem with the data or the settings is a :class:`~graphtree.train.runs.RunError`
(or the :class:`~graphtree.errors.TreeFormatError` of the malformed record)
naming the file, the line and what to change.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Linear
from torch_geometric.data import Batch, Data
from torch_geometric.utils import scatter

from ..data.tree import NO_LABEL, NO_WORD, lookup_words
from ..datasets.files import _SUFFIXES, GraphFiles, split_indices
from ..errors import GraphtreeError
from ..models import BiTreeLSTM, NodeEmbedding
from ..nn import LSTMRNN, SLSTM, ChildSumTreeLSTM, NaryTreeLSTM
from ..nn.functional import dropout
from ..vocab import Vocab
from .checkpoint import atomic_write_text
from .optim import PaperOptimizer
from .pairs import relatedness
from .runs import RunError, fail, note, quick_sample
from .trainer import Trainer, collate

__all__ = ["MODELS", "SPLITS", "GraphModel", "GraphSplits", "NodeInputs", "Prediction", "Structure", "Task",
           "TaskTrainer", "attach_words", "build_model", "describe_structure", "feature_channels", "find_task",
           "load_graph_splits", "model_settings", "write_predictions"]

SPLITS = ("train", "dev", "test")

MODELS = {
    "childsum": "Child-Sum Tree-LSTM (Tai et al. 2015): any number of children, inputs at every node",
    "nary": "N-ary Tree-LSTM (Tai et al. 2015), N = the most children of any node; the constituency form (inputs "
            "at leaves) where only leaves carry inputs, else the general form",
    "slstm": "S-LSTM (Zhu et al. 2015): binary, inputs at leaves",
    "lstmrnn": "LSTM-RNN (Le & Zuidema 2015): binary, inputs at leaves, memory size = input size",
    "contree": "bottom-up ConTree (Teng & Zhang 2017): binary, inputs at leaves",
    "topdown": "head-lexicalized top-down Tree-LSTM (Teng & Zhang 2017): binary, inputs at leaves",
    "bicontree": "BiConTree (Teng & Zhang 2017): binary, inputs at leaves",
}
"""The models ``experiments/train.py --model`` offers."""

_BINARY = ("slstm", "lstmrnn", "contree", "topdown", "bicontree")  # at most two children; only leaves read inputs
_TENG_VARIANTS = {"contree": "contree", "topdown": "top_down", "bicontree": "bicontree"}


# --------------------------------------------------------------------------- data


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
        """A fixed random subset of each split (:func:`~graphtree.train.runs.quick_sample`), for ``--quick``."""
        graphs, indices = {}, {}
        for split in SPLITS:
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
                       and (format is not None or p.suffix.lower() in _SUFFIXES))
        if not found:
            wanted = ", ".join(f"{split}{s}" for s, f in _SUFFIXES.items() if format in (None, f))
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
                      root: str | os.PathLike = "datasets") -> GraphSplits:
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
        root: Data root of the processed caches.

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
                             log=False)
        graphs = list(dataset)
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
                           {s: [graphs[k] for k in indices[s]] for s in SPLITS}, indices,
                           dict.fromkeys(SPLITS, dataset.options_tag()))
    files = _split_files(path, format)
    graphs, tags = {}, {}
    for split in SPLITS:
        dataset = GraphFiles(root, split, files=files, format=format, target=target, name=name, log=False)
        graphs[split], tags[split] = list(dataset), dataset.options_tag()
        if split == "train" and target == "auto" and graphs[split]:
            graph_y = getattr(graphs[split][0], "graph_y", None)
            if graph_y is not None:  # dev and test read their labels as the training file has them
                target = "regression" if graph_y.is_floating_point() else "class"
    return GraphSplits(name, dataset.format, files, graphs, {s: list(range(len(graphs[s]))) for s in SPLITS}, tags)


# --------------------------------------------------------------------------- the task


@dataclass(frozen=True)
class Task:
    """What a model learns: a class or a number per graph (``graph_y``), or a class per node (``y``).

    Attributes:
        level: ``"graph"`` or ``"node"``.
        kind: ``"class"`` or ``"regression"``.
        num_classes: Number of classes (1 for regression).
    """

    level: str
    kind: str
    num_classes: int = 1

    @property
    def name(self) -> str:
        """``graph-class``, ``graph-regression`` or ``node-class``."""
        return f"{self.level}-{self.kind}"

    @property
    def out_channels(self) -> int:
        """Outputs per graph or node: one score per class, or the number."""
        return self.num_classes if self.kind == "class" else 1

    @property
    def metric(self) -> str:
        """What dev selection maximizes (``accuracy``) or minimizes (``mse``)."""
        return "accuracy" if self.kind == "class" else "mse"

    def gold(self, batch: Any) -> Tensor:
        """The labels of a batch: one per graph, or one per node (unlabelled: ``NO_LABEL``, or NaN)."""
        if self.level == "node":
            return batch.y
        graph_y = getattr(batch, "graph_y", None)
        if graph_y is None:  # a file without graph labels (e.g. a test file to predict)
            size, device = getattr(batch, "num_graphs", 1), batch.is_root.device
            return torch.full((size,), NO_LABEL if self.kind == "class" else math.nan, device=device)
        return graph_y.view(-1)

    def labelled(self, gold: Tensor) -> Tensor:
        """Where ``gold`` holds a label."""
        return gold != NO_LABEL if self.kind == "class" else ~torch.isnan(gold)

    def loss(self, out: Tensor, batch: Any) -> Tensor:
        """Summed cross-entropy (classes) or squared error (numbers) over the labelled graphs or nodes."""
        gold = self.gold(batch)
        keep = self.labelled(gold)
        if self.kind == "class":
            return F.cross_entropy(out[keep], gold[keep], reduction="sum")
        return F.mse_loss(out[keep, 0], gold[keep].to(out.dtype), reduction="sum")

    def predict(self, out: Tensor) -> Tensor:
        """The predicted class (or number) of each row of ``out``."""
        return out.argmax(-1) if self.kind == "class" else out[:, 0]


def _count_labels(task_level: str, kind: str, graphs: Sequence[Data]) -> int:
    task = Task(task_level, kind)
    return sum(int(task.labelled(task.gold(g)).sum()) for g in graphs)


def find_task(splits: GraphSplits, level: str = "auto") -> Task:
    """The task of ``splits`` at ``level`` (``"graph"``, ``"node"`` or ``"auto"``).

    ``"auto"`` is ``"graph"`` where the training graphs have graph labels,
    else ``"node"`` where their nodes have labels. Graph labels are classes
    (integers) or numbers (regression) as :class:`GraphFiles` read them; node
    labels are classes. The number of classes is one more than the largest
    label of any split.

    Raises:
        RunError: the training or dev graphs have no labels of that level.
    """
    train, file = splits.graphs["train"], splits.files["train"]
    graph_y = getattr(train[0], "graph_y", None) if train else None
    kind = "regression" if graph_y is not None and graph_y.is_floating_point() else "class"
    graph_labels = _count_labels("graph", kind, train) if graph_y is not None else 0
    node_labels = _count_labels("node", "class", train)
    how_graph = ("give graph labels: a '# label = N' comment per CoNLL-U sentence, a graph \"y\" in JSON Lines, or "
                 "--labels FILE with one label per graph")
    how_node = "give node labels: PTB labels at the nodes, or \"y\" of the nodes in JSON Lines"
    if level == "auto":
        if not graph_labels and not node_labels:
            fail(f"{file}: no labels to learn: none of its {len(train)} training graphs has a label; {how_graph}, "
                 f"or {how_node}")
        level = "graph" if graph_labels else "node"
    if level == "graph" and not graph_labels:
        fail(f"{file}: --task graph, but none of its {len(train)} training graphs has a graph label; {how_graph}")
    if level == "node" and not node_labels:
        fail(f"{file}: --task node, but no node of its {len(train)} training graphs has a label; {how_node}")
    if level == "node":
        kind = "class"
    if not _count_labels(level, kind, splits.graphs["dev"]):
        fail(f"{splits.files['dev']}: the dev graphs have no {level} labels, and dev selects the epoch to keep; "
             "label them, or split one labelled file")
    num_classes = 1
    if kind == "class":
        task = Task(level, kind)
        num_classes = 1 + max(int(task.gold(g).max()) for s in SPLITS for g in splits.graphs[s])  # NO_LABEL is -1
    return Task(level, kind, num_classes)


# --------------------------------------------------------------------------- inputs


def attach_words(splits: GraphSplits, vectors: Any = None) -> Vocab | None:
    """Give every node with a token its word id (``word``); the vocabulary, or ``None`` where no node has a token.

    Without ``vectors`` the vocabulary is the training tokens; with pretrained
    ``vectors`` (e.g. :func:`~graphtree.embeddings.load_glove`), the tokens of
    every split that have a vector (Teng & Zhang's rule, as the experiments).
    """
    if not any(len(g.tokens) for s in SPLITS for g in splits.graphs[s]):
        return None
    if vectors is None:
        vocab = Vocab.build(splits.graphs["train"])
    else:
        vocab = Vocab.build([g for s in SPLITS for g in splits.graphs[s]], pretrained=vectors)
    for split in SPLITS:
        for graph in splits.graphs[split]:
            graph.word = lookup_words(graph.tokens, graph.word_pos.tolist(), vocab)
    return vocab


def feature_channels(splits: GraphSplits) -> int:
    """The width of the node features ``x`` (0 where the graphs have none); every split must agree."""
    widths = {}
    for split in SPLITS:
        for graph in splits.graphs[split]:
            x = getattr(graph, "x", None)
            widths.setdefault(0 if x is None else x.size(1), (split, graph))
    if len(widths) > 1:
        (a, (sa, ga)), (b, (sb, gb)) = sorted(widths.items())[:2]
        fail(f"{splits.where(sb, gb)}: x: nodes have {b} features here but {a} in {splits.where(sa, ga)}; every "
             "split needs the same node features")
    return next(iter(widths), 0)


class NodeInputs(torch.nn.Module):
    """The input vector of every node: its word vector, its features ``x``, or both side by side.

    Args:
        embedding: Word vectors of ``batch.word`` (nodes without a word get zeros), or ``None``.
        feature_channels: Width of ``batch.x`` (0: no features).
    """

    def __init__(self, embedding: NodeEmbedding | None, feature_channels: int = 0) -> None:
        super().__init__()
        if embedding is None and feature_channels == 0:
            raise ValueError("NodeInputs needs word vectors, node features, or both")
        self.embedding, self.feature_channels = embedding, feature_channels

    @property
    def out_channels(self) -> int:
        return (self.embedding.embedding_dim if self.embedding is not None else 0) + self.feature_channels

    def forward(self, batch: Any) -> Tensor:
        parts = [self.embedding(batch.word)] if self.embedding is not None else []
        if self.feature_channels:
            parts.append(batch.x)
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)


# --------------------------------------------------------------------------- models


@dataclass(frozen=True)
class Structure:
    """What the graphs of all splits ask of a cell.

    Attributes:
        max_children: The most children of any node (as positions: the largest ``edge_pos`` + 1).
        widest: Where the first node with that many children is (``<file>, line <n>``), or ``None``.
        binary_breach: Where the first node with more than two children is, or ``None``.
        inner_inputs: Where the first inner node with a word or features is, or ``None``.
    """

    max_children: int
    widest: str | None
    binary_breach: str | None
    inner_inputs: str | None


def describe_structure(splits: GraphSplits) -> Structure:
    """The :class:`Structure` of every graph of ``splits``."""
    most, widest, breach, inner = 0, None, None, None
    for split in SPLITS:
        for graph in splits.graphs[split]:
            width = int(graph.edge_pos.max()) + 1 if graph.edge_pos.numel() else 0
            if width > most:
                most, widest = width, splits.where(split, graph)
            if width > 2 and breach is None:
                breach = splits.where(split, graph)
            if inner is None:
                has_input = (graph.word_pos != NO_WORD) if getattr(graph, "x", None) is None else \
                    torch.ones(graph.num_nodes, dtype=torch.bool)
                if bool((has_input & ~graph.is_leaf).any()):
                    inner = splits.where(split, graph)
    return Structure(most, widest, breach, inner)


def model_settings(model: str, structure: Structure, in_channels: int, hidden: int) -> dict[str, Any]:
    """The settings of ``model`` on graphs of this structure (what :func:`build_model` builds).

    Raises:
        RunError: an unknown model; a binary model on nodes with more than two
            children, or on inner nodes that carry inputs it would not read
            (it names the first such graph).
    """
    if model not in MODELS:
        fail(f"--model {model}: not one of {', '.join(MODELS)}")
    if model in _BINARY:
        if structure.binary_breach is not None:
            fail(f"{structure.binary_breach}: --model {model} takes at most 2 children per node, and this graph has "
                 "a node with more; use childsum or nary")
        if structure.inner_inputs is not None:
            fail(f"{structure.inner_inputs}: --model {model} reads inputs at leaves only, and this graph has a word "
                 "or features at an inner node (a dependency tree?), which it would ignore; use childsum or nary")
    settings: dict[str, Any] = {"model": model, "in_channels": in_channels, "hidden": hidden}
    if model == "nary":
        settings["n_ary"] = max(structure.max_children, 1)
        settings["setting"] = "general" if structure.inner_inputs is not None else "constituency"
    if model == "lstmrnn":
        settings["hidden"] = in_channels  # a leaf's output is its input vector (Le & Zuidema, section 4)
    return settings


class CellOutput(torch.nn.Module):
    """A cell's ``h`` at every node, dropout, and a linear map to the outputs."""

    def __init__(self, cell: torch.nn.Module, out_channels: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.cell, self.dropout = cell, dropout
        self.out = Linear(cell.state_channels[0], out_channels)

    def forward(self, x: Tensor, batch: Any) -> Tensor:
        h = self.cell(x, batch)[0]
        return self.out(dropout(h, self.dropout, self.training))


def root_mean(out: Tensor, batch: Any) -> Tensor:
    """The mean of ``out`` over each graph's roots (a tree has one; a DAG may have several): ``[num_graphs, C]``."""
    roots = batch.is_root
    graph = getattr(batch, "batch", None)
    graph = graph[roots] if graph is not None else torch.zeros(int(roots.sum()), dtype=torch.long,
                                                               device=out.device)
    return scatter(out[roots], graph, dim=0, dim_size=getattr(batch, "num_graphs", 1), reduce="mean")


class GraphModel(torch.nn.Module):
    """``net(inputs(batch), batch)``: outputs at every node, or (``level="graph"``) their mean over each graph's roots.

    Args:
        inputs: The node input vectors (:class:`NodeInputs`).
        net: ``net(x, batch) -> [num_nodes, C]``, e.g. :class:`CellOutput` or :class:`~graphtree.models.BiTreeLSTM`.
        level: ``"graph"`` or ``"node"``.
    """

    def __init__(self, inputs: NodeInputs, net: torch.nn.Module, level: str) -> None:
        super().__init__()
        if level not in ("graph", "node"):
            raise ValueError(f"level must be 'graph' or 'node', got {level!r}")
        self.inputs, self.net, self.level = inputs, net, level

    def forward(self, batch: Any) -> Tensor:
        out = self.net(self.inputs(batch), batch)
        return out if self.level == "node" else root_mean(out, batch)


def build_model(settings: Mapping[str, Any], task: Task, inputs: NodeInputs, dropout: float = 0.0) -> GraphModel:
    """The model of ``settings`` (:func:`model_settings`) for ``task``, on ``inputs``.

    The cells' ``h`` goes through dropout and a linear layer at every node;
    Teng & Zhang's models keep their own output layer (an MLP of ``hidden``
    units) and take the dropout on their inputs, as in the paper.
    """
    model, d_in, hidden = settings["model"], settings["in_channels"], settings["hidden"]
    if d_in != inputs.out_channels:
        raise ValueError(f"settings are for {d_in} input channels, the inputs have {inputs.out_channels}")
    if model in _TENG_VARIANTS:
        net = BiTreeLSTM(d_in, hidden, task.out_channels, mlp_channels=hidden, variant=_TENG_VARIANTS[model],
                         dropout=dropout)
        return GraphModel(inputs, net, task.level)
    if model == "childsum":
        cell = ChildSumTreeLSTM(d_in, hidden)
    elif model == "nary":
        cell = NaryTreeLSTM(d_in, hidden, n_ary=settings["n_ary"], setting=settings["setting"])
    elif model == "slstm":
        cell = SLSTM(d_in, hidden, leaf="embedding" if d_in == hidden else "lstm")
    else:
        cell = LSTMRNN(d_in, hidden)
    return GraphModel(inputs, CellOutput(cell, task.out_channels, dropout), task.level)


# --------------------------------------------------------------------------- training


class Prediction(NamedTuple):
    """One graph's predictions and labels: one entry per graph (graph level) or per node (node level)."""

    pred: Tensor
    gold: Tensor
    is_root: Tensor | None  # node level: which nodes are roots


class TaskTrainer(Trainer):
    """:class:`~graphtree.train.Trainer` for a :class:`Task`: its loss, and dev selection on its metric.

    The epoch kept is the one with the best dev accuracy (classes: of the
    labelled graphs, or of every labelled node) or the lowest dev mean squared
    error (numbers). Checkpoints, resuming, the CSV and the progress bar are
    the :class:`~graphtree.train.Trainer`'s; the CSV's dev columns are
    ``dev_accuracy``, or ``dev_mse`` and ``dev_pearson``.

    Args:
        model: ``model(batch)``: ``[num_graphs, C]`` (graph level) or ``[num_nodes, C]`` (node level).
        optimizer: The update (:class:`~graphtree.train.PaperOptimizer`).
        task: The task.
        **kwargs: As :class:`~graphtree.train.Trainer` takes them (``epochs``, ``batch_size``, ``seed``...).
    """

    checkpoint_format = "task-1"

    def __init__(self, model: torch.nn.Module, optimizer: PaperOptimizer, *, task: Task, **kwargs: Any) -> None:
        super().__init__(model, optimizer, **kwargs)
        self.task = task
        self.dev_columns = ("accuracy",) if task.kind == "class" else ("mse", "pearson")
        self.csv_fields = ("epoch", "train_loss", *(f"dev_{c}" for c in self.dev_columns), "train_seconds",
                           "seconds", "best")

    def _load(self) -> dict[str, Any] | None:
        try:
            return super()._load()
        except GraphtreeError:
            raise
        except ValueError as err:  # a checkpoint of another run: the user's to resolve
            raise RunError(str(err)) from None

    def _batch_loss(self, model: torch.nn.Module, batch: Batch) -> Tensor:
        return self.task.loss(model(batch), batch)

    def _validate(self, model: torch.nn.Module, dev_batches: list[Batch]) -> tuple[dict[str, float], dict[str, Any]]:
        metrics = self.metrics(self._predict(model, dev_batches))
        return {f"dev_{c}": metrics[c] for c in self.dev_columns}, metrics

    def _improves(self, dev: dict[str, Any], best_dev: dict[str, Any] | None) -> bool:
        if best_dev is None:
            return True
        new, best = dev[self.task.metric], best_dev[self.task.metric]
        return new > best if self.task.kind == "class" else new < best

    def _last_dev(self, history: list[dict]) -> str:
        return f"{history[-1][f'dev_{self.task.metric}']:.3g}" if history else "-"

    def _dev_summary(self, columns: dict[str, float]) -> str:
        if self.task.kind == "class":
            return f"dev accuracy {columns['dev_accuracy']:.2f}"
        return f"dev MSE {columns['dev_mse']:.4g}, dev r {columns['dev_pearson']:.4f}"

    @torch.no_grad()
    def _predict(self, model: torch.nn.Module, batches: Sequence[Batch]) -> list[Prediction]:
        was_training = model.training
        model.eval()
        out: list[Prediction] = []
        try:
            for batch in batches:
                pred = self.task.predict(model(batch)).cpu()
                gold = self.task.gold(batch).cpu()
                if self.task.level == "graph":
                    out += [Prediction(p, g, None) for p, g in zip(pred.split(1), gold.split(1))]
                else:
                    sizes = batch.ptr.diff().tolist() if isinstance(batch, Batch) else [batch.num_nodes]
                    out += [Prediction(p, g, r) for p, g, r in
                            zip(pred.split(sizes), gold.split(sizes), batch.is_root.cpu().split(sizes))]
        finally:
            model.train(was_training)
        return out

    def metrics(self, predictions: Sequence[Prediction]) -> dict[str, Any]:
        """Accuracy (``accuracy``, ``correct``, ``total``; node level also ``root_accuracy``), or
        ``mse``, ``pearson``, ``spearman`` and ``n`` of the labelled graphs or nodes (``None`` without any)."""
        pred = torch.cat([p.pred for p in predictions])
        gold = torch.cat([p.gold for p in predictions])
        keep = self.task.labelled(gold)
        if self.task.kind == "regression":
            if not keep.any():
                return {"mse": None, "pearson": None, "spearman": None, "n": 0}
            return relatedness(pred[keep].tolist(), gold[keep].tolist())
        correct = pred.eq(gold) & keep
        out: dict[str, Any] = {"accuracy": 100.0 * int(correct.sum()) / int(keep.sum()) if keep.any() else None,
                               "correct": int(correct.sum()), "total": int(keep.sum())}
        if self.task.level == "node":
            roots = torch.cat([p.is_root for p in predictions]) & keep
            out["root_accuracy"] = 100.0 * int(correct[roots].sum()) / int(roots.sum()) if roots.any() else None
        return out

    def evaluate(self, data: Sequence[Data]) -> tuple[dict[str, Any], list[Prediction]]:
        """Metrics and per-graph predictions of the current model (after :meth:`fit`, the best-dev one) on ``data``."""
        batches = [self.to_device(b) for b in collate(data, self.eval_batch_size)]
        predictions = self._predict(self._scoring_model(batches), batches)
        return self.metrics(predictions), predictions


def write_predictions(path: str | os.PathLike, task: Task, splits: GraphSplits, split: str,
                      predictions: Sequence[Prediction]) -> None:
    """One tab-separated line per graph of ``split``, under a header: ``graph line prediction gold``.

    ``graph`` is the graph's 0-based index among the graphs of its file and
    ``line`` the line it starts on; ``prediction`` and ``gold`` are a class or
    a number (graph level) or one class per node separated by spaces (node
    level, in node order); an unlabelled ``gold`` is ``_``.
    """
    def text(values: Tensor, gold: bool) -> str:
        items = []
        for value in values.tolist():
            if gold and ((task.kind == "class" and value == NO_LABEL) or (task.kind != "class" and math.isnan(value))):
                items.append("_")
            else:
                items.append(str(value) if task.kind == "class" else f"{value:.6g}")
        return " ".join(items)

    lines = ["graph\tline\tprediction\tgold"]
    for index, graph, prediction in zip(splits.indices[split], splits.graphs[split], predictions, strict=True):
        lines.append(f"{index}\t{int(graph.line)}\t{text(prediction.pred, False)}\t{text(prediction.gold, True)}")
    atomic_write_text("\n".join(lines) + "\n", path)
