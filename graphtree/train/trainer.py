"""The training loop every experiment uses: epochs, dev selection, resumable checkpoints, CSV, progress bar."""

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
from ..backend.threads import denormals_flushed  # noqa: F401  (importable here as before it moved)
from ..data.batching import BatchCutter, collate_graphs
from ..data.loader import ScheduleCollater, unpacked, with_schedule
from ..levels import topological_levels
from ..models.classifier import node_loss
from . import distributed
from .checkpoint import atomic_save, atomic_write_text, get_rng_state, seed_everything, set_rng_state
from .metrics import Tally, evaluate
from .optim import PaperOptimizer
from .replaying import ReplayedForward, ReplayPath, StepOptimizer, replay_requested, unreplayable_reason

__all__ = ["CHECKPOINT_FORMAT", "PHASES", "FitResult", "Trainer", "collate", "epoch_order", "height_grouped_order",
           "tree_levels"]

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


_NOT_YET = object()  # Trainer._cutter before the first epoch of a fit has made it


def epoch_order(num_examples: int, seed: int, epoch: int) -> Tensor:
    """The shuffled order of the training examples in ``epoch``.

    A pure function of ``(seed, epoch)``, so a resumed run visits the data in
    the same order as an uninterrupted one without storing any loader state.
    """
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(num_examples, generator=generator)


def tree_levels(example: Data) -> int:
    """The levels a bottom-up pass over ``example`` runs: its height plus one (the taller side of a pair; 0 for a
    graph without nodes). Read from the stored ``height`` (``height_a`` and ``height_b`` of a pair) where the
    converters left it, else computed from the edges."""
    if getattr(example, "height", None) is not None:
        return int(example.height.max()) + 1 if example.height.numel() else 0
    if getattr(example, "height_a", None) is not None and getattr(example, "height_b", None) is not None:
        return max(int(h.max()) + 1 if h.numel() else 0 for h in (example.height_a, example.height_b))
    if getattr(example, "edge_index", None) is None:
        raise ValueError(f"cannot tell the height of {type(example).__name__} without height or edge_index")
    if not example.num_nodes:
        return 0
    return int(topological_levels(example.edge_index, example.num_nodes)[0].max()) + 1


def height_grouped_order(levels: Tensor | Sequence[int], batch_size: int, window: int, seed: int,
                         epoch: int) -> Tensor:
    """The order of the training examples in ``epoch`` with trees of similar height in one minibatch.

    :func:`epoch_order`'s permutation is cut into windows of ``window`` minibatches; each window is sorted by
    ``levels`` (stably: ties keep the permutation's order) and cut into minibatches of ``batch_size``; the full
    minibatches are then shuffled, and the short one (if any: the last window's lowest trees) comes last, as in
    the plain order. Each window holds the same trees as in :func:`epoch_order`, and no cut of them into
    minibatches of these sizes runs fewer levels in all. A minibatch
    runs as many levels as its tallest tree, so fewer levels are run in all, while every tree still meets a
    different set of others each epoch (within a window of ``window * batch_size`` random ones). A pure function
    of its arguments, like :func:`epoch_order`, so a resumed run or every rank of a job cuts the same minibatches.

    Args:
        levels: Levels of each training example (:func:`tree_levels`), in dataset order.
        batch_size: Examples per minibatch.
        window: Minibatches per sorted window (1: each minibatch is the plain order's, in a shuffled order).
        seed, epoch: As for :func:`epoch_order`.
    """
    if batch_size < 1 or window < 1:
        raise ValueError(f"batch_size and window must be positive, got {batch_size} and {window}")
    levels = torch.as_tensor(levels, dtype=torch.long)
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)  # epoch_order's permutation, then more
    order = torch.randperm(levels.numel(), generator=generator)
    windows = [chunk[torch.sort(levels[chunk], stable=True).indices] for chunk in order.split(window * batch_size)]
    # The short minibatch (the last window's remainder) takes that window's lowest trees: the tallest then sit
    # in full minibatches, which keeps every window's summed levels at their least.
    short = windows[-1][:len(windows[-1]) % batch_size] if windows else order
    if windows:
        windows[-1] = windows[-1][short.numel():]
    full = torch.cat(windows).view(-1, batch_size) if windows else order.view(0, batch_size)
    return torch.cat([full[torch.randperm(full.size(0), generator=generator)].reshape(-1), short])


