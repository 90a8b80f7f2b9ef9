"""Structure benchmarks: ListOps (Nangia & Bowman 2018) and Boolean circuits, tree cells against a sequence LSTM.

One run per seed: generate the seeded dataset (the generator is the dataset:
:class:`graphtree.datasets.ListOps`, :class:`graphtree.datasets.BooleanCircuits`),
train on the graph label (ListOps: the list's value 0-9; circuits: the output
bit), keep the epoch with the best dev accuracy, test it, and write
``runs/structure/<run>.json`` with the per-epoch ``<run>.csv`` beside it
(``--out DIR`` writes under ``DIR``; ``--quick`` under ``DIR/quick/``). The JSON
breaks test accuracy down by depth (ListOps: nested lists; circuits: gates on
the longest path) and, for circuits, by size (gates). Checkpoints go to
``runs/checkpoints/structure/<run>.pt``; the same command resumes a killed run and
skips a finished one. ``python experiments/report_structure.py --results runs``
tabulates the runs.

    python experiments/structure.py --task listops --model childsum --seeds 1 2 3
    python experiments/structure.py --task listops --model nary --seeds 1 2 3
    python experiments/structure.py --task listops --model lstm --seeds 1 2 3
    python experiments/structure.py --task listops --model childsum --listops-tree flat --seeds 1
    python experiments/structure.py --task circuits --model childsum --seeds 1 2 3
    python experiments/structure.py --task circuits --model lstm --seeds 1 2 3
    python experiments/structure.py --task circuits --model childsum --quick   # seconds, under runs/quick/

Models: ``childsum`` and ``nary`` (and the other cells of ``experiments/train.py``
where they fit: the binary ones, top-down and bidirectional included, take at
most two children and inputs at leaves only, which ListOps' gold parse has and
circuits have not) on the gold trees / DAGs; ``lstm``: ``nn.LSTM`` of the same
hidden size over ListOps' token sequence (brackets included), or over a
circuit's nodes in a topological order, each node its gate type and the
distances back to its operands.

ListOps' gold tree is the paper's parse (Nangia & Bowman 2018, Figure 1): every
token a leaf, left-branching within each list, so a list is read one argument
at a time. ``--listops-tree flat`` gives instead one node per list with its
arguments as children (runs named ``listops_<model>_flat_s<seed>``).

ListOps uses the generator's defaults, the paper's settings (90,000 / 10,000 /
10,000 examples, at most 10 nested lists, 2-5 arguments, sequences up to 100
tokens). Circuits: 4 inputs, 12 gates; train and dev keep the circuits of depth
up to ``TRAIN_MAX_DEPTH``, test keeps all, so deeper circuits are never seen in training.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from lab.own_data.names import MODELS
from lab.runs import ArgumentParser, add_run_arguments, check_flags_first, main_guard, note

from graphtree.train.presets import PRESETS

# ----------------------------------------------------------------------------------------------------------------
TASKS = {
    "listops": dict(dataset="ListOps", sizes=dict(train_size=90_000, dev_size=10_000, test_size=10_000)),
    "circuits": dict(dataset="BooleanCircuits", sizes=dict(train_size=10_000, dev_size=1_000, test_size=2_000,
                                                         num_inputs=4, num_gates=12)),
}
TRAIN_MAX_DEPTH = 9   # circuits: train and dev keep depths up to this; test has depths up to num_gates
DIM, HIDDEN, DROPOUT, EPOCHS = 64, 128, 0.0, 20   # DIM: ListOps token vectors (circuits: one-hot gate types)
OPTIMIZER = PRESETS["teng"]   # Adam, lr 0.001, minibatch 25
MAX_OFFSET = 32   # circuits' sequence model: operand distances one-hot up to this
QUICK = dict(listops=dict(train_size=300, dev_size=100, test_size=100),
             circuits=dict(train_size=400, dev_size=100, test_size=150, num_inputs=4, num_gates=12))
LISTOPS_TREES = ("paper", "flat")   # graphtree.datasets.listops.TREES, named here to list them without torch
REPO = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = ArgumentParser(description="ListOps and Boolean circuits (see the module docstring).")
    p.add_argument("--task", choices=list(TASKS), required=True,
                   help="listops: ListOps expressions (Nangia & Bowman 2018); circuits: Boolean circuits, DAGs")
    p.add_argument("--model", choices=[*MODELS, "lstm"], default="childsum",
                   help="a tree cell on the gold structure, or lstm: nn.LSTM over the sequence")
    p.add_argument("--listops-tree", choices=LISTOPS_TREES, default="paper",
                   help="ListOps: the paper's gold parse (default), or flat: one node per list")
    add_run_arguments(p, REPO, EPOCHS, quick_sample="a few hundred graphs")
    return p.parse_args(argv)


if __name__ == "__main__":
    check_flags_first(parse_args, "structure.py")  # --help and a mistyped flag answer here, before torch is imported

from lab.harness import SPLITS, Experiment, split_sizes
from lab.own_data import Task, TaskTrainer
from lab.seeds import Outcome, SeedRun, count_parameters
from lab.structure import accuracy_by, add_sequences, structure_model

from graphtree.datasets import BooleanCircuits, ListOps
from graphtree.datasets.listops import TREES

DATASETS = {"ListOps": ListOps, "BooleanCircuits": BooleanCircuits}
assert TREES == LISTOPS_TREES, "experiments/structure.py lists ListOps' trees as graphtree.datasets.listops.TREES"


def depth_of(task: str, graph) -> int:
    """ListOps: lists nested on the deepest path; circuits: gates on the longest path."""
    return int(graph.circuit_depth) if task == "circuits" else int(graph.list_depth)


def load_splits(args: argparse.Namespace) -> tuple[dict, dict[str, list]]:
    """The generator's settings and the three splits (circuits: train and dev up to ``TRAIN_MAX_DEPTH``)."""
    spec = TASKS[args.task]
    sizes = QUICK[args.task] if args.quick else spec["sizes"]
    options = dict(tree=args.listops_tree) if args.task == "listops" else {}
    dataset = DATASETS[spec["dataset"]]
    splits = {s: list(dataset(args.data_root, s, **sizes, **options, seed=0, log=False)) for s in SPLITS}
    if args.task == "circuits":
        for s in ("train", "dev"):
            splits[s] = [g for g in splits[s] if depth_of(args.task, g) <= TRAIN_MAX_DEPTH]
    return sizes, splits


