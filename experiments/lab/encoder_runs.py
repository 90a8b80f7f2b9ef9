"""Runs over a pretrained encoder (``--encoder``), as every experiment script sets them up: the flags, the
fine-tuning recipe, what a run records and names, the contextual leaves, and the frozen layers run once.

The recipe (:data:`ENCODER_DEFAULTS`) is BERT's fine-tuning one (Devlin et al.
2019, §A.3): AdamW, a small learning rate for the encoder with a linear warm-up
over the first 10% of the updates and a linear decay to 0, weight decay 0.01,
minibatches of 16, 3 epochs, dropout 0.1; the tree cell and the classifier,
which start from scratch, take a larger rate (``lr``). A checkpoint is written
every 10 minutes inside an epoch, so that a run on the CPU survives being stopped.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from graphtree.train.presets import OptimizerSpec

__all__ = ["ENCODER_DEFAULTS", "add_encoder_arguments", "check_encoder_flags", "checkpoint_seconds",
           "encode_once", "encoder_leaves", "encoder_name_parts", "encoder_optimizer", "encoder_settings"]

ENCODER_DEFAULTS = dict(lr=1e-3, encoder_lr=3e-5, batch_size=16, dropout=0.1, epochs=3, warmup=0.1,
                        weight_decay=0.01, checkpoint_minutes=10.0)
"""The fine-tuning recipe of a run over an encoder (see the module docstring)."""


def add_encoder_arguments(p: argparse.ArgumentParser, alone: str | None = None) -> None:
    """The ``--encoder`` flags; ``alone`` names the script's model that is the encoder without a tree."""
    d = ENCODER_DEFAULTS
    enc = p.add_argument_group("a pretrained encoder under the tree (contextual leaves)")
    enc.add_argument("--encoder", default=None, metavar="NAME|FOLDER",
                     help="minilm or mpnet (their registry packages, see README) or a folder of a Hugging Face "
                          "encoder with a fast tokenizer: each word's state over its sentence is the input of its "
                          "node, and the encoder is fine-tuned with the model (AdamW, warm-up, linear decay)"
                          + (f"; --model {alone} is the encoder alone" if alone else ""))
    enc.add_argument("--encoder-lr", type=float, default=None,
                     help=f"the encoder's learning rate (default {d['encoder_lr']:g}); --lr is then the tree's and "
                          f"classifier's (default {d['lr']:g})")
    enc.add_argument("--warmup", type=float, default=None,
                     help=f"fraction of the updates with a rising learning rate (default {d['warmup']:g}), then a "
                          "linear decay to 0")
    enc.add_argument("--weight-decay", type=float, default=None,
                     help=f"AdamW's weight decay of the matrices (default {d['weight_decay']:g})")
    enc.add_argument("--trainable-layers", type=int, default=None, metavar="K",
                     help="fine-tune only the encoder's top K layers: the frozen ones below run once per sentence "
                          "and their output is kept (0: a frozen encoder); default: all, with its embeddings")
    enc.add_argument("--pool", choices=["mean", "first"], default="mean",
                     help="a word's vector: the mean of its sub-words' states (default) or the first one's")
    enc.add_argument("--checkpoint-every", type=float, default=None, metavar="MINUTES",
                     help=f"also checkpoint inside an epoch, every MINUTES (default {d['checkpoint_minutes']:g} "
                          "with --encoder, else after each epoch)")


def check_encoder_flags(p: argparse.ArgumentParser, args: argparse.Namespace, alone: str | None = None,
                        without: Sequence[str] = ()) -> None:
    """One-line errors for encoder flags without ``--encoder`` (or ``--model {alone}`` without it), a model of
    ``without`` over an encoder, and settings out of range."""
    given = [flag for flag, value in (("--encoder-lr", args.encoder_lr), ("--warmup", args.warmup),
                                      ("--weight-decay", args.weight_decay),
                                      ("--trainable-layers", args.trainable_layers))
             if value is not None] + (["--pool"] if args.pool != "mean" else [])
    if args.encoder is None:
        if given or (alone is not None and args.model == alone):
            p.error(f"{', '.join(given) or f'--model {alone}'} needs --encoder")
        return
    if args.model in without:
        p.error(f"--encoder applies to the tree models{f' and --model {alone}' if alone else ''}, not {args.model}")
    if args.warmup is not None and not 0 <= args.warmup < 1:
        p.error(f"--warmup must be in [0, 1), got {args.warmup}")
    if args.trainable_layers is not None and args.trainable_layers < 0:
        p.error(f"--trainable-layers must be 0 or more, got {args.trainable_layers}")


