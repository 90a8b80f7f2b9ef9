""":class:`TaskTrainer`: :class:`~graphtree.train.Trainer` with a :class:`~.task.Task`'s loss and dev
selection (accuracy, or mean squared error), and the test predictions graph by graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch_geometric.data import Batch, Data

from graphtree.errors import GraphtreeError
from graphtree.train.optim import PaperOptimizer
from graphtree.train.pairs import relatedness
from graphtree.train.replaying import unreplayable_reason
from graphtree.train.trainer import Trainer

from ..runs import RunError
from .task import Task

__all__ = ["Prediction", "TaskTrainer"]

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

    @property
    def _node_outputs(self) -> bool:  # the replayed evaluation: a row per node, or one per graph
        return self.task.level == "node"

    def _unreplayable(self) -> str | None:
        return unreplayable_reason(self.model, self.optimizer.spec)

    def _replay_loss(self, model: torch.nn.Module, batch: Any) -> Tensor:
        loss = self.task.weighted_loss(model(batch), batch)
        return loss * batch.loss_weight.to(loss.dtype)

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
        batches = self.eval_batches(data)
        predictions = self._predict(self._scoring_model(batches), batches)
        return self.metrics(predictions), predictions


