"""Sentiment classification on the Stanford Sentiment Treebank with graphtree's tree LSTMs.

One run per seed: train with the paper's optimizer, keep the epoch with the best
dev root accuracy, test it, and write ``runs/sst/<run>.json`` (config, per-epoch
metrics, dev-selected test numbers, wall time, provenance) with the per-epoch
``<run>.csv`` beside it; ``--out DIR`` writes under ``DIR`` instead. Checkpoints
go to ``runs/checkpoints/sst/<run>.pt`` after every epoch; running the same
command again resumes a killed run, and skips a finished one. The committed
reference results are in ``experiments/results/sst/`` (``--out experiments/results``
adds to them); ``python experiments/report_sst.py --results runs`` reports on yours.

    python experiments/sst.py --model nary --embeddings glove50 --fine-grained --seeds 1 2 3
    python experiments/sst.py --model slstm --supervision root --structure left --seeds 1 2 3
    python experiments/sst.py --model bicontree --embeddings glove50 --binary --head average
    python experiments/sst.py --model nary --settings-of zhu      # Tai's cell with Zhu et al.'s settings
    python experiments/sst.py --model bicontree --embeddings glove50 --optimizer teng_code  # per-sentence Adam
    python experiments/sst.py --model bicontree --embeddings glove50 --share-input-weights  # Table 4's sharing
    python experiments/sst.py --model bicontree --embeddings glove50 --binary --lr 0.002 --batch-size 10  # tuning
    python experiments/sst.py --model nary --quick            # a few minutes, results under runs/quick/
    python experiments/sst.py --model bicontree --embeddings glove50 --device cuda   # on a GPU
    python experiments/sst.py predict runs/checkpoints/sst/<run>.pt "A gorgeous, witty film."

The data is read from ``$GRAPHTREE_MIRROR`` (else ``../shared/data`` next to
the repository, else the official URL) into ``datasets/``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from graphtree.datasets import SST
from graphtree.embeddings import embedding_matrix, load_glove
from graphtree.experiments.baselines import sst_phrase_baseline
from graphtree.experiments.seeds import Outcome, SeedRun, count_parameters, train_seeds
from graphtree.experiments.sst_predict import PREDICT_USAGE, predict
from graphtree.models import BiTreeLSTM, NodeEmbedding, TreeClassifier
from graphtree.models.spans import SpanLSTMClassifier
from graphtree.nn import LSTMRNN, SLSTM, ChildSumTreeLSTM, NaryTreeLSTM
from graphtree.train import (
    PRESETS,
    OptimizerSpec,
    PaperOptimizer,
    Trainer,
    WordInputModel,
    distributed,
    recursive_tree,
    restrict_supervision,
)
from graphtree.train.runs import (
    ArgumentParser,
    add_run_arguments,
    at_least_one,
    check_embeddings,
    default_mirror,
    epochs_of,
    fail,
    main_guard,
    note,
    quick_sample,
    start_process,
)
from graphtree.vocab import Vocab

if TYPE_CHECKING:  # PyG itself is imported by graphtree, which pauses the garbage collector for it
    from torch_geometric.data import Data

# ----------------------------------------------------------------------------------------------------------------
# The papers' settings. dim: word vector size with random vectors (pretrained ones bring their own);
# hidden: memory size; dropout: where the paper uses it (Tai: on h before the softmax; Teng: on the word
# vectors); epochs: Tai's code trains 10, Le & Zuidema 20, Teng & Zhang 30; Zhu give none, we use 20.
MODELS = {
    "nary":        dict(paper="tai", dim=300, hidden=150, dropout=0.5, epochs=10),   # Constituency Tree-LSTM
    "childsum":    dict(paper="tai", dim=300, hidden=168, dropout=0.5, epochs=10),
    "slstm":       dict(paper="zhu", dim=100, hidden=100, dropout=0.0, epochs=20),
    "lstmrnn":     dict(paper="le_zuidema", dim=50, hidden=50, dropout=0.0, epochs=20),
    "contree":     dict(paper="teng", dim=300, hidden=150, dropout=0.5, epochs=30),
    "contree_lex": dict(paper="teng", dim=300, hidden=150, dropout=0.5, epochs=30),
    "topdown":     dict(paper="teng", dim=300, hidden=150, dropout=0.5, epochs=30),
    "bicontree":   dict(paper="teng", dim=300, hidden=150, dropout=0.5, epochs=30),
    "bilstm":      dict(paper="tai", dim=300, hidden=168, dropout=0.5, epochs=10),   # sequential, on every span
}
# --settings-of PAPER trains a model with another paper's settings (those of that paper's own model below: vector
# and memory sizes, dropout, epochs, optimizer): the same cell under two papers' setups, not a reproduction.
SETTINGS_MODEL = {"tai": "nary", "zhu": "slstm", "le_zuidema": "lstmrnn", "teng": "contree"}
TENG_VARIANTS = {"contree": "contree", "contree_lex": "contree_lex", "topdown": "top_down", "bicontree": "bicontree"}
BASELINES = ("nb", "svm")    # bag-of-words naive Bayes and linear SVM over every labelled training phrase
BASELINE_GRID = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0)   # NB smoothing alpha / SVM C, chosen on dev root accuracy
MLP_CHANNELS = 128            # Teng & Zhang's output hidden size for sentiment
RANDOM_INIT = 0.05            # random vectors ~ U(-0.05, 0.05), as Tai et al.'s code initializes unknown words
# --random-init normal: N(0, 1), the default initialization of Torch7's nn.LookupTable (the papers give none)
QUICK = dict(train=1000, dev=300, test=500)   # --quick: a fixed sample of each split
REPO = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = ArgumentParser(
        description="Train a tree LSTM on SST (see the module docstring).",
        epilog=f"To classify a sentence with a trained model: {PREDICT_USAGE} (a checkpoint of a finished or "
               "running run, e.g. runs/checkpoints/sst/<run>.pt; --help after predict for its options)")
    p.add_argument("--model", choices=sorted(MODELS) + sorted(BASELINES), default="nary",
                   help="a tree LSTM, or an n-gram baseline (nb, svm; Zhu Table 1, after Socher et al. 2013)")
    p.add_argument("--embeddings", default="random", help="random, glove50, or the path of a GloVe text file")
    task = p.add_mutually_exclusive_group()
    task.add_argument("--fine-grained", dest="fine_grained", action="store_true", default=True)
    task.add_argument("--binary", dest="fine_grained", action="store_false")
    p.add_argument("--supervision", choices=["all", "root", "root+leaf"], default="all")
    p.add_argument("--structure", choices=["gold", "left", "right"], default="gold")
    p.add_argument("--head", choices=["gated", "left", "right", "average"], default="gated",
                   help="head lexicalization (contree_lex, topdown, bicontree)")
    p.add_argument("--activation", choices=["tanh", "softsign", "sigmoid"], default="tanh", help="lstmrnn only")
    add_run_arguments(p, REPO, "the paper's, see MODELS", quick_sample="1000 / 300 / 500 sentences")
    p.add_argument("--optimizer", choices=["paper", "teng_code"], default="paper",
                   help="paper: the paper's update (graphtree.train.PRESETS); teng_code: that of Teng & Zhang's "
                        "released code (Adam after every sentence, lazy Adam on the embeddings, decay 1e-6), "
                        "Teng & Zhang's models only; listed apart in sst.md")
    p.add_argument("--batch-size", type=at_least_one, default=None,
                   help="default: the optimizer's (graphtree.train.PRESETS)")
    p.add_argument("--dropout", type=float, default=None,
                   help="dropout probability, default: the paper's (MODELS); another value is not a reproduction "
                        "and is listed apart in sst.md")
    p.add_argument("--lr", type=float, default=None,
                   help="learning rate of the parameters and the embeddings, default: the paper's "
                        "(graphtree.train.PRESETS); another value is listed apart in sst.md")
    p.add_argument("--l2", type=float, default=None,
                   help="per-minibatch L2 strength on the non-embedding parameters, default: the paper's "
                        "(graphtree.train.PRESETS); another value is listed apart in sst.md")
    p.add_argument("--settings-of", choices=sorted(SETTINGS_MODEL), default=None,
                   help="train with another paper's settings (its own model's vector and memory sizes, dropout, "
                        "epochs and optimizer; SETTINGS_MODEL); not a reproduction, listed apart in sst.md")
    p.add_argument("--share-input-weights", action="store_true",
                   help="topdown, bicontree: the top-down cell's two positions share their input maps and biases "
                        "(Table 4's parameter count and the released code; eq 14 gives each its own); listed "
                        "apart in sst.md")
    p.add_argument("--random-init", choices=["uniform", "normal"], default="uniform",
                   help="random vectors: uniform U(-0.05, 0.05) (default, as Tai et al.'s code initializes unknown "
                        "words) or normal N(0, 1) (Torch7's nn.LookupTable default); not a reproduction setting, "
                        "listed apart in sst.md")
    args = p.parse_args(argv)
    if args.model not in BASELINES:
        check_embeddings(args.embeddings, ("random", "glove50"))
    if args.settings_of is not None and args.model in BASELINES + ("bilstm",):
        p.error(f"--settings-of applies to the tree models, not {args.model}")
    if args.settings_of is not None and (MODELS[args.model]["paper"] == "teng") != (args.settings_of == "teng"):
        p.error("--settings-of: Teng & Zhang's models and the others train differently (Adam, an output MLP); "
                "only settings within one of the two groups can be swapped")
    if args.optimizer == "teng_code" and (args.model not in MODELS or MODELS[args.model]["paper"] != "teng"
                                          or args.settings_of is not None):
        p.error("--optimizer teng_code applies to Teng & Zhang's models under their own settings")
    if args.share_input_weights and args.model not in ("topdown", "bicontree"):
        p.error("--share-input-weights applies to the models with a top-down cell (topdown, bicontree)")
    if args.random_init != "uniform" and args.embeddings != "random":
        p.error("--random-init applies to --embeddings random only")
    if args.l2 is not None and args.l2 < 0:
        p.error(f"--l2 must be non-negative, got {args.l2}")
    if args.lr is not None and args.lr <= 0:
        p.error(f"--lr must be positive, got {args.lr}")
    if args.dropout is not None and not 0.0 <= args.dropout < 1.0:
        p.error(f"--dropout must be in [0, 1), got {args.dropout}")
    return args


def run_name(cfg: dict, seed: int) -> str:
    """File name of a run: model, options that differ from the defaults, seed."""
    parts = [cfg["model"]]
    if cfg["model"] == "lstmrnn":
        parts.append(cfg["activation"])
    if MODELS[cfg["model"]]["paper"] == "teng" and cfg["model"] != "contree":
        parts.append(f"head-{cfg['head']}")
    emb = cfg["embeddings"]
    parts += [emb if emb in ("random", "glove50") else Path(emb).stem, "fine" if cfg["fine_grained"] else "binary"]
    if cfg["supervision"] != "all":
        parts.append(f"sup-{cfg['supervision'].replace('+', '-')}")
    if cfg["structure"] != "gold":
        parts.append(f"struct-{cfg['structure']}")
    if cfg["epochs"] != paper_settings(cfg)["epochs"] and not cfg["quick"]:
        parts.append(f"ep{cfg['epochs']}")
    preset = PRESETS[cfg.get("optimizer_preset", cfg["paper"])]
    if cfg.get("optimizer_preset"):
        parts.append(f"opt-{cfg['optimizer_preset'].replace('_', '-')}")
    if cfg["optimizer"]["batch_size"] != preset.batch_size:
        parts.append(f"bs{cfg['optimizer']['batch_size']}")
    if cfg.get("settings_of"):
        parts.append(f"settings-{cfg['settings_of']}")
    if cfg["dropout"] != paper_settings(cfg)["dropout"]:
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


def paper_settings(cfg: dict) -> dict:
    """The settings a run starts from: its model's paper's, or those of ``--settings-of``."""
    return MODELS[SETTINGS_MODEL.get(cfg.get("settings_of"), cfg["model"])]


def load_vectors(embeddings: str):
    """GloVe 6B 50d from its package, or a GloVe text file."""
    return load_glove(None if embeddings == "glove50" else embeddings, verbose=False)


def build_vocab(cfg: dict, root: str, mirror: str | None, vectors) -> Vocab:
    """The vocabulary of a run."""
    # Random vectors: every training word. Pretrained: Teng & Zhang's rule, every word of the corpus that
    # has a vector (as written or lowercased); the rest is <unk>, initialized to the mean vector.
    # A dataset's tokens column (PyG's dataset.tokens): every sentence's words without cutting out the graphs.
    if vectors is None:
        return Vocab.build(SST(root, "train", mirror=mirror, log=False).tokens)
    sentences = [t for split in ("train", "dev", "test") for t in SST(root, split, mirror=mirror, log=False).tokens]
    return Vocab.build(sentences, pretrained=vectors)


def load_split(cfg: dict, split: str, vocab: Vocab, root: str, mirror: str | None) -> Sequence[Data]:
    """One SST split: the dataset itself, or a list of its trees remade with the run's structure and (for
    training) supervision where those are not the corpus's own. (The trainer cuts minibatches straight from a
    dataset's storage.)"""
    data: Sequence[Data] = SST(root, split, fine_grained=cfg["fine_grained"], vocab=vocab, mirror=mirror, log=False)
    if cfg["structure"] != "gold":
        data = [recursive_tree(d, cfg["structure"], vocab) for d in data]
    # dev and test keep every label: Zhu evaluate the same nodes whatever the training
    if split == "train" and cfg["supervision"] != "all":
        data = [restrict_supervision(d, cfg["supervision"]) for d in data]
    return data


