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
    python experiments/sst.py --model nary --encoder mpnet --seeds 1 2 3     # leaves from a fine-tuned MPNet
    python experiments/sst.py --model encoder --encoder minilm                # the encoder alone, for comparison
    python experiments/sst.py predict runs/checkpoints/sst/<run>.pt "A gorgeous, witty film."

The data is read from ``$GRAPHTREE_MIRROR`` (else ``../shared/data`` next to
the repository, else the official URL) into ``datasets/``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from lab.encoder_runs import ENCODER_DEFAULTS, checkpoint_seconds, encode_once
from lab.runs import check_flags_first, main_guard
from lab.sst_options import SSTOptions

from graphtree.train.presets import PRESETS

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
    # --encoder only: the encoder alone, each phrase the mean of its words' states (no tree cell)
    "encoder":     dict(paper="encoder", dim=0, hidden=0, dropout=0.1, epochs=3),
}
# --settings-of PAPER trains a model with another paper's settings (those of that paper's own model below: vector
# and memory sizes, dropout, epochs, optimizer): the same cell under two papers' setups, not a reproduction.
SETTINGS_MODEL = {"tai": "nary", "zhu": "slstm", "le_zuidema": "lstmrnn", "teng": "contree"}
BASELINES = ("nb", "svm")    # bag-of-words naive Bayes and linear SVM over every labelled training phrase
BASELINE_GRID = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0)   # NB smoothing alpha / SVM C, chosen on dev root accuracy
MLP_CHANNELS = 128            # Teng & Zhang's output hidden size for sentiment
RANDOM_INIT = 0.05            # random vectors ~ U(-0.05, 0.05), as Tai et al.'s code initializes unknown words
# --random-init normal: N(0, 1), the default initialization of Torch7's nn.LookupTable (the papers give none)
QUICK = dict(train=1000, dev=300, test=500)   # --quick: a fixed sample of each split
REPO = Path(__file__).resolve().parent.parent
OPTIONS = SSTOptions(MODELS, SETTINGS_MODEL, BASELINES, PRESETS)   # the flags, run settings and names of these


def parse_args(argv: list[str]) -> argparse.Namespace:
    return OPTIONS.parse(argv, REPO)


if __name__ == "__main__" and sys.argv[1:2] != ["predict"]:
    check_flags_first(parse_args, "sst.py")  # --help and a mistyped flag answer here, before torch is imported

from lab.baselines import single_process, sst_phrase_baseline
from lab.harness import (
    SPLITS,
    Experiment,
    encoder_record,
    initial_vectors,
    sample_splits,
    split_sizes,
)
from lab.runs import default_mirror, note
from lab.seeds import Outcome, SeedRun, count_parameters
from lab.sst_models import sst_model
from lab.sst_predict import predict
from torch_geometric.data import Data

from graphtree.datasets import SST
from graphtree.train import OptimizerSpec, Trainer, recursive_tree, restrict_supervision
from graphtree.vocab import Vocab


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


# build_model(cfg, vocab_size, num_classes, pretrained): the model of a run's settings (``model(batch) -> logits``
# on every node) and its word embedding; ``sst.py predict`` rebuilds a checkpoint's with it.
build_model = partial(sst_model, mlp_channels=MLP_CHANNELS)


def train(args: argparse.Namespace, argv: list[str]) -> None:
    """Train, select on dev and test one model per seed; write the JSON and CSV of each run."""
    over_encoder = args.encoder is not None
    exp = Experiment.start("sst", args, argv, REPO,
                           ENCODER_DEFAULTS["epochs"] if over_encoder else OPTIONS.paper(vars(args))["epochs"])
    vectors = exp.vectors()
    encoder = encoder_record(args.encoder) if over_encoder else None
    cfg = OPTIONS.config(args, vectors, encoder["width"] if encoder else None)
    with exp.main_first():  # the first run processes the corpus into datasets/ for the others
        vocab = build_vocab(cfg, args.data_root, exp.mirror, vectors)
        splits = {s: load_split(cfg, s, vocab, args.data_root, exp.mirror) for s in SPLITS}
    splits = exp.sample(splits, QUICK)  # a fixed random sample: the treebank files are ordered by sentiment
    classes = SST.FINE_CLASSES if args.fine_grained else SST.BINARY_CLASSES
    note(f"SST {'fine-grained' if args.fine_grained else 'binary'}: {split_sizes(splits)} sentences, "
         f"vocabulary {len(vocab)}")

    def build(run: SeedRun) -> Trainer:
        pretrained = None if over_encoder else initial_vectors(vocab, vectors, cfg["dim"], run.seed,
                                                               args.random_init, RANDOM_INIT)
        model, embedding = build_model(cfg, len(vocab), len(classes), pretrained)
        if over_encoder:
            cache = Path(args.out) / "cache" / f"sst_{Path(cfg['encoder']).name}_top{cfg.get('trainable_layers')}.pt"
            encode_once(embedding, [list(d.tokens) for split in splits.values() for d in split], cache)
        return run.trainer(model, embedding, OptimizerSpec(**cfg["optimizer"]), cfg["epochs"],
                           extra={"vocab": vocab.itos[1:], "lowercase": vocab.lowercase, "classes": list(classes)},
                           checkpoint_every=checkpoint_seconds(args))

    def score(trainer: Trainer, fit) -> Outcome:
        test = trainer.test(splits["test"])
        return Outcome(fit.best_dev, test.as_dict(), f"dev root {fit.best_dev['root']:.2f}, test root "
                                                     f"{test.root:.2f}, test phrase {test.phrase:.2f}",
                       {"num_parameters": count_parameters(trainer.model), "num_parameters_without_embeddings":
                        count_parameters(trainer.model, lambda name: name.startswith(("embedding.", "leaves."))),
                        **({"encoder": encoder} if encoder else {})})

    exp.train_seeds(cfg, lambda seed: OPTIONS.run_name(cfg, seed), build, score, splits,
                    exp.data_identity(splits, vocab))


def main(argv: list[str]) -> None:
    if argv[:1] == ["predict"]:
        predict(argv[1:], build_model, MODELS, REPO / "runs")
        return
    args = parse_args(argv)
    if args.model in BASELINES:  # every labelled phrase of the treebank an example
        single_process(args.model)
        splits = {s: list(SST(args.data_root, s, fine_grained=args.fine_grained, mirror=default_mirror(REPO),
                              log=False)) for s in SPLITS}
        sst_phrase_baseline(args, argv, sample_splits(splits, QUICK, args.quick), BASELINE_GRID)
    else:
        train(args, argv)


if __name__ == "__main__":
    main_guard(lambda: main(sys.argv[1:]), "sst.py")
