"""The training loop every experiment uses: epochs, dev selection, resumable checkpoints, CSV, progress bar.

One epoch loop (:meth:`Trainer._train_epoch`) runs whichever step the run takes: :class:`PlainStep` (the level
loop, under ``torchrun`` through ``DistributedDataParallel``) or :class:`ReplayedTrainingStep` (the padded step,
replayed as CUDA graphs on a GPU: :mod:`graphtree.train.replaying`). The epoch's order is
:mod:`graphtree.train.ordering`'s, its minibatches come from :mod:`graphtree.train.batches`.
"""

from __future__ import annotations

import csv
import io
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Batch, Data
from tqdm.auto import tqdm

from ..backend import native
from ..backend.thread_budget import ThreadBudget
from ..data.loader import with_schedule
from ..errors import InvalidArgumentError
from ..models.classifier import node_loss
from . import distributed
from .batches import Minibatch, StoredBatches, TrainingBatches, collate, reads_from_disk
from .checkpoint import atomic_save, atomic_write_text, get_rng_state, seed_everything, set_rng_state
from .metrics import Tally, evaluate
from .optim import PaperOptimizer
from .ordering import EpochOrder
from .replaying import ReplayedForward, ReplayPath, StepOptimizer, replay_requested, unreplayable_reason

__all__ = ["CHECKPOINT_FORMAT", "PHASES", "FitResult", "PlainStep", "ReplayedTrainingStep", "Trainer"]

CHECKPOINT_FORMAT = 1
"""Version of the checkpoint layout written by :class:`Trainer`."""

CSV_FIELDS = ("epoch", "train_loss", "dev_root", "dev_phrase", "train_seconds", "seconds", "best")

PHASES = ("batches", "forward", "backward", "optimizer", "embeddings")
"""Where a training pass's time goes (each epoch's ``phases`` in the history, with ``dev`` for the evaluation):
building the minibatches (and moving them to the device), the forward pass and loss, the backward pass (and,
under ``torchrun``, the gradient all-reduce), the update of the model's parameters, and that of the word
embeddings. On a GPU, which runs asynchronously, a phase may be charged to a later one. A replayed epoch
(:mod:`graphtree.train.replaying`) has ``batches`` and ``step``: the whole step (padding, forward, backward and
both updates, captures included) is one launch."""


@dataclass
class FitResult:
    """What :meth:`Trainer.fit` returns; the model holds the best-dev weights afterwards.

    Attributes:
        best_epoch: 1-based epoch with the best dev root accuracy (the first on ties).
        best_dev: Dev metrics of that epoch (:meth:`Tally.as_dict`).
        history: One dict per epoch: ``epoch``, ``train_loss`` (summed node
            loss per sentence), ``dev_root``, ``dev_phrase``, ``train_seconds``
            (the training pass), ``seconds`` (training and dev evaluation) and
            ``phases`` (those seconds split as :data:`PHASES`, and ``dev``).
        seconds: Training and dev-evaluation time of all completed epochs,
            summed over every process that worked on the run.
        resumed_at: Epochs already completed when this process started.
    """

    best_epoch: int
    best_dev: dict[str, Any]
    history: list[dict[str, Any]]
    seconds: float
    resumed_at: int


class _Replay(torch.nn.Module):
    """Stands in for the model in metric code under ``torchrun``: returns, call by call, the outputs that the
    ranks computed for their shares of the batches and gathered (the metric code visits the batches in order)."""

    def __init__(self, outputs: list[Tensor]) -> None:
        super().__init__()
        self._outputs = iter(outputs)

    def forward(self, batch: Any) -> Tensor:
        return next(self._outputs)


def _clock() -> float:
    """Seconds, less those a first use of the compiled kernels took (a build or load is set-up, not training)."""
    return time.perf_counter() - native.build_seconds()


class _RunningLoss:
    """An epoch's summed training loss. The plain path reads each step's loss on the host (it waits for every
    step anyway); the replayed one sums them on the device, read once per epoch and, for the bar, every
    :attr:`read_every` steps."""

    def __init__(self, on_device: bool, start: float = 0.0) -> None:
        self.on_device = on_device
        self.read_every = 50 if on_device else 1
        self._total: Tensor | float | None = None if on_device else start

    def add(self, loss: Tensor) -> None:
        if self.on_device:
            self._total = loss if self._total is None else self._total + loss
        else:
            self._total += float(loss)

    def value(self) -> float:
        return float(self._total) if self._total is not None else 0.0