def build_model(cfg: dict, vocab_size: int, num_classes: int, pretrained: torch.Tensor | None
                ) -> tuple[torch.nn.Module, NodeEmbedding]:
    """The model of ``cfg`` (``model(batch) -> logits`` on every node) and its word embedding."""
    dim, hidden, dropout = cfg["dim"], cfg["hidden"], cfg["dropout"]
    embedding = NodeEmbedding(vocab_size, dim, pretrained)
    model = cfg["model"]
    if MODELS[model]["paper"] == "teng":
        net = BiTreeLSTM(dim, hidden, num_classes, mlp_channels=MLP_CHANNELS, variant=TENG_VARIANTS[model],
                         head=cfg["head"], dropout=dropout,
                         share_input_weights=cfg.get("share_input_weights", False))
        return WordInputModel(embedding, net), embedding
    if model == "bilstm":  # Tai's footnote 2: the two directions share their weights
        return SpanLSTMClassifier(embedding, hidden, num_classes, bidirectional=True, tied=True,
                                  dropout=dropout), embedding
    if model == "nary":
        cell = NaryTreeLSTM(dim, hidden)
    elif model == "childsum":
        cell = ChildSumTreeLSTM(dim, hidden)
    elif model == "slstm":  # Zhu's leaf: the word vector is h; with vectors of another size, a learned leaf unit
        cell = SLSTM(dim, hidden, leaf="embedding" if dim == hidden else "lstm")
    else:
        if dim != hidden:
            fail(f"lstmrnn: a leaf's output is its word vector, so the memory size is the vector size; these "
                 f"vectors have {dim} dimensions, the model {hidden}")
        cell = LSTMRNN(dim, hidden, activation=cfg["activation"])
    return TreeClassifier(embedding, cell, num_classes, dropout=dropout), embedding


