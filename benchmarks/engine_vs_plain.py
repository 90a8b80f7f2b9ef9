"""graphtree's definition path and compiled kernels against the plainest level loop, for every paper cell.

For each cell (the configurations of ``ab_cells.py``, and README's ``ChildSumGRU``, a cell of one's own), each
mode (``train``: forward, a loss summing every returned state, backward, gradients zeroed; ``infer``: forward
under ``torch.no_grad()``) and each batch size, it times in one process, interleaved:

* ``definition``: the cell's ``update`` driven by the engine (``settings.overridden(native="0")``, the
  in-process form of ``GRAPHTREE_NATIVE=0``), as a cell of one's own, float64 or a GPU runs;
* ``kernels``: the cell's compiled kernel (default settings), where it has one;
* ``plain``: the plainest level loop of the same cell on the same weights (``plain_cells.py``), its states and
  gradients first checked equal to the cell's in float64.

Same seeded data as ``ab_cells.py`` (random binary trees of SST's sentence lengths, random node inputs); every
batch carries its schedule (and the plain loop its levels), built outside the timed region. Each round times
every contender of a point for ``--seconds`` back to back, in an order that rotates from round to round; the
table gives the median trees/s over rounds and the median of the per-round ratios to the plain loop.

Run from the repository root::

    python benchmarks/engine_vs_plain.py --threads 1 --out benchmarks/results/engine-vs-plain-threads1.json
    python benchmarks/engine_vs_plain.py --cells childsum gru --batch-sizes 25 --rounds 3 --seconds 0.5
    python benchmarks/engine_vs_plain.py --dtype float64 --cells childsum gru   # float64: no kernels
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ab_cells as _ab
import lab_path  # noqa: F401  (the lab, for provenance)
import plain_cells as _plain
import torch
from lab.provenance import code_state, processor_name

import graphtree.nn
from graphtree import settings
from graphtree.backend import native
from graphtree.data import with_schedule

HERE = Path(__file__).resolve().parent

CELLS = ("childsum", "nary", "slstm", "lstmrnn", "lexicalized", "topdown", "head_gated", "gru")
CONTENDERS = ("definition", "kernels", "plain")


def make_cell(name: str) -> torch.nn.Module:
    if name == "gru":
        return _plain.ChildSumGRU(300, 150)
    config = _ab.CELLS[name]
    return getattr(graphtree.nn, config.cls)(*config.args, **config.kwargs)


def in_channels(name: str) -> int:
    return 300 if name == "gru" else _ab.CELLS[name].in_channels


def step_of(contender: str, cell: torch.nn.Module, name: str, mode: str) -> Callable[[Any], None]:
    """One step of ``contender`` on one (batch, x, plain levels)."""
    loop = _plain.PLAIN_LOOPS[name](cell)

    def forward(item: Any) -> tuple[torch.Tensor, ...]:
        batch, x, levels = item
        if contender == "plain":
            return loop(x, levels)
        if contender == "definition":
            with settings.overridden(native="0"):
                return cell(x, batch)
        return cell(x, batch)

    def step(item: Any) -> None:
        if mode == "train":
            out = forward(item)
            (sum(t.sum() for t in out[1:]) + out[0].sum()).backward()
            cell.zero_grad(set_to_none=True)
        else:
            with torch.no_grad():
                forward(item)

    return step


def has_kernel(cell: torch.nn.Module, item: Any) -> bool:
    """Whether the cell's pass over this batch runs compiled under the default settings."""
    from graphtree.backend import dispatch
    from graphtree.engine import _prepare

    batch, x, _ = item
    if not native.kernels_loaded() or cell.compiled_kernel is None:
        return False
    prepared = _prepare(cell, [x], batch.schedule, cell.direction)
    with torch.no_grad():
        return dispatch.bound_kernel(cell, prepared.inputs, prepared.plan) is not None


