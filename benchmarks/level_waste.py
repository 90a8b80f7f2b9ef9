"""Where a plan split by width starts to split: the slots the experiments' batches waste in a level, and the slots
per edge of program and random trees, at each split cost.

A plan split by width (:meth:`graphtree.schedule.Schedule.plan`) cuts a level where that saves more slots than the
cost of a level; any cut changes the rounding of a pass (its products run on other row counts). So the default
cost (:data:`graphtree.schedule.SPLIT_COST_SLOTS`) is meant to sit above what the experiments' sentence batches
waste, and below what hubs and program trees do. For the training splits of SICK (dependency trees, both sides of
25 pairs a batch), TREC (dependency trees, 25 a batch), flat ListOps and Boolean circuits (25 a batch, the
generators' settings of ``experiments/structure.py``, fewer examples), shuffled with ``--shuffles`` seeds, it
reports the most slots any level of any batch wastes (slots of nodes narrower than the level's widest) and how
many batches each cost splits; for 40 batches of 25 standard-library function ASTs and three random trees of
10^5 nodes (``hubs.py``'s), the slots per edge at each cost.

    python benchmarks/level_waste.py --out benchmarks/results/level-waste.json
    python benchmarks/level_waste.py --table benchmarks/results/level-waste.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

import lab_path  # noqa: F401  (the lab, not installed)
import torch
from depth import random_tree
from hubs import function_trees
from lab.provenance import code_state, processor
from torch_geometric.data import Batch
from torch_geometric.loader import DataLoader

from graphtree.data.pairs import pair_side
from graphtree.datasets import SICK, TREC, BooleanCircuits, ListOps
from graphtree.schedule import SPLIT_COST_SLOTS, Schedule

COSTS = (64, 256, SPLIT_COST_SLOTS)
REPO = Path(__file__).resolve().parent.parent


def corpora(data_root: Path, mirror: str | None) -> dict:
    """Each experiment corpus's training graphs, and how a batch of them becomes the graph a cell runs on."""
    sick = SICK(data_root, "train", mirror=mirror, log=False)
    trec = TREC(data_root, "train", mirror=mirror, log=False)
    listops = ListOps(data_root / "listops-flat", "train", train_size=5000, dev_size=10, test_size=10, tree="flat",
                      log=False)
    circuits = BooleanCircuits(data_root / "circuits", "train", train_size=5000, dev_size=10, test_size=10,
                               num_inputs=4, num_gates=12, log=False)
    return {"SICK (dependency, both sides)": (list(sick), lambda b: pair_side(b, "both")),
            "TREC (dependency)": (list(trec), lambda b: b), "ListOps (flat)": (list(listops), lambda b: b),
            "circuits": (list(circuits), lambda b: b)}


def level_waste(schedule: Schedule) -> int:
    """The most slots a level of the plain bottom-up plan wastes: its width times its nodes, less each node's own
    width (widest slot + 1)."""
    plan, worst = schedule.plan("bottom_up"), 0
    for width, slots in zip(plan.widths, plan.slots):
        if width:
            own = torch.where(slots != plan.num_nodes, torch.arange(width) + 1, 0).amax(dim=1)
            worst = max(worst, int((width - own).sum()))
    return worst


def sentence_rows(args: argparse.Namespace) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(args.data_root) if args.data_root else Path(scratch)
        for name, (graphs, side) in corpora(root, args.mirror).items():
            worst, batches, split = 0, 0, dict.fromkeys(COSTS, 0)
            for seed in range(args.shuffles):
                order = list(graphs)
                random.Random(seed).shuffle(order)
                for batch in DataLoader(order, batch_size=25):
                    schedule = Schedule.from_data(side(batch))
                    worst, batches = max(worst, level_waste(schedule)), batches + 1
                    for cost in COSTS:
                        split[cost] += schedule.plan("bottom_up", cost) is not schedule.plan("bottom_up")
            rows.append(dict(corpus=name, batches=batches, most_wasted=worst,
                             split_batches={str(cost): count for cost, count in split.items()}))
    return rows


def tree_rows(args: argparse.Namespace) -> list[dict]:
    functions = function_trees(40 * 25)
    graphs = {"python-ast": [Batch.from_data_list(functions[k:k + 25]) for k in range(0, len(functions), 25)],
              "random-tree": [random_tree(100_000, seed=seed) for seed in range(3)]}
    rows = []
    for name, batch in graphs.items():
        edges = sum(g.edge_index.size(1) for g in batch)
        schedules = [Schedule.from_data(g) for g in batch]
        per_cost = {str(cost): sum(s.plan("bottom_up", cost).num_slots for s in schedules) / edges
                    for cost in (None, *COSTS)}
        rows.append(dict(corpus=name, graphs=len(batch), edges=edges, slots_per_edge=per_cost))
    return rows


def table(result: dict) -> str:
    costs = [str(c) for c in COSTS]
    lines = ["| corpus | batches | most slots a level wastes | " + " | ".join(f"batches split at {c}" for c in costs)
             + " |", "|---|---:|---:|" + "---:|" * len(costs)]
    for r in result["sentences"]:
        lines.append(f"| {r['corpus']} | {r['batches']:,} | {r['most_wasted']:,} | "
                     + " | ".join(f"{r['split_batches'][c]:,}" for c in costs) + " |")
    lines += ["", "| corpus | graphs | edges | slots/edge, one level per height | "
              + " | ".join(f"split at {c}" for c in costs) + " |", "|---|---:|---:|---:|" + "---:|" * len(costs)]
    for r in result["trees"]:
        lines.append(f"| {r['corpus']} | {r['graphs']} | {r['edges']:,} | {r['slots_per_edge']['None']:.2f} | "
                     + " | ".join(f"{r['slots_per_edge'][c]:.2f}" for c in costs) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", help="where the corpora are (default: a temporary folder, from --mirror)")
    parser.add_argument("--mirror", default=str(REPO.parent / "shared" / "data"),
                        help="the folder the corpora are read from (default: ../shared/data beside the checkout)")
    parser.add_argument("--shuffles", type=int, default=3, help="shuffles of each training split (default 3)")
    parser.add_argument("--out", help="write the results here as JSON (default: print only)")
    parser.add_argument("--table", metavar="JSON", help="print the table of a results file and exit")
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(Path(args.table).read_text())))
        return
    result = dict(command="python benchmarks/level_waste.py " + " ".join(a for a in sys.argv[1:]),
                  code=code_state(), processor=processor(), default_cost=SPLIT_COST_SLOTS,
                  sentences=sentence_rows(args), trees=tree_rows(args))
    print(table(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
