"""Hubs and wide nodes: what a level costs when one of its nodes has hundreds of children, and the slots a pass
gathers per edge on real and random trees, with levels split by width (graphtree's default) and without
(``GRAPHTREE_WIDTH_CLASSES=0``: one level per height, every node padded to the level's widest).

A level's predecessors are gathered into ``[n, K, d]`` slots. Without the split ``K`` is the level's widest node,
so one hub of 400 children makes every node of its level compute on 400 slots. Split by width, the level's
nodes of two children run as one level and the hub as another (:func:`graphtree.schedule.Schedule.plan`).

**Time per level** (forward and backward, one thread, the least of ``--repeats`` passes, all configurations
interleaved in one process so that drift hits them alike) on DAGs of ``--levels`` levels of ``--width`` nodes:

* ``layered``: node ``k`` of each level above the first has children ``k`` and one other, random node of the
  level below (``benchmarks/depth.py``'s family);
* ``layered+hubs``: the same, and on every level above the first one node more, a hub whose children are all
  ``--width`` nodes of the level below (1.5 times the edges);
* ``layered+sinks``: the same as ``layered``, and below every level but the first one node more, a sink whose
  parents are all nodes of the level above: a node of hundreds of parents, for the top-down pass.

Cells: Child-Sum compiled and on its PyTorch path (``update`` under autograd), a cell of one's own (a mean over
the children, ``depth.py``'s), and the top-down cell (its PyTorch path: its kernel serves trees only) on the
sinks, each split as the engine splits for it (its ``level_cost_slots``; the top-down cell steps filled slots
only, and splits only where a level would waste thousands of slots). ``saved/node``: what autograd keeps for
the backward per node (PyTorch paths only; the compiled kernels keep their gates in contexts of their own).

**Slots per edge** of the bottom-up plan: random trees (``depth.py``'s, node ``i``'s parent one of the 1,000
nodes before it), and batches of 25 functions' abstract syntax trees from the Python standard library of the
interpreter that runs this (a node per AST node, its children in order). And the time of Child-Sum over all
those batches, forward and backward, with plans split at several level costs: what a level's fixed cost is
worth in slots decides where a split stops paying.

    python benchmarks/hubs.py --quick                          # a minute: smaller graphs, fewer repeats
    python benchmarks/hubs.py --out runs/hubs.json             # the table of docs/performance.md
    python benchmarks/hubs.py --table benchmarks/results/hubs-cpu.json
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import sysconfig
import time
from pathlib import Path

import lab_path  # noqa: F401  (the lab, not installed)
import torch
from depth import MeanPool, _saving, layered, random_tree
from lab.provenance import code_state, processor
from torch_geometric.data import Batch, Data

from graphtree import settings
from graphtree.backend import native
from graphtree.data import with_schedule
from graphtree.nn import ChildSumTreeLSTM, TopDownTreeLSTM
from graphtree.schedule import SPLIT_COST_SLOTS, Schedule

CONFIGS = [  # (cell, path, family)
    ("child_sum", "compiled", "layered"), ("child_sum", "compiled", "layered+hubs"),
    ("child_sum", "pytorch", "layered"), ("child_sum", "pytorch", "layered+hubs"),
    ("own", "pytorch", "layered"), ("own", "pytorch", "layered+hubs"),
    ("top_down", "pytorch", "layered"), ("top_down", "pytorch", "layered+sinks"),
]


def with_hubs(levels: int, width: int, kind: str, seed: int = 0) -> Data:
    """``layered`` with a hub on every level above the first (``kind="hubs"``: all of the level below are its
    children) or a sink below every level but the first (``kind="sinks"``: all of the level above are its
    parents). The extra nodes come after the layered ones."""
    base = layered(levels, width, seed)
    extra = torch.arange(levels - 1) + levels * width
    below = torch.arange(width)
    if kind == "hubs":  # hub l + 1 of level l + 1: children every node of level l
        child = (torch.arange(levels - 1).repeat_interleave(width) * width + below.repeat(levels - 1))
        parent = extra.repeat_interleave(width)
    else:  # the sink under level l + 1: parents every node of level l + 1
        parent = ((torch.arange(levels - 1) + 1).repeat_interleave(width) * width + below.repeat(levels - 1))
        child = extra.repeat_interleave(width)
    # A hub's children at positions 0..width-1; a sink at position 2 under each parent, after its two children.
    position = below.repeat(levels - 1) if kind == "hubs" else torch.full_like(child, 2)
    edge_index = torch.cat([base.edge_index, torch.stack([child, parent])], dim=1)
    edge_pos = torch.cat([base.edge_pos, position])
    return Data(edge_index=edge_index, edge_pos=edge_pos, num_nodes=levels * width + levels - 1)


def graph_of(family: str, levels: int, width: int) -> Data:
    if family == "layered":
        return layered(levels, width)
    return with_hubs(levels, width, family.split("+")[1])


def make_cell(name: str, channels: int) -> torch.nn.Module:
    if name == "child_sum":
        return ChildSumTreeLSTM(channels, channels)
    if name == "own":
        return MeanPool(channels)
    return TopDownTreeLSTM(channels, channels, n_ary=3)


def time_pass(cell: torch.nn.Module, x: torch.Tensor, graph: Data) -> float:
    start = time.perf_counter()
    states = cell(x, graph)
    sum(s.sum() for s in (states if isinstance(states, tuple) else (states,))).backward()
    return time.perf_counter() - start


def saved_bytes(cell: torch.nn.Module, x: torch.Tensor, graph: Data) -> int:
    """What autograd keeps for the backward of one forward pass (``depth.py``'s count)."""
    saved: dict[int, int] = {}
    states = _saving(lambda: cell(x, graph), saved, [x, *cell.parameters()])
    del states
    return sum(saved.values())


def measure_levels(args: argparse.Namespace) -> list[dict]:
    """Every (config, layout) interleaved, ``--repeats`` rounds; the least time of each."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    native.ensure_built()
    graphs = {family: with_schedule(graph_of(family, args.levels, args.width))
              for family in {family for _, _, family in CONFIGS}}
    cells = {name: make_cell(name, args.channels) for name in {name for name, _, _ in CONFIGS}}
    runs = [(c, layout) for c in CONFIGS for layout in ("by_width", "by_level")]
    best: dict[tuple, float] = {}
    for round_ in range(args.repeats + 1):  # round 0 warms up (and builds each plan once)
        for (name, path, family), layout in runs if round_ % 2 else runs[::-1]:  # each order in turn
            graph = graphs[family]
            x = torch.randn(graph.num_nodes, args.channels)
            with settings.overridden(width_classes=layout == "by_width", native="auto" if path == "compiled"
                                     else "0"):
                seconds = time_pass(cells[name], x, graph)
            key = (name, path, family, layout)
            if round_:
                best[key] = min(best.get(key, float("inf")), seconds)
    rows = []
    for (name, path, family), layout in runs:
        graph = graphs[family]
        row = dict(cell=name, path=path, family=family, layout=layout, nodes=graph.num_nodes,
                   edges=graph.edge_index.size(1), heights=args.levels,
                   ms_per_level=1000 * best[(name, path, family, layout)] / args.levels)
        plan = graph.schedule.plan("top_down" if name == "top_down" else "bottom_up",
                                   cells[name].level_cost_slots if layout == "by_width" else None)
        row["levels_run"], row["slots_per_edge"] = plan.num_levels, plan.num_slots / row["edges"]
        if path == "pytorch":
            with settings.overridden(width_classes=layout == "by_width", native="0"):
                x = torch.randn(graph.num_nodes, args.channels)
                row["saved_bytes_per_node"] = saved_bytes(cells[name], x, graph) / graph.num_nodes
        rows.append(row)
    return rows


def function_trees(limit: int) -> list[Data]:
    """The abstract syntax trees of the first ``limit`` functions of the standard library (files in name order,
    functions in source order), a node per AST node, its children in order (``edge_pos``)."""
    trees = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        try:
            module = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(module):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                trees.append(_tree_of(node))
                if len(trees) == limit:
                    return trees
    return trees


def _tree_of(root: ast.AST) -> Data:
    """Pre-order ids; an edge from each node to its parent, at its position among the parent's children. (Not
    keyed by the nodes themselves: the parser shares one ``Load()`` object among all the loads of a module.)"""
    edges, positions = [], []
    stack: list[tuple[ast.AST, int, int]] = [(root, -1, 0)]
    count = 0
    while stack:
        node, parent, position = stack.pop()
        me = count
        count += 1
        if parent >= 0:
            edges.append((me, parent))
            positions.append(position)
        children = list(ast.iter_child_nodes(node))
        stack.extend((child, me, k) for k, child in reversed(list(enumerate(children))))
    edge_index = torch.tensor(edges, dtype=torch.long).t().reshape(2, -1)
    return Data(edge_index=edge_index, edge_pos=torch.tensor(positions, dtype=torch.long), num_nodes=count)


def slot_rows(args: argparse.Namespace) -> list[dict]:
    rows = []
    functions = function_trees(args.batches * 25)
    corpora = {"python-ast": [Batch.from_data_list(functions[k:k + 25]) for k in range(0, len(functions), 25)],
               "random-tree": [random_tree(args.random_nodes, seed=seed) for seed in range(3)]}
    for name, graphs in corpora.items():
        edges = sum(g.edge_index.size(1) for g in graphs)
        for layout in ("by_width", "by_level"):
            cost = SPLIT_COST_SLOTS if layout == "by_width" else None
            plans = [Schedule.from_data(g).plan("bottom_up", cost) for g in graphs]
            rows.append(dict(corpus=name, layout=layout, graphs=len(graphs), edges=edges,
                             slots=sum(p.num_slots for p in plans), levels=sum(p.num_levels for p in plans),
                             heights=sum(Schedule.from_data(g).plan("bottom_up").num_levels for g in graphs)))
            rows[-1]["slots_per_edge"] = rows[-1]["slots"] / edges
    return rows


AST_COSTS = (None, 1024, 256, 64)  # one level per height; the default split; a level's CPU cost; ~1.2 slots/edge


def ast_epoch(args: argparse.Namespace) -> list[dict]:
    """Child-Sum (``--ast-channels``) forward and backward over every batch of function ASTs, each plan split at
    each level cost of :data:`AST_COSTS` (schedules built inside the timing, as a loader's would be), on both
    paths, interleaved; the least of ``--repeats`` rounds."""
    torch.set_num_threads(1)
    functions = function_trees(args.batches * 25)
    batches = [Batch.from_data_list(functions[k:k + 25]) for k in range(0, len(functions), 25)]
    torch.manual_seed(0)
    cell = ChildSumTreeLSTM(args.ast_channels, args.ast_channels)
    features = [torch.randn(b.num_nodes, args.ast_channels) for b in batches]
    runs = [(cost, path) for cost in AST_COSTS for path in ("compiled", "pytorch")]
    best: dict[tuple, float] = {}
    for round_ in range(args.repeats + 1):
        for cost, path in runs if round_ % 2 else runs[::-1]:
            cell.level_cost_slots = cost if cost is not None else SPLIT_COST_SLOTS  # what the engine splits at
            start = time.perf_counter()
            with settings.overridden(native="auto" if path == "compiled" else "0", width_classes=cost is not None):
                for batch, x in zip(batches, features):
                    h, c = cell(x, Schedule.from_data(batch))
                    (h.sum() + c.sum()).backward()
            if round_:
                best[(cost, path)] = min(best.get((cost, path), float("inf")), time.perf_counter() - start)
    return [dict(level_cost=cost, path=path, seconds=best[(cost, path)], batches=len(batches),
                 channels=args.ast_channels) for cost, path in runs]


def table(result: dict) -> str:
    lines = ["| cell | path | family | ms/level by width | by level | × plain (by width) | × plain (by level) | "
             "slots/edge by width | by level | saved B/node by width | by level |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    rows = {(r["cell"], r["path"], r["family"], r["layout"]): r for r in result["levels"]}
    for (name, path, family, layout), r in rows.items():
        if layout != "by_width":
            continue
        other = rows[(name, path, family, "by_level")]
        plain = {lay: rows[(name, path, "layered", lay)]["ms_per_level"] for lay in ("by_width", "by_level")}
        saved = [f"{x['saved_bytes_per_node']:,.0f}" if "saved_bytes_per_node" in x else "-" for x in (r, other)]
        lines.append(f"| {name} | {path} | {family} | {r['ms_per_level']:.2f} | {other['ms_per_level']:.2f} | "
                     f"{r['ms_per_level'] / plain['by_width']:.2f} | {other['ms_per_level'] / plain['by_level']:.2f} | "
                     f"{r['slots_per_edge']:.2f} | {other['slots_per_edge']:.2f} | {saved[0]} | {saved[1]} |")
    lines += ["", "| corpus | graphs | edges | slots/edge by width | by level | levels run by width | heights |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    by = {(r["corpus"], r["layout"]): r for r in result["slots"]}
    for corpus in dict.fromkeys(r["corpus"] for r in result["slots"]):
        w, lv = by[(corpus, "by_width")], by[(corpus, "by_level")]
        lines.append(f"| {corpus} | {w['graphs']} | {w['edges']:,} | {w['slots_per_edge']:.2f} | "
                     f"{lv['slots_per_edge']:.2f} | {w['levels']:,} | {w['heights']:,} |")
    if "ast_epoch" in result:
        lines += ["", "| Child-Sum over the ASTs | level cost | seconds, compiled | seconds, PyTorch |",
                  "|---|---|---:|---:|"]
        by_cost = {(r["level_cost"], r["path"]): r["seconds"] for r in result["ast_epoch"]}
        for cost in dict.fromkeys(r["level_cost"] for r in result["ast_epoch"]):
            name = "one level per height" if cost is None else f"split by width, {cost} slots a level"
            lines.append(f"| {name} | {cost if cost is not None else '-'} | {by_cost[(cost, 'compiled')]:.2f} | "
                         f"{by_cost[(cost, 'pytorch')]:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", type=int, default=40, help="levels of the layered DAGs (default 40)")
    parser.add_argument("--width", type=int, default=400, help="nodes per level, and a hub's children (400)")
    parser.add_argument("--channels", type=int, default=64, help="state width (default 64)")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds after a warm-up round (default 5)")
    parser.add_argument("--batches", type=int, default=40, help="batches of 25 functions (default 40)")
    parser.add_argument("--random-nodes", type=int, default=100_000, help="nodes of each random tree (10^5)")
    parser.add_argument("--ast-channels", type=int, default=150, help="Child-Sum's width over the ASTs (150)")
    parser.add_argument("--quick", action="store_true", help="10 levels of 100, 2 rounds, 8 batches")
    parser.add_argument("--out", help="write the results here as JSON (default: print only)")
    parser.add_argument("--table", metavar="JSON", help="print the table of a results file and exit")
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(Path(args.table).read_text())))
        return
    if args.quick:
        args.levels, args.width, args.repeats, args.batches, args.random_nodes = 10, 100, 2, 8, 20_000
    command = "python benchmarks/hubs.py " + " ".join(sys.argv[1:])
    result = dict(command=command, code=code_state(), processor=processor(), torch=torch.__version__,
                  threads=1, args={k: v for k, v in vars(args).items() if k not in ("out", "table")},
                  levels=measure_levels(args), slots=slot_rows(args), ast_epoch=ast_epoch(args))
    print(table(result))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
