"""``experiments/sst.py``'s command line over the script's settings tables: its flags and their checks, the
settings a run starts from, the run's settings record and its name.

The tables themselves (the papers' settings per model, which paper's settings
``--settings-of`` takes, the baselines) stay in the script; :class:`SSTOptions`
is made from them.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from graphtree.train.presets import OptimizerSpec

from .encoder_runs import (
    ENCODER_DEFAULTS,
    add_encoder_arguments,
    check_encoder_flags,
    encoder_name_parts,
    encoder_optimizer,
    encoder_settings,
)
from .runs import (
    ArgumentParser,
    add_run_arguments,
    at_least_one,
    check_embeddings,
    check_training_flags,
    epochs_of,
)

__all__ = ["PREDICT_USAGE", "SSTOptions"]


PREDICT_USAGE = 'python experiments/sst.py predict CHECKPOINT "a sentence" [--png PICTURE.png]'


@dataclass(frozen=True)
class SSTOptions:
    """SST's flags and run settings, for the tables of ``experiments/sst.py``: ``models`` (each model's paper,
    ``dim``, ``hidden``, ``dropout`` and ``epochs``), ``settings_model`` (``--settings-of PAPER``: whose settings
    that paper's runs take), ``baselines`` (the n-gram models) and ``presets`` (each paper's optimizer, and
    ``teng_code``'s; :data:`graphtree.train.PRESETS`)."""

    models: Mapping[str, dict[str, Any]]
    settings_model: Mapping[str, str]
    baselines: tuple[str, ...]
    presets: Mapping[str, OptimizerSpec]

    def parser(self, repo: Path) -> ArgumentParser:
        """The parser of ``experiments/sst.py`` (without the cross-flag checks of :meth:`parse`)."""
        p = ArgumentParser(
            description="Train a tree LSTM on SST (see the module docstring).",
            epilog=f"To classify a sentence with a trained model: {PREDICT_USAGE} (a checkpoint of a finished or "
                   "running run, e.g. runs/checkpoints/sst/<run>.pt; --help after predict for its options)")
        p.add_argument("--model", choices=sorted(self.models) + sorted(self.baselines), default="nary",
                       help="a tree LSTM, or an n-gram baseline (nb, svm; Zhu Table 1, after Socher et al. 2013)")
        p.add_argument("--embeddings", default="random", help="random, glove50, or the path of a GloVe text file")
        task = p.add_mutually_exclusive_group()
        task.add_argument("--fine-grained", dest="fine_grained", action="store_true", default=True,
                          help="five classes, very negative to very positive (the default)")
        task.add_argument("--binary", dest="fine_grained", action="store_false",
                          help="two classes, negative and positive: sentences with a neutral root are dropped, "
                               "neutral phrases unlabelled")
        p.add_argument("--supervision", choices=["all", "root", "root+leaf"], default="all",
                       help="the labels training reads: every phrase's (default), the sentence's only, or the "
                            "sentence's and the words' (Zhu et al.); dev and test keep every label")
        p.add_argument("--structure", choices=["gold", "left", "right"], default="gold",
                       help="the trees: the treebank's parses (default), or left- or right-branching trees over "
                            "the words (Zhu et al.'s comparison)")
        p.add_argument("--head", choices=["gated", "left", "right", "average"], default="gated",
                       help="head lexicalization (contree_lex, topdown, bicontree)")
        p.add_argument("--activation", choices=["tanh", "softsign", "sigmoid"], default="tanh", help="lstmrnn only")
        add_run_arguments(p, repo, "the paper's, see MODELS", quick_sample="1000 / 300 / 500 sentences")
        p.add_argument("--optimizer", choices=["paper", "teng_code"], default="paper",
                       help="paper: the paper's update (graphtree.train.PRESETS); teng_code: that of Teng & Zhang's "
                            "released code (Adam after every sentence, lazy Adam on the embeddings, decay 1e-6), "
                            "Teng & Zhang's models only; listed apart in sst.md")
        p.add_argument("--batch-size", type=at_least_one, default=None,
                       help="default: the optimizer's (graphtree.train.PRESETS)")
        p.add_argument("--dropout", type=float, default=None,
                       help="dropout probability, default: the paper's (MODELS); another value is not a "
                            "reproduction and is listed apart in sst.md")
        p.add_argument("--lr", type=float, default=None,
                       help="learning rate of the parameters and the embeddings, default: the paper's "
                            "(graphtree.train.PRESETS); another value is listed apart in sst.md")
        p.add_argument("--l2", type=float, default=None,
                       help="per-minibatch L2 strength on the non-embedding parameters, default: the paper's "
                            "(graphtree.train.PRESETS); another value is listed apart in sst.md")
        p.add_argument("--settings-of", choices=sorted(self.settings_model), default=None,
                       help="train with another paper's settings (its own model's vector and memory sizes, "
                            "dropout, epochs and optimizer; SETTINGS_MODEL); not a reproduction, listed apart in "
                            "sst.md")
        p.add_argument("--share-input-weights", action="store_true",
                       help="topdown, bicontree: the top-down cell's two positions share their input maps and "
                            "biases (Table 4's parameter count and the released code; eq 14 gives each its own); "
                            "listed apart in sst.md")
        add_encoder_arguments(p, alone="encoder")
        p.add_argument("--random-init", choices=["uniform", "normal"], default="uniform",
                       help="random vectors: uniform U(-0.05, 0.05) (default, as Tai et al.'s code initializes "
                            "unknown words) or normal N(0, 1) (Torch7's nn.LookupTable default); not a reproduction "
                            "setting, listed apart in sst.md")
        return p

    def parse(self, argv: list[str], repo: Path) -> argparse.Namespace:
        """The flags of ``argv``; a one-line error for flags that do not go together."""
        p = self.parser(repo)
        args = p.parse_args(argv)
        if args.model not in self.baselines:
            check_embeddings(args.embeddings, ("random", "glove50"))
        check_encoder_flags(p, args, alone="encoder", without=self.baselines + ("bilstm", "lstmrnn"))
        if args.encoder is not None:
            if args.embeddings != "random":
                p.error("--encoder gives the leaves' inputs: leave out --embeddings")
            if args.optimizer != "paper" or args.settings_of is not None or args.l2 is not None:
                p.error("--encoder trains with its own recipe (AdamW): --optimizer, --settings-of and --l2 do not "
                        "apply")
        if args.settings_of is not None and args.model in self.baselines + ("bilstm",):
            p.error(f"--settings-of applies to the tree models, not {args.model}")
        if args.settings_of is not None and (self.models[args.model]["paper"] == "teng") != (
                args.settings_of == "teng"):
            p.error("--settings-of: Teng & Zhang's models and the others train differently (Adam, an output MLP); "
                    "only settings within one of the two groups can be swapped")
        if args.optimizer == "teng_code" and (args.model not in self.models
                                              or self.models[args.model]["paper"] != "teng"
                                              or args.settings_of is not None):
            p.error("--optimizer teng_code applies to Teng & Zhang's models under their own settings")
        if args.share_input_weights and args.model not in ("topdown", "bicontree"):
            p.error("--share-input-weights applies to the models with a top-down cell (topdown, bicontree)")
        if args.random_init != "uniform" and args.embeddings != "random":
            p.error("--random-init applies to --embeddings random only")
        check_training_flags(p, args)
        return args

    def paper(self, cfg: Mapping[str, Any]) -> dict[str, Any]:
        """The settings a run starts from: its model's paper's, or those of ``--settings-of``."""
        return self.models[self.settings_model.get(cfg.get("settings_of"), cfg["model"])]

    def config(self, args: argparse.Namespace, vectors: Any, encoder_width: int | None = None) -> dict[str, Any]:
        """A run's settings (what its results file records) from the flags and the word vectors (``None``:
        random ones), or, with ``--encoder``, the width of the encoder's states."""
        if args.encoder is not None:
            return self._encoder_config(args, encoder_width)
        paper = self.paper(vars(args))
        preset = self.presets[paper["paper"] if args.optimizer == "paper" else args.optimizer]
        cfg = dict(model=args.model, embeddings=args.embeddings, fine_grained=args.fine_grained,
                   supervision=args.supervision, structure=args.structure,
                   head=args.head if paper["paper"] == "teng" and args.model != "contree" else None,
                   activation=args.activation if args.model == "lstmrnn" else None,
                   paper=paper["paper"], dim=vectors.dim if vectors is not None else paper["dim"],
                   hidden=paper["hidden"] if args.model != "lstmrnn" or vectors is None else vectors.dim,
                   dropout=paper["dropout"] if args.dropout is None else args.dropout,
                   epochs=epochs_of(args, paper["epochs"]),
                   optimizer=replace(preset, batch_size=args.batch_size or preset.batch_size,
                                     l2=preset.l2 if args.l2 is None else args.l2, lr=args.lr or preset.lr,
                                     embedding_lr=args.lr or preset.embedding_lr).as_dict(),
                   quick=args.quick)
        # The keys below are recorded only when set: the runs made before these options keep their record.
        if args.optimizer != "paper":
            cfg["optimizer_preset"] = args.optimizer
        if args.random_init != "uniform":
            cfg["random_init"] = args.random_init
        if args.share_input_weights:
            cfg["share_input_weights"] = True
        if args.settings_of is not None and paper["paper"] != self.models[args.model]["paper"]:
            cfg["settings_of"] = args.settings_of
        return cfg

    def _encoder_config(self, args: argparse.Namespace, width: int | None) -> dict[str, Any]:
        """The settings of a run over a pretrained encoder (:data:`ENCODER_DEFAULTS` where a flag is not given)."""
        if width is None:
            raise ValueError("a run over an encoder needs the encoder's width")
        d = ENCODER_DEFAULTS
        paper = self.models[args.model]
        spec = encoder_optimizer(args)
        cfg = dict(model=args.model, embeddings="encoder", fine_grained=args.fine_grained,
                   supervision=args.supervision, structure=args.structure,
                   head=args.head if paper["paper"] == "teng" and args.model != "contree" else None,
                   activation=None, paper=paper["paper"], dim=width,
                   hidden=paper["hidden"] if args.model != "encoder" else width,
                   dropout=d["dropout"] if args.dropout is None else args.dropout,
                   epochs=epochs_of(args, d["epochs"]), optimizer=spec.as_dict(), quick=args.quick,
                   **encoder_settings(args))
        if args.share_input_weights:
            cfg["share_input_weights"] = True
        return cfg

    def run_name(self, cfg: Mapping[str, Any], seed: int) -> str:
        """File name of a run: model, options that differ from the defaults, seed."""
        if cfg.get("encoder") is not None:
            return self._encoder_run_name(cfg, seed)
        parts = [cfg["model"]]
        if cfg["model"] == "lstmrnn":
            parts.append(cfg["activation"])
        if self.models[cfg["model"]]["paper"] == "teng" and cfg["model"] != "contree":
            parts.append(f"head-{cfg['head']}")
        emb = cfg["embeddings"]
        parts += [emb if emb in ("random", "glove50") else Path(emb).stem,
                  "fine" if cfg["fine_grained"] else "binary"]
        if cfg["supervision"] != "all":
            parts.append(f"sup-{cfg['supervision'].replace('+', '-')}")
        if cfg["structure"] != "gold":
            parts.append(f"struct-{cfg['structure']}")
        if cfg["epochs"] != self.paper(cfg)["epochs"] and not cfg["quick"]:
            parts.append(f"ep{cfg['epochs']}")
        preset = self.presets[cfg.get("optimizer_preset", cfg["paper"])]
        if cfg.get("optimizer_preset"):
            parts.append(f"opt-{cfg['optimizer_preset'].replace('_', '-')}")
        if cfg["optimizer"]["batch_size"] != preset.batch_size:
            parts.append(f"bs{cfg['optimizer']['batch_size']}")
        if cfg.get("settings_of"):
            parts.append(f"settings-{cfg['settings_of']}")
        if cfg["dropout"] != self.paper(cfg)["dropout"]:
            parts.append(f"do{cfg['dropout']:g}")
        if cfg["optimizer"]["l2"] != preset.l2:
            parts.append(f"l2-{cfg['optimizer']['l2']:g}")
        if cfg["optimizer"]["lr"] != preset.lr:
            parts.append(f"lr{cfg['optimizer']['lr']:g}")
        if cfg.get("random_init", "uniform") != "uniform":
            parts.append(f"init-{cfg['random_init']}")
        if cfg.get("share_input_weights"):
            parts.append("shared-inputs")
        return "_".join(parts) + f"_s{seed}"

    def _encoder_run_name(self, cfg: Mapping[str, Any], seed: int) -> str:
        """File name of a run over an encoder: model, encoder, task, options that differ from
        :data:`ENCODER_DEFAULTS`, seed (``nary_mpnet_fine_s1``)."""
        parts = [cfg["model"]]
        if self.models[cfg["model"]]["paper"] == "teng" and cfg["model"] != "contree":
            parts.append(f"head-{cfg['head']}")
        encoder, settings = encoder_name_parts(cfg)
        parts += [encoder, "fine" if cfg["fine_grained"] else "binary"]
        if cfg["supervision"] != "all":
            parts.append(f"sup-{cfg['supervision'].replace('+', '-')}")
        if cfg["structure"] != "gold":
            parts.append(f"struct-{cfg['structure']}")
        parts += settings
        if cfg.get("share_input_weights"):
            parts.append("shared-inputs")
        return "_".join(parts) + f"_s{seed}"
