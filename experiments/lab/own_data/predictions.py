"""The predictions file of a run: one line per test graph, with its index and line in its file
(:func:`write_predictions`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

from torch import Tensor

from graphtree.data.tree import NO_LABEL
from graphtree.train.checkpoint import atomic_write_text

from .splits import GraphSplits
from .task import Task
from .training import Prediction

__all__ = ["write_predictions"]

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
