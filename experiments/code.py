"""Program trees: method-name prediction and method-kind classification on the ASTs of installed Python packages.

One run per seed: read the functions of a fixed list of installed packages
(:data:`PACKAGES`, :class:`graphtree.datasets.CodeTrees`: one AST per function,
its name, decorators and docstring removed, split by package), train on one task,
keep the epoch best on dev, test it, and write ``runs/code/<run>.json`` with the
per-epoch ``<run>.csv`` beside it (``--out DIR`` writes under ``DIR``; ``--quick``
under ``DIR/quick/``). Checkpoints go to ``runs/checkpoints/code/<run>.pt``; the
same command resumes a killed run and skips a finished one.
``python experiments/report_code.py --results runs/code`` tabulates the runs.

    python experiments/code.py --task name --model childsum --seeds 1 2 3
    python experiments/code.py --task name --model nary --seeds 1 2 3
    python experiments/code.py --task name --model bilstm --seeds 1 2 3
    python experiments/code.py --task name --model tfidf --seeds 1 2 3
    python experiments/code.py --task kind --model childsum --seeds 1 2 3
    python experiments/code.py --task kind --model childsum --quick   # a minute, under runs/quick/

Tasks (:mod:`lab.code_tasks`): ``name``, the name's first five
sub-tokens as ogbg-code2 defines the task, scored by OGB's F1; ``kind``, the
13 method kinds of :data:`graphtree.datasets.code.KINDS` (from the name's
pattern: ``__init__``, other dunders, ``test_``, ``get_``, ``is_``/``has_``...),
accuracy, on the functions whose name has one. Models: ``childsum``
(Child-Sum Tree-LSTM on the AST), ``nary`` (binary N-ary Tree-LSTM on its
left-child right-sibling binarization), ``bilstm`` (bidirectional LSTM over the
nodes in pre-order), all with the same node inputs (a type vector plus the mean
of the node's sub-token vectors) and the same pooling ([root; mean; max] over
the nodes); ``tfidf``: logistic regression on TF-IDF uni- and bigrams of the
same pre-order tokens. Functions above ``--max-nodes`` nodes are counted and
left out.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

from lab.runs import QUICK_EPOCHS, ArgumentParser, add_run_arguments, check_flags_first

from graphtree.train.presets import OptimizerSpec

# ----------------------------------------------------------------------------------------------------------------
# A fixed list of pure-Python packages of the environment (about 40,000 functions): web, documentation, parsing,
# testing, graphs and NLP code, none of them large enough to be a split alone.
PACKAGES = ("_pytest", "aiohttp", "attr", "babel", "click", "docutils", "flask", "httpx", "hypothesis", "jedi",
            "jinja2", "networkx", "parso", "pydantic", "pygments", "requests", "rich", "spacy", "sphinx", "thinc",
            "torch_geometric", "werkzeug", "yaml")
MAX_NODES = 300                     # the dataset's limit: larger functions are counted in its manifest, left out
TASK_MAX_NODES = 100                # the experiment's: functions of up to this many nodes (the CPU time of a run)
TRAIN_SIZE = 12_000                 # training functions, a fixed sample (seed 0) where a task has more
DIM, HIDDEN, DROPOUT, EPOCHS = 128, 128, 0.2, 5
OPTIMIZER = OptimizerSpec("adam", 2e-3, "adam", 2e-3, 0.0, 64)  # Adam, minibatches of 64: fewer, fuller levels
MIN_COUNT = 2                       # input sub-tokens seen fewer times in training read __UNK__
TFIDF_LR, TFIDF_BATCH = 0.01, 256   # the logistic regression: Adam on minibatches, the epoch chosen on dev
TFIDF_NAME_FEATURES = 10_000       # name: 5 x 1,002 scores per feature, so the commonest n-grams only
TFIDF_EPOCHS = 40                   # seconds each: enough for the linear model to converge on dev
TFIDF_NAME = dict(lr=0.03, batch=512, epochs=4)  # name: an epoch costs minutes (5 x 1,002 outputs), so fewer, larger
QUICK = dict(train=2000, dev=300, test=300)
REPO = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = ArgumentParser(description="Method-name prediction and method kinds on program ASTs (see the docstring).")
    p.add_argument("--task", choices=["name", "kind"], required=True,
                   help="name: the method name's first five sub-tokens (ogbg-code2, F1); kind: 13 method kinds")
    p.add_argument("--model", choices=["childsum", "nary", "bilstm", "tfidf"], default="childsum",
                   help="a Tree-LSTM on the AST, a BiLSTM over its nodes in pre-order, or TF-IDF logistic regression")
    p.add_argument("--packages", nargs="+", default=list(PACKAGES), help="installed packages to read")
    p.add_argument("--source", default=None, help="folder of .py files (default: this interpreter's site-packages)")
    p.add_argument("--max-nodes", type=int, default=TASK_MAX_NODES,
                   help=f"functions of up to this many nodes (at most the dataset's {MAX_NODES})")
    p.add_argument("--train-size", type=int, default=TRAIN_SIZE, help="training functions (a fixed sample)")
    p.add_argument("--hidden", type=int, default=HIDDEN, help=f"LSTM memory size (default {HIDDEN})")
    p.add_argument("--dropout", type=float, default=DROPOUT, help="on the pooled vector")
    p.add_argument("--input-dropout", type=float, default=0.0, help="on the node inputs")
    p.add_argument("--positions", action="store_true",
                   help="add a vector of each node's position among its siblings to its input")
    add_run_arguments(p, REPO, EPOCHS, quick_sample="2000 / 300 / 300 functions")
    return p.parse_args(argv)


if __name__ == "__main__":
    check_flags_first(parse_args, "code.py")  # --help and a mistyped flag answer here, before torch is imported

import torch
from lab.code_tasks import (
    EOS,
    NAME_LENGTH,
    NAME_VOCAB,
    UNK,
    CodeModel,
    CodeTrainer,
    InputVocab,
    decode_name,
    name_targets,
    preorder_text,
    prepare,
    tfidf_features,
)
from lab.harness import SPLITS, Experiment, split_sizes
from lab.runs import (
    RunPaths,
    finished_run,
    main_guard,
    note,
    quick_sample,
    recorded_command,
    run_record,
)
from lab.seeds import Outcome, SeedRun, count_parameters

from graphtree.datasets import CodeTrees
from graphtree.train.batches import collate
from graphtree.train.checkpoint import atomic_write_text, seed_everything


def load(args: argparse.Namespace) -> tuple[dict[str, list], CodeTrees]:
    """The task's functions of each split (``kind``: those with a kind), sampled under ``--quick``."""
    datasets = {s: CodeTrees(args.data_root, s, source=args.source, packages=args.packages,
                             max_nodes=MAX_NODES, log=False) for s in SPLITS}
    splits = {s: [g for g in d if (args.task == "name" or int(g.kind) >= 0) and g.num_nodes <= args.max_nodes]
              for s, d in datasets.items()}
    if len(splits["train"]) > args.train_size:
        splits["train"] = quick_sample(splits["train"], args.train_size)
    if args.quick:
        splits = {s: quick_sample(g, QUICK[s]) for s, g in splits.items()}
    return splits, datasets["train"]


