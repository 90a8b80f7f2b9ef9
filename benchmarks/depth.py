"""Depth scaling: the time per level and the memory per node of a pass over deep graphs, as the graph grows.

The width table (``tree_lstm.py``) grows a batch sideways: more trees, the same few levels. Here graphs grow in
depth, and the question is whether a level costs the same in a graph of 200 levels as in one of 3,200, and a
node the same memory in a graph of 10^4 nodes as in one of 10^6. Two families:

* ``layered``: ``--width`` nodes per level; node ``k`` of each level above the first takes two children in the
  level below: node ``k`` and one other, random node (so nodes have one parent or several, none below the top
  level is a root, and every level holds exactly ``--width`` nodes in both directions: the top-down pass's levels
  too, which two random children would not give, as a node that no parent draws is a root in whatever level);
* ``fan-in``: ``--width`` nodes per layer; each node below the top layer feeds one random node of the layer above
  (children per node unbounded; a node that draws none is a leaf, so the levels are of unequal sizes);
* ``random-tree``: node ``i``'s parent is one of the 1,000 nodes before it (children per node unbounded: the
  cells that take any number of children, and the top-down cell, every child at position 0).

Each measurement runs in a process of its own (one thread), so that its peak resident memory is its own: a
forward and backward pass once to warm up, then ``--repeats`` timed passes, over features of width
``--channels``; of those, the pass with the least processor time is reported (a pass slowed by other work on
the machine says nothing of the code), with its wall time, its processor time in the program (user) and in
the kernel on its behalf (system: mostly page faults, the first touch of memory fresh from the kernel), and its
page faults. The ratios compare each row with the smallest graph of its cell, family and path: per level, or
per node for the random trees, whose levels are not alike. ``bytes/node`` is the growth of the process's peak
resident memory over what it held before the first pass (the graph and its features), per node; beside it, on
the PyTorch path, what autograd keeps for the backward (``saved``, every saved storage once) and the states a
node outputs. ``path``: ``compiled`` (the C++ level kernels where the cell has one) or ``pytorch``
(``GRAPHTREE_NATIVE=0``: the cell's ``update`` under autograd). ``malloc``: ``system`` (glibc's malloc as a
process starts, which hands blocks above 32 MiB back to the kernel when they are freed, so that the next pass
faults them in afresh), ``keep`` (the same after :func:`graphtree.backend.allocator.keep_freed_memory`),
``jemalloc`` (preloaded: ``$GRAPHTREE_JEMALLOC``, else the conda environment's or the system's
``libjemalloc``) or ``jemalloc-keep`` (that, after ``keep_freed_memory``); the two jemalloc ones are measured
by default where a jemalloc is found.

    python benchmarks/depth.py --quick                              # minutes: two depths, two cells
    python benchmarks/depth.py --out runs/depth.json                # every cell, 200 to 3,200 levels, 10^6 nodes
    python benchmarks/depth.py --slow --cells child_sum own         # to 3.2 and 3 million nodes (about 20 GB)
    python benchmarks/depth.py --table benchmarks/results/depth-cpu.json   # the table of a results file
"""

from __future__ import annotations

import argparse
import ctypes.util
import itertools
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import lab_path  # noqa: F401  (the lab, not installed)
import torch
from lab.provenance import code_state
from torch_geometric.data import Data

from graphtree.backend.allocator import keep_freed_memory, malloc_in_use
from graphtree.data import with_schedule
from graphtree.nn import LSTMRNN, SLSTM, ChildSumTreeLSTM, LexicalizedTreeLSTM, NaryTreeLSTM, TopDownTreeLSTM, TreeCell

CELLS = ("child_sum", "nary", "slstm", "lstm_rnn", "lexicalized", "top_down", "own")
UNBOUNDED = ("child_sum", "own")  # the cells that take any number of children (fan-in)
TREE_CELLS = (*UNBOUNDED, "top_down")  # and those that take a tree of any shape (top-down: each node one parent)
ALLOCATORS = ("system", "keep", "jemalloc", "jemalloc-keep")


