"""Semantic relatedness on SICK (Tai et al. 2015, §4.2 and §5.2) with graphtree's encoders.

One run per seed: encode both sentences, predict the rating with the similarity
network of eq 15, train on the KL divergence to the sparse target, keep the
epoch with the best dev Pearson r, test it, and write ``runs/sick/<run>.json``
(config, per-epoch metrics, test Pearson r, Spearman ρ and MSE, Pearson r by
sentence length for the plot, wall time, provenance) with the per-epoch
``<run>.csv`` beside it; ``--out DIR`` writes under ``DIR`` instead. Checkpoints
go to ``runs/checkpoints/sick/<run>.pt``; running the same command again resumes
a killed run and skips a finished one. The committed reference results are in
``experiments/results/sick/``; ``python experiments/report_sick.py --results runs``
reports on yours.

    python experiments/sick.py --model dependency --seeds 1 2 3
    python experiments/sick.py --model constituency --seeds 1 2 3
    python experiments/sick.py --model lstm --seeds 1 2 3
    python experiments/sick.py --model mean --quick           # a minute, results under runs/quick/
    python experiments/sick.py --model dependency --encoder mpnet --seeds 1 2 3   # over a fine-tuned MPNet
    python experiments/sick.py --model mean --encoder mpnet   # the encoder alone: its word states mean-pooled

Trees are the Stanford dependency parses of Tai et al.'s preprocessing. The
"constituency" model is the binary N-ary Tree-LSTM on those dependency trees
binarized by :func:`graphtree.data.spacy.binarize`, not on constituency parses
(Tai et al. used the Stanford PCFG parser's binarized trees, which we do not have).
Word vectors are GloVe 6B 50d (Tai: 840B 300d), held fixed as in Tai et al.
The data is read from ``$GRAPHTREE_MIRROR`` (else ``../shared/data`` next to the
repository, else the official URLs) into ``datasets/``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from lab.encoder_runs import add_encoder_arguments, check_encoder_flags
from lab.runs import (
    ArgumentParser,
    add_run_arguments,
    check_embeddings,
    check_flags_first,
    main_guard,
    note,
)

from graphtree.train.presets import PRESETS

# ----------------------------------------------------------------------------------------------------------------
# Tai et al.'s settings (§5.2-5.3, Table 1, relatedness column): memory sizes chosen so that the LSTM parameter
# counts match; trees "dependency" (Stanford parses) or "binary" (those parses binarized); no dropout.
MODELS = {
    "dependency":   dict(name="Dependency Tree-LSTM", trees="dependency", hidden=150),
    "constituency": dict(name="Constituency Tree-LSTM (binarized dependency trees)", trees="binary", hidden=142),
    "lstm":         dict(name="LSTM", trees="dependency", hidden=150),
    "bilstm":       dict(name="Bidirectional LSTM", trees="dependency", hidden=150),
    "mean":         dict(name="Mean vectors", trees="dependency", hidden=None),
}
SIM_HIDDEN = 50          # hidden layer of eq 15 (§5.2)
NUM_CLASSES = 5          # ratings 1..5
EPOCHS = 10              # Tai et al.'s code trains relatedness models for 10 epochs
# Tai's AdaGrad 0.05, minibatch 25, per-minibatch L2 1e-4; embedding_lr 0: the word vectors are held fixed.
OPTIMIZER = replace(PRESETS["tai"], embedding_lr=0.0)
QUICK = dict(train=300, dev=100, test=200)   # --quick: a fixed sample of each split
REPO = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = ArgumentParser(description="Train a relatedness model on SICK (see the module docstring).")
    p.add_argument("--model", choices=list(MODELS), default="dependency",
                   help="; ".join(f"{key}: {spec['name']}" for key, spec in MODELS.items()))
    p.add_argument("--embeddings", default="glove50", help="glove50, or the path of a GloVe text file")
    add_run_arguments(p, REPO, EPOCHS, quick_sample="300 / 100 / 200 pairs")
    p.add_argument("--lr", type=float, default=None, help="with --encoder: the tree's and similarity network's rate")
    p.add_argument("--batch-size", type=int, default=None, help="with --encoder: pairs per minibatch (16)")
    add_encoder_arguments(p)
    args = p.parse_args(argv)
    check_encoder_flags(p, args)
    if args.encoder is None:
        if args.lr is not None or args.batch_size is not None:
            p.error("--lr and --batch-size apply with --encoder (the GloVe runs keep Tai et al.'s settings)")
        check_embeddings(args.embeddings, ("glove50",))
    return args


if __name__ == "__main__":
    check_flags_first(parse_args, "sick.py")  # --help and a mistyped flag answer here, before torch is imported

import torch
from lab.encoder_runs import (
    ENCODER_DEFAULTS,
    checkpoint_seconds,
    encode_once,
    encoder_leaves,
    encoder_name_parts,
    encoder_optimizer,
    encoder_settings,
)
from lab.harness import SPLITS, Experiment, encoder_record, split_sizes, vectors_name
from lab.seeds import Outcome, SeedRun, count_parameters
from torch_geometric.data import Data

from graphtree.data.spacy import binarize
from graphtree.data.tree import lookup_words
from graphtree.datasets import SICK
from graphtree.datasets.sick import TREE_KEYS, make_pair
from graphtree.embeddings import embedding_matrix
from graphtree.models import NodeEmbedding
from graphtree.models.similarity import MeanEncoder, PairSimilarity, SequenceEncoder, TreeEncoder, similarity_loss
from graphtree.nn import ChildSumTreeLSTM, NaryTreeLSTM
from graphtree.train.pairs import PairTrainer, pearson_by_length
from graphtree.vocab import Vocab


def side(pair: Data, which: str) -> Data:
    """One sentence of a SICK pair as a tree ``Data``."""
    tree = Data(num_nodes=int(getattr(pair, f"num_nodes_{which}")))
    for key in TREE_KEYS:
        value = getattr(pair, f"{key}_{which}", None)
        if value is not None:
            tree[key] = value
    return tree


def with_words(pair: Data, trees: str, vocab: Vocab) -> Data:
    """The pair with word ids from ``vocab``, its trees binarized for ``trees="binary"``."""
    sides = []
    for which in ("a", "b"):
        tree = side(pair, which)
        if trees == "binary":
            tree = binarize(tree, vocab)
        else:
            tree.word = lookup_words(tree.tokens, tree.word_pos.tolist(), vocab)
        sides.append(tree)
    return make_pair(*sides, score=pair.score, target=pair.target, pair_id=pair.pair_id)


def mean_length(pair: Data) -> float:
    """Mean number of words of the two sentences (Tai et al. Fig. 4's x axis)."""
    return (len(pair.tokens_a) + len(pair.tokens_b)) / 2


def build_model(model: str, vocab_size: int, dim: int, pretrained: torch.Tensor | None,
                leaves: torch.nn.Module | None = None) -> PairSimilarity:
    """Encoder of ``model`` under the similarity network of eq 15, on fixed word vectors (or on the contextual
    ``leaves`` of a pretrained encoder, fine-tuned)."""
    embedding = leaves if leaves is not None else NodeEmbedding(vocab_size, dim, pretrained, freeze=True)
    hidden = MODELS[model]["hidden"]
    if model == "dependency":
        encoder = TreeEncoder(embedding, ChildSumTreeLSTM(dim, hidden))
    elif model == "constituency":
        encoder = TreeEncoder(embedding, NaryTreeLSTM(dim, hidden))
    elif model in ("lstm", "bilstm"):
        encoder = SequenceEncoder(embedding, hidden, bidirectional=model == "bilstm", tied=True)
    else:
        encoder = MeanEncoder(embedding)
    return PairSimilarity(encoder, SIM_HIDDEN, NUM_CLASSES)


def main(argv: list[str]) -> None:
    """Train, select on dev Pearson r and test one model per seed; write the JSON and CSV of each run."""
    args = parse_args(argv)
    over_encoder = args.encoder is not None
    exp = Experiment.start("sick", args, argv, REPO, ENCODER_DEFAULTS["epochs"] if over_encoder else EPOCHS)
    spec = MODELS[args.model]
    if over_encoder:
        vectors, record, optimizer = None, encoder_record(args.encoder), encoder_optimizer(args)
        cfg = dict(model=args.model, trees=spec["trees"], parses="stanford", embeddings="encoder",
                   freeze_embeddings=False, dim=record["width"], hidden=spec["hidden"], sim_hidden=SIM_HIDDEN,
                   epochs=exp.epochs, optimizer=optimizer.as_dict(), quick=args.quick, **encoder_settings(args))
    else:
        vectors, record, optimizer = exp.vectors(), None, OPTIMIZER
        cfg = dict(model=args.model, trees=spec["trees"], parses="stanford", embeddings=args.embeddings,
                   freeze_embeddings=True, dim=vectors.dim, hidden=spec["hidden"], sim_hidden=SIM_HIDDEN,
                   epochs=exp.epochs, optimizer=OPTIMIZER.as_dict(), quick=args.quick)
    with exp.main_first():  # the first run processes the corpus into datasets/ for the others
        raw = {s: list(SICK(args.data_root, s, mirror=exp.mirror, log=False)) for s in SPLITS}
    # Every SICK word with a GloVe vector (as written or lowercased); the others share <unk>, the mean vector.
    vocab = Vocab.build([d.tokens_a for s in raw.values() for d in s] + [d.tokens_b for s in raw.values() for d in s],
                        pretrained=vectors)
    raw = exp.sample(raw, QUICK)
    splits = {s: [with_words(d, spec["trees"], vocab) for d in raw[s]] for s in SPLITS}
    note(f"SICK ({spec['trees']} trees): {split_sizes(splits)} pairs, vocabulary {len(vocab)}")

    def build(run: SeedRun) -> PairTrainer:
        if over_encoder:
            leaves = encoder_leaves(cfg)
            model = build_model(args.model, len(vocab), record["width"], None, leaves)
            kept = Path(args.out) / "cache" / f"sick_{Path(args.encoder).name}_top{cfg.get('trainable_layers')}.pt"
            encode_once(leaves, [list(t) for s in splits.values() for d in s for t in (d.tokens_a, d.tokens_b)],
                        kept)
            return run.trainer(model, leaves, optimizer, exp.epochs, PairTrainer, loss_fn=similarity_loss,
                               checkpoint_every=checkpoint_seconds(args))
        model = build_model(args.model, len(vocab), vectors.dim, embedding_matrix(vocab, vectors, missing="mean"))
        return run.trainer(model, model.encoder.embedding, OPTIMIZER, exp.epochs, PairTrainer,
                           loss_fn=similarity_loss)

    def score(trainer: PairTrainer, fit) -> Outcome:
        test, pred, gold = trainer.evaluate(splits["test"])
        return Outcome(fit.best_dev, test, f"dev r {fit.best_dev['pearson']:.4f}, test r {test['pearson']:.4f}, "
                                           f"ρ {test['spearman']:.4f}, MSE {test['mse']:.4f}", {
            # Only the statistic: gold ratings are corpus data and stay out of the results.
            "test_by_length": pearson_by_length(pred, gold, [mean_length(d) for d in raw["test"]]),
            "num_parameters_without_embeddings": count_parameters(
                trainer.model, lambda name: name.startswith("encoder.embedding.")),
            **({"encoder": record} if record else {})})

    if over_encoder:
        encoder, settings = encoder_name_parts(cfg, dropout_default=cfg.get("dropout"))
        names = lambda seed: "_".join([args.model, encoder, *settings]) + f"_s{seed}"  # noqa: E731
    else:
        names = exp.run_names(f"{args.model}_{vectors_name(args.embeddings)}")
    exp.train_seeds(cfg, names, build, score, splits, exp.data_identity(splits, vocab))


if __name__ == "__main__":
    main_guard(lambda: main(sys.argv[1:]), "sick.py")