class PlainStep:
    """One training step of the plain level loop, through ``model`` (the trainer's model, or its
    ``DistributedDataParallel``): forward pass and loss, backward pass (with the gradient all-reduce under
    ``torchrun``), the model's update, the embeddings'. Each is timed as one of :data:`PHASES`.

    Called as ``step(minibatch, mine, batch, phases)`` (a :data:`~graphtree.train.batches.Minibatch` and the
    epoch's phase seconds), it returns the summed loss of this rank's share, or ``None`` for a rank without one.
    """

    phases = PHASES[1:]
    resumable = True  # a mid-epoch checkpoint can resume it (its state is the optimizer's and the RNG's)
    sums_on_device = False

    def __init__(self, trainer: Trainer, model: torch.nn.Module) -> None:
        self.trainer, self.model = trainer, model

    def __call__(self, minibatch: list[int], mine: list[int], batch: Batch,
                 phases: dict[str, float]) -> Tensor | None:
        trainer, optimizer = self.trainer, self.trainer.optimizer
        began = _clock()
        loss = trainer._every_parameter(trainer._batch_loss(self.model, batch))
        forward = _clock()
        optimizer.zero_grad()
        # DDP averages over the ranks, so each rank's share is divided by the minibatch size over the ranks:
        # the gradient is that of the minibatch's summed loss over its size, as in one process.
        (loss / (len(minibatch) / distributed.world_size()) if mine else loss * 0.0).backward()
        for param in trainer._sparse_params:
            distributed.all_reduce_sparse_(param)
        backward = _clock()
        optimizer.step_model()
        stepped = _clock()
        optimizer.step_embeddings()
        done = _clock()
        for phase, seconds in zip(self.phases, (forward - began, backward - forward, stepped - backward,
                                                done - stepped)):
            phases[phase] += seconds
        return loss.detach() if mine else None

    def end_epoch(self) -> None:
        pass


class ReplayedTrainingStep:
    """One training step of the replayed path (:mod:`graphtree.train.replaying`): the run's
    :class:`~graphtree.replay.ReplayedStep` on the minibatch's host trees (the trainer's ``_replay_trees``),
    the loss weighed by this rank's share of the minibatch, timed as one ``step`` phase (padding, forward,
    backward, both updates, captures: one launch). Called as :class:`PlainStep` is; returns the summed loss on
    the device (zero for a rank without a share)."""

    phases = ("step",)
    resumable = False  # the step's captured state is not in a checkpoint: it resumes after whole epochs only
    sums_on_device = True

    def __init__(self, trainer: Trainer) -> None:
        self.trainer, self.path = trainer, trainer.replay_path

    def __call__(self, minibatch: list[int], mine: list[int], batch: Batch, phases: dict[str, float]) -> Tensor:
        began = _clock()
        weight = distributed.world_size() / len(minibatch) if mine else 0.0
        trees = self.trainer._replay_trees(batch)
        trees.loss_weight = torch.tensor(weight, dtype=torch.float64)
        loss = self.path.step(trees).detach()
        phases["step"] += _clock() - began
        return loss / weight if weight else loss * 0.0

    def end_epoch(self) -> None:
        """A step that fell back (a pass asking the host for values) makes that the run's fallback."""
        self.path.note_fallback()