class MeanPool(TreeCell):
    """A cell of one's own (``update`` only): h = tanh(W x + U mean_k h_k)."""

    def __init__(self, channels: int) -> None:
        super().__init__(state_channels=(channels,))
        self.W = torch.nn.Linear(channels, channels)
        self.U = torch.nn.Linear(channels, channels, bias=False)

    def update(self, children, x):
        return (torch.tanh(self.W(x) + self.U(children.mean())),)


MAKE = {"child_sum": lambda d: ChildSumTreeLSTM(d, d), "nary": lambda d: NaryTreeLSTM(d, d, setting="general"),
        "slstm": lambda d: SLSTM(d, d), "lstm_rnn": lambda d: LSTMRNN(d, d),
        "lexicalized": lambda d: LexicalizedTreeLSTM(d, d), "top_down": lambda d: TopDownTreeLSTM(d, d),
        "own": MeanPool}


def layered(levels: int, width: int, seed: int = 0) -> Data:
    """``levels`` levels of ``width`` nodes; node ``k`` of each level above the first has children ``k`` and one
    other, random node of the level below."""
    generator = torch.Generator().manual_seed(seed)
    parents = torch.arange(width, levels * width)
    below = (parents // width - 1) * width
    other = (parents % width + torch.randint(1, width, (parents.numel(),), generator=generator)) % width
    children = torch.stack([parents - width, below + other], dim=1).reshape(-1)
    edge_pos = torch.tensor([0, 1]).repeat(parents.numel())
    return Data(edge_index=torch.stack([children, parents.repeat_interleave(2)]), edge_pos=edge_pos,
                num_nodes=levels * width)


def fan_in(levels: int, width: int, seed: int = 0) -> Data:
    """``levels`` layers of ``width`` nodes; each node below the top layer feeds one random node of the layer above
    (the children per node are unbounded, and a node that draws none is a leaf whatever its layer)."""
    generator = torch.Generator().manual_seed(seed)
    child = torch.arange((levels - 1) * width)
    parent = (child // width + 1) * width + torch.randint(0, width, (child.numel(),), generator=generator)
    return Data(edge_index=torch.stack([child, parent]), num_nodes=levels * width)


def random_tree(num_nodes: int, window: int = 1000, seed: int = 0) -> Data:
    """Node ``i``'s parent: one of the ``window`` nodes before it (node 0 the root)."""
    generator = torch.Generator().manual_seed(seed)
    child = torch.arange(1, num_nodes)
    parent = child - 1 - (torch.rand(num_nodes - 1, generator=generator) * child.clamp(max=window)).long()
    return Data(edge_index=torch.stack([child, parent]), num_nodes=num_nodes)


def _peak_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _saving(forward, saved: dict, exclude: list[torch.Tensor]):
    """Run ``forward``, recording in ``saved`` the bytes of every storage autograd keeps for the backward (the
    inputs and parameters excluded: they exist anyway). The compiled kernels keep their levels' gates in
    contexts of their own, which this does not see."""
    own = {t.untyped_storage().data_ptr() for t in exclude}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in own:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        return forward()


def measure_one(cell_name: str, family: str, size: int, width: int, channels: int, repeats: int,
                allocator: str = "system") -> dict:
    """One measurement, in this process: time per level and peak memory per node of forward + backward."""
    torch.set_num_threads(1)
    if allocator.startswith("jemalloc") and malloc_in_use() != "jemalloc":
        raise SystemExit(f"--allocator {allocator}: the preloaded library is not jemalloc")
    if allocator.endswith("keep") and not keep_freed_memory():
        raise SystemExit(f"--allocator {allocator}: keep_freed_memory() took no effect under {malloc_in_use()}")
    torch.manual_seed(0)
    graph = {"layered": lambda: layered(size, width), "fan-in": lambda: fan_in(size, width),
             "random-tree": lambda: random_tree(size)}[family]()
    if family == "random-tree" and cell_name == "top_down":  # children unordered: all under parameter set 0
        graph.edge_pos = torch.zeros(graph.num_edges, dtype=torch.long)
    cell = MAKE[cell_name](channels)
    x = torch.randn(graph.num_nodes, channels, requires_grad=True)
    direction = getattr(cell, "direction", "bottom_up")
    graph = with_schedule(graph, [direction])  # built once, outside the timed passes, as a loader would
    levels = graph.schedule.plan(direction).num_levels
    before = _peak_bytes()
    passes, saved = [], {}
    for k in range(repeats + 1):
        start, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
        if k:
            states = cell(x, graph)
        else:  # the warm-up pass also sums what autograd keeps for the backward
            states = _saving(lambda: cell(x, graph), saved, exclude=[x, *cell.parameters()])
        sum(s.sum() for s in (states if isinstance(states, tuple) else (states,))).backward()
        end, cpu_end = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
        if k:  # the first pass warms up (and loads the kernels)
            passes.append((end - start, cpu_end.ru_utime - cpu.ru_utime, cpu_end.ru_stime - cpu.ru_stime,
                           cpu_end.ru_minflt - cpu.ru_minflt))
        del states
        x.grad = None
        cell.zero_grad(set_to_none=True)
    # The pass with the least processor time: a pass slowed by other work on the machine is not the code's.
    seconds, user, system, faults = min(passes, key=lambda p: p[1] + p[2])
    return {"cell": cell_name, "family": family, "size": size, "nodes": graph.num_nodes, "levels": levels,
            "seconds": seconds, "ms_per_level": 1e3 * seconds / levels, "us_per_node": 1e6 * seconds / graph.num_nodes,
            "user_ms_per_level": 1e3 * user / levels, "system_ms_per_level": 1e3 * system / levels,
            "faults_per_node": faults / graph.num_nodes,
            "bytes_per_node": max(0, _peak_bytes() - before) / graph.num_nodes,
            "saved_bytes_per_node": sum(saved.values()) / graph.num_nodes,
            "state_bytes_per_node": sum(cell.state_channels) * x.element_size()}


def jemalloc_library() -> str | None:
    """The jemalloc to preload: ``$GRAPHTREE_JEMALLOC``, the conda environment's, or the system's; None if none."""
    if os.environ.get("GRAPHTREE_JEMALLOC"):
        return os.environ["GRAPHTREE_JEMALLOC"]
    conda = Path(os.environ.get("CONDA_PREFIX", sys.prefix)) / "lib" / "libjemalloc.so.2"
    return str(conda) if conda.exists() else ctypes.util.find_library("jemalloc")


def run_in_subprocess(cell: str, family: str, size: int, path: str, allocator: str, args: argparse.Namespace) -> dict:
    env = {**os.environ, "GRAPHTREE_NATIVE": "0" if path == "pytorch" else "auto", "OMP_NUM_THREADS": "1"}
    if allocator.startswith("jemalloc"):
        env["LD_PRELOAD"] = " ".join(filter(None, [jemalloc_library(), env.get("LD_PRELOAD")]))
    command = [sys.executable, __file__, "--one", cell, family, str(size), "--width", str(args.width),
               "--channels", str(args.channels), "--repeats", str(args.repeats), "--allocator", allocator]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{cell} {family} {size} ({path}) failed:\n{done.stderr[-2000:]}")
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "path": path, "allocator": allocator}


def _saved(row: dict) -> str:
    # On the compiled path the kernels keep their levels' gates in contexts that autograd's hooks do not see.
    return f"{row['saved_bytes_per_node']:,.0f}" if row["path"] == "pytorch" else ""


def table(rows: list[dict]) -> str:
    """Markdown: per level (per node for the random trees) the wall time, the processor time in the program
    (user) and in the kernel for it (system: mostly first touches of fresh memory), each row's ratio to the
    smallest graph of its kind, and memory."""
    lines = ["| cell | family | levels | nodes | path | malloc | ms per level | user ms per level | "
             "system ms per level | × user per level | × per level | page faults per node | bytes per node | "
             "saved | states |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    smallest: dict[tuple, tuple[float, float]] = {}
    for row in sorted(rows, key=lambda r: (r["cell"], r["family"], r["path"], r["allocator"], r["nodes"])):
        key = (row["cell"], row["family"], row["path"], row["allocator"])
        per = row["levels"] if row["family"] != "random-tree" else row["nodes"]  # a tree's levels are not alike
        user, total = row["user_ms_per_level"] * row["levels"] / per, row["ms_per_level"] * row["levels"] / per
        smallest.setdefault(key, (user, total))
        lines.append(f"| {row['cell']} | {row['family']} | {row['levels']:,} | {row['nodes']:,} | {row['path']} | "
                     f"{row['allocator']} | "
                     f"{row['ms_per_level']:.2f} | {row['user_ms_per_level']:.2f} | "
                     f"{row['system_ms_per_level']:.2f} | {user / smallest[key][0]:.2f} | "
                     f"{total / smallest[key][1]:.2f} | {row['faults_per_node']:.2f} | {row['bytes_per_node']:,.0f} | "
                     f"{_saved(row)} | {row['state_bytes_per_node']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", nargs="+", choices=CELLS, default=list(CELLS))
    parser.add_argument("--levels", nargs="+", type=int, default=[200, 800, 3200], help="depths of the layered DAGs")
    parser.add_argument("--tree-nodes", nargs="*", type=int, default=[100_000, 1_000_000],
                        help="sizes of the random trees (Child-Sum, top-down, the cell of one's own; none: no trees)")
    parser.add_argument("--width", type=int, default=500, help="nodes per level of the layered DAGs")
    parser.add_argument("--channels", type=int, default=32)
    parser.add_argument("--paths", nargs="+", choices=("compiled", "pytorch"), default=["compiled", "pytorch"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--allocator", nargs="+", choices=ALLOCATORS, default=None,
                        help="glibc's malloc as the process starts or told to keep freed memory "
                             "(graphtree.backend.allocator.keep_freed_memory), or jemalloc preloaded, as it starts "
                             "or told so; each is measured (default: all four, jemalloc where one is found)")
    parser.add_argument("--quick", action="store_true", help="child_sum and own, 100 and 400 levels, no tree")
    parser.add_argument("--slow", action="store_true", help="200 to 6,400 levels and trees of up to 3 million nodes")
    parser.add_argument("--out", default=None, help="write every measurement to this JSON (default: print only)")
    parser.add_argument("--table", default=None, metavar="JSON", help="only print the table of this results file")
    parser.add_argument("--one", nargs=3, metavar=("CELL", "FAMILY", "SIZE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    code = code_state() if args.out else None  # the code this process imported, not the tree at its end
    if args.one:
        cell, family, size = args.one
        print(json.dumps(measure_one(cell, family, int(size), args.width, args.channels, args.repeats,
                                     args.allocator[0] if args.allocator else "system")))
        return
    if args.table:
        print(table(json.loads(Path(args.table).read_text())["rows"]))
        return
    if args.slow:
        args.levels, args.tree_nodes = [200, 800, 3200, 6400], [100_000, 1_000_000, 3_000_000]
    if args.quick:
        args.cells, args.levels, args.tree_nodes, args.repeats = ["child_sum", "own"], [100, 400], [], 1
    if args.allocator is None:
        args.allocator = [a for a in ALLOCATORS if jemalloc_library() or not a.startswith("jemalloc")]
    elif any(a.startswith("jemalloc") for a in args.allocator) and not jemalloc_library():
        raise SystemExit("--allocator jemalloc: no libjemalloc found (conda install -c conda-forge jemalloc, or "
                         "apt install libjemalloc2; or set GRAPHTREE_JEMALLOC to its path)")
    jobs = [(cell, "layered", levels) for cell in args.cells for levels in args.levels]
    jobs += [(cell, "fan-in", levels) for cell in args.cells if cell in UNBOUNDED for levels in args.levels]
    jobs += [(cell, "random-tree", nodes) for cell in args.cells if cell in TREE_CELLS for nodes in args.tree_nodes]
    rows = []
    for cell, family, size in jobs:
        for path, allocator in itertools.product(args.paths, args.allocator):
            rows.append(run_in_subprocess(cell, family, size, path, allocator, args))
            print(f"{cell} {family} {size} {path} {allocator}: {rows[-1]['ms_per_level']:.2f} ms/level "
                  f"({rows[-1]['user_ms_per_level']:.2f} user, {rows[-1]['system_ms_per_level']:.2f} system), "
                  f"{rows[-1]['bytes_per_node']:,.0f} B/node", file=sys.stderr, flush=True)
    print(table(rows))
    if args.out:
        record = {"command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
                  "code": code, "channels": args.channels, "width": args.width, "rows": rows}
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
