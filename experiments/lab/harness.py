"""The set-up every experiment script repeats around its own data and model, written once here.

An :class:`Experiment` is one command's run of a script: it sets the process's
threads and device (one process, or this one of ``torchrun``'s), knows the
epochs, the data mirror and the word vectors the flags ask for, samples the
splits for ``--quick``, and hands the script's ``build`` and ``score`` to the
per-seed loop (:func:`~lab.seeds.train_seeds`) with the data's
identity, which a resumed run must match. The flag checks the scripts share
(:func:`check_training_flags`) and the names of word vectors are here too.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence, Sized
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from graphtree.backend.thread_budget import ThreadBudget
from graphtree.embeddings import embedding_matrix, load_glove
from graphtree.train import distributed
from graphtree.train.trainer import FitResult, Trainer

from .runs import check_training_flags, default_mirror, epochs_of, quick_sample, start_process, thread_budget
from .seeds import Outcome, SeedRun, seed_names, train_seeds

__all__ = ["SPLITS", "Experiment", "check_training_flags", "encoder_record", "initial_vectors", "load_vectors",
           "sample_splits", "split_sizes", "vectors_name"]

SPLITS = ("train", "dev", "test")


def load_vectors(embeddings: str) -> Any:
    """The word vectors of ``--embeddings``: ``None`` for ``random``, GloVe 6B 50d from its package for
    ``glove50``, else the GloVe text file at that path."""
    if embeddings == "random":
        return None
    return load_glove(None if embeddings == "glove50" else embeddings, verbose=False)


def encoder_record(name_or_folder: str) -> dict[str, Any]:
    """What a run over a pretrained encoder records of it: the name it was given, its folder's name (not its
    place on this machine), width, layers, and each file's size and SHA-256."""
    import json

    from graphtree.encoders import encoder_files, encoder_folder

    folder = encoder_folder(name_or_folder)
    config = json.loads((folder / "config.json").read_text())
    return {"name": name_or_folder if not Path(name_or_folder).is_dir() else Path(name_or_folder).name,
            "folder": folder.name, "model_type": config.get("model_type"), "width": int(config["hidden_size"]),
            "layers": int(config["num_hidden_layers"]), "files": encoder_files(folder)}


def vectors_name(embeddings: str) -> str:
    """``--embeddings`` as a run's name says it: ``random``, ``glove50``, or a GloVe file's name without suffix."""
    return embeddings if embeddings in ("random", "glove50") else Path(embeddings).stem


def initial_vectors(vocab: Any, vectors: Any, dim: int, seed: int, init: str = "uniform",
                    scale: float = 0.05) -> torch.Tensor:
    """A run's first word vectors: the pretrained ones (the mean vector for a word without one), else random ones
    drawn from ``seed``, ``U(-scale, scale)`` (``init="uniform"``) or ``N(0, 1)`` (``init="normal"``)."""
    if vectors is not None:
        return embedding_matrix(vocab, vectors, missing="mean")
    generator = torch.Generator().manual_seed(seed)
    if init == "normal":
        return torch.randn(len(vocab), dim, generator=generator)
    return (torch.rand(len(vocab), dim, generator=generator) * 2 - 1) * scale


def sample_splits(splits: Mapping[str, Sequence], sizes: Mapping[str, int], quick: bool) -> dict[str, Sequence]:
    """The splits, each cut to a fixed random sample of ``sizes[split]`` when ``quick`` (``--quick``), as lists."""
    return {s: quick_sample(list(data), sizes[s]) if quick else data for s, data in splits.items()}


def split_sizes(splits: Mapping[str, Sized]) -> str:
    """``"train / dev / test"`` sizes, for a script's note on its data (e.g. ``"1000 / 300 / 500"``)."""
    return " / ".join(str(len(splits[s])) for s in SPLITS)


@dataclass
class Experiment:
    """One command's run of the script ``name`` (``experiments/<name>.py``): its flags ``args``, command line
    ``argv``, repository ``repo`` (for the data mirror), the epochs its models train by default, and the device
    this process trains on."""

    name: str
    args: argparse.Namespace
    argv: Sequence[str]
    repo: Path
    default_epochs: int
    device: torch.device
    thread_budget: ThreadBudget | None = None

    @classmethod
    def start(cls, name: str, args: argparse.Namespace, argv: Sequence[str], repo: Path,
              default_epochs: int) -> Experiment:
        """Set this process's threads and device (:func:`~lab.runs.start_process`) and begin; above
        one thread, the models train on fewer while other processes keep the processors busy
        (:func:`~lab.runs.thread_budget`)."""
        device = start_process(args)
        return cls(name, args, argv, repo, default_epochs, device, thread_budget(args, device))

    @property
    def epochs(self) -> int:
        """The epochs a run trains: ``--epochs``, else 2 under ``--quick``, else the default."""
        return epochs_of(self.args, self.default_epochs)

    @property
    def mirror(self) -> str | None:
        """Where the corpora come from (:func:`~lab.runs.default_mirror`)."""
        return default_mirror(self.repo)

    def vectors(self) -> Any:
        """The word vectors of ``--embeddings`` (:func:`load_vectors`)."""
        return load_vectors(self.args.embeddings)

    def main_first(self) -> AbstractContextManager:
        """Under ``torchrun``, the first process runs the block first (it processes the corpus into the data
        root) and the others after it; one process just runs it."""
        return distributed.main_first()

    def sample(self, splits: Mapping[str, Sequence], sizes: Mapping[str, int]) -> dict[str, Sequence]:
        """The splits, each cut to a fixed random sample of ``sizes[split]`` under ``--quick``."""
        return sample_splits(splits, sizes, self.args.quick)

    def data_identity(self, splits: Mapping[str, Sized], vocab: Any) -> dict[str, Any]:
        """What a resumed run must find again: the splits' sizes, the vocabulary, and the sample."""
        return dict(train=len(splits["train"]), dev=len(splits["dev"]), test=len(splits["test"]),
                    vocab=vocab.fingerprint, sample="random-0" if self.args.quick else "all")

    def run_names(self, stem: str) -> Callable[[int], str]:
        """Run names ``<stem>[_ep<epochs>]_s<seed>`` (:func:`~lab.seeds.seed_names`)."""
        return seed_names(stem, self.epochs, self.default_epochs, self.args.quick)

    def train_seeds(self, config: dict[str, Any], run_name: Callable[[int], str],
                    build: Callable[[SeedRun], Trainer], score: Callable[[Any, FitResult], Outcome],
                    splits: Mapping[str, Sequence], data: dict[str, Any] | None = None) -> list[Path]:
        """Train, test and write one run per seed of ``--seeds`` on ``splits``' train and dev
        (:func:`~lab.seeds.train_seeds`); ``data`` is the data's identity, stored with the
        checkpoints. The paths of the results files."""
        return train_seeds(self.name, self.args, self.argv, config, run_name=run_name, build=build, score=score,
                           train=splits["train"], dev=splits["dev"],
                           checkpoint_config=None if data is None else {"data": data}, device=self.device,
                           thread_budget=self.thread_budget)