class Trainer:
    """Trains a node classifier with a paper's optimizer and keeps the model that does best on dev.

    Each epoch visits the training trees in the order :func:`~graphtree.train.ordering.epoch_order`
    gives (or :func:`~graphtree.train.ordering.height_grouped_order`, under ``group_by_height``), in
    minibatches of ``batch_size`` sentences; the minibatch loss is
    ``loss_fn(logits, y)`` (summed over labelled nodes) divided by the number
    of sentences, as in Tai et al.'s code. After each epoch the model is
    evaluated on dev, the best weights by dev **root** accuracy are kept, and a
    checkpoint is written atomically (model, optimizer, RNG states, epoch,
    history, best weights). Calling :meth:`fit` again with the same
    ``checkpoint`` path resumes after the last completed epoch and ends with
    exactly the weights and metrics of an uninterrupted run (same seed, same
    thread count); a run that had finished returns at once.

    Under ``torchrun`` (a process group set up by
    :func:`graphtree.train.distributed.setup`) the same call trains data-parallel:
    each minibatch is split across the ranks, gradients are averaged by
    ``DistributedDataParallel`` (sparse embedding gradients by
    :func:`~graphtree.train.distributed.all_reduce_sparse_`), the minibatch loss
    is still divided by the whole minibatch's size, dev and test sets are split
    across the ranks, and rank 0 alone writes files and shows the bar. The
    result is the one-process run's up to the order of float sums (and to the
    dropout masks, which each rank draws from a stream of its own). A
    checkpoint keeps every rank's random state: a job resumed with the same
    number of processes ends exactly as an uninterrupted one.

    Args:
        model: ``model(batch) -> logits`` on every node.
        optimizer: The paper's update (:class:`PaperOptimizer`).
        epochs: Number of epochs.
        batch_size: Sentences per minibatch.
        seed: Seed of the data order.
        checkpoint: Checkpoint file (``None``: no checkpointing).
        metrics_csv: Per-epoch CSV, rewritten atomically after each epoch.
        config: JSON-able description of the run, stored in the checkpoint;
            resuming with a different one is an error (it would mix two runs).
        loss_fn: ``(logits, y) -> summed loss`` (default :func:`~graphtree.models.node_loss`).
        eval_batch_size: Sentences per evaluation batch.
        progress: Show a tqdm bar (running loss, last dev accuracy).
        desc: Label of the bar.
        extra: JSON-able extras stored in the checkpoint (e.g. the vocabulary).
        on_step: Called after every optimizer step with the global step number.
        thread_budget: Fewer intra-op threads while other processes keep the
            processors busy (:class:`~graphtree.backend.thread_budget.ThreadBudget`,
            checked before every forward pass of :meth:`fit` and :meth:`test`);
            ``None`` (default): the thread count is left as it is.
        verbose: Print one line per epoch (loss, dev metrics, time) on stderr,
            above the progress bar, which is cleared each epoch.
        device: Where batches are sent (default: the device of the model's
            first parameter). Each batch's level schedule is built on the CPU
            before the batch moves, so the level loop never waits on the device
            to learn the shape of the tree.
        replay: ``"auto"`` (replayed steps and evaluation on a GPU, the plain
            level loop on the CPU), ``"on"`` (replayed; on the CPU the padded
            step runs eagerly) or ``"off"`` (:mod:`graphtree.train.replaying`).
            The replayed path needs the optimizer built with ``capturable=True``
            (:meth:`PaperOptimizer.for_model`); what cannot replay trains plainly
            and :attr:`replay_path` says why.
        loader_workers: Processes reading, collating and scheduling the
            minibatches of a dataset on disk (:func:`~graphtree.train.batches.reads_from_disk`), as
            :class:`~graphtree.data.TreeLoader` does, a batch a query; graphs
            in memory are batched in this process.
        group_by_height: ``None`` (default): the minibatches of :func:`~graphtree.train.ordering.epoch_order`. A
            number ``W``: those of :func:`~graphtree.train.ordering.height_grouped_order` with windows of ``W``
            minibatches, trees of similar height together, so that a minibatch runs fewer levels; the heights
            are read once per :meth:`fit`.
        checkpoint_every: Also write the checkpoint inside an epoch, after the first minibatch that ends this
            many seconds after the last write (``None``, the default: after each epoch only). A run killed
            mid-epoch then resumes at the minibatch after that write, and ends with the weights and metrics
            of an uninterrupted run: the epoch's order is a function of the seed, and the checkpoint keeps the
            random state, the optimizer's and the epoch's running loss. For runs whose epochs take long (a
            transformer fine-tuned on the CPU); in one process on the plain (not replayed) path.
    """

    def __init__(self, model: torch.nn.Module, optimizer: PaperOptimizer, *, epochs: int, batch_size: int,
                 seed: int, checkpoint: str | os.PathLike | None = None,
                 metrics_csv: str | os.PathLike | None = None, config: dict[str, Any] | None = None,
                 loss_fn: Callable[[Tensor, Tensor], Tensor] = node_loss, eval_batch_size: int = 256,
                 progress: bool = True, desc: str = "", extra: dict[str, Any] | None = None,
                 on_step: Callable[[int], None] | None = None, device: str | torch.device | None = None,
                 verbose: bool = True, replay: str = "auto", group_by_height: int | None = None,
                 loader_workers: int = 2, thread_budget: ThreadBudget | None = None,
                 checkpoint_every: float | None = None) -> None:
        if epochs < 1 or batch_size < 1:
            raise InvalidArgumentError(f"epochs and batch_size must be positive, got {epochs} and {batch_size}")
        if group_by_height is not None and (isinstance(group_by_height, bool) or not isinstance(group_by_height, int)
                                            or group_by_height < 1):
            raise InvalidArgumentError(f"group_by_height must be None or a positive number of minibatches, got "
                             f"{group_by_height!r}")
        if checkpoint_every is not None and not checkpoint_every > 0:
            raise InvalidArgumentError(
                f"checkpoint_every must be None or a positive number of seconds, got {checkpoint_every}")
        self.checkpoint_every = checkpoint_every
        self.group_by_height = group_by_height
        self._order = EpochOrder(seed, batch_size, group_by_height)  # each epoch's order of the training set
        self.model, self.optimizer = model, optimizer
        self.epochs, self.batch_size, self.seed = epochs, batch_size, seed
        self.checkpoint = Path(checkpoint) if checkpoint is not None else None
        self.metrics_csv = Path(metrics_csv) if metrics_csv is not None else None
        self.config = config or {}
        self.loss_fn, self.eval_batch_size = loss_fn, eval_batch_size
        self.progress, self.desc, self.extra, self.on_step = progress, desc, extra or {}, on_step
        self.verbose, self.thread_budget = verbose, thread_budget
        self.loader_workers = loader_workers
        self._sparse_params: list[torch.nn.Parameter] = []  # synchronized outside DDP (see _data_parallel)
        self._ddp_params: list[torch.nn.Parameter] = []  # synchronized by DDP
        self._batches: TrainingBatches | None = None  # the training minibatches' source, made by each fit
        if device is None:
            device = next((p.device for p in model.parameters()), torch.device("cpu"))
        self.device = torch.device(device)
        replay_requested(replay, self.device)  # a ValueError for a mode that is not one
        self.replay = replay
        self.replay_path: ReplayPath | None = None  # made by fit

    def eval_batches(self, data: Sequence[Data]) -> Sequence[Batch]:
        """``data`` in evaluation batches with their schedules, on the device: all made now, or, for a dataset on
        disk, each read when used (:class:`~graphtree.train.batches.StoredBatches`)."""
        # Where evaluation replays, batches stay on the host with their schedules (the replayed pass pads them there).
        replayed = self.replay_path is not None and self.replay_path.forward is not None
        place = with_schedule if replayed else self.to_device
        if reads_from_disk(data):
            return StoredBatches(data, self.eval_batch_size, place, self.loader_workers)
        return [place(b) for b in collate(data, self.eval_batch_size)]

    def to_device(self, batch: Batch) -> Batch:
        """``batch`` carrying its schedule (built on the host, where it is cheap, unless it came with one), on
        the trainer's device. Batches kept across epochs (the dev set's) keep their schedules."""
        batch = with_schedule(batch)
        return batch if self.device.type == "cpu" else batch.to(self.device)

    # -- what differs between trainers (see PairTrainer) ----------------------------------------------

    checkpoint_format: Any = CHECKPOINT_FORMAT
    csv_fields: tuple[str, ...] = CSV_FIELDS

    def _batch_loss(self, model: torch.nn.Module, batch: Batch) -> Tensor:
        """The summed loss of one minibatch under ``model`` (the model, or its data-parallel wrapper)."""
        return self.loss_fn(model(batch), batch.y)

    def _unreplayable(self) -> str | None:
        """Why this trainer's model and loss cannot take the replayed path (``None``: they can try)."""
        if self.loss_fn is not node_loss:
            return "a loss function of its own (the replayed step weighs graphtree's node loss by node_weight)"
        return unreplayable_reason(self.model, self.optimizer.spec)

    def _replay_trees(self, batch: Any) -> Any:
        """The host batch of trees a replayed step pads for ``batch`` (a pair trainer's: both sides)."""
        return batch

    def _replay_loss(self, model: torch.nn.Module, batch: Any) -> Tensor:
        """The minibatch loss on a padded batch (or a plain one, with ``node_weight``) of
        :meth:`_replay_trees`, times its ``loss_weight``: :meth:`_batch_loss` without the replicas."""
        from ..replay import weighted_node_loss

        loss = weighted_node_loss(model(batch), batch.y, batch.node_weight)
        return loss * batch.loss_weight.to(loss.dtype)

    def _replay_output(self, model: torch.nn.Module, batch: Any) -> Tensor:
        """The evaluation outputs on a padded batch of :meth:`_replay_trees` (per row; see :attr:`_node_outputs`)."""
        return model(batch)

    _node_outputs = True  # whether _replay_output gives a row per node (put back in node order) or one per graph

    def _validate(self, model: torch.nn.Module, dev_batches: list[Batch]) -> tuple[dict[str, float], dict[str, Any]]:
        """Dev metrics after an epoch, ``model`` run on ``dev_batches`` in order: the history columns, and the
        dict kept with the best epoch."""
        tally = evaluate(model, dev_batches)
        return {"dev_root": tally.root, "dev_phrase": tally.phrase}, tally.as_dict()

    def _improves(self, dev: dict[str, Any], best_dev: dict[str, Any] | None) -> bool:
        """Whether this epoch's dev metrics displace the best so far (ties keep the earlier epoch)."""
        return best_dev is None or dev["root"] > best_dev["root"]

    def _last_dev(self, history: list[dict]) -> str:
        return f"{history[-1]['dev_root']:.1f}" if history else "-"

    def _dev_summary(self, columns: dict[str, float]) -> str:
        """The dev metrics of one epoch, for its line on screen."""
        return f"dev root {columns['dev_root']:.2f}, dev phrase {columns['dev_phrase']:.2f}"

    # -- the replayed path (graphtree.train.replaying) ---------------------------------------------------

    def _start_replay(self) -> ReplayPath:
        """The run's path: the replayed step and evaluation where asked for and possible, else why not."""
        path = ReplayPath(self.replay, replay_requested(self.replay, self.device))
        if path.requested:
            path.fallback = self._unreplayable()
            if path.fallback is None and not getattr(self.optimizer, "capturable", False):
                path.fallback = ("the optimizer was not built capturable "
                                 "(PaperOptimizer.for_model(..., capturable=True))")
        if path.active:
            from ..replay import ReplayedStep

            path.graphs = self.device.type == "cuda"
            path.step = ReplayedStep(self.model, StepOptimizer(self.optimizer), loss=self._replay_loss)
            path.forward = ReplayedForward(self.model, self._replay_output, lambda model, batch: model(batch),
                                           prepare=self._replay_trees, node_level=self._node_outputs)
        elif path.requested and self.verbose and distributed.is_main():
            tqdm.write(f"{self.desc + ': ' if self.desc else ''}not replayed: {path.fallback}", file=sys.stderr)
        return path

    def _replaying(self) -> bool:
        return self.replay_path is not None and self.replay_path.active

    def _prepare(self, batch: Batch) -> Batch:
        """A training minibatch as the epoch's path takes it: on the host with its schedule (replayed: the step
        pads it there), else on the device (:meth:`to_device`)."""
        return with_schedule(batch) if self._replaying() else self.to_device(batch)

    def _broadcast_parameters(self) -> None:
        """Under ``torchrun`` without DDP (the replayed path): every rank starts from rank 0's weights."""
        if distributed.world_size() == 1:
            return
        with torch.no_grad():
            for tensor in [*self.model.parameters(), *self.model.buffers()]:
                torch.distributed.broadcast(tensor.data, src=0)

    # -- checkpoints -------------------------------------------------------------------------------

    def _scoring_model(self, batches: Sequence[Batch]) -> torch.nn.Module:
        """What metric code runs on ``batches``: the model itself in one process; under ``torchrun``, a stand-in
        replaying the outputs that each rank computed for its share and every rank gathered. On the replayed
        path, a stand-in replaying the outputs of the padded forward pass (:class:`ReplayedForward`)."""
        forward = self.replay_path.forward if self.replay_path is not None else None
        if forward is not None:
            was_training = self.model.training
            self.model.eval()
            try:
                outputs = distributed.gather_outputs(forward, batches)
            finally:
                self.model.train(was_training)
            return _Replay(outputs)
        if distributed.world_size() == 1:
            return self.model
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                outputs = distributed.gather_outputs(self.model, batches)
        finally:
            self.model.train(was_training)
        return _Replay(outputs)

    def _data_parallel(self) -> torch.nn.Module:
        """The model training goes through: itself, or under ``torchrun`` its ``DistributedDataParallel``.

        DDP all-reduces the dense gradients. The embeddings with sparse
        gradients are left to :func:`~graphtree.train.distributed.all_reduce_sparse_`
        (``nccl`` has no sparse all-reduce), so they are kept out of DDP and
        broadcast from rank 0 here, as DDP broadcasts the others.
        """
        if distributed.world_size() == 1:
            self._sparse_params, self._ddp_params = [], []
            return self.model
        from torch.nn.parallel import DistributedDataParallel

        sparse = {f"{name}.weight" if name else "weight" for name, module in self.model.named_modules()
                  if isinstance(module, torch.nn.Embedding) and module.sparse and module.weight.requires_grad}
        self._sparse_params = [p for name, p in self.model.named_parameters() if name in sparse]
        self._ddp_params = [p for name, p in self.model.named_parameters() if name not in sparse and p.requires_grad]
        for param in self._sparse_params:
            torch.distributed.broadcast(param.data, src=0)
        # DDP's own (static, documented in its source) way of leaving parameters to the caller.
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(self.model, sorted(sparse))
        return DistributedDataParallel(self.model, device_ids=[self.device.index] if self.device.type == "cuda"
                                       else None)

    def _every_parameter(self, loss: Tensor) -> Tensor:
        """``loss`` plus zero times every DDP-synchronized parameter, under ``torchrun``.

        A rank's share of a minibatch may lack what some weights act on (no
        inner node, no leaf); its DDP would then wait for a gradient that never
        comes. The zero term gives every such weight a zero gradient, for the
        price of a sum, where ``find_unused_parameters`` would search the
        autograd graph at every step.
        """
        if not self._ddp_params:
            return loss
        return loss + 0.0 * sum(p.sum() for p in self._ddp_params)

    def _load(self) -> dict[str, Any] | None:
        if self.checkpoint is None or not self.checkpoint.is_file():
            return None
        state = torch.load(self.checkpoint, map_location="cpu", weights_only=False)
        if state.get("format") != self.checkpoint_format:
            raise InvalidArgumentError(f"{self.checkpoint} is not a checkpoint of {type(self).__name__} (format "
                             f"{state.get('format')!r}); delete it to start the run afresh")
        if state["config"] != self.config:
            changed = sorted(k for k in set(state["config"]) | set(self.config)
                             if state["config"].get(k) != self.config.get(k))
            raise InvalidArgumentError(f"{self.checkpoint} belongs to a run with other settings (differing: "
                             f"{', '.join(changed)}); delete it, or give this run another name")
        return state

    def _save(self, epoch: int, history: list[dict], best: dict, seconds: float,
              in_epoch: dict[str, Any] | None = None) -> None:
        """Write the checkpoint after ``epoch`` completed epochs (and, with ``in_epoch``, part of the next one:
        its minibatches done, running loss and phases; see ``checkpoint_every``)."""
        if self.checkpoint is None:
            return
        rng = distributed.all_gather_objects(get_rng_state())  # every rank's dropout stream, to resume exactly
        if not distributed.is_main():
            return
        atomic_save({"format": self.checkpoint_format, "config": self.config, "epoch": epoch,
                     "finished": epoch == self.epochs, "model": self.model.state_dict(),
                     "optimizer": self.optimizer.state_dict(), "rng": rng[0], "rng_ranks": rng, "history": history,
                     "best": best, "seconds": seconds, "extra": self.extra, "in_epoch": in_epoch}, self.checkpoint)

    @staticmethod
    def _restore_rng(state: dict[str, Any]) -> None:
        """This rank's random state from a checkpoint (rank 0's where it was written by fewer processes)."""
        ranks = state.get("rng_ranks", [state["rng"]])
        set_rng_state(ranks[distributed.rank()] if distributed.rank() < len(ranks) else ranks[0])

    def _write_csv(self, history: list[dict], best_epoch: int) -> None:
        if self.metrics_csv is None or not distributed.is_main():
            return
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=self.csv_fields, lineterminator="\n")
        writer.writeheader()
        for row in history:
            writer.writerow({**{k: row[k] for k in self.csv_fields[:-1]}, "best": int(row["epoch"] == best_epoch)})
        atomic_write_text(out.getvalue(), self.metrics_csv)

    # -- training ----------------------------------------------------------------------------------

    def fit(self, train: Sequence[Data], dev: Sequence[Data]) -> FitResult:
        """Train (or resume, or return a finished run) and leave the best-dev weights in the model.

        The processor's floating-point mode is left as it is: where weights decay into subnormal floats (L2 on a
        block that gets no gradient), wrap the call in :func:`graphtree.backend.threads.denormals_flushed`, as
        the experiment scripts do (the same numbers, faster)."""
        if len(train) == 0 or len(dev) == 0:
            raise InvalidArgumentError("fit needs non-empty training and dev sets")
        with self._thread_budget():
            return self._fit(train, dev)

    def _fit(self, train: Sequence[Data], dev: Sequence[Data]) -> FitResult:
        # The training graphs are concatenated anew for each fit (see TrainingBatches), their heights read anew.
        self._batches = TrainingBatches(train, self.batch_size, self._prepare, self.loader_workers)
        self._order.forget()
        history: list[dict[str, Any]] = []
        best: dict[str, Any] = {"epoch": 0, "dev": None, "model": None}
        seconds, start = 0.0, 0
        in_epoch = None  # the part of epoch ``start`` a mid-epoch checkpoint had done
        state = self._load()
        if state is not None:
            in_epoch = state.get("in_epoch")
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self._restore_rng(state)
            history, best, seconds, start = state["history"], state["best"], state["seconds"], state["epoch"]
        elif distributed.world_size() > 1:  # a dropout stream of each rank's own
            seed_everything(self.seed * 1_000_003 + 7_919 * (distributed.rank() + 1))
        self.replay_path = self._start_replay()
        if self._replaying():  # gradients averaged inside the step (StepOptimizer), not by DDP's hooks
            self._sparse_params, self._ddp_params = [], []
            self._broadcast_parameters()
            model = self.model
        else:
            model = self._data_parallel()
        dev_batches = self.eval_batches(dev)
        steps_per_epoch = math.ceil(len(train) / self.batch_size)
        if hasattr(self.optimizer, "plan_updates"):  # a warm-up or decay is laid over the run's updates
            self.optimizer.plan_updates(self.epochs * steps_per_epoch)
        for epoch in range(start, self.epochs):
            # A first use of the compiled kernels builds them (minutes, once per install): that is set-up, not
            # training, so it is left out of the epoch's recorded time.
            began, building = time.perf_counter(), native.build_seconds()
            captured = self.replay_path.capture_seconds()
            done_before = in_epoch["seconds"] if in_epoch else 0.0  # this epoch's time before a resume

            def save_part(part: dict[str, Any], epoch: int = epoch, began: float = began, building: float = building,
                          done_before: float = done_before, best: dict = best, seconds: float = seconds) -> None:
                part["seconds"] = done_before + time.perf_counter() - began - (native.build_seconds() - building)
                self._save(epoch, history, best, seconds + part["seconds"], part)

            train_loss, phases = self._train_epoch(self._training_step(model), train, epoch,
                                                   epoch * steps_per_epoch, history, resume=in_epoch,
                                                   save_part=save_part)
            in_epoch = None
            trained = done_before + time.perf_counter() - began - (native.build_seconds() - building)
            columns, dev_metrics = self._validate(self._scoring_model(dev_batches), dev_batches)
            took = done_before + time.perf_counter() - began - (native.build_seconds() - building)
            seconds += took
            phases["dev"] = took - trained
            history.append({"epoch": epoch + 1, "train_loss": train_loss, **columns,
                            "train_seconds": trained, "seconds": took, "phases": phases})
            if self.replay_path.requested:  # what capturing the graphs cost in this epoch, training and dev
                history[-1]["capture_seconds"] = self.replay_path.capture_seconds() - captured
            improved = self._improves(dev_metrics, best["dev"])
            if improved:
                best = {"epoch": epoch + 1, "dev": dev_metrics,
                        "model": {k: v.detach().clone() for k, v in self.model.state_dict().items()}}
            self._save(epoch + 1, history, best, seconds)
            self._write_csv(history, best["epoch"])
            if self.verbose and distributed.is_main():  # one line per epoch stays above the progress bar
                captures = history[-1].get("capture_seconds")
                tqdm.write(f"{self.desc + ' ' if self.desc else ''}epoch {epoch + 1}/{self.epochs}: loss "
                           f"{train_loss:.4f}, {self._dev_summary(columns)}{' (best)' if improved else ''}, "
                           f"{took:.1f} s{f' ({captures:.1f} s capturing graphs)' if captures else ''}",
                           file=sys.stderr)
        if start == self.epochs:  # finished before: the CSV may predate a kill right after the last save
            self._write_csv(history, best["epoch"])
        self.model.load_state_dict(best["model"])
        return FitResult(best["epoch"], best["dev"], history, seconds, start)

    def epoch_indices(self, train: Sequence[Data], epoch: int) -> list[int]:
        """The order in which ``epoch`` (0-based) visits ``train``, its minibatches consecutive runs of
        ``batch_size``: :func:`~graphtree.train.ordering.epoch_order`, or
        :func:`~graphtree.train.ordering.height_grouped_order` under ``group_by_height``."""
        return self._order(train, epoch).tolist()

    def _minibatches(self, train: Sequence[Data], order: Tensor | list[int]) -> Iterator[Minibatch]:
        """The minibatches of the epoch's ``order`` (:class:`~graphtree.train.batches.TrainingBatches`)."""
        return self._batches(order)

    def _training_step(self, model: torch.nn.Module) -> PlainStep | ReplayedTrainingStep:
        """The step this epoch takes: replayed while the run's path is (a step that falls back at its first
        batch leaves the next epochs to the plain one), else the plain one through ``model``."""
        return ReplayedTrainingStep(self) if self._replaying() else PlainStep(self, model)

    def _train_epoch(self, step: PlainStep | ReplayedTrainingStep, train: Sequence[Data], epoch: int,
                     steps_before: int, history: list[dict], resume: dict[str, Any] | None = None,
                     save_part: Callable[[dict[str, Any]], None] | None = None) -> tuple[float, dict[str, float]]:
        """One pass over ``train``, ``step`` on each minibatch; returns the summed loss per example and the seconds
        of each phase (``batches``, then the step's). ``steps_before``: optimizer steps of the earlier epochs.
        ``resume``: the part of this epoch a mid-epoch checkpoint had done (its minibatches are skipped);
        ``save_part`` writes such a checkpoint (see ``checkpoint_every``)."""
        if resume and not step.resumable:
            raise InvalidArgumentError("a mid-epoch checkpoint resumes on the plain path only (replay='off')")
        self.model.train()
        order = self._order(train, epoch)  # a dataset on disk reads each minibatch's rows in one query
        order = order if reads_from_disk(train) else order.tolist()
        last_dev = self._last_dev(history)
        done = resume["minibatches"] if resume else 0
        bar = self._progress_bar(epoch, done, math.ceil(len(order) / self.batch_size))
        ranks = distributed.world_size()
        running = _RunningLoss(step.sums_on_device, resume["loss_sum"] if resume else 0.0)
        examples = resume["examples"] if resume else 0
        phases = dict(resume["phases"]) if resume else dict.fromkeys(("batches", *step.phases), 0.0)
        steps = steps_before + done
        order = order[done * self.batch_size:]  # minibatches are consecutive runs of batch_size: cuts unchanged
        partial_saves = step.resumable and self.checkpoint_every is not None and save_part is not None and ranks == 1
        last_save = time.perf_counter()
        minibatches = self._minibatches(train, order)
        for k in bar:
            began = _clock()
            minibatch, mine, batch = next(minibatches)
            phases["batches"] += _clock() - began
            loss = step(minibatch, mine, batch, phases)
            if loss is not None:
                running.add(loss)
            examples += len(mine)
            steps += 1
            if partial_saves and time.perf_counter() - last_save >= self.checkpoint_every:
                save_part({"minibatches": k + 1, "loss_sum": running.value(), "examples": examples,
                           "phases": phases})
                last_save = time.perf_counter()
            if self.on_step is not None:
                self.on_step(steps)
            if self.progress and k % running.read_every == 0:
                bar.set_postfix(loss=f"{running.value() / examples:.3f}" if examples else "-", dev=last_dev,
                                refresh=False)
        bar.close()
        loss_sum = running.value()
        step.end_epoch()
        if ranks > 1:
            loss_sum, examples = (sum(part) for part in zip(*distributed.all_gather_objects((loss_sum, examples))))
        return loss_sum / examples, phases

    def _progress_bar(self, epoch: int, done: int, total: int) -> tqdm:
        """The epoch's bar over its minibatches, from ``done`` (a resumed epoch's); on rank 0 only."""
        return tqdm(range(done, total), desc=f"{self.desc} epoch {epoch + 1}/{self.epochs}", initial=done,
                    total=total, disable=not self.progress or not distributed.is_main(), leave=False,
                    file=sys.stderr, mininterval=0.5 if sys.stderr.isatty() else 30.0)

    def test(self, data: Sequence[Data], breakdown: bool = True) -> Tally:
        """Evaluate the model (after :meth:`fit`: the best-dev weights) on ``data``."""
        batches = self.eval_batches(data)
        with self._thread_budget():
            return evaluate(self._scoring_model(batches), batches, breakdown=breakdown)

    def _thread_budget(self) -> AbstractContextManager:
        """The thread budget watching the model, if there is one (it hands back the whole pool when it ends)."""
        return nullcontext() if self.thread_budget is None else self.thread_budget.watching(self.model)
