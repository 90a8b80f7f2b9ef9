"""Training shared by the experiments: optimizers as the papers define them, metrics, checkpoints, the trainer.

* :mod:`~graphtree.train.optim` — AdaGrad/Adam with a separate embedding
  optimizer and per-minibatch L2, with presets for Tai, Zhu, Le & Zuidema
  and Teng & Zhang.
* :mod:`~graphtree.train.metrics` — root and all-phrase accuracy, and their
  breakdowns by sentence length, node height and span length.
* :mod:`~graphtree.train.checkpoint` — atomic saves and RNG state capture.
* :mod:`~graphtree.train.trainer` — :class:`Trainer`: the epoch loop (over a
  plain or a replayed step), early model selection on dev, resumable
  checkpoints, per-epoch CSV, progress bar.
* :mod:`~graphtree.train.ordering` — each epoch's order of the training set, a
  function of seed and epoch: shuffled, or with trees of similar height together.
* :mod:`~graphtree.train.batches` — where the minibatches come from: graphs in
  memory (cut from their concatenation, or graph by graph) or a store on disk.
* :mod:`~graphtree.train.replaying` — the trainer's replayed path: padded steps
  and evaluation passes, CUDA graphs on a GPU (``replay="auto"``), and what falls back.
* :mod:`~graphtree.train.distributed` — data-parallel training under
  ``torchrun`` (``DistributedDataParallel``; the trainer finds the process group).
* :mod:`~graphtree.train.transforms` — label restriction (root / root+leaf
  supervision) and left/right-recursive trees over a sentence's words.
* :mod:`~graphtree.train.pairs` — :class:`~graphtree.train.pairs.PairTrainer` for sentence-pair
  regression (SICK relatedness) and its correlations.

The experiment scripts' own parts (command-line conventions, run files and their provenance, reports, training on
files of one's own) are the lab, ``experiments/lab/``: not installed with the package, which never imports it.
"""

import importlib
from typing import TYPE_CHECKING, Any

# Imported when first used (PEP 562): the experiment scripts read their flags from train.runs and
# train.presets, which need no torch, before they import the trainer.
_LAZY = {
    "distributed": ".distributed", "atomic_save": ".checkpoint", "atomic_write_text": ".checkpoint",
    "get_rng_state": ".checkpoint", "seed_everything": ".checkpoint", "set_rng_state": ".checkpoint",
    "Tally": ".metrics", "evaluate": ".metrics", "WordInputModel": ".models", "PRESETS": ".presets",
    "OptimizerSpec": ".presets", "CapturableAdagrad": ".optim", "PaperOptimizer": ".optim",
    "make_optimizer": ".optim", "FitResult": ".trainer", "Trainer": ".trainer", "SUPERVISION": ".transforms",
    "recursive_tree": ".transforms", "restrict_supervision": ".transforms",
}

if TYPE_CHECKING:
    from . import distributed
    from .checkpoint import atomic_save, atomic_write_text, get_rng_state, seed_everything, set_rng_state
    from .metrics import Tally, evaluate
    from .models import WordInputModel
    from .optim import CapturableAdagrad, PaperOptimizer, make_optimizer
    from .presets import PRESETS, OptimizerSpec
    from .trainer import FitResult, Trainer
    from .transforms import SUPERVISION, recursive_tree, restrict_supervision


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'graphtree.train' has no attribute {name!r}")
    module = importlib.import_module(_LAZY[name], __name__)
    value = module if _LAZY[name] == f".{name}" else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


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