def collate(examples: Sequence[Data], batch_size: int) -> list[Batch]:
    """Consecutive ``Batch`` es of ``batch_size`` examples (for evaluation, where order does not matter)."""
    return [collate_graphs(examples[k:k + batch_size]) for k in range(0, len(examples), batch_size)]


def reads_from_disk(data: Any) -> bool:
    """Whether ``data`` is a dataset read from a graph store (:class:`~graphtree.datasets.store.GraphStore`, or a
    dataset with ``on_disk=True``): held a batch at a time, never whole."""
    return bool(getattr(data, "reads_from_disk", False))


class _MinibatchShares(torch.utils.data.Sampler):
    """The epoch's minibatches of ``order`` (a tensor), each as this rank's share (:func:`distributed.shard`; a rank
    without one gets the minibatch's first example, weighted zero by the trainer): the batches a loader's workers
    read from disk. The order stays a tensor: a list of a million Python ints would be most of a reader's memory."""

    def __init__(self, order: Tensor, batch_size: int) -> None:
        self.order, self.batch_size = order, batch_size

    def __len__(self) -> int:
        return math.ceil(len(self.order) / self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        for start in range(0, len(self.order), self.batch_size):
            minibatch = self.order[start:start + self.batch_size].tolist()
            yield distributed.shard(minibatch) or minibatch[:1]


class _EncodedReads(torch.utils.data.Dataset):
    """A dataset on disk as a loader fetches it: each batch read as bytes in one query and collated from them
    (:meth:`~graphtree.datasets.store.GraphStore.read_encoded`), not a ``Data`` per graph."""

    def __init__(self, data: Any) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitems__(self, indices: Sequence[int]) -> Any:
        return self.data.read_encoded(indices)


class StoredBatches(Sequence):
    """The evaluation batches of a dataset on disk, read when used (never all held): ``batches[k]`` reads batch
    ``k`` in this process; iterating reads them in ``workers`` loader processes, which collate and schedule them.
    ``finish`` (e.g. moving to the device) is applied to each."""

    def __init__(self, data: Sequence[Data], batch_size: int, finish: Callable[[Batch], Batch],
                 workers: int = 0) -> None:
        self.data, self.batch_size, self.finish, self.workers = data, batch_size, finish, workers

    def __len__(self) -> int:
        return math.ceil(len(self.data) / self.batch_size)

    def _indices(self, k: int) -> range:
        return range(k * self.batch_size, min((k + 1) * self.batch_size, len(self.data)))

    def __getitem__(self, k: int) -> Batch:  # type: ignore[override]
        if not 0 <= k < len(self):
            raise IndexError(k)
        return self.finish(ScheduleCollater(self.data)(_EncodedReads(self.data).__getitems__(self._indices(k))))

    def __iter__(self) -> Iterator[Batch]:
        if self.workers == 0:
            yield from (self[k] for k in range(len(self)))
            return
        loader = torch.utils.data.DataLoader(_EncodedReads(self.data),
                                             batch_sampler=[self._indices(k) for k in range(len(self))],
                                             collate_fn=ScheduleCollater(self.data, packed=True),
                                             num_workers=self.workers)
        for batch in unpacked(loader):
            yield self.finish(batch)


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


class Trainer:
    """Trains a node classifier with a paper's optimizer and keeps the model that does best on dev.

    Each epoch visits the training trees in the order :func:`epoch_order`
    gives (or :func:`height_grouped_order`, under ``group_by_height``), in
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
            minibatches of a dataset on disk (:func:`reads_from_disk`), as
            :class:`~graphtree.data.TreeLoader` does, a batch a query; graphs
            in memory are batched in this process.
        group_by_height: ``None`` (default): the minibatches of :func:`epoch_order`. A number ``W``: those of
            :func:`height_grouped_order` with windows of ``W`` minibatches, trees of similar height together,
            so that a minibatch runs fewer levels; the heights are read once per :meth:`fit`.
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
            raise ValueError(f"epochs and batch_size must be positive, got {epochs} and {batch_size}")
        if group_by_height is not None and (isinstance(group_by_height, bool) or not isinstance(group_by_height, int)
                                            or group_by_height < 1):
            raise ValueError(f"group_by_height must be None or a positive number of minibatches, got "
                             f"{group_by_height!r}")
        if checkpoint_every is not None and not checkpoint_every > 0:
            raise ValueError(f"checkpoint_every must be None or a positive number of seconds, got {checkpoint_every}")
        self.checkpoint_every = checkpoint_every
        self.group_by_height = group_by_height
        self._levels: Tensor | None = None  # each training example's levels, under group_by_height (per fit)
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
        self._cutter: BatchCutter | object | None = _NOT_YET  # see _minibatches
        if device is None:
            device = next((p.device for p in model.parameters()), torch.device("cpu"))
        self.device = torch.device(device)
        replay_requested(replay, self.device)  # a ValueError for a mode that is not one
        self.replay = replay
        self.replay_path: ReplayPath | None = None  # made by fit

    def eval_batches(self, data: Sequence[Data]) -> Sequence[Batch]:
        """``data`` in evaluation batches with their schedules, on the device: all made now, or, for a dataset on
        disk, each read when used (:class:`StoredBatches`)."""
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

    def _replayed_step(self, batch: Batch, weight: float) -> Tensor:
        """One replayed training step on the host ``batch``, its loss weighed by ``weight``: the summed loss."""
        trees = self._replay_trees(batch)
        trees.loss_weight = torch.tensor(weight, dtype=torch.float64)
        loss = self.replay_path.step(trees)
        return loss.detach() / weight if weight else loss.detach() * 0.0

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
            raise ValueError(f"{self.checkpoint} is not a checkpoint of {type(self).__name__} (format "
                             f"{state.get('format')!r}); delete it to start the run afresh")
        if state["config"] != self.config:
            changed = sorted(k for k in set(state["config"]) | set(self.config)
                             if state["config"].get(k) != self.config.get(k))
            raise ValueError(f"{self.checkpoint} belongs to a run with other settings (differing: "
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
            raise ValueError("fit needs non-empty training and dev sets")
        with self._thread_budget():
            return self._fit(train, dev)

    def _fit(self, train: Sequence[Data], dev: Sequence[Data]) -> FitResult:
        self._cutter = _NOT_YET  # the training graphs are concatenated anew for each fit (see _minibatches)
        self._levels = None  # and their heights read anew (see epoch_indices)
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

            train_loss, phases = self._train_epoch(model, train, epoch, epoch * steps_per_epoch, history,
                                                   resume=in_epoch, save_part=save_part)
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
        ``batch_size``: :func:`epoch_order`, or :func:`height_grouped_order` under ``group_by_height``."""
        return self._epoch_order(train, epoch).tolist()

    def _epoch_order(self, train: Sequence[Data], epoch: int) -> Tensor:
        """:meth:`epoch_indices` as a tensor."""
        if self.group_by_height is None:
            order = epoch_order(len(train), self.seed, epoch)
        else:
            if self._levels is None or self._levels.numel() != len(train):
                self._levels = torch.tensor([tree_levels(train[k]) for k in range(len(train))], dtype=torch.long)
            order = height_grouped_order(self._levels, self.batch_size, self.group_by_height, self.seed, epoch)
        return order

    def _minibatch(self, train: Sequence[Data], order: list[int], start: int) -> tuple[list[int], list[int], Batch]:
        """The minibatch at ``start`` of the epoch's ``order``, this rank's share of it, and that share as a
        ``Batch`` with its schedule (built here, on the host), on the device. A rank left without examples (a
        last minibatch smaller than the job) still joins the gradient all-reduce, with one example weighted
        zero."""
        minibatch = order[start:start + self.batch_size]
        mine = distributed.shard(minibatch)
        return minibatch, mine, self._prepare(collate_graphs([train[i] for i in mine or minibatch[:1]]))

    def _minibatches(self, train: Sequence[Data], order: list[int]) -> Iterator[tuple[list[int], list[int], Batch]]:
        """The epoch's minibatches, as :meth:`_minibatch` gives them. In one process, from plain ``Data``
        graphs, they are cut from the training graphs concatenated once per :meth:`fit` (:class:`BatchCutter`,
        built here, in the first epoch's time): the same batches for a fraction of the work. Not for a dataset
        with a ``transform``, which may give other graphs at every access."""
        if reads_from_disk(train):
            yield from self._disk_minibatches(train, order)
            return
        if self._cutter is _NOT_YET:
            cuttable = distributed.world_size() == 1 and getattr(train, "transform", None) is None
            self._cutter = BatchCutter.of(train) if cuttable else None
        starts = range(0, len(order), self.batch_size)
        cutter = self._cutter
        if not isinstance(cutter, BatchCutter):
            for start in starts:
                yield self._minibatch(train, order, start)
            return
        for start, batch in zip(starts, cutter.batches(order, self.batch_size)):
            minibatch = order[start:start + self.batch_size]
            yield minibatch, minibatch, self._prepare(batch)

    def _disk_minibatches(self, train: Sequence[Data], order: Tensor) -> Iterator[tuple[list[int], list[int], Batch]]:
        """:meth:`_minibatches` of a dataset on disk: ``loader_workers`` processes each read a share of a
        minibatch in one query, collate it and build its schedule (:class:`~graphtree.data.ScheduleCollater`);
        under ``torchrun`` each rank reads its own shares only, so the ranks read disjoint parts of the store."""
        shares = _MinibatchShares(order, self.batch_size)
        loader = torch.utils.data.DataLoader(_EncodedReads(train), batch_sampler=shares,
                                             collate_fn=ScheduleCollater(train, packed=self.loader_workers > 0),
                                             num_workers=self.loader_workers,
                                             prefetch_factor=4 if self.loader_workers else None)
        for start, batch in zip(range(0, len(order), self.batch_size), unpacked(loader)):
            minibatch = order[start:start + self.batch_size].tolist()
            yield minibatch, distributed.shard(minibatch), self._prepare(batch)

    def _train_epoch(self, model: torch.nn.Module, train: Sequence[Data], epoch: int, step: int,
                     history: list[dict], resume: dict[str, Any] | None = None,
                     save_part: Callable[[dict[str, Any]], None] | None = None) -> tuple[float, dict[str, float]]:
        """One pass over ``train``; returns the summed loss per example and the seconds of each of :data:`PHASES`.
        ``resume``: the part of this epoch a mid-epoch checkpoint had done (its minibatches are skipped);
        ``save_part`` writes such a checkpoint (see ``checkpoint_every``)."""
        self.model.train()
        order = self._epoch_order(train, epoch)  # a dataset on disk reads each minibatch's rows in one query
        order = order if reads_from_disk(train) else order.tolist()
        last_dev = self._last_dev(history)
        done = resume["minibatches"] if resume else 0
        bar = tqdm(range(done, math.ceil(len(order) / self.batch_size)),
                   desc=f"{self.desc} epoch {epoch + 1}/{self.epochs}", initial=done,
                   total=math.ceil(len(order) / self.batch_size),
                   disable=not self.progress or not distributed.is_main(), leave=False, file=sys.stderr,
                   mininterval=0.5 if sys.stderr.isatty() else 30.0)
        ranks = distributed.world_size()
        loss_sum, examples = (resume["loss_sum"], resume["examples"]) if resume else (0.0, 0)
        phases = dict(resume["phases"]) if resume else dict.fromkeys(PHASES, 0.0)
        step += done
        order = order[done * self.batch_size:]  # minibatches are consecutive runs of batch_size: cuts unchanged
        partial_saves = self.checkpoint_every is not None and save_part is not None and ranks == 1
        last_save = time.perf_counter()

        def clock() -> float:  # a first use of the kernels (build or load) is left out, as from train_seconds
            return time.perf_counter() - native.build_seconds()

        minibatches = self._minibatches(train, order)
        if self._replaying():
            if resume:
                raise ValueError("a mid-epoch checkpoint resumes on the plain path only (replay='off')")
            return self._train_replayed(minibatches, bar, step, last_dev)
        for k in bar:
            began = clock()
            minibatch, mine, batch = next(minibatches)
            built = clock()
            loss = self._every_parameter(self._batch_loss(model, batch))
            forward = clock()
            self.optimizer.zero_grad()
            # DDP averages over the ranks, so each rank's share is divided by the minibatch size over the ranks:
            # the gradient is that of the minibatch's summed loss over its size, as in one process.
            (loss / (len(minibatch) / ranks) if mine else loss * 0.0).backward()
            for param in self._sparse_params:
                distributed.all_reduce_sparse_(param)
            backward = clock()
            self.optimizer.step_model()
            stepped = clock()
            self.optimizer.step_embeddings()
            done = clock()
            for phase, seconds in zip(PHASES, (built - began, forward - built, backward - forward,
                                               stepped - backward, done - stepped)):
                phases[phase] += seconds
            if mine:
                loss_sum += float(loss.detach())
                examples += len(mine)
            step += 1
            if partial_saves and time.perf_counter() - last_save >= self.checkpoint_every:
                save_part({"minibatches": k + 1, "loss_sum": loss_sum, "examples": examples, "phases": phases})
                last_save = time.perf_counter()
            if self.on_step is not None:
                self.on_step(step)
            bar.set_postfix(loss=f"{loss_sum / examples:.3f}" if examples else "-", dev=last_dev, refresh=False)
        bar.close()
        if ranks > 1:
            loss_sum, examples = (sum(part) for part in zip(*distributed.all_gather_objects((loss_sum, examples))))
        return loss_sum / examples, phases

    def _train_replayed(self, minibatches: Iterator[tuple[list[int], list[int], Batch]], bar: Any, step: int,
                        last_dev: str) -> tuple[float, dict[str, float]]:
        """:meth:`_train_epoch` on the replayed path: one replayed step per minibatch, the losses summed on the
        device (read once per epoch, and every 50 steps for the bar)."""
        ranks = distributed.world_size()
        phases = {"batches": 0.0, "step": 0.0}
        total, examples = None, 0
        for k in bar:
            began = time.perf_counter()
            minibatch, mine, batch = next(minibatches)
            built = time.perf_counter()
            loss = self._replayed_step(batch, ranks / len(minibatch) if mine else 0.0)
            phases["batches"] += built - began
            phases["step"] += time.perf_counter() - built
            total = loss if total is None else total + loss
            examples += len(mine)
            step += 1
            if self.on_step is not None:
                self.on_step(step)
            if self.progress and k % 50 == 0 and examples:
                bar.set_postfix(loss=f"{float(total) / examples:.3f}", dev=last_dev, refresh=False)
        bar.close()
        loss_sum = float(total) if total is not None else 0.0
        self.replay_path.note_fallback()
        if ranks > 1:
            loss_sum, examples = (sum(part) for part in zip(*distributed.all_gather_objects((loss_sum, examples))))
        return loss_sum / examples, phases

    def test(self, data: Sequence[Data], breakdown: bool = True) -> Tally:
        """Evaluate the model (after :meth:`fit`: the best-dev weights) on ``data``."""
        batches = self.eval_batches(data)
        with self._thread_budget():
            return evaluate(self._scoring_model(batches), batches, breakdown=breakdown)

    def _thread_budget(self) -> AbstractContextManager:
        """The thread budget watching the model, if there is one (it hands back the whole pool when it ends)."""
        return nullcontext() if self.thread_budget is None else self.thread_budget.watching(self.model)