def measure_point(name: str, mode: str, batch_size: int, args: argparse.Namespace) -> dict[str, Any]:
    torch.manual_seed(args.seed)
    cell = make_cell(name).to(args.dtype)
    items = []
    for batch, x in _ab.make_batches(batch_size, in_channels(name), args.seed):
        batch = with_schedule(batch)
        items.append((batch, x.to(args.dtype), _plain.levels_for(cell, batch.edge_index, batch.edge_pos,
                                                                batch.num_nodes)))
    check = _plain.check_equal(name, cell, items[0][0], items[0][1])
    cell.to(args.dtype)
    if check > 1e-9:
        raise SystemExit(f"engine_vs_plain: the plain loop of {name} differs from the cell by {check:.3g}")
    contenders = [c for c in CONTENDERS if c != "kernels" or has_kernel(cell, items[0])]
    steps = {c: step_of(c, cell, name, mode) for c in contenders}
    for c in contenders:  # warm-up: every batch once
        for item in items:
            steps[c](item)
    rates: dict[str, list[float]] = {c: [] for c in contenders}
    for r in range(args.rounds):
        order = contenders[r % len(contenders):] + contenders[:r % len(contenders)]
        for c in order:
            gc.collect()
            done = trees = 0
            start = time.perf_counter()
            while True:
                item = items[done % len(items)]
                steps[c](item)
                done += 1
                trees += item[0].num_graphs
                elapsed = time.perf_counter() - start
                if elapsed >= args.seconds:
                    break
            rates[c].append(trees / elapsed)
    row: dict[str, Any] = dict(cell=name, mode=mode, batch_size=batch_size, plain_check=check,
                               rates=rates, median={c: statistics.median(v) for c, v in rates.items()})
    row["vs_plain"] = {c: statistics.median(a / p for a, p in zip(rates[c], rates["plain"]))
                       for c in contenders if c != "plain"}
    row["vs_plain_range"] = {c: [min(a / p for a, p in zip(rates[c], rates["plain"])),
                                 max(a / p for a, p in zip(rates[c], rates["plain"]))]
                             for c in contenders if c != "plain"}
    return row


def print_table(rows: list[dict[str, Any]]) -> None:
    print("| cell | mode | batch | definition (× plain) | kernels (× plain) | plain |")
    print("|---|---|---:|---:|---:|---:|")
    for row in rows:
        m, v = row["median"], row["vs_plain"]
        kernels = f"{m['kernels']:,.0f} ({v['kernels']:.2f}×)" if "kernels" in m else "n/a"
        print(f"| {row['cell']} | {row['mode']} | {row['batch_size']} | {m['definition']:,.0f} "
              f"({v['definition']:.2f}×) | {kernels} | {m['plain']:,.0f} |")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cells", nargs="+", default=list(CELLS), choices=CELLS)
    parser.add_argument("--modes", nargs="+", default=["train", "infer"], choices=["train", "infer"])
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[25, 256])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0, help="per contender and round")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()
    args.dtype = getattr(torch, args.dtype)
    return args


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    native.ensure_built()
    commit, dirty = code_state()
    rows = []
    for name in args.cells:
        for mode in args.modes:
            for batch_size in args.batch_sizes:
                row = measure_point(name, mode, batch_size, args)
                rows.append(row)
                print(f"{name} {mode} {batch_size}: " + ", ".join(
                    f"{c} {r:,.0f}" for c, r in row["median"].items()), file=sys.stderr, flush=True)
    print(f"\nTrees/s, median of {args.rounds} rounds of {args.seconds} s, {args.threads} thread(s), "
          f"{str(args.dtype).removeprefix('torch.')}, torch {torch.__version__}, {processor_name()}, "
          f"commit {commit}{' (dirty)' if dirty else ''}\n")
    print_table(rows)
    if args.out is not None:
        argv = [str(a) for a in sys.argv[1:]]
        info = dict(command=shlex.join(["python", "benchmarks/engine_vs_plain.py", *argv]), commit=commit,
                    dirty=dirty, threads=args.threads, dtype=str(args.dtype), torch=torch.__version__,
                    processor=processor_name(), cpu_count=os.cpu_count(), python=platform.python_version(),
                    load_average=os.getloadavg(), rounds=args.rounds, seconds=args.seconds, seed=args.seed)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(dict(info, rows=rows), indent=1) + "\n")
        print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
