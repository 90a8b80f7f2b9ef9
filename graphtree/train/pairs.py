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

import csv
import io
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Batch, Data
from tqdm.auto import tqdm

from .checkpoint import atomic_save, atomic_write_text, get_rng_state, set_rng_state
from .optim import PaperOptimizer
from .trainer import FitResult, collate, epoch_order

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
            r = torch.arange(1, log_probs.size(-1) + 1, dtype=log_probs.dtype)
            pred += (log_probs.exp() @ r).tolist()
            gold += batch.score.view(-1).tolist()
    finally:
        model.train(was_training)
    return pred, gold


class PairTrainer:
    """Trains a pair model with a paper's optimizer and keeps the epoch with the best dev Pearson r.

    Each epoch visits the training pairs in the order
    :func:`~graphtree.train.trainer.epoch_order` gives, ``batch_size`` pairs at a
    time; the minibatch objective is ``loss_fn(log_probs, batch.target)``
    divided by the number of pairs. A checkpoint is written atomically after
    every epoch; calling :meth:`fit` again with the same path resumes after the
    last completed epoch (or returns a finished run at once).

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
    """

    def __init__(self, model: torch.nn.Module, optimizer: PaperOptimizer, *, epochs: int, batch_size: int,
                 seed: int, loss_fn: Callable[[Tensor, Tensor], Tensor],
                 checkpoint: str | os.PathLike | None = None, metrics_csv: str | os.PathLike | None = None,
                 config: dict[str, Any] | None = None, eval_batch_size: int = 256, progress: bool = True,
                 desc: str = "", extra: dict[str, Any] | None = None) -> None:
        if epochs < 1 or batch_size < 1:
            raise ValueError(f"epochs and batch_size must be positive, got {epochs} and {batch_size}")
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn
        self.epochs, self.batch_size, self.seed = epochs, batch_size, seed
        self.checkpoint = Path(checkpoint) if checkpoint is not None else None
        self.metrics_csv = Path(metrics_csv) if metrics_csv is not None else None
        self.config, self.eval_batch_size = config or {}, eval_batch_size
        self.progress, self.desc, self.extra = progress, desc, extra or {}

    def _load(self) -> dict[str, Any] | None:
        if self.checkpoint is None or not self.checkpoint.is_file():
            return None
        state = torch.load(self.checkpoint, map_location="cpu", weights_only=False)
        if state.get("format") != PAIR_CHECKPOINT_FORMAT:
            raise ValueError(f"{self.checkpoint} is not a pair-trainer checkpoint; delete it to start afresh")
        if state["config"] != self.config:
            changed = sorted(k for k in set(state["config"]) | set(self.config)
                             if state["config"].get(k) != self.config.get(k))
            raise ValueError(f"{self.checkpoint} belongs to a run with other settings (differing: "
                             f"{', '.join(changed)}); delete it, or give this run another name")
        return state

    def _save(self, epoch: int, history: list[dict], best: dict, seconds: float) -> None:
        if self.checkpoint is None:
            return
        atomic_save({"format": PAIR_CHECKPOINT_FORMAT, "config": self.config, "epoch": epoch,
                     "finished": epoch == self.epochs, "model": self.model.state_dict(),
                     "optimizer": self.optimizer.state_dict(), "rng": get_rng_state(), "history": history,
                     "best": best, "seconds": seconds, "extra": self.extra}, self.checkpoint)

    def _write_csv(self, history: list[dict], best_epoch: int) -> None:
        if self.metrics_csv is None:
            return
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=CSV_FIELDS, lineterminator="\n")
        writer.writeheader()
        for row in history:
            writer.writerow({**{k: row[k] for k in CSV_FIELDS[:-1]}, "best": int(row["epoch"] == best_epoch)})
        atomic_write_text(out.getvalue(), self.metrics_csv)

    def evaluate(self, data: Sequence[Data]) -> tuple[dict[str, float], list[float], list[float]]:
        """Metrics, predictions and gold ratings of the current model on ``data`` (in order)."""
        pred, gold = predict_pairs(self.model, collate(data, self.eval_batch_size))
        return relatedness(pred, gold), pred, gold

    def fit(self, train: Sequence[Data], dev: Sequence[Data]) -> FitResult:
        """Train (or resume, or return a finished run) and leave the best-dev weights in the model."""
        if len(train) == 0 or len(dev) == 0:
            raise ValueError("fit needs non-empty training and dev sets")
        history: list[dict[str, Any]] = []
        best: dict[str, Any] = {"epoch": 0, "dev": None, "model": None}
        seconds, start = 0.0, 0
        state = self._load()
        if state is not None:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            set_rng_state(state["rng"])
            history, best, seconds, start = state["history"], state["best"], state["seconds"], state["epoch"]
        dev_batches = collate(dev, self.eval_batch_size)
        for epoch in range(start, self.epochs):
            began = time.perf_counter()
            loss = self._train_epoch(train, epoch, history)
            trained = time.perf_counter() - began
            dev_metrics = relatedness(*predict_pairs(self.model, dev_batches))
            took = time.perf_counter() - began
            seconds += took
            history.append({"epoch": epoch + 1, "train_loss": loss, "dev_pearson": dev_metrics["pearson"],
                            "dev_spearman": dev_metrics["spearman"], "dev_mse": dev_metrics["mse"],
                            "train_seconds": trained, "seconds": took})
            r, best_r = dev_metrics["pearson"], best["dev"]["pearson"] if best["dev"] is not None else math.nan
            # A nan r (constant predictions, e.g. early in training) never displaces a real one.
            if best["dev"] is None or (not math.isnan(r) and (math.isnan(best_r) or r > best_r)):
                best = {"epoch": epoch + 1, "dev": dev_metrics,
                        "model": {k: v.detach().clone() for k, v in self.model.state_dict().items()}}
            self._save(epoch + 1, history, best, seconds)
            self._write_csv(history, best["epoch"])
        if start == self.epochs:
            self._write_csv(history, best["epoch"])
        self.model.load_state_dict(best["model"])
        return FitResult(best["epoch"], best["dev"], history, seconds, start)

    def _train_epoch(self, train: Sequence[Data], epoch: int, history: list[dict]) -> float:
        self.model.train()
        order = epoch_order(len(train), self.seed, epoch).tolist()
        last_dev = f"{history[-1]['dev_pearson']:.3f}" if history else "-"
        bar = tqdm(range(0, len(order), self.batch_size), desc=f"{self.desc} epoch {epoch + 1}/{self.epochs}",
                   disable=not self.progress, leave=False, file=sys.stderr,
                   mininterval=0.5 if sys.stderr.isatty() else 30.0)
        loss_sum, pairs = 0.0, 0
        for k in bar:
            batch = Batch.from_data_list([train[i] for i in order[k:k + self.batch_size]])
            loss = self.loss_fn(self.model(batch), batch.target)
            self.optimizer.zero_grad()
            (loss / batch.num_graphs).backward()
            self.optimizer.step()
            loss_sum += float(loss.detach())
            pairs += batch.num_graphs
            bar.set_postfix(loss=f"{loss_sum / pairs:.3f}", dev_r=last_dev, refresh=False)
        bar.close()
        return loss_sum / pairs