def train(args: argparse.Namespace, argv: list[str]) -> None:
    """Train, select on dev and test one model per seed; write the JSON and CSV of each run."""
    device = start_process(args)
    paper = paper_settings(dict(model=args.model, settings_of=args.settings_of))
    vectors = load_vectors(args.embeddings) if args.embeddings != "random" else None
    preset = PRESETS[paper["paper"] if args.optimizer == "paper" else args.optimizer]
    cfg = dict(model=args.model, embeddings=args.embeddings, fine_grained=args.fine_grained,
               supervision=args.supervision, structure=args.structure,
               head=args.head if paper["paper"] == "teng" and args.model != "contree" else None,
               activation=args.activation if args.model == "lstmrnn" else None,
               paper=paper["paper"], dim=vectors.dim if vectors is not None else paper["dim"],
               hidden=paper["hidden"] if args.model != "lstmrnn" or vectors is None else vectors.dim,
               dropout=paper["dropout"] if args.dropout is None else args.dropout,
               epochs=epochs_of(args, paper["epochs"]),
               optimizer=replace(preset, batch_size=args.batch_size or preset.batch_size,
                                 l2=preset.l2 if args.l2 is None else args.l2,
                                 lr=args.lr or preset.lr, embedding_lr=args.lr or preset.embedding_lr).as_dict(),
               quick=args.quick)
    if args.optimizer != "paper":  # only then: the runs made before this option keep their settings' record
        cfg["optimizer_preset"] = args.optimizer
    if args.random_init != "uniform":  # only then: the runs made before this option keep their settings' record
        cfg["random_init"] = args.random_init
    if args.share_input_weights:  # likewise
        cfg["share_input_weights"] = True
    if args.settings_of is not None and paper["paper"] != MODELS[args.model]["paper"]:
        cfg["settings_of"] = args.settings_of
    mirror = default_mirror(REPO)
    with distributed.main_first():  # the first run processes the corpus into datasets/ for the others
        vocab = build_vocab(cfg, args.data_root, mirror, vectors)
        train_set, dev_set, test_set = (load_split(cfg, s, vocab, args.data_root, mirror)
                                        for s in ("train", "dev", "test"))
    if args.quick:  # a fixed random sample: the treebank files are ordered by sentiment
        train_set, dev_set, test_set = (quick_sample(s, QUICK[k]) for s, k in
                                        ((train_set, "train"), (dev_set, "dev"), (test_set, "test")))
    classes = SST.FINE_CLASSES if args.fine_grained else SST.BINARY_CLASSES
    note(f"SST {'fine-grained' if args.fine_grained else 'binary'}: {len(train_set)} / {len(dev_set)} / "
         f"{len(test_set)} sentences, vocabulary {len(vocab)}")

    # Stored with the checkpoint so that a resumed run is sure to continue on the very same data.
    data_id = dict(train=len(train_set), dev=len(dev_set), test=len(test_set), vocab=vocab.fingerprint,
                   sample="random-0" if args.quick else "all")

    def build(run: SeedRun) -> Trainer:
        if vectors is not None:
            pretrained = embedding_matrix(vocab, vectors, missing="mean")
        else:
            generator = torch.Generator().manual_seed(run.seed)
            if args.random_init == "normal":
                pretrained = torch.randn(len(vocab), cfg["dim"], generator=generator)
            else:
                pretrained = (torch.rand(len(vocab), cfg["dim"], generator=generator) * 2 - 1) * RANDOM_INIT
        model, embedding = build_model(cfg, len(vocab), len(classes), pretrained)
        model.to(device)
        spec = OptimizerSpec(**cfg["optimizer"])
        return Trainer(model, PaperOptimizer.for_model(model, embedding, spec), epochs=cfg["epochs"],
                       batch_size=spec.batch_size, **run.trainer_options(),
                       extra={"vocab": vocab.itos[1:], "lowercase": vocab.lowercase, "classes": list(classes)})

    def score(trainer: Trainer, fit) -> Outcome:
        test = trainer.test(test_set)
        return Outcome(fit.best_dev, test.as_dict(), f"dev root {fit.best_dev['root']:.2f}, test root "
                                                     f"{test.root:.2f}, test phrase {test.phrase:.2f}",
                       {"num_parameters": count_parameters(trainer.model), "num_parameters_without_embeddings":
                        count_parameters(trainer.model, lambda name: name.startswith("embedding."))})

    train_seeds("sst", args, argv, cfg, run_name=lambda seed: run_name(cfg, seed), build=build, score=score,
                train=train_set, dev=dev_set, checkpoint_config={"data": data_id}, device=device)


def main(argv: list[str]) -> None:
    if argv[:1] == ["predict"]:
        predict(argv[1:], build_model, MODELS, REPO / "runs")
        return
    args = parse_args(argv)
    if args.model in BASELINES and distributed.launched():
        fail(f"--model {args.model} trains in one process (scikit-learn); run it without torchrun")
    if args.model in BASELINES:  # every labelled phrase of the treebank an example
        splits = {s: SST(args.data_root, s, fine_grained=args.fine_grained, mirror=default_mirror(REPO), log=False)
                  for s in ("train", "dev", "test")}
        sst_phrase_baseline(args, argv, {s: quick_sample(list(d), QUICK[s]) if args.quick else list(d)
                                         for s, d in splits.items()}, BASELINE_GRID)
    else:
        train(args, argv)


if __name__ == "__main__":
    main_guard(lambda: main(sys.argv[1:]), "sst.py")
