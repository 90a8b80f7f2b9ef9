"""Train a tree or DAG LSTM on data of your own: CoNLL-U, PTB bracketed trees or JSON Lines.

One run per seed: read train, dev and test (``--data`` is one file, split by a
seeded shuffle, or a folder holding ``train.*``, ``dev.*`` and ``test.*``), train,
keep the epoch with the best dev score, test it, and write
``runs/train/<run>.json`` (settings, per-epoch metrics, test metrics, wall time,
provenance), the per-epoch ``<run>.csv`` and ``<run>.predictions.tsv`` (one line
per test graph: its index in its file, its line, the prediction and the gold
label) beside it; ``--out DIR`` writes under ``DIR`` instead. Checkpoints go to
``runs/checkpoints/train/<run>.pt``; running the same command again resumes a
killed run and skips a finished one.

    python experiments/train.py --data examples/graphs.jsonl --model childsum
    python experiments/train.py --data examples/trees.ptb --model nary
    python experiments/train.py --data my_treebank/ --format conllu --model childsum --seeds 1 2 3

The file formats are those of :class:`graphtree.datasets.GraphFiles` (README,
"Your own data"). What is learnt follows the labels (``--task auto``): a class
or a number per graph where the training graphs have graph labels (``# label =``
in CoNLL-U, a graph ``"y"`` in JSON Lines, or ``--labels FILE``), else a class
per node (PTB node labels, node ``"y"`` in JSON Lines). Classes are scored by
accuracy, numbers by mean squared error (and Pearson r). A graph's output is
read from its nodes' states by ``--readout`` (:class:`graphtree.models.Readout`:
the root's, or a pool over all nodes). Node inputs are word vectors of the
nodes' tokens (random, or GloVe with ``--embeddings glove50``), with the token
fields of JSON Lines (``"fields"``, e.g. an AST node's sub-tokens; and with
``--subtokens`` the tokens' own ``snake_case``/``camelCase``/digit parts)
embedded beside them by :class:`graphtree.models.NodeFields`, and the numeric
node features ``x`` of JSON Lines, side by side where a file has both.

Two baselines without structure run on the same split and write the same
files: ``--model bilstm`` (a BiLSTM over the nodes in file order, the same
inputs and readout) and ``--model tfidf`` (TF-IDF n-grams of the same tokens,
logistic regression)::

    python -m graphtree.datasets.code some_python_project/ functions.jsonl
    python experiments/train.py --data functions.jsonl --model childsum
    python experiments/train.py --data functions.jsonl --model tfidf

``--encoder minilm`` (or ``mpnet``, or a folder) makes the node inputs a pretrained transformer's contextual
states of the nodes' tokens, fine-tuned with the model (docs/encoders.md).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from lab import own_data as own  # a lazy package: MODELS needs no torch
from lab.encoder_runs import add_encoder_arguments, check_encoder_flags
from lab.runs import (
    ArgumentParser,
    RunPaths,
    add_run_arguments,
    check_embeddings,
    check_flags_first,
    check_training_flags,
    fail,
    main_guard,
    note,
)

from graphtree.train.presets import PRESETS

# ----------------------------------------------------------------------------------------------------------------
# Defaults: word vectors of 100 (random) or GloVe's 50, memories of 100, no dropout, 10 epochs, and Teng & Zhang's
# update (Adam, learning rate 0.001, minibatches of 25; graphtree.train.PRESETS["teng"]).
DIM, HIDDEN, DROPOUT, EPOCHS, OPTIMIZER = 100, 100, 0.0, 10, "teng"
# Graph labels are read from the nodes by READOUT (Teng & Zhang's models keep their own output at the root), and
# minibatches hold BATCH_SIZE graphs. Measured with childsum, one seed, test accuracy: on code.py's method kinds
# (5 epochs) [root; mean; max] 65.0, root 64.9, max 64.6, attention 63.1, mean 54.5, and minibatches of 64 64.5
# (2.5 times faster); on SST-5 root labels (3 epochs, random vectors) [root; mean; max] 37.3, root 35.3, 64 36.9.
READOUT, BATCH_SIZE = "root-mean-max", 25
READOUTS = ("root", "mean", "max", "root-mean-max", "attention")  # graphtree.models.READOUTS, without torch
TENG = ("contree", "topdown", "bicontree")
QUICK = dict(train=200, dev=50, test=50)   # --quick: at most this many graphs of each split
REPO = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = ArgumentParser(description="Train a tree or DAG LSTM on your own data (see the module docstring).")
    p.add_argument("--data", required=True, help="a data file, or a folder with train, dev and test files")
    p.add_argument("--format", choices=["conllu", "ptb", "jsonl"], default=None,
                   help="default: from the suffix (.conllu/.conll, .ptb/.mrg, .jsonl/.ndjson)")
    p.add_argument("--labels", default=None, help="a file of graph labels, one per line (_ for none), for one file")
    p.add_argument("--task", choices=["auto", "graph", "node"], default="auto",
                   help="learn a label per graph or per node (default: per graph where graphs have labels)")
    p.add_argument("--target", choices=["auto", "class", "regression"], default="auto",
                   help="graph labels as classes or numbers (default: classes if all are integers)")
    p.add_argument("--model", choices=list(own.MODELS), default="childsum",
                   help="; ".join(f"{k}: {v}" for k, v in own.MODELS.items()))
    p.add_argument("--embeddings", default="random", help="random, glove50, or the path of a GloVe text file")
    p.add_argument("--dim", type=int, default=DIM, help=f"size of random word vectors (default {DIM})")
    p.add_argument("--hidden", type=int, default=HIDDEN, help=f"memory size (default {HIDDEN})")
    p.add_argument("--dropout", type=float, default=DROPOUT, help=f"dropout probability (default {DROPOUT})")
    p.add_argument("--optimizer", choices=sorted(PRESETS), default=OPTIMIZER,
                   help=f"a paper's update (graphtree.train.PRESETS; default {OPTIMIZER}: Adam)")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: the optimizer's)")
    p.add_argument("--batch-size", type=int, default=None,
                   help=f"graphs per minibatch (default {BATCH_SIZE}, the teng optimizer's; other optimizers: theirs)")
    p.add_argument("--readout", choices=READOUTS, default=None,
                   help=f"how a graph label is read from the node states: the root's, their mean, max, "
                        f"[root; mean; max] or attention pooling (default {READOUT}, measured on code and SST; "
                        f"{', '.join(TENG)}: their own output at the root)")
    p.add_argument("--subtokens", action="store_true",
                   help="split every token into sub-tokens (snake_case, camelCase, digits) as a field embedded "
                        "beside it (e.g. identifiers of code)")
    p.add_argument("--no-fields", action="store_true",
                   help="ignore the token fields of JSON Lines (\"fields\"; default: embed them beside the token)")
    p.add_argument("--split", type=float, nargs=3, default=[0.8, 0.1, 0.1], metavar=("TRAIN", "DEV", "TEST"),
                   help="fractions of one file for train, dev and test (default 0.8 0.1 0.1)")
    p.add_argument("--split-seed", type=int, default=0, help="seed of the split of one file (default 0)")
    p.add_argument("--on-disk", action="store_true",
                   help="keep the graphs in an SQLite store under the data root and read them a batch at a time, "
                        "in 2 loader processes, for corpora larger than memory (default: in memory)")
    add_run_arguments(p, REPO, EPOCHS, quick_sample="at most 200 / 50 / 50 graphs")
    add_encoder_arguments(p)
    args = p.parse_args(argv)
    check_embeddings(args.embeddings, ("random", "glove50"))
    check_encoder_flags(p, args, without=("tfidf",))
    if args.encoder is not None and args.embeddings != "random":
        p.error("--encoder gives the node inputs: leave out --embeddings")
    if args.task == "node" and args.target == "regression":
        p.error("--task node learns node classes; numbers are graph labels (--task graph --target regression)")
    if min(args.dim, args.hidden) < 1 or (args.batch_size is not None and args.batch_size < 1):
        p.error("--dim, --hidden and --batch-size must be positive")
    check_training_flags(p, args)
    if args.model in TENG and args.readout not in (None, "root"):
        fail(f"--model {args.model} has its own output layer at the root; --readout is for the other models")
    if args.readout is None:
        args.readout = "root" if args.model in TENG else READOUT
    if min(args.split) < 0 or abs(sum(args.split) - 1) > 1e-6:
        p.error(f"--split takes three non-negative fractions summing to 1, got {' '.join(map(str, args.split))}")
    return args


if __name__ == "__main__":
    check_flags_first(parse_args, "train.py")  # --help and a mistyped flag answer here, before torch is imported

from lab.encoder_runs import (
    checkpoint_seconds,
    encode_once,
    encoder_leaves,
    encoder_name_parts,
    encoder_optimizer,
    encoder_settings,
)
from lab.harness import Experiment, encoder_record, split_sizes, vectors_name
from lab.seeds import Outcome, SeedRun, count_parameters

from graphtree.train import distributed


def main(argv: list[str]) -> None:
    """Train, select on dev and test one model per seed; write the JSON, CSV and predictions of each run."""
    args = parse_args(argv)
    exp = Experiment.start("train", args, argv, REPO, EPOCHS)
    with exp.main_first():  # the first run converts the files into datasets/ for the others
        splits = own.load_graph_splits(args.data, format=args.format, labels=args.labels, target=args.target,
                                       ratios=args.split, seed=args.split_seed, root=args.data_root,
                                       on_disk=args.on_disk, subtokens=args.subtokens)
    task = own.find_task(splits, args.task)
    if args.quick:
        splits = splits.sample(QUICK)
    # Run names: data, model, task, vectors, what is not the default, epochs where not the default, seed.
    record = encoder_record(args.encoder) if args.encoder else None
    inputs_name = vectors_name(args.embeddings)
    if record:  # the encoder, and the recipe's settings that are not its defaults
        encoder, settings = encoder_name_parts({"encoder": args.encoder, **encoder_settings(args),
                                                "optimizer": encoder_optimizer(args).as_dict()})
        inputs_name = "_".join([encoder, *settings])
    stem = f"{splits.name}_{args.model}_{task.name}" + ("" if args.model == "tfidf" else f"_{inputs_name}")
    stem += "_sub" if args.subtokens else ""
    stem += "_nofields" if args.no_fields else ""
    if args.model == "tfidf":
        cfg = dict(data=splits.identity(), format=splits.format, task=task.name, classes=task.num_classes,
                   model="tfidf", subtokens=args.subtokens, fields=not args.no_fields,
                   split=dict(ratios=args.split, seed=args.split_seed) if splits.one_file else None, quick=args.quick)
        own.tfidf_runs(splits, task, args.seeds, RunPaths.under(args.out, "train", args.quick),
                       lambda seed: f"{stem}_s{seed}", cfg, argv, args.threads)
        return
    vectors = exp.vectors()
    vocab = own.attach_words(splits, vectors)   # None: no node has a token
    # Over an encoder the tokens themselves are its input: no fields beside them
    field_vocab = None if args.no_fields or record else own.attach_fields(splits)   # None: no token fields
    dim = args.dim if vectors is None else vectors.dim
    dim = record["width"] if record else dim
    if record and vocab is None:
        fail(f"{splits.files['train']}: --encoder reads the nodes' tokens, and these nodes have none")
    dim = 0 if vocab is None and field_vocab is None else dim
    features = own.feature_channels(splits)
    if dim + features == 0:
        fail(f"{splits.files['train']}: the nodes have neither tokens nor features x; give them one or both")
    if args.model in TENG and field_vocab is not None:
        fail(f"--model {args.model} reads one word per leaf, and the nodes have token fields; use another model, "
             "or --no-fields")
    settings = own.model_settings(args.model, own.describe_structure(splits), dim + features, args.hidden)
    readout = args.readout if task.level == "graph" else "root"
    preset = PRESETS[args.optimizer]
    default_batch = BATCH_SIZE if args.optimizer == OPTIMIZER else preset.batch_size
    spec = replace(preset, lr=args.lr or preset.lr, embedding_lr=args.lr or preset.embedding_lr,
                   batch_size=args.batch_size or default_batch) if record is None else encoder_optimizer(args)
    cfg = dict(data=splits.identity(), format=splits.format, task=task.name, classes=task.num_classes,
               **settings, embeddings=args.embeddings, dim=dim, features=features, dropout=args.dropout,
               **({"readout": readout} if readout != "root" else {}),
               **({"fields": len(field_vocab), "subtokens": args.subtokens} if field_vocab is not None else {}),
               epochs=exp.epochs, optimizer=spec.as_dict(),
               split=dict(ratios=args.split, seed=args.split_seed) if splits.one_file else None, quick=args.quick,
               **(encoder_settings(args) if record else {}))
    if record:
        cfg["embeddings"] = "encoder"
    note(f"{splits.name} ({splits.format}): {split_sizes(splits.graphs)} graphs, {task.name} with "
         f"{task.out_channels} outputs, vocabulary {len(vocab) if vocab is not None else 0}"
         + (f", {len(field_vocab)} field tokens" if field_vocab is not None else "")
         + f", {features} node features, readout {readout}")

    def build(run: SeedRun) -> own.TaskTrainer:
        if record:   # a pretrained encoder's states of the nodes' tokens, fine-tuned with the model
            embedding = encoder_leaves(cfg)
            top = cfg.get("trainable_layers")
            kept = Path(args.out) / "cache" / f"train_{splits.name}_{record['folder']}_top{top}.pt"
            encode_once(embedding, [list(d.tokens) for graphs in splits.graphs.values() for d in graphs], kept)
            model = own.build_model(settings, task, own.NodeInputs(embedding, features), args.dropout, readout)
            return run.trainer(model, embedding, spec, exp.epochs, own.TaskTrainer, task=task,
                               extra={"vocab": vocab.itos[1:]}, checkpoint_every=checkpoint_seconds(args))
        if field_vocab is not None:   # the word as the type, the field tokens as the bag (NodeFields)
            embedding = own.node_fields(vocab, field_vocab, vectors, dim)
            inputs = own.NodeInputs(None, features, embedding)
        else:
            embedding = own.word_embedding(vocab, vectors, dim)   # GloVe's vectors where there are some, else random
            inputs = own.NodeInputs(embedding, features)
        model = own.build_model(settings, task, inputs, args.dropout, readout)
        return run.trainer(model, embedding, spec, exp.epochs, own.TaskTrainer, task=task,
                           extra={"vocab": vocab.itos[1:] if vocab is not None else None})

    def score(trainer: own.TaskTrainer, fit) -> Outcome:
        test, predictions = trainer.evaluate(splits.graphs["test"])
        name = trainer.desc
        if distributed.is_main():  # the first process writes the files
            own.write_predictions(trainer.metrics_csv.with_name(f"{name}.predictions.tsv"), task, splits, "test",
                                  predictions)
        return Outcome(fit.best_dev, test, f"{task.scores(test)}; predictions in {name}.predictions.tsv",
                       {"predictions": f"{name}.predictions.tsv", "num_parameters": count_parameters(trainer.model),
                        **({"encoder": record} if record else {})})

    if task.level == "graph" and readout != ("root" if args.model in TENG else READOUT):
        stem += f"_{readout}"
    if args.batch_size is not None and args.batch_size != default_batch:
        stem += f"_bs{args.batch_size}"
    exp.train_seeds(cfg, exp.run_names(stem), build, score, splits.graphs)


if __name__ == "__main__":
    main_guard(lambda: main(sys.argv[1:]), "train.py")
