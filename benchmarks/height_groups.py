"""Levels per minibatch of SST's training split, plain order against height-grouped minibatches; and the A/B table
of training runs with and without ``--group-by-height``.

A minibatch runs as many levels as its tallest tree. For the trainer's plain order
(:func:`graphtree.train.ordering.epoch_order`) and for :func:`~graphtree.train.ordering.height_grouped_order` with
windows of ``W`` minibatches, this counts over ``--epochs`` epochs of seed ``--seed`` the mean levels per
minibatch, the levels of a whole epoch, and the mean spread of heights within a minibatch (tallest less lowest).
``--runs DIR`` adds a table of the results files of ``experiments/sst.py`` under ``DIR/sst/`` (the runs with
``--group-by-height`` are those named ``_hgW``): training seconds per epoch, best epoch, dev and test root
accuracy, per seed. ``--time W`` times one training epoch (batches built, forward, backward, both updates; no dev)
of ``experiments/sst.py``'s Child-Sum model (its sizes, Tai et al.'s update, minibatch 25) on the plain order and on
windows of ``W``, the two epochs interleaved in blocks of ``--block`` minibatches, each order with a model of its own
from the same start, so that a busy machine's drift falls on both alike.

    python benchmarks/height_groups.py
    python benchmarks/height_groups.py --time 16 --runs runs --out height-groups.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import lab_path  # noqa: F401  (the lab, not installed)
import torch
from lab.provenance import code_state
from lab.sst_models import sst_model

from graphtree.backend.threads import denormals_flushed
from graphtree.data.batching import collate_graphs
from graphtree.data.loader import with_schedule
from graphtree.datasets import SST
from graphtree.models.classifier import node_loss
from graphtree.train import PRESETS, PaperOptimizer
from graphtree.train.checkpoint import seed_everything
from graphtree.train.ordering import epoch_order, height_grouped_order, tree_levels
from graphtree.vocab import Vocab

CHILDSUM = dict(model="childsum", dim=300, hidden=168, dropout=0.5)  # experiments/sst.py's MODELS["childsum"]

REPO = Path(__file__).resolve().parent.parent


def level_counts(levels: torch.Tensor, batch_size: int, window: int | None, seed: int, epochs: int) -> dict:
    """Mean levels per minibatch, levels per epoch and mean within-minibatch spread, over ``epochs`` epochs."""
    per_batch, spread = [], []
    for epoch in range(epochs):
        order = (epoch_order(levels.numel(), seed, epoch) if window is None
                 else height_grouped_order(levels, batch_size, window, seed, epoch))
        for batch in order.split(batch_size):
            heights = levels[batch]
            per_batch.append(int(heights.max()))
            spread.append(int(heights.max() - heights.min()))
    return {"batch_size": batch_size, "window": window, "levels_per_batch": statistics.mean(per_batch),
            "levels_per_epoch": sum(per_batch) / epochs, "spread_per_batch": statistics.mean(spread)}


def time_epochs(root: Path, window: int, seed: int, block: int, batch_size: int = 25) -> dict:
    """Seconds of one Child-Sum training epoch on SST in the plain order and in windows of ``window`` minibatches,
    interleaved by blocks of ``block`` minibatches."""
    vocab = Vocab.build(SST(root, "train", log=False).tokens)
    train = SST(root, "train", vocab=vocab, log=False)
    levels = torch.tensor([tree_levels(train[k]) for k in range(len(train))])
    orders = {"plain": epoch_order(len(train), seed, 0),
              "grouped": height_grouped_order(levels, batch_size, window, seed, 0)}
    runs = {}
    for name in orders:
        seed_everything(seed)
        model, embedding = sst_model(CHILDSUM, len(vocab), len(SST.FINE_CLASSES), None,
                                     mlp_channels=128)
        runs[name] = (model, PaperOptimizer.for_model(model, embedding, PRESETS["tai"]),
                      orders[name].split(batch_size))
    seconds = dict.fromkeys(orders, 0.0)
    steps = len(runs["plain"][2])
    with denormals_flushed():
        for start in range(0, steps, block):
            for name, (model, optimizer, batches) in runs.items():
                began = time.perf_counter()
                for minibatch in batches[start:start + block]:
                    batch = with_schedule(collate_graphs([train[int(i)] for i in minibatch]))
                    loss = node_loss(model(batch), batch.y) / len(minibatch)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step_model()
                    optimizer.step_embeddings()
                seconds[name] += time.perf_counter() - began
    return {"window": window, "batch_size": batch_size, "block": block, "seconds": seconds,
            "grouped_over_plain": seconds["grouped"] / seconds["plain"]}


def run_rows(folder: Path) -> list[dict]:
    """One row per results file of ``experiments/sst.py`` under ``folder``."""
    rows = []
    for path in sorted(folder.glob("*.json")):
        record = json.loads(path.read_text())
        history = record["history"]
        rows.append({"run": record["run"], "group_by_height": record["config"].get("group_by_height"),
                     "seed": record["seed"], "epochs": len(history),
                     "train_seconds_per_epoch": record["train_seconds_per_epoch"],
                     "best_epoch": record["best_epoch"], "dev_root": record["dev"]["root"],
                     "test_root": record["test"]["root"], "test_phrase": record["test"]["phrase"],
                     "commit": record.get("provenance", {}).get("commit", record.get("commit"))})
    return rows


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=REPO / "datasets")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[25, 256])
    parser.add_argument("--windows", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--time", type=int, default=None, metavar="W",
                        help="also time a Child-Sum training epoch, plain against windows of W")
    parser.add_argument("--block", type=int, default=20, help="minibatches per interleaved block of --time")
    parser.add_argument("--runs", type=Path, default=None, help="an --out folder of experiments/sst.py runs")
    parser.add_argument("--out", type=Path, default=None, help="also write the numbers as JSON here")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    train = SST(args.data_root, "train", log=False)
    levels = torch.tensor([tree_levels(train[k]) for k in range(len(train))])
    print(f"SST train: {len(train)} trees, {levels.float().mean():.2f} levels a tree on average, "
          f"{int(levels.max())} at most; seed {args.seed}, {args.epochs} epochs")
    print("\n| batch | order | levels per minibatch | levels per epoch | height spread in a minibatch |")
    print("|---:|---|---:|---:|---:|")
    counts = []
    for batch_size in args.batch_sizes:
        for window in [None, *args.windows]:
            row = level_counts(levels, batch_size, window, args.seed, args.epochs)
            counts.append(row)
            order = "plain" if window is None else f"grouped, W = {window}"
            print(f"| {batch_size} | {order} | {row['levels_per_batch']:.1f} | {row['levels_per_epoch']:.0f} | "
                  f"{row['spread_per_batch']:.1f} |")
    timed = time_epochs(args.data_root, args.time, args.seed, args.block) if args.time is not None else None
    if timed is not None:
        print(f"\nChild-Sum, one training epoch at minibatch 25 ({torch.get_num_threads()} thread(s), interleaved by "
              f"{args.block} minibatches): plain {timed['seconds']['plain']:.1f} s, grouped (W = {args.time}) "
              f"{timed['seconds']['grouped']:.1f} s, grouped / plain {timed['grouped_over_plain']:.2f}")
    rows = run_rows(args.runs / "sst") if args.runs is not None else []
    if rows:
        print("\n| run | seed | train s/epoch | best epoch | dev root | test root | test phrase |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for r in sorted(rows, key=lambda r: (r["group_by_height"] or 0, r["seed"])):
            print(f"| {r['run']} | {r['seed']} | {r['train_seconds_per_epoch']:.1f} | {r['best_epoch']} | "
                  f"{r['dev_root']:.2f} | {r['test_root']:.2f} | {r['test_phrase']:.2f} |")
        for group in sorted({r["group_by_height"] or 0 for r in rows}):
            mine = [r for r in rows if (r["group_by_height"] or 0) == group]
            print(f"{'plain' if not group else f'W = {group}'}: {len(mine)} seeds, train s/epoch "
                  f"{statistics.mean(r['train_seconds_per_epoch'] for r in mine):.1f}, dev root "
                  + ", test root ".join(f"{statistics.mean(v):.2f} ± {statistics.stdev(v) if len(v) > 1 else 0:.2f}"
                                        for v in ([r["dev_root"] for r in mine], [r["test_root"] for r in mine])))
    if args.out is not None:
        record = {"levels": counts, "epoch_time": timed, "runs": rows, "code": code_state()}
        args.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
