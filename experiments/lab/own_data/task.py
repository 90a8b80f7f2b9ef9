"""What is learnt from the labels there are (:func:`find_task`): a class or a number per graph, or a class
per node (:class:`Task`: its loss, its predictions, its metric).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Data

from graphtree.data.tree import NO_LABEL

from ..runs import fail
from .splits import SPLITS, GraphSplits

__all__ = ["Task", "find_task"]

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

    def scores(self, test: dict[str, Any]) -> str:
        """The test metrics ``test`` (of ``TaskTrainer.evaluate``) as a run's line says them."""
        if self.kind == "class" and test["accuracy"] is not None:
            return f"test accuracy {test['accuracy']:.2f}"
        return f"test MSE {test['mse']:.4g}, r {test['pearson']:.4f}" if test.get("mse") is not None else (
            "no test labels")

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

    def weighted_loss(self, out: Tensor, batch: Any) -> Tensor:
        """:meth:`loss` without asking the host which rows are labelled (a replayed step's, on a padded batch):
        every row's loss, times 0 where it has no label (and, node level, on a padded batch's replicas:
        ``batch.node_weight``), summed."""
        gold = self.gold(batch)
        weight = self.labelled(gold).to(out.dtype)
        if self.level == "node" and "node_weight" in batch:
            weight = weight * batch.node_weight.to(out.dtype)
        if self.kind == "class":
            per_row = F.cross_entropy(out, gold.clamp(min=0), reduction="none")
        else:
            per_row = (out[:, 0] - torch.where(self.labelled(gold), gold, 0.0).to(out.dtype)).square()
        return (per_row * weight).sum()

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