def targets_of(args: argparse.Namespace, splits: dict[str, list]) -> tuple[dict[str, list], list[str]]:
    """Per split the target ids of each function, and the output classes' names (``name``: sub-tokens)."""
    if args.task == "kind":
        from graphtree.datasets.code import KINDS
        return {s: [[int(g.kind)] for g in gs] for s, gs in splits.items()}, list(KINDS)
    counts = Counter(w for g in splits["train"] for w in g.name)
    words = [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:NAME_VOCAB]] + [UNK, EOS]
    index = {w: i for i, w in enumerate(words)}
    return {s: [name_targets(g.name, index) for g in gs] for s, gs in splits.items()}, words


def main(argv: list[str]) -> None:
    """Train, select on dev and test one model per seed; write the JSON and CSV of each run."""
    args = parse_args(argv)
    exp = Experiment.start("code", args, argv, REPO, EPOCHS)
    began = time.perf_counter()
    with exp.main_first():  # the first process reads the packages into datasets/code for the others
        splits, train_set = load(args)
    targets, classes = targets_of(args, splits)
    names = {s: [list(g.name) for g in gs] for s, gs in splits.items()}
    corpus = dict(packages=train_set.manifest["packages"], versions=train_set.manifest["versions"],
                  functions={s: len(g) for s, g in splits.items()},
                  nodes={s: sum(int(g.num_nodes) for g in gs) for s, gs in splits.items()},
                  too_large=train_set.manifest["too_large"], dataset_max_nodes=MAX_NODES, max_nodes=args.max_nodes,
                  train_size=args.train_size)
    note(f"code {args.task}: {split_sizes(splits)} functions, {corpus['nodes']['train']} training nodes, "
         f"{sum(corpus['too_large'].values())} above the dataset's {MAX_NODES} nodes left out "
         f"({time.perf_counter() - began:.0f} s to read)")
    outputs = NAME_LENGTH if args.task == "name" else 1
    cfg = dict(task=args.task, model=args.model, packages=sorted(args.packages), max_nodes=args.max_nodes,
               train_size=args.train_size,
               quick=args.quick, epochs=exp.epochs, outputs=outputs, classes=len(classes))
    if args.model == "tfidf":
        return tfidf_runs(args, argv, exp, cfg, splits, train_set, targets, classes, names, corpus)
    cfg.update(dim=DIM, hidden=args.hidden, dropout=args.dropout, optimizer=OPTIMIZER.as_dict(), min_count=MIN_COUNT,
               fields="type + mean of sub-tokens", pooling="root, mean, max")
    vocab = InputVocab(splits["train"], len(train_set.node_types), len(train_set.subtokens), MIN_COUNT)
    data = {s: prepare(splits[s], vocab, targets[s], args.model) for s in SPLITS}

    def build_trainer(run: SeedRun) -> CodeTrainer:
        model = CodeModel(args.model, vocab.num_types, vocab.num_subtokens, DIM, args.hidden, outputs, len(classes),
                          args.dropout, args.input_dropout, args.positions)
        return run.trainer(model, None, OPTIMIZER, exp.epochs, CodeTrainer, task=args.task,
                           dev_names=names["dev"], name_words=classes)

    def score(trainer: CodeTrainer, fit) -> Outcome:
        batches = collate(data["test"], trainer.eval_batch_size)
        test = trainer.scores(trainer.predict(batches), torch.cat([b.y for b in batches]), names["test"])
        metric = trainer.metric
        return Outcome(fit.best_dev, test, f"dev {fit.best_dev[metric]:.2f}, test {test[metric]:.2f}",
                       dict(corpus=corpus, num_parameters=count_parameters(trainer.model)))

    identity = dict(sizes={s: len(d) for s, d in data.items()}, vocab=[vocab.num_types, vocab.num_subtokens])
    stem = f"{args.task}_{args.model}"
    if args.hidden != HIDDEN:
        stem += f"_h{args.hidden}"
    if args.dropout != DROPOUT:
        stem += f"_do{args.dropout:g}"
    if args.input_dropout:
        cfg["input_dropout"] = args.input_dropout
        stem += f"_in{args.input_dropout:g}"
    if args.positions:
        cfg["positions"] = True
        stem += "_pos"
    exp.train_seeds(cfg, exp.run_names(stem), build_trainer, score, data, identity)