def encoder_optimizer(args: argparse.Namespace) -> OptimizerSpec:
    """The recipe's update under the flags (:data:`ENCODER_DEFAULTS` where a flag is not given)."""
    d = ENCODER_DEFAULTS
    return OptimizerSpec("adamw", args.lr or d["lr"], "adamw", d["encoder_lr"] if args.encoder_lr is None
                         else args.encoder_lr, 0.0, args.batch_size or d["batch_size"],
                         weight_decay=d["weight_decay"] if args.weight_decay is None else args.weight_decay,
                         warmup=d["warmup"] if args.warmup is None else args.warmup, schedule="linear")


def encoder_settings(args: argparse.Namespace) -> dict[str, Any]:
    """What a run's settings record of its encoder: the name or folder given, and the top layers and the pool
    where they are not the defaults."""
    cfg: dict[str, Any] = {"encoder": args.encoder}
    if args.trainable_layers is not None:
        cfg["trainable_layers"] = args.trainable_layers
    if args.pool != "mean":
        cfg["pool"] = args.pool
    return cfg


def encoder_name_parts(cfg: Mapping[str, Any], epochs_default: int = ENCODER_DEFAULTS["epochs"],
                       dropout_default: float = ENCODER_DEFAULTS["dropout"]) -> tuple[str, list[str]]:
    """A run name's encoder (``mpnet``, a folder's name) and its parts for the settings that differ from the
    recipe (``ep5``, ``elr5e-05``, ``top4``, ...)."""
    d, opt = ENCODER_DEFAULTS, cfg["optimizer"]
    parts = []
    if cfg.get("epochs", epochs_default) != epochs_default and not cfg.get("quick"):
        parts.append(f"ep{cfg['epochs']:g}")
    if cfg.get("dropout", dropout_default) != dropout_default:
        parts.append(f"do{cfg['dropout']:g}")
    for key, default, tag in (("batch_size", d["batch_size"], "bs"), ("lr", d["lr"], "lr"),
                              ("embedding_lr", d["encoder_lr"], "elr"), ("warmup", d["warmup"], "warm"),
                              ("weight_decay", d["weight_decay"], "wd")):
        if opt.get(key, 0.0) != default:
            parts.append(f"{tag}{opt.get(key, 0.0):g}")
    if cfg.get("trainable_layers") is not None:
        parts.append(f"top{cfg['trainable_layers']}")
    if cfg.get("pool"):
        parts.append(f"pool-{cfg['pool']}")
    return Path(cfg["encoder"]).name, parts


def checkpoint_seconds(args: argparse.Namespace) -> float | None:
    """``--checkpoint-every`` in seconds (every 10 minutes by default over an encoder; else ``None``)."""
    minutes = args.checkpoint_every or (ENCODER_DEFAULTS["checkpoint_minutes"] if args.encoder else None)
    return minutes * 60 if minutes else None


def encoder_leaves(cfg: Mapping[str, Any]) -> Any:
    """The contextual leaves of a run: the encoder of ``cfg["encoder"]``, found offline
    (:func:`graphtree.encoders.load_encoder`), pooled and frozen as ``cfg`` says; with ``trainable_layers``
    below the encoder's depth the frozen layers' output is kept per sentence (``cache_below``)."""
    from graphtree.encoders import load_encoder
    from graphtree.models import EncoderLeaves
    from graphtree.models.contextual import encoder_layers

    encoder, tokenizer, _ = load_encoder(cfg["encoder"])
    top = cfg.get("trainable_layers")
    return EncoderLeaves(encoder, tokenizer, pool=cfg.get("pool", "mean"), trainable_layers=top,
                         cache_below=bool(top) and top < len(encoder_layers(encoder)))


def encode_once(leaves: Any, sentences: Iterable[Sequence[str]], path: Path) -> None:
    """Run an encoder's frozen part once per sentence of the corpus before the first epoch, and keep its
    states in ``path`` for the other seeds and a resumed run (nothing to do where no part is frozen)."""
    import torch

    from graphtree.train.checkpoint import atomic_save

    from .runs import note

    if not getattr(leaves, "caches", False):
        return
    if path.is_file():
        leaves.load_cache_state(torch.load(path, weights_only=False))
    path.parent.mkdir(parents=True, exist_ok=True)
    computed = leaves.precompute(sentences, keep=lambda: atomic_save(leaves.cache_state(), path))
    if computed:
        note(f"encoded {computed} sentences through the frozen layers once; kept in {path}")
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_save(leaves.cache_state(), path)
