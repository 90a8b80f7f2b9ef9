"""Two builds of the compiled kernels in one process, train steps interleaved: the same cells, the same batches.

    python benchmarks/paired_builds.py --old-library OLD.so [--cells childsum nary] [--steps 40]
    python benchmarks/paired_builds.py --old-library graphtree/backend/graphtree_native_<hash>.so  # A/A

This checkout's kernels (loaded, or built at first use) are "new"; ``--old-library`` is the pybind11 module of
a build from before the kernels were PyTorch operators (their names and arguments are the same), or this
build's own library for an A/A check (two libraries that both register ``torch.ops.graphtree`` cannot share a
process, so no other build of operators can be compared here). The engine is switched between the two
builds step by step (``graphtree.backend.native``'s loaded kernels), the order alternating, one thread; so the
machine's drift hits both alike, which separate processes (``ab_cells.py``) cannot promise on a busy machine.
For each cell of ``ab_cells.CELLS`` and batches of 25 trees of its data: the median step of each build and the
median of the paired ratios old/new (the new build's speed relative to the old; above 1: faster).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from pathlib import Path

import ab_cells
import torch

import graphtree.nn
from graphtree.backend import native
from graphtree.data import with_schedule


def old_kernels(path: Path, new: object) -> object:
    """The other build: its pybind11 module, or (a library of operators) the loaded operators themselves."""
    module_name = path.name.split(".")[0]
    spec = importlib.util.spec_from_file_location(module_name, path)
    try:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    except ImportError:  # no Python module in it: a library of PyTorch operators
        return new


def cell_of(config: ab_cells.CellConfig) -> torch.nn.Module:
    """The cell of ``config`` (a class of ``graphtree.nn``)."""
    return getattr(graphtree.nn, config.cls)(*config.args, **config.kwargs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old-library", type=Path, required=True, help="the other build's library file")
    parser.add_argument("--cells", nargs="+", default=["childsum", "nary", "slstm", "topdown", "head_gated"],
                        choices=[name for name, c in ab_cells.CELLS.items() if "." not in c.cls])
    parser.add_argument("--steps", type=int, default=40, help="timed steps per build and cell")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with native.use_native(True):
        native.ensure_built()
        new = native._kernels
        old = old_kernels(args.old_library, new)
        builds = {"old": old, "new": new}
        for name in args.cells:
            config = ab_cells.CELLS[name]
            torch.manual_seed(0)
            cell = cell_of(config)
            batches = [(with_schedule(b), x) for b, x in ab_cells.make_batches(25, config.in_channels, 0)]

            def step(k: int, cell: torch.nn.Module = cell, batches: list = batches) -> None:
                batch, x = batches[k % len(batches)]
                ab_cells.states_sum(cell(x, batch)).backward()
                cell.zero_grad(set_to_none=True)

            for side in builds:  # a warm-up of every batch on each build
                native._kernels = builds[side]
                for k in range(len(batches)):
                    step(k)
            times: dict[str, list[float]] = {"old": [], "new": []}
            for k in range(args.steps):
                for side in ("old", "new") if k % 2 == 0 else ("new", "old"):
                    native._kernels = builds[side]
                    start = time.perf_counter()
                    step(k)
                    times[side].append(time.perf_counter() - start)
            paired = statistics.median(a / b for a, b in zip(times["old"], times["new"]))
            print(f"{name} train/25: old {1e3 * statistics.median(times['old']):.2f} ms, new "
                  f"{1e3 * statistics.median(times['new']):.2f} ms a step (medians of {args.steps}); "
                  f"new's speed relative to old, the median of the paired ratios: {paired:.3f}", flush=True)
        native._kernels = new


if __name__ == "__main__":
    main()