def tfidf_runs(args, argv, exp, cfg, splits, train_set, targets, classes, names, corpus) -> None:
    """Logistic regression on TF-IDF n-grams, per seed: Adam on shuffled minibatches, the epoch best on dev."""
    texts = {s: [preorder_text(g, train_set.node_types, train_set.subtokens) for g in gs] for s, gs in splits.items()}
    features = tfidf_features(texts, max_features=TFIDF_NAME_FEATURES if args.task == "name" else None)
    y = {s: torch.tensor(t, dtype=torch.long) for s, t in targets.items()}
    lr, batch_size, epochs = ((TFIDF_NAME["lr"], TFIDF_NAME["batch"], TFIDF_NAME["epochs"]) if args.task == "name"
                              else (TFIDF_LR, TFIDF_BATCH, TFIDF_EPOCHS))
    default_epochs = epochs
    epochs = args.epochs or (QUICK_EPOCHS if args.quick else epochs)
    cfg.update(epochs=epochs, features="tf-idf uni+bigrams of pre-order type and sub-tokens, min_df 2, sublinear tf"
               + (f", the {TFIDF_NAME_FEATURES:,} commonest" if args.task == "name" else ""),
               optimizer=dict(name="adam", lr=lr, batch_size=batch_size), num_features=features["train"].size(1))
    paths = RunPaths.under(args.out, "code", args.quick)
    outputs, width = cfg["outputs"], len(classes)
    metric = "f1" if args.task == "name" else "accuracy"

    def evaluate(layer: torch.nn.Linear, split: str) -> dict:
        with torch.no_grad():
            predicted = (features[split] @ layer.weight.t() + layer.bias).view(-1, outputs, width).argmax(-1)
        if args.task == "kind":
            return dict(accuracy=100 * float((predicted[:, 0] == y[split][:, 0]).float().mean()), total=len(predicted))
        from lab.code_tasks import name_f1
        return dict(name_f1(names[split], [decode_name(p, classes) for p in predicted.tolist()]),
                    total=len(predicted))

    for seed in args.seeds:
        longer = args.epochs and not args.quick and args.epochs != default_epochs  # a setting of its own
        name = f"{args.task}_tfidf{f'_ep{epochs}' if longer else ''}_s{seed}"  # as the harness names the others
        if finished_run(paths.results, name, cfg) is not None:
            note(f"{name}: finished earlier, skipped")
            continue
        seed_everything(seed)
        layer = torch.nn.Linear(features["train"].size(1), outputs * width)
        torch.nn.init.zeros_(layer.weight)
        optimizer = torch.optim.Adam(layer.parameters(), lr=lr)
        history, best, best_state, start = [], None, None, time.perf_counter()
        rows = features["train"].to_sparse_coo().coalesce()
        dense_rows = rows.index_select  # minibatches as sparse row slices
        for epoch in range(epochs):
            tic = time.perf_counter()
            order = torch.randperm(len(y["train"]), generator=torch.Generator().manual_seed(seed * 1000 + epoch))
            total = 0.0
            for k in range(0, len(order), batch_size):
                idx = order[k:k + batch_size]
                x = dense_rows(0, idx)
                scores = (torch.sparse.mm(x, layer.weight.t()) + layer.bias).view(-1, width)
                loss = torch.nn.functional.cross_entropy(scores, y["train"][idx].flatten(), reduction="sum")
                optimizer.zero_grad()
                (loss / len(idx)).backward()
                optimizer.step()
                total += float(loss.detach())
            dev = evaluate(layer, "dev")
            history.append(dict(epoch=epoch + 1, train_loss=total / len(order), **{f"dev_{metric}": dev[metric]},
                                train_seconds=time.perf_counter() - tic))
            if best is None or dev[metric] > best[metric]:
                best, best_epoch = dev, epoch + 1
                best_state = {k: v.clone() for k, v in layer.state_dict().items()}
            note(f"{name} epoch {epoch + 1}: dev {metric} {dev[metric]:.2f}")
        layer.load_state_dict(best_state)
        test, seconds = evaluate(layer, "test"), time.perf_counter() - start
        record = dict(experiment="code", run=name, seed=seed, config=cfg, command=recorded_command("code.py", argv),
                      best_epoch=best_epoch, dev=best, test=test, history=history, wall_time_s=seconds,
                      seconds_per_epoch=seconds / len(history),
                      train_seconds_per_epoch=sum(h["train_seconds"] for h in history) / len(history),
                      corpus=corpus, **run_record(args.threads))
        atomic_write_text(json.dumps(record, indent=1) + "\n", paths.results / f"{name}.json")
        print(f"{name}: best dev epoch {best_epoch}, dev {best[metric]:.2f}, test {test[metric]:.2f}, "
              f"{seconds:.0f} s", flush=True)


if __name__ == "__main__":
    main_guard(lambda: main(sys.argv[1:]), "code.py")
