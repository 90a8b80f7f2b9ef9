"""Training for sentence-pair regression (SICK relatedness): Pearson r, Spearman ρ, MSE, and a pair trainer.

:class:`PairTrainer` is :class:`~graphtree.train.Trainer` for models that map a
batch of :class:`~graphtree.datasets.PairData` to :math:`\\log \\hat{p}` over the
ratings (e.g. :class:`~graphtree.models.similarity.PairSimilarity`): the same
epoch order, paper optimizer, atomic resumable checkpoints and per-epoch CSV,
but the loss is the KL divergence to ``batch.target`` (divided by the number of
pairs, Tai et al.'s :math:`\\frac{1}{m}\\sum_k`) and the epoch kept is the one
with the best dev **Pearson r** (what Tai et al.'s code selects on).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Batch, Data

from ..data.loader import with_schedule
from ..data.pairs import pair_side
from ..models.similarity import similarity_loss
from .optim import PaperOptimizer
from .replaying import unreplayable_reason
from .trainer import Trainer

__all__ = ["PAIR_CHECKPOINT_FORMAT", "PairTrainer", "pearson", "predict_pairs", "relatedness", "spearman"]

PAIR_CHECKPOINT_FORMAT = "pairs-1"
"""Layout tag of :class:`PairTrainer` checkpoints (distinct from the node trainer's, so neither loads the other's)."""

CSV_FIELDS = ("epoch", "train_loss", "dev_pearson", "dev_spearman", "dev_mse", "train_seconds", "seconds", "best")


def pearson(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Pearson's r (``nan`` when either side is constant or has fewer than 2 values)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.size < 2:
        return float("nan")
    dx, dy = x - x.mean(), y - y.mean()
    denom = math.sqrt(float((dx * dx).sum()) * float((dy * dy).sum()))
    return float((dx * dy).sum()) / denom if denom > 0 else float("nan")


def pearson_by_length(pred: Sequence[float], gold: Sequence[float], lengths: Sequence[float],
                      half: float = 2.0, min_pairs: int = 30) -> dict[str, list[float]]:
    """Tai et al. Fig. 4: Pearson r of the pairs whose mean sentence length lies in ``[l - half, l + half]``.

    Windows with fewer than ``min_pairs`` pairs are left out (r of a handful of pairs is noise).
    Returns ``{"length": [...], "pearson": [...]}``, a statistic that can be stored with a run.
    """
    centers, values = [], []
    for center in range(int(min(lengths)), int(max(lengths)) + 1):
        keep = [k for k, n in enumerate(lengths) if center - half <= n <= center + half]
        if len(keep) >= min_pairs:
            centers.append(center)
            values.append(pearson([pred[k] for k in keep], [gold[k] for k in keep]))
    return {"length": centers, "pearson": values}


def _ranks(x: np.ndarray) -> np.ndarray:
    # 1-based ranks, tied values sharing the mean of their ranks (the usual Spearman convention).
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(x.size, dtype=np.float64)
    ranks[order] = np.arange(1, x.size + 1)
    _, inverse = np.unique(x, return_inverse=True)
    return (np.bincount(inverse, weights=ranks) / np.bincount(inverse))[inverse]


def spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Spearman's ρ: Pearson's r of the ranks, ties averaged."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    return pearson(_ranks(x), _ranks(y))


def relatedness(pred: Sequence[float] | np.ndarray, gold: Sequence[float] | np.ndarray) -> dict[str, float]:
    """``pearson``, ``spearman``, ``mse`` and ``n`` of predicted against gold ratings."""
    p, g = np.asarray(pred, dtype=np.float64), np.asarray(gold, dtype=np.float64)
    return {"pearson": pearson(p, g), "spearman": spearman(p, g),
            "mse": float(((p - g) ** 2).mean()) if p.size else float("nan"), "n": int(p.size)}


@torch.no_grad()
def predict_pairs(model: torch.nn.Module, batches: Sequence[Any]) -> tuple[list[float], list[float]]:
    """Predicted ratings :math:`r^\\top \\hat{p}` and gold ``score`` over ``batches``, in order, in eval mode."""
    was_training = model.training
    model.eval()
    pred: list[float] = []
    gold: list[float] = []
    try:
        for batch in batches:
            log_probs = model(batch)
            r = torch.arange(1, log_probs.size(-1) + 1, dtype=log_probs.dtype, device=log_probs.device)
            pred += (log_probs.exp() @ r).tolist()
            gold += batch.score.view(-1).tolist()
    finally:
        model.train(was_training)
    return pred, gold


class PairTrainer(Trainer):
    """Trains a pair model with a paper's optimizer and keeps the epoch with the best dev Pearson r.

    :class:`~graphtree.train.Trainer` with a pair objective: each epoch visits
    the training pairs in the order :func:`~graphtree.train.ordering.epoch_order`
    gives, ``batch_size`` pairs at a time; the minibatch objective is
    ``loss_fn(log_probs, batch.target)`` divided by the number of pairs. A
    checkpoint is written atomically after every epoch; calling :meth:`fit`
    again with the same path resumes after the last completed epoch (or returns
    a finished run at once). History rows carry ``dev_pearson``,
    ``dev_spearman`` and ``dev_mse``.

    Args:
        model: ``model(pairs) -> log_probs`` of shape ``[B, K]``.
        optimizer: The paper's update (:class:`PaperOptimizer`).
        epochs: Number of epochs.
        batch_size: Pairs per minibatch.
        seed: Seed of the data order.
        loss_fn: ``(log_probs, target) -> summed loss`` (e.g. :func:`~graphtree.models.similarity.similarity_loss`).
        checkpoint: Checkpoint file (``None``: no checkpointing).
        metrics_csv: Per-epoch CSV, rewritten atomically after each epoch.
        config: JSON-able description of the run; resuming with a different one is an error.
        eval_batch_size: Pairs per evaluation batch.
        progress: Show a tqdm bar.
        desc: Label of the bar.
        extra: JSON-able extras stored in the checkpoint.
        device: Where batches are sent (default: the model's device).
        group_by_height: Pairs of similar height (the taller side's) in one minibatch, in windows of this many
            minibatches (:func:`~graphtree.train.ordering.height_grouped_order`); ``None``: the plain order.
    """

    checkpoint_format = PAIR_CHECKPOINT_FORMAT
    csv_fields = CSV_FIELDS

    def __init__(self, model: torch.nn.Module, optimizer: PaperOptimizer, *, epochs: int, batch_size: int,
                 seed: int, loss_fn: Callable[[Tensor, Tensor], Tensor],
                 checkpoint: str | os.PathLike | None = None, metrics_csv: str | os.PathLike | None = None,
                 config: dict[str, Any] | None = None, eval_batch_size: int = 256, progress: bool = True,
                 desc: str = "", extra: dict[str, Any] | None = None,
                 device: str | torch.device | None = None, verbose: bool = True, replay: str = "auto",
                 group_by_height: int | None = None, checkpoint_every: float | None = None) -> None:
        super().__init__(model, optimizer, epochs=epochs, batch_size=batch_size, seed=seed, checkpoint=checkpoint,
                         metrics_csv=metrics_csv, config=config, loss_fn=loss_fn,
                         eval_batch_size=eval_batch_size, progress=progress, desc=desc, extra=extra, device=device,
                         verbose=verbose, replay=replay, group_by_height=group_by_height,
                         checkpoint_every=checkpoint_every)

    def _batch_loss(self, model: torch.nn.Module, batch: Batch) -> Tensor:
        return self.loss_fn(model(batch), batch.target)

    # The replayed path pads both sides of a minibatch's pairs as one batch of 2B trees, each tree carrying its
    # pair's target (a graph attribute: a row per tree), and runs the encoder and the head on it.

    _node_outputs = False

    def _unreplayable(self) -> str | None:
        if self.loss_fn is not similarity_loss:
            return "a loss function of its own (the replayed pair step knows similarity_loss)"
        if not hasattr(self.model, "forward_trees"):
            return f"{type(self.model).__name__} has no forward_trees (PairSimilarity's pass over both sides)"
        return unreplayable_reason(self.model, self.optimizer.spec)

    def _replay_trees(self, batch: Any) -> Any:
        trees = pair_side(batch, "both")
        trees.target = torch.cat([batch.target, batch.target])
        return with_schedule(trees)

    def _replay_loss(self, model: torch.nn.Module, batch: Any) -> Tensor:
        log_probs = model.forward_trees(batch)
        loss = self.loss_fn(log_probs, batch.target[:log_probs.size(0)])
        return loss * batch.loss_weight.to(loss.dtype)

    def _replay_output(self, model: torch.nn.Module, batch: Any) -> Tensor:
        return model.forward_trees(batch)

    def _validate(self, model: torch.nn.Module, dev_batches: list[Batch]) -> tuple[dict[str, float], dict[str, Any]]:
        metrics = relatedness(*predict_pairs(model, dev_batches))
        return {f"dev_{k}": metrics[k] for k in ("pearson", "spearman", "mse")}, metrics

    def _improves(self, dev: dict[str, Any], best_dev: dict[str, Any] | None) -> bool:
        if best_dev is None:
            return True
        r, best_r = dev["pearson"], best_dev["pearson"]
        # A nan r (constant predictions, e.g. early in training) never displaces a real one.
        return not math.isnan(r) and (math.isnan(best_r) or r > best_r)

    def _last_dev(self, history: list[dict]) -> str:
        return f"{history[-1]['dev_pearson']:.3f}" if history else "-"

    def _dev_summary(self, columns: dict[str, float]) -> str:
        return f"dev r {columns['dev_pearson']:.4f}, dev MSE {columns['dev_mse']:.4f}"

    def evaluate(self, data: Sequence[Data]) -> tuple[dict[str, float], list[float], list[float]]:
        """Metrics, predictions and gold ratings of the current model on ``data`` (in order)."""
        batches = self.eval_batches(data)
        pred, gold = predict_pairs(self._scoring_model(batches), batches)
        return relatedness(pred, gold), pred, gold
