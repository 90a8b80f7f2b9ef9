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
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from graphtree.datasets import SST
from graphtree.embeddings import embedding_matrix, load_glove
from graphtree.models import BiTreeLSTM, NodeEmbedding, TreeClassifier
from graphtree.models.spans import SpanLSTMClassifier
from graphtree.nn import LSTMRNN, SLSTM, ChildSumTreeLSTM, NaryTreeLSTM
from graphtree.train import (
    PRESETS,
    OptimizerSpec,
    PaperOptimizer,
    Trainer,
    WordInputModel,
    atomic_write_text,
    distributed,
    recursive_tree,
    restrict_supervision,
    seed_everything,
)
from graphtree.train.runs import (
    RunPaths,
    add_run_arguments,
    check_embeddings,
    default_mirror,
    fail,
    finished_run,
    main_guard,
    note,
    quick_sample,
    recorded_command,
    resolve_device,
    run_record,
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
QUICK = dict(train=1000, dev=300, test=500, epochs=3)   # --quick: a smoke run of the whole pipeline
REPO = Path(__file__).resolve().parent.parent
PREDICT_USAGE = 'python experiments/sst.py predict CHECKPOINT "a sentence" [--png tree.png]'


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
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
    add_run_arguments(p, REPO, epochs_help="default: the paper's (see MODELS)",
                      quick_help="small subset, 3 epochs; results under OUT/quick/")
    p.add_argument("--optimizer", choices=["paper", "teng_code"], default="paper",
                   help="paper: the paper's update (graphtree.train.PRESETS); teng_code: that of Teng & Zhang's "
                        "released code (Adam after every sentence, lazy Adam on the embeddings, decay 1e-6), "
                        "Teng & Zhang's models only; listed apart in sst.md")
    p.add_argument("--batch-size", type=int, default=None,
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
            raise SystemExit(f"lstmrnn: a leaf's output is its word vector, so the memory size is the vector "
                             f"size; these vectors have {dim} dimensions, the model {hidden}")
        cell = LSTMRNN(dim, hidden, activation=cfg["activation"])
    return TreeClassifier(embedding, cell, num_classes, dropout=dropout), embedding


def train(args: argparse.Namespace) -> None:
    """Train, select on dev and test one model per seed; write the JSON and CSV of each run."""
    torch.set_num_threads(args.threads)
    device = distributed.setup(resolve_device(args.device))  # one process, or this one of torchrun's
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
               epochs=args.epochs or (QUICK["epochs"] if args.quick else paper["epochs"]),
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
    paths = RunPaths.under(args.out, "sst", args.quick)

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
    for seed in args.seeds:
        name = run_name(cfg, seed)
        if finished_run(paths.results, name, cfg) is not None:
            note(f"{name}: finished earlier ({paths.results / name}.json), skipped")
            continue
        seed_everything(seed)
        if vectors is not None:
            pretrained = embedding_matrix(vocab, vectors, missing="mean")
        else:
            generator = torch.Generator().manual_seed(seed)
            if args.random_init == "normal":
                pretrained = torch.randn(len(vocab), cfg["dim"], generator=generator)
            else:
                pretrained = (torch.rand(len(vocab), cfg["dim"], generator=generator) * 2 - 1) * RANDOM_INIT
        model, embedding = build_model(cfg, len(vocab), len(classes), pretrained)
        model.to(device)
        spec = OptimizerSpec(**cfg["optimizer"])
        trainer = Trainer(model, PaperOptimizer.for_model(model, embedding, spec), epochs=cfg["epochs"],
                          batch_size=spec.batch_size, seed=seed, checkpoint=paths.checkpoints / f"{name}.pt",
                          metrics_csv=paths.results / f"{name}.csv", config={**cfg, "seed": seed, "data": data_id},
                          progress=not args.no_progress, desc=name, device=device,
                          extra={"vocab": vocab.itos[1:], "lowercase": vocab.lowercase, "classes": list(classes)})
        fit = trainer.fit(train_set, dev_set)
        test = trainer.test(test_set)
        if not distributed.is_main():
            continue
        record = {
            "experiment": "sst", "run": name, "seed": seed, "config": cfg,
            "command": recorded_command("sst.py", sys.argv[1:]),
            "best_epoch": fit.best_epoch, "dev": fit.best_dev, "test": test.as_dict(), "history": fit.history,
            "wall_time_s": fit.seconds, "seconds_per_epoch": fit.seconds / len(fit.history),
            "train_seconds_per_epoch": sum(h["train_seconds"] for h in fit.history) / len(fit.history),
            "num_parameters": sum(p.numel() for p in model.parameters()),
            "num_parameters_without_embeddings": sum(p.numel() for n, p in model.named_parameters()
                                                     if not n.startswith("embedding.")),
            **run_record(args.threads, device),
        }
        atomic_write_text(json.dumps(record, indent=1) + "\n", paths.results / f"{name}.json")
        done = "" if fit.resumed_at == 0 else f" (resumed after epoch {fit.resumed_at})"
        print(f"{name}: best dev epoch {fit.best_epoch}, dev root {fit.best_dev['root']:.2f}, test root "
              f"{test.root:.2f}, test phrase {test.phrase:.2f}, {fit.seconds:.0f} s{done}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------------------------
# n-gram baselines: every labelled training phrase is an example (as in Socher et al. 2013); one model per
# smoothing / C value, the best on dev root accuracy is tested.

def phrases(data) -> list[str]:
    """The words under every node of a tree, as one string per node (node order)."""
    parent = {c: p for c, p in zip(*data.edge_index.tolist())}
    words: list[list[str]] = [[] for _ in range(data.num_nodes)]
    for node, pos in enumerate(data.word_pos.tolist()):
        if pos >= 0:
            up = node
            while up is not None:  # add the word to the node and every ancestor, left to right
                words[up].append(data.tokens[pos])
                up = parent.get(up)
    return [" ".join(w) for w in words]


def train_baseline(args: argparse.Namespace) -> None:
    """Naive Bayes or linear SVM on binary bag-of-words features of every labelled phrase."""
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.naive_bayes import MultinomialNB
    from sklearn.svm import LinearSVC

    cfg = dict(model=args.model, embeddings=None, fine_grained=args.fine_grained, supervision="all",
               structure="gold", head=None, activation=None, paper="socher", epochs=None, quick=args.quick,
               ngrams="unigrams", grid=list(BASELINE_GRID))
    mirror = default_mirror(REPO)
    splits = {}
    for split in ("train", "dev", "test"):
        data = list(SST(args.data_root, split, fine_grained=args.fine_grained, mirror=mirror, log=False))
        if args.quick:
            data = quick_sample(data, QUICK[split])
        texts, labels, is_root = [], [], []
        for d in data:
            texts += phrases(d)
            labels += d.y.tolist()
            is_root += d.is_root.tolist()
        keep = [k for k, y in enumerate(labels) if y >= 0]
        splits[split] = ([texts[k] for k in keep], torch.tensor([labels[k] for k in keep]),
                         torch.tensor([is_root[k] for k in keep]))
    vectorizer = CountVectorizer(lowercase=True, token_pattern=r"\S+", binary=True)
    x_train = vectorizer.fit_transform(splits["train"][0])
    began = time.perf_counter()
    history, best = [], None
    for value in BASELINE_GRID:
        clf = MultinomialNB(alpha=value) if args.model == "nb" else LinearSVC(C=value, random_state=args.seeds[0])
        clf.fit(x_train, splits["train"][1].numpy())
        accs = {}
        for split in ("dev", "test"):
            texts, y, roots = splits[split]
            pred = torch.from_numpy(clf.predict(vectorizer.transform(texts)))
            hit = pred == y
            accs[split] = dict(root=100.0 * float(hit[roots].float().mean()), phrase=100.0 * float(hit.float().mean()),
                               root_total=int(roots.sum()), phrase_total=len(y))
        history.append({"epoch": len(history) + 1, "value": value, "dev_root": accs["dev"]["root"],
                        "dev_phrase": accs["dev"]["phrase"]})
        if best is None or accs["dev"]["root"] > best[1]["dev"]["root"]:
            best = (len(history), accs)
    seconds = time.perf_counter() - began
    name = f"{args.model}_unigrams_{'fine' if args.fine_grained else 'binary'}_s{args.seeds[0]}"
    paths = RunPaths.under(args.out, "sst", args.quick)
    record = {"experiment": "sst", "run": name, "seed": args.seeds[0], "config": cfg,
              "command": recorded_command("sst.py", sys.argv[1:]), "best_epoch": best[0],
              "dev": best[1]["dev"], "test": best[1]["test"], "history": history, "wall_time_s": seconds,
              "seconds_per_epoch": seconds / len(history), "train_seconds_per_epoch": seconds / len(history),
              **run_record(args.threads)}
    atomic_write_text(json.dumps(record, indent=1) + "\n", paths.results / f"{name}.json")
    print(f"{name}: best {'alpha' if args.model == 'nb' else 'C'} {BASELINE_GRID[best[0] - 1]}, dev root "
          f"{best[1]['dev']['root']:.2f}, test root {best[1]['test']['root']:.2f}, test phrase "
          f"{best[1]['test']['phrase']:.2f}, {seconds:.0f} s", file=sys.stderr)


# ---------------------------------------------------------------------------------------------------------------
# predict: python experiments/sst.py predict CHECKPOINT "sentence" [--png tree.png]

def predict(argv: list[str]) -> None:
    """Parse a sentence with spaCy, classify every node with a checkpoint's best model, print and draw it."""
    from graphtree.parse import parse

    p = argparse.ArgumentParser(prog="sst.py predict", usage=PREDICT_USAGE,
                                description="Parse a sentence with spaCy and classify every node of its binarized "
                                            "tree with a checkpoint's best-dev model; print the tree and draw it.")
    p.add_argument("checkpoint", help="a checkpoint of experiments/sst.py, e.g. runs/checkpoints/sst/<run>.pt")
    p.add_argument("text", help="the sentence, in quotes")
    p.add_argument("--png", default="sst-tree.png", help="where to save the tree picture (default: sst-tree.png)")
    p.add_argument("--out", default=str(REPO / "runs"), help="output folder of the runs, to list their checkpoints "
                                                             "when CHECKPOINT is missing (default: runs/)")
    args = p.parse_args(argv)
    state = load_checkpoint(args.checkpoint, RunPaths.under(args.out, "sst").checkpoints)
    if not args.text.strip():
        fail('the sentence is empty; give one in quotes, e.g. "A gorgeous, witty film."')
    if not Path(args.png).resolve().parent.is_dir():
        fail(f"--png {args.png}: the folder {Path(args.png).parent} does not exist; create it or choose another path")
    cfg, extra = state["config"], state["extra"]
    vocab, classes = Vocab(extra["vocab"], lowercase=extra["lowercase"]), extra["classes"]
    model, _ = build_model(cfg, len(vocab), len(classes), None)
    model.load_state_dict(state["best"]["model"] if state["best"]["model"] is not None else state["model"])
    model.eval()
    tree = parse(args.text, vocab=vocab).binary
    if cfg["structure"] != "gold":
        tree = recursive_tree(tree, cfg["structure"], vocab)
    with torch.no_grad():
        probs = torch.softmax(model(tree), dim=-1)
    lines, picture = render_tree(tree, probs, classes)
    print("\n".join(lines))
    draw_tree(picture, classes, args.text, args.png)
    print(f"saved {args.png}", file=sys.stderr)


def load_checkpoint(path: str, saved_in: Path) -> dict:
    """The checkpoint of an SST run at ``path``; a user error naming the problem when it is not one."""
    if not Path(path).is_file():
        saved = sorted(saved_in.glob("*.pt"))
        hint = (f"; {len(saved)} in {saved_in}, e.g. {saved[-1].name}" if saved else
                f"; training writes one per run to {saved_in}/<run>.pt")
        fail(f"no checkpoint at {path}{hint}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # a pickle, zip or torch error: all mean "not a checkpoint"
        fail(f"{path} is not a checkpoint of experiments/sst.py (it does not load: {type(error).__name__})")
    if not isinstance(state, dict) or not {"config", "extra", "best"} <= state.keys():
        fail(f"{path} is not a checkpoint of experiments/sst.py (no config, vocabulary or best model)")
    cfg = state["config"]
    if not {"structure", "model"} <= cfg.keys() or cfg["model"] not in MODELS or not (
            {"classes", "vocab"} <= state["extra"].keys()):
        fail(f"{path} is a checkpoint of another experiment (model {cfg.get('model')!r}, settings "
             f"{', '.join(sorted(cfg)[:6])}, ...), not of experiments/sst.py; give one from runs/checkpoints/sst/")
    return state


def render_tree(tree, probs: torch.Tensor, classes: list[str]) -> tuple[list[str], list[dict]]:
    """Indented text of the tree (class and span of every node) and the node list for the picture."""
    children: dict[int, list[tuple[int, int]]] = {}
    for child, parent, pos in zip(*tree.edge_index.tolist(), tree.edge_pos.tolist()):
        children.setdefault(parent, []).append((pos, child))
    root = int(tree.is_root.nonzero()[0])
    words, lines, nodes = tree.tokens, [], []
    stack = [(root, 0)]
    while stack:
        node, indent = stack.pop()
        kids = [c for _, c in sorted(children.get(node, []))]
        span = _span(node, children, tree)
        label = int(probs[node].argmax())
        text = " ".join(words[i] for i in span)
        lines.append(f"{'  ' * indent}[{label} {classes[label]} {100 * float(probs[node, label]):.0f}%] {text}")
        nodes.append(dict(node=node, kids=kids, label=label, depth=indent, span=span,
                          word=words[int(tree.word_pos[node])] if int(tree.word_pos[node]) >= 0 else None))
        stack.extend((c, indent + 1) for c in reversed(kids))
    return lines, nodes


def _span(node: int, children: dict, tree) -> list[int]:
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        if int(tree.word_pos[n]) >= 0:
            out.append(int(tree.word_pos[n]))
        stack.extend(c for _, c in children.get(n, []))
    return sorted(out)


def draw_tree(nodes: list[dict], classes: list[str], title: str, path: str) -> None:
    """Leaves in word order, parents above the middle of their children, coloured red (negative) to green."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cmap = plt.get_cmap("RdYlGn")
    x = {n["node"]: (sum(n["span"]) / len(n["span"]) if n["span"] else 0.0) for n in nodes}
    by_id = {n["node"]: n for n in nodes}
    width = max(6.0, 0.7 * (1 + max((max(n["span"]) for n in nodes if n["span"]), default=0)))
    height = max(3.0, 0.55 * (1 + max(n["depth"] for n in nodes)))
    fig, ax = plt.subplots(figsize=(width, height))
    for n in nodes:
        for kid in n["kids"]:
            ax.plot([x[n["node"]], x[kid]], [-n["depth"], -by_id[kid]["depth"]], color="0.6", lw=0.8, zorder=1)
    for n in nodes:
        colour = cmap(n["label"] / max(1, len(classes) - 1))
        ax.scatter([x[n["node"]]], [-n["depth"]], s=260, color=colour, edgecolors="0.3", zorder=2)
        ax.text(x[n["node"]], -n["depth"], str(n["label"]), ha="center", va="center", fontsize=8, zorder=3)
        if n["word"] is not None:
            ax.text(x[n["node"]], -n["depth"] - 0.45, n["word"], ha="center", va="top", fontsize=9, rotation=30)
    handles = [plt.Line2D([], [], marker="o", ls="", color=cmap(k / max(1, len(classes) - 1)), label=f"{k} {c}")
               for k, c in enumerate(classes)]
    ax.legend(handles=handles, loc="upper right", fontsize=7, frameon=False)
    ax.set_title(title, fontsize=9)
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str]) -> None:
    if argv[:1] == ["predict"]:
        predict(argv[1:])
    else:
        args = parse_args(argv)
        if args.model in BASELINES and distributed.launched():
            fail(f"--model {args.model} trains in one process (scikit-learn); run it without torchrun")
        train_baseline(args) if args.model in BASELINES else train(args)


if __name__ == "__main__":
    start = time.perf_counter()
    main_guard(lambda: main(sys.argv[1:]), "sst.py")
    note(f"wall time {time.perf_counter() - start:.0f} s")
