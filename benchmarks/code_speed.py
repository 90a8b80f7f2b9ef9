"""Training speed of a Child-Sum Tree-LSTM on program ASTs beside SST's parse trees, interleaved in one process.

Both run the same cell (:class:`graphtree.nn.ChildSumTreeLSTM`, ``--hidden`` in and out) on random node inputs,
forward and backward through every node's state, in minibatches of ``--batch`` trees: the first ``--trees``
functions of ``experiments/code.py``'s training split (:class:`graphtree.datasets.CodeTrees`, the script's packages,
functions of up to 100 nodes) and the first ``--trees`` SST training trees. Rounds alternate the two corpora so
that the machine's drift hits both alike; each corpus's best round counts. The AST's wide nodes (statement lists,
argument lists) next to nodes of one child are what differs: SST's binary trees have two children or none.

    python benchmarks/code_speed.py --out runs/code-speed.json
    python benchmarks/code_speed.py --out benchmarks/results/code-speed-cpu.json   # the committed file
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import lab_path  # noqa: F401  (the lab, not installed)
import torch
from torch_geometric.data import Batch

REPO = Path(__file__).resolve().parent.parent

from lab.provenance import code_state, processor  # noqa: E402
from lab.scripts import load_script  # noqa: E402

from graphtree.data import with_schedule  # noqa: E402
from graphtree.datasets import SST, CodeTrees  # noqa: E402
from graphtree.nn import ChildSumTreeLSTM  # noqa: E402


def batches(trees: list, size: int) -> list[Batch]:
    return [with_schedule(Batch.from_data_list(trees[k:k + size])) for k in range(0, len(trees), size)]


def plain(graph) -> object:
    from torch_geometric.data import Data
    return Data(edge_index=graph.edge_index, edge_pos=graph.edge_pos, num_nodes=graph.num_nodes)


def one_pass(cell: torch.nn.Module, prepared: list[Batch], hidden: int) -> float:
    began = time.perf_counter()
    for batch in prepared:
        x = torch.randn(batch.num_nodes, hidden)
        h, c = cell(x, batch)
        (h.sum() + c.sum()).backward()
    return time.perf_counter() - began


def main(argv: list[str]) -> None:
    code_script = load_script(REPO / "experiments" / "code.py")  # its packages and limits

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trees", type=int, default=1280)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--data-root", default=str(REPO / "datasets"))
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    code = [plain(g) for g in CodeTrees(args.data_root, "train", packages=code_script.PACKAGES,
                                        max_nodes=code_script.MAX_NODES, log=False)
            if g.num_nodes <= code_script.TASK_MAX_NODES][:args.trees]
    sst = [plain(g) for g in SST(args.data_root, "train", log=False)][:args.trees]
    corpora = {"code": batches(code, args.batch), "sst": batches(sst, args.batch)}
    sizes = {"code": (len(code), sum(g.num_nodes for g in code)), "sst": (len(sst), sum(g.num_nodes for g in sst))}
    widest = {"code": max(int(torch.bincount(g.edge_index[1]).max()) for g in code if g.edge_index.numel()),
              "sst": max(int(torch.bincount(g.edge_index[1]).max()) for g in sst if g.edge_index.numel())}
    cell = ChildSumTreeLSTM(args.hidden, args.hidden)
    for prepared in corpora.values():  # warm-up: kernel load, allocator
        one_pass(cell, prepared[:2], args.hidden)
    best = dict.fromkeys(corpora, float("inf"))
    for _ in range(args.rounds):
        for name, prepared in corpora.items():
            best[name] = min(best[name], one_pass(cell, prepared, args.hidden))
    rows = {name: dict(trees=sizes[name][0], nodes=sizes[name][1], widest_node=widest[name], seconds=best[name],
                       trees_per_s=sizes[name][0] / best[name], nodes_per_s=sizes[name][1] / best[name])
            for name in corpora}
    for name, row in rows.items():
        print(f"{name}: {row['trees']} trees, {row['nodes']} nodes (widest {row['widest_node']} children): "
              f"{row['trees_per_s']:.0f} trees/s, {row['nodes_per_s']:.0f} nodes/s")
    if args.out:
        record = dict(benchmark="code_speed", command="python benchmarks/code_speed.py " + " ".join(argv),
                      settings=dict(trees=args.trees, batch=args.batch, hidden=args.hidden, rounds=args.rounds,
                                    threads=1, cell="ChildSumTreeLSTM", pass_="forward and backward"),
                      results=rows, processor=processor(), code=code_state())
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
