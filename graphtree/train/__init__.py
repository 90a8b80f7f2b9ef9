"""Training shared by the experiments: optimizers as the papers define them, metrics, checkpoints, the trainer.

* :mod:`~graphtree.train.optim` — AdaGrad/Adam with a separate embedding
  optimizer and per-minibatch L2, with presets for Tai, Zhu, Le & Zuidema
  and Teng & Zhang.
* :mod:`~graphtree.train.metrics` — root and all-phrase accuracy, and their
  breakdowns by sentence length, node height and span length.
* :mod:`~graphtree.train.checkpoint` — atomic saves and RNG state capture.
* :mod:`~graphtree.train.trainer` — :class:`Trainer`: epochs, early model
  selection on dev, resumable checkpoints, per-epoch CSV, progress bar.
* :mod:`~graphtree.train.distributed` — data-parallel training under
  ``torchrun`` (``DistributedDataParallel``; the trainer finds the process group).
* :mod:`~graphtree.train.transforms` — label restriction (root / root+leaf
  supervision) and left/right-recursive trees over a sentence's words.
* :mod:`~graphtree.train.pairs` — :class:`~graphtree.train.pairs.PairTrainer` for sentence-pair
  regression (SICK relatedness) and its correlations.

The experiment scripts' own parts (command-line conventions, run files and their provenance, reports, training on
files of one's own) are the lab, :mod:`graphtree.experiments`, which this package never imports.
"""

from . import distributed
from .checkpoint import atomic_save, atomic_write_text, get_rng_state, seed_everything, set_rng_state
from .metrics import Tally, evaluate
from .models import WordInputModel
from .optim import PRESETS, CapturableAdagrad, OptimizerSpec, PaperOptimizer, make_optimizer
from .trainer import FitResult, Trainer
from .transforms import SUPERVISION, recursive_tree, restrict_supervision

__all__ = [
    "PRESETS",
    "SUPERVISION",
    "CapturableAdagrad",
    "FitResult",
    "OptimizerSpec",
    "PaperOptimizer",
    "Tally",
    "Trainer",
    "WordInputModel",
    "atomic_save",
    "atomic_write_text",
    "distributed",
    "evaluate",
    "get_rng_state",
    "make_optimizer",
    "recursive_tree",
    "restrict_supervision",
    "seed_everything",
    "set_rng_state",
]
