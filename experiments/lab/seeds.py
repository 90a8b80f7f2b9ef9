"""The per-seed loop of every experiment script: one training run per seed, written once here.

For each seed: skip it when its results file is there (written with the same
settings), else seed every generator, let the script build its model and
:class:`~graphtree.train.Trainer`, train (the trainer resumes a killed run from
its checkpoint), let the script test the best-dev model, and write the results
file atomically, from the first process only under ``torchrun``. Each finished
run's line goes to stdout; progress and notes go to stderr.

A script supplies only what is its own: the run's name, how to build its
trainer (:class:`SeedRun` gives the flags every trainer takes) and how to score
the test split (an :class:`Outcome`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from graphtree.backend.thread_budget import ThreadBudget
from graphtree.train import distributed
from graphtree.train.checkpoint import atomic_write_text, seed_everything
from graphtree.train.optim import OptimizerSpec, PaperOptimizer
from graphtree.train.replaying import replay_requested, unreplayable_reason
from graphtree.train.trainer import FitResult, Trainer

from .runs import RunPaths, finished_run, note, recorded_command, run_record

__all__ = ["Outcome", "SeedRun", "count_parameters", "seed_names", "train_seeds"]


@dataclass(frozen=True)
class SeedRun:
    """One seed's run as a script builds it: its name and the trainer flags it shares with every run."""

    seed: int
    name: str
    checkpoint: Path
    metrics_csv: Path
    config: dict[str, Any]   # stored in the checkpoint: a resumed run continues only on the same settings and data
    progress: bool
    device: torch.device
    replay: str = "auto"     # --replay: the replayed path (graphtree.train.replaying) on a GPU, or on/off
    group_by_height: int | None = None   # --group-by-height: minibatches of trees of similar height (Trainer)

    def trainer_options(self, **config: Any) -> dict[str, Any]:
        """The keyword arguments every trainer of an experiment takes; ``config`` adds to the checkpoint's."""
        return dict(seed=self.seed, checkpoint=self.checkpoint, metrics_csv=self.metrics_csv,
                    config={**self.config, **config, "seed": self.seed}, progress=self.progress, desc=self.name,
                    device=self.device, replay=self.replay,
                    **({"group_by_height": self.group_by_height} if self.group_by_height is not None else {}))

    def trainer(self, model: torch.nn.Module, embedding: torch.nn.Module | None, optimizer: OptimizerSpec,
                epochs: int, kind: type[Trainer] = Trainer, config: dict[str, Any] | None = None,
                **options: Any) -> Trainer:
        """The run's trainer (a ``kind``) of ``model``, moved to the run's device first: the paper optimizer
        ``optimizer`` (its minibatch size too; ``embedding`` gets the embedding update) for ``epochs``, with the
        flags of :meth:`trainer_options` (``config`` adds to the checkpoint's) and ``options`` (e.g. ``extra=``).

        Where the run replays (``replay``, :mod:`graphtree.train.replaying`) and the model can, the update is
        built in its capturable form, and the checkpoint says so (``"replay": True``): its optimizer state is
        that form's, which the plain update does not resume from."""
        model.to(self.device)
        capturable = replay_requested(self.replay, self.device) and unreplayable_reason(model, optimizer) is None
        config = {**(config or {}), **({"replay": True} if capturable else {})}
        return kind(model, PaperOptimizer.for_model(model, embedding, optimizer, capturable=capturable),
                    epochs=epochs, batch_size=optimizer.batch_size, **self.trainer_options(**config), **options)


@dataclass
class Outcome:
    """A trained seed as a script scores it: the results file's ``dev`` and ``test``, its further fields, and
    the scores for the run's line (e.g. ``"dev 89.20, test 90.40"``)."""

    dev: dict[str, Any]
    test: dict[str, Any]
    scores: str
    fields: dict[str, Any] = field(default_factory=dict)


def seed_names(stem: str, epochs: int, default_epochs: int, quick: bool) -> Callable[[int], str]:
    """Run names ``<stem>[_ep<epochs>]_s<seed>``: the epochs are named where they are not the experiment's own
    (a quick run is told apart by its folder, ``OUT/quick/``)."""
    length = f"_ep{epochs}" if epochs != default_epochs and not quick else ""
    return lambda seed: f"{stem}{length}_s{seed}"


