"""The trainer's replayed path: training steps and evaluation passes on padded batches, CUDA graphs on a GPU.

:class:`~graphtree.train.Trainer` (and the pair and task trainers) take ``replay``:

* ``"auto"`` (the default): replayed where the model is on a GPU, the plain level loop on the CPU;
* ``"on"``: replayed; on the CPU the padded step runs eagerly (:class:`graphtree.replay.ReplayedStep` without
  graphs), which is how the tests prove the replayed trainer equal to the plain one;
* ``"off"``: the plain level loop.

A replayed run trains with the paper's update in its capturable form
(:meth:`PaperOptimizer.for_model` with ``capturable=True``: CapturableAdagrad,
capturable Adam, SGD; dense embedding gradients, which move a row without
gradient by exactly nothing under AdaGrad and SGD, and which Adam's embeddings
had anyway), the minibatch loss weighed by a per-batch scalar that the graph
reads (``batch.loss_weight``, so that the last, smaller minibatch and a rank's
uneven share need no graph of their own), and, under ``torchrun``, every gradient
averaged by one all-reduce of them all, flattened (the same number of bytes
at every step on every rank, whatever its batch: a collective a graph can
hold), instead of ``DistributedDataParallel``'s hooks.

Dev and test run a forward-only pass on the padded batch (captured per bucket
shape on a GPU, :class:`graphtree.replay.ReplayedForward`, importable from here
too), whose outputs are put back in the batch's node order for the metrics. The
padding, the buckets and the capture loop are :mod:`graphtree.replay`'s; this
module holds what the trainer decides: whether a run replays, its optimizer's
step under ``torchrun``, and what the run records.

What cannot replay runs as before, and the run says so (:meth:`ReplayPath.record`):
a model without a tree cell or with a sequence LSTM (``nn.LSTM`` reads its
lengths on the host), lazy Adam embeddings (``--optimizer teng_code``), a loss
function of one's own, and a model whose pass asks the host for values (a
top-down pass, today: :class:`graphtree.replay.ReplayError` at its first step).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..errors import InvalidArgumentError
from ..nn.cell import TreeCell
from ..replay import ReplayedForward
from . import distributed
from .optim import OptimizerSpec, PaperOptimizer

__all__ = ["REPLAY_MODES", "ReplayPath", "ReplayedForward", "StepOptimizer", "replay_requested",
           "unreplayable_reason"]

REPLAY_MODES = ("auto", "on", "off")
"""The values of a trainer's ``replay`` (and of the experiment scripts' ``--replay``)."""


def replay_requested(mode: str, device: torch.device | str) -> bool:
    """Whether ``mode`` asks for the replayed path on ``device``: ``"on"``, or ``"auto"`` on a GPU."""
    if mode not in REPLAY_MODES:
        raise InvalidArgumentError(f"replay must be one of {', '.join(REPLAY_MODES)}, got {mode!r}")
    return mode == "on" or (mode == "auto" and torch.device(device).type == "cuda")


def unreplayable_reason(model: torch.nn.Module, spec: OptimizerSpec | None = None) -> str | None:
    """Why ``model`` (trained with ``spec``) cannot take the replayed path, or ``None`` where it can try (a model
    whose pass asks the host for values is found at its first step instead)."""
    if spec is not None and spec.embedding == "sparse_adam" and spec.embedding_lr > 0:
        return "lazy Adam on the embeddings (sparse_adam) has no update of fixed shape"
    modules = list(model.modules())
    if any(isinstance(m, torch.nn.RNNBase) for m in modules):
        return f"{type(model).__name__} runs a sequence LSTM, whose lengths are read on the host"
    if not any(isinstance(m, TreeCell) for m in modules):
        return f"{type(model).__name__} has no tree cell"
    return None


class StepOptimizer:
    """A capturable :class:`PaperOptimizer` as :class:`~graphtree.replay.ReplayedStep` steps it: under
    ``torchrun``, the gradients averaged over the processes first (one all-reduce of all of them, flattened; a
    parameter without a gradient sends zeros, as ``DistributedDataParallel`` gives it under the trainer's
    ``_every_parameter``), then the model's update (decay, L2, step) and the embeddings'.

    ``param_groups`` says ``capturable=True`` (what ``ReplayedStep`` asks), made so by construction: the paper
    optimizer must have been built with ``capturable=True``. On the CPU, Adam's capturable form is PyTorch's
    ordinary one (PyTorch has none there): the padded step runs eagerly on the CPU, so nothing captures it.
    """

    def __init__(self, optimizer: PaperOptimizer) -> None:
        if not optimizer.capturable:
            raise InvalidArgumentError("StepOptimizer needs a PaperOptimizer built with capturable=True")
        self.optimizer = optimizer
        self.param_groups = [{"params": optimizer.params + optimizer.embedding_params, "capturable": True}]

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad()

    @torch.no_grad()
    def _average_gradients(self) -> None:
        params = self.param_groups[0]["params"]
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        torch.distributed.all_reduce(flat)
        flat.div_(distributed.world_size())
        offset = 0
        for p in params:
            p.grad = flat[offset:offset + p.numel()].view_as(p)
            offset += p.numel()

    def step(self) -> None:
        if distributed.world_size() > 1:
            self._average_gradients()
        self.optimizer.step_model()
        self.optimizer.step_embeddings()


@dataclass
class ReplayPath:
    """Which path a run's training and evaluation took, for its results file (:meth:`record`).

    Attributes:
        mode: The ``replay`` asked for.
        requested: Whether it asked for the replayed path on this device.
        fallback: Why the run trains eagerly instead, or ``None``.
        graphs: Whether steps are captured as CUDA graphs (on a GPU) or the padded step runs eagerly (CPU).
    """

    mode: str
    requested: bool
    fallback: str | None = None
    graphs: bool = False
    step: Any = None  # the run's ReplayedStep, once made
    forward: Any = None  # its ReplayedForward for dev and test

    @property
    def active(self) -> bool:
        """Whether training goes through the replayed step (which may still fall back at its first batch)."""
        return self.requested and self.fallback is None

    def path(self) -> str:
        """``"replayed"`` (CUDA graphs), ``"padded"`` (the padded step, eagerly), or ``"eager"``."""
        if not self.active or (self.step is not None and not self.step.replayable):
            return "eager"
        return "replayed" if self.graphs else "padded"

    def capture_seconds(self) -> float:
        """Seconds spent capturing graphs so far, training steps and evaluation passes."""
        step = self.step.stats.capture_seconds if self.step is not None else 0.0
        return step + (self.forward.capture_seconds if self.forward is not None else 0.0)

    def note_fallback(self) -> None:
        """Take the step's own fallback (a model whose pass asks the host for values) as the run's."""
        step = self.step
        if self.fallback is None and step is not None and not step.replayable:
            self.fallback = getattr(step, "reason", None) or "the step could not be replayed"

    def record(self) -> dict[str, Any]:
        """The results file's ``replay``: the mode, the path taken, why not replayed, and what replay cost."""
        self.note_fallback()
        out: dict[str, Any] = {"mode": self.mode, "path": self.path(), "fallback": self.fallback}
        if self.step is not None:
            s = self.step.stats
            out.update(steps=dict(replayed=s.replayed, padded=s.padded_eager, eager=s.eager), captures=s.captures,
                       capture_seconds=s.capture_seconds, shapes=len(s.shapes),
                       padding=None if s.nodes == 0 else s.padding)
        if self.forward is not None:
            out["evaluation"] = self.forward.record()
        return out
