"""Levels per minibatch of SST's training split, plain order against height-grouped minibatches; and the A/B table
of training runs with and without ``--group-by-height``.

A minibatch runs as many levels as its tallest tree. For the trainer's plain order
(:func:`graphtree.train.trainer.epoch_order`) and for :func:`~graphtree.train.trainer.height_grouped_order` with
windows of ``W`` minibatches, this counts over ``--epochs`` epochs of seed ``--seed`` the mean levels per
minibatch, the levels of a whole epoch, and the mean spread of heights within a minibatch (tallest less lowest).
``--runs DIR`` adds a table of the results files of ``experiments/sst.py`` under ``DIR/sst/`` (the runs with
``--group-by-height`` are those named ``_hgW``): training seconds per epoch, best epoch, dev and test root
accuracy, per seed.

    python benchmarks/height_groups.py
    python benchmarks/height_groups.py --runs runs --out height-groups.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from graphtree.datasets import SST
from graphtree.train.provenance import code_state
from graphtree.train.trainer import epoch_order, height_grouped_order, tree_levels

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
    parser.add_argument("--runs", type=Path, default=None, help="an --out folder of experiments/sst.py runs")
    parser.add_argument("--out", type=Path, default=None, help="also write the numbers as JSON here")
    args = parser.parse_args(argv)
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
        args.out.write_text(json.dumps({"levels": counts, "runs": rows, "code": code_state()}, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