def grouped_name(name: str, seed: int, group_by_height: int | None) -> str:
    """A run's name with ``_hg<W>`` before its seed where it trains on height-grouped minibatches (windows of
    ``W``), so that it neither overwrites nor is taken for the run of the plain order."""
    if group_by_height is None:
        return name
    suffix = f"_s{seed}"
    stem = name[:-len(suffix)] if name.endswith(suffix) else name
    return f"{stem}_hg{group_by_height}{suffix if name.endswith(suffix) else ''}"


def count_parameters(model: torch.nn.Module, leave_out: Callable[[str], bool] = lambda name: False) -> int:
    """The number of parameters of ``model``, without those whose name ``leave_out`` picks (the embeddings)."""
    return sum(p.numel() for name, p in model.named_parameters() if not leave_out(name))


def train_seeds(experiment: str, args: argparse.Namespace, argv: Sequence[str], config: dict[str, Any], *,
                run_name: Callable[[int], str], build: Callable[[SeedRun], Trainer],
                score: Callable[[Trainer, FitResult], Outcome], train: Sequence, dev: Sequence,
                checkpoint_config: dict[str, Any] | None = None, device: torch.device | str = "cpu",
                thread_budget: ThreadBudget | None = None) -> list[Path]:
    """Train ``experiment`` once per seed of ``args.seeds`` and write ``OUT/<experiment>/<run>.json``; the paths
    of the results files, those of seeds finished earlier included.

    ``config`` is what the results file records and what a finished run must match;
    ``checkpoint_config`` adds what a resumed run must also match (the data's
    identity). ``argv`` is the command line, recorded as ``python experiments/<experiment>.py ARGV``.
    ``thread_budget``: the trainers' (:class:`~graphtree.backend.thread_budget.ThreadBudget`), whose seconds at
    each thread count the results file records as ``threads_used``.
    """
    paths = RunPaths.under(args.out, experiment, args.quick)
    group_by_height = getattr(args, "group_by_height", None)
    if group_by_height is not None:  # recorded only when set: the runs made before the option keep their record
        config = {**config, "group_by_height": group_by_height}
    written = []
    for seed in args.seeds:
        name = grouped_name(run_name(seed), seed, group_by_height)
        results = paths.results / f"{name}.json"
        if finished_run(paths.results, name, config) is not None:
            note(f"{name}: finished earlier ({results}), skipped")
            written.append(results)
            continue
        seed_everything(seed)
        run = SeedRun(seed, name, paths.checkpoints / f"{name}.pt", paths.results / f"{name}.csv",
                      {**config, **(checkpoint_config or {})}, not args.no_progress, torch.device(device),
                      getattr(args, "replay", "auto"), group_by_height)
        trainer = build(run)
        if thread_budget is not None:
            trainer.thread_budget = thread_budget
            thread_budget.seconds.clear()
        fit = trainer.fit(train, dev)
        with nullcontext() if thread_budget is None else thread_budget.watching(trainer.model):
            outcome = score(trainer, fit)  # the test set's evaluation, which may not go through Trainer.test
        if not distributed.is_main():  # the first process writes the results
            continue
        epochs = len(fit.history)
        record = {
            "experiment": experiment, "run": name, "seed": seed, "config": config,
            "command": recorded_command(f"{experiment}.py", argv),
            "best_epoch": fit.best_epoch, "dev": outcome.dev, "test": outcome.test, "history": fit.history,
            "wall_time_s": fit.seconds, "seconds_per_epoch": fit.seconds / epochs,
            "train_seconds_per_epoch": sum(h["train_seconds"] for h in fit.history) / epochs,
            **outcome.fields, **run_record(args.threads, device),
        }
        if trainer.replay_path is not None:  # which path trained and evaluated, and what capturing cost
            record["replay"] = trainer.replay_path.record()
        if thread_budget is not None:
            record["threads_used"] = thread_budget.record()
        atomic_write_text(json.dumps(record, indent=1) + "\n", results)
        written.append(results)
        resumed = "" if fit.resumed_at == 0 else f" (resumed after epoch {fit.resumed_at})"
        print(f"{name}: best dev epoch {fit.best_epoch}, {outcome.scores}, {fit.seconds:.0f} s{resumed}",
              flush=True)
    return written