def main(argv: list[str]) -> None:
    """Train, select on dev accuracy and test one model per seed; write the JSON and CSV of each run."""
    args = parse_args(argv)
    exp = Experiment.start("structure", args, argv, REPO, EPOCHS)
    began = time.perf_counter()
    with exp.main_first():  # the first run generates the graphs into datasets/ for the others
        sizes, splits = load_splits(args)
    if args.model == "lstm":  # the sequences it reads, made once for every seed
        add_sequences((g for graphs in splits.values() for g in graphs), args.task, MAX_OFFSET)
    data_seconds = time.perf_counter() - began
    task = Task("graph", "class", DATASETS[TASKS[args.task]["dataset"]].num_classes)
    train_depths = sorted({depth_of(args.task, g) for g in splits["train"]})
    cfg = dict(task=args.task, model=args.model, generator=dict(sizes, seed=0), epochs=exp.epochs, dim=DIM,
               hidden=HIDDEN, dropout=DROPOUT, optimizer=OPTIMIZER.as_dict(), quick=args.quick,
               train_max_depth=TRAIN_MAX_DEPTH if args.task == "circuits" else None)
    if args.task == "listops" and args.model != "lstm":
        cfg["tree"] = args.listops_tree
    note(f"{args.task}: {split_sizes(splits)} graphs, training "
         f"depths {train_depths[0]}-{train_depths[-1]} ({data_seconds:.1f} s to generate)")
    depths = [depth_of(args.task, g) for g in splits["test"]]
    settings = {}

    def build_trainer(run: SeedRun) -> TaskTrainer:
        model, settings_, embedding = structure_model(args.task, args.model, splits, task, dim=DIM, hidden=HIDDEN,
                                                      dropout=DROPOUT, max_offset=MAX_OFFSET)
        settings.update(settings_)
        return run.trainer(model, embedding, OPTIMIZER, exp.epochs, TaskTrainer, dict(settings=settings), task=task)

    def score(trainer: TaskTrainer, fit) -> Outcome:
        test, predictions = trainer.evaluate(splits["test"])
        correct = [bool(p.pred.eq(p.gold).all()) for p in predictions]
        test["by_depth"] = accuracy_by(depths, correct)
        if args.task == "circuits":
            test["by_size"] = accuracy_by([int(g.circuit_size) for g in splits["test"]], correct)
            deeper = accuracy_by([int(d > train_depths[-1]) for d in depths], correct)
            test["in_training_depths"], test["deeper_than_training"] = deeper.get("0"), deeper.get("1")
        return Outcome(fit.best_dev, test, f"dev {fit.best_dev['accuracy']:.2f}, test {test['accuracy']:.2f}", dict(
            settings=settings, sizes={s: len(g) for s, g in splits.items()}, train_depths=train_depths,
            out_of_range_depths=sorted({d for d in depths if d > train_depths[-1]}), data_seconds=data_seconds,
            num_parameters=count_parameters(trainer.model)))

    stem = f"{args.task}_{args.model}" + ("_flat" if cfg.get("tree") == "flat" else "")
    exp.train_seeds(cfg, exp.run_names(stem), build_trainer, score, splits)


if __name__ == "__main__":
    main_guard(lambda: main(sys.argv[1:]), "structure.py")
