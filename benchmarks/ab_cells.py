"""Interleaved A/B throughput of every tree cell between two checkouts of graphtree ("old" and "new").

For each cell configuration of :data:`CELLS`, each mode (``train``: forward, a scalar loss summing every
returned state, backward and zeroing the gradients; ``infer``: forward under ``torch.no_grad()``) and each
batch size (25 and 256 trees), it reports trees per second in float32 (on the CPU, or with ``--device cuda``
on the GPU, where every step waits for the GPU before the clock is read), for both checkouts.

Every measurement runs in a fresh subprocess (this same file with ``--child``) whose ``PYTHONPATH`` is the
checkout, so each side imports its own ``graphtree``; the child checks that every imported ``graphtree``
module lies under the checkout and fails loudly otherwise. Both sides see the same seeded data: random
binary trees whose sentence lengths follow SST's training split (deciles below, mean ~19 words), a random
bracketing as deep as SST's, and random node inputs (``requires_grad=False``, like frozen word vectors),
built by this script rather than by either checkout. The compiled kernels are built (or loaded) before
anything is timed, every batch's schedule is built outside the timed region, and a few
warm-up steps run first. Then as many steps as fit in ``--seconds`` are timed, cycling through a fixed
list of batches.

Rounds alternate the order of the two sides (old, new / new, old) so that drift of the machine hits both
alike; the table gives the median over rounds of each side, their ratio new/old, and the range of the
per-round ratios. A JSON file keeps every round's raw numbers, both checkouts' commits and dirty state,
the threads, torch version, processor and the exact command line.

Run from the repository root::

    python benchmarks/ab_cells.py --old ../graphtree-old --new .
    python benchmarks/ab_cells.py --old A --new B --rounds 3 --seconds 1 --cells nary childsum --out ab.json
    python benchmarks/ab_cells.py --old A --new B --device cuda --modes train --cells nary topdown

A quick way to get an "old" checkout: ``git worktree add ../graphtree-old HEAD`` (``git worktree remove``
afterwards). The default settings (10 configs, 5 rounds, 2 s per point) take about half an hour.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import json
import os
import platform
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

# --------------------------------------------------------------------------- what is measured


@dataclass(frozen=True)
class CellConfig:
    """A cell of ``graphtree.nn``, built as ``getattr(graphtree.nn, cls)(*args, **kwargs)``, or of the module a
    dotted ``cls`` names (``"graphtree.models.bicontree._LeafSum"``).

    Every cell is called as ``cell(x, batch)`` with ``x`` of shape ``[num_nodes, in_channels]`` for every
    node (cells that only read the leaves' rows ignore the others).
    """

    cls: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def in_channels(self) -> int:
        return self.args[0]


CELLS: dict[str, CellConfig] = {
    "childsum": CellConfig("ChildSumTreeLSTM", (300, 150)),
    "nary": CellConfig("NaryTreeLSTM", (300, 150)),  # setting="constituency": only leaves read x
    "nary_general": CellConfig("NaryTreeLSTM", (300, 150), {"setting": "general"}),
    "slstm": CellConfig("SLSTM", (150, 150)),  # leaf="embedding": h = x at leaves, so in == hidden
    "lstmrnn": CellConfig("LSTMRNN", (150, 150)),  # a leaf's output is its word vector: in == hidden; tanh
    "lexicalized": CellConfig("LexicalizedTreeLSTM", (300, 150)),  # x: head vectors of every node
    "topdown": CellConfig("TopDownTreeLSTM", (300, 150)),  # x: head vectors of every node
    "head_gated": CellConfig("HeadLexicalization", (300,), {"method": "gated"}),
    "head_left": CellConfig("HeadLexicalization", (300,), {"method": "left"}),  # no parameters: see measure()
    "leafsum": CellConfig("graphtree.models.bicontree._LeafSum", (300,)),  # BiTreeLSTM's span means; no parameters
}

MODES = ("train", "infer")
BATCH_SIZES = (25, 256)

# SST training split, deciles of the number of words (min, 10%, ..., max): a length is drawn uniformly
# within a uniformly chosen decile, so the mean is ~19.6 words (~38 nodes a tree).
SST_LENGTH_DECILES = (2, 7, 11, 13, 16, 18, 21, 24, 27, 32, 52)
# The left part of a span is 1 + (span - 1) * u**SPLIT_SKEW words: random bracketings about as deep as SST's.
SPLIT_SKEW = 4.0
TREE_POOL = 1024  # trees generated once; a batch size cuts the pool into consecutive batches
MAX_BATCHES = 8  # batches cycled through per (mode, batch size)
EXIT_WRONG_CHECKOUT = 3  # the child imported a graphtree from outside its checkout


# --------------------------------------------------------------------------- data (identical for both sides)


def random_tree(num_words: int, rng: random.Random) -> tuple[list[int], list[int]]:
    """Parent (-1 at the root) and position under the parent (0 left, 1 right) of each node, in pre-order."""
    parent: list[int] = []
    position: list[int] = []
    stack = [(0, num_words, -1, -1)]  # (span start, span end, parent node, position under it)
    while stack:
        start, end, up, pos = stack.pop()
        node = len(parent)
        parent.append(up)
        position.append(pos)
        if end - start == 1:
            continue  # a leaf: one word
        split = start + 1 + min(int((end - start - 1) * rng.random() ** SPLIT_SKEW), end - start - 2)
        stack.append((split, end, node, 1))
        stack.append((start, split, node, 0))
    return parent, position


def tree_pool(seed: int) -> list[tuple[list[int], list[int]]]:
    rng = random.Random(seed)
    trees = []
    for _ in range(TREE_POOL):
        k = rng.randrange(len(SST_LENGTH_DECILES) - 1)
        trees.append(random_tree(rng.randint(SST_LENGTH_DECILES[k], SST_LENGTH_DECILES[k + 1]), rng))
    return trees


def make_batches(batch_size: int, in_channels: int, seed: int) -> list[tuple[Any, Tensor]]:
    """Up to ``MAX_BATCHES`` batches of ``batch_size`` trees, each with its random node inputs."""
    from torch_geometric.data import Batch, Data

    trees = tree_pool(seed)
    out = []
    for b in range(max(1, min(MAX_BATCHES, len(trees) // batch_size))):
        graphs = []
        for parent, position in trees[b * batch_size:(b + 1) * batch_size]:
            child = [i for i, p in enumerate(parent) if p >= 0]
            edge_index = torch.tensor([child, [parent[i] for i in child]], dtype=torch.long).view(2, -1)
            edge_pos = torch.tensor([position[i] for i in child], dtype=torch.long)
            graphs.append(Data(edge_index=edge_index, edge_pos=edge_pos, num_nodes=len(parent)))
        batch = Batch.from_data_list(graphs)
        generator = torch.Generator().manual_seed(seed * 1000 + b)
        out.append((batch, torch.randn(batch.num_nodes, in_channels, generator=generator)))
    return out


# --------------------------------------------------------------------------- child: one checkout, one cell


def states_sum(out: Tensor | tuple[Tensor, ...]) -> Tensor:
    """A scalar loss touching every returned state."""
    if isinstance(out, Tensor):
        return out.sum()
    return sum(t.sum() for t in out[1:]) + out[0].sum()


def ensure_native() -> dict[str, Any]:
    """Build or load the checkout's compiled kernels, wherever this version keeps them."""
    for name in ("graphtree.nn.native", "graphtree.backend.native"):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name is not None and name.startswith(err.name):
                continue  # this version has no such module
            raise
        if not hasattr(module, "ensure_built"):
            continue
        start = time.perf_counter()
        built = bool(module.ensure_built())
        loaded = module.kernels_loaded() if hasattr(module, "kernels_loaded") else None
        return dict(module=name, built=built, loaded=loaded, seconds=round(time.perf_counter() - start, 2))
    return dict(module=None, built=False, loaded=None, seconds=0.0)


def measure(cell: torch.nn.Module, in_channels: int, mode: str, batch_size: int, seconds: float,
            warmup: int, seed: int, device: torch.device | None = None) -> dict[str, Any]:
    """Trees per second of one (mode, batch size), with what it ran on."""
    device = device or torch.device("cpu")
    try:  # each batch carries its schedule, as a TreeLoader's do
        from graphtree.data import with_schedule
    except ImportError:  # a checkout from before it: its cells cache the schedule on the batch at the first pass
        def with_schedule(batch: Any) -> Any:
            return batch
    batches = [(with_schedule(batch).to(device), x.to(device))
               for batch, x in make_batches(batch_size, in_channels, seed)]
    # A GPU runs behind the host: the clock is read once the GPU has finished every step before it.
    wait = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    # A cell without parameters (HeadLexicalization "left") has nothing to train unless its input does.
    x_grad = mode == "train" and not any(p.requires_grad for p in cell.parameters())
    if x_grad:
        batches = [(batch, x.requires_grad_()) for batch, x in batches]

    cell.zero_grad(set_to_none=True)
    cell.eval()
    with torch.no_grad():  # builds what the first pass builds; the checksum compares old and new
        sums = [float(states_sum(cell(x, batch))) for batch, x in batches]
    cell.train(mode == "train")

    def step(batch: Any, x: Tensor) -> None:
        if mode == "train":
            loss = states_sum(cell(x, batch))
            loss.backward()
            cell.zero_grad(set_to_none=True)
            if x_grad:
                x.grad = None
        else:
            with torch.no_grad():
                cell(x, batch)

    for i in range(max(warmup, len(batches))):  # every batch at least once in this mode
        step(*batches[i % len(batches)])
    gc.collect()

    steps = trees = 0
    wait()
    start = time.perf_counter()
    while True:
        batch, x = batches[steps % len(batches)]
        step(batch, x)
        steps += 1
        trees += batch.num_graphs
        wait()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            break
    return dict(mode=mode, batch_size=batch_size, trees_per_s=trees / elapsed, steps=steps, trees=trees,
                seconds=elapsed, num_batches=len(batches), x_requires_grad=x_grad,
                mean_nodes_per_batch=statistics.mean(b.num_nodes for b, _ in batches), checksum=sums[0])


def check_checkout(checkout: Path) -> None:
    """Exit with ``EXIT_WRONG_CHECKOUT`` unless every imported graphtree module lies under ``checkout``."""
    for name, module in list(sys.modules.items()):
        if name != "graphtree" and not name.startswith("graphtree."):
            continue
        path = getattr(module, "__file__", None)
        if path is None or not Path(path).resolve().is_relative_to(checkout):
            print(f"ab_cells: {name} was imported from {path}, not from the checkout {checkout}; "
                  f"PYTHONPATH={os.environ.get('PYTHONPATH')!r}", file=sys.stderr)
            sys.exit(EXIT_WRONG_CHECKOUT)


def child_main(spec: dict[str, Any]) -> None:
    """Measure one cell config of one checkout at the points of ``spec``; write the result as JSON."""
    checkout = Path(spec["checkout"]).resolve()
    torch.set_num_threads(spec["threads"])
    found = importlib.util.find_spec("graphtree")
    origin = found.origin if found is not None else None
    if origin is None or not Path(origin).resolve().is_relative_to(checkout):
        print(f"ab_cells: graphtree resolves to {origin}, not to the checkout {checkout}", file=sys.stderr)
        sys.exit(EXIT_WRONG_CHECKOUT)

    result: dict[str, Any] = dict(torch=torch.__version__, threads=torch.get_num_threads(), points=[])
    device = torch.device(spec.get("device", "cpu"))
    try:
        import graphtree.nn

        # The kernels are CPU code: on a GPU every cell runs its definition, and nothing is built.
        result["native"] = ensure_native() if device.type == "cpu" else None
        config = CELLS[spec["cell"]]
        torch.manual_seed(spec["seed"])
        owner = importlib.import_module(config.cls.rsplit(".", 1)[0]) if "." in config.cls else graphtree.nn
        cell = getattr(owner, config.cls.rsplit(".", 1)[-1])(*config.args, **config.kwargs).to(device)
        check_checkout(checkout)
        result["parameters"] = sum(p.numel() for p in cell.parameters())
    except Exception:
        check_checkout(checkout)
        result["error"] = traceback.format_exc()
    else:
        for mode, batch_size in spec["points"]:
            try:
                point = measure(cell, config.in_channels, mode, batch_size, spec["seconds"], spec["warmup"],
                                spec["seed"], device)
            except Exception:
                point = dict(mode=mode, batch_size=batch_size, error=traceback.format_exc())
            result["points"].append(point)
        check_checkout(checkout)
    Path(spec["result"]).write_text(json.dumps(result))


# --------------------------------------------------------------------------- parent: interleaved rounds


def public_argv(argv: list[str]) -> list[str]:
    """``argv`` with the values of --old, --new and --out replaced by what they stand for."""
    shown = {"--old": "OLD", "--new": "NEW", "--out": "OUT.json"}
    return [shown[argv[k - 1]] if k and argv[k - 1] in shown else a for k, a in enumerate(argv)]


def git_state(checkout: Path) -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True,
                              check=True).stdout

    try:
        porcelain = git("status", "--porcelain").splitlines()
        return dict(head=git("rev-parse", "HEAD").strip(), dirty=bool(porcelain), porcelain=porcelain)
    except (OSError, subprocess.CalledProcessError) as err:
        return dict(head=None, dirty=None, error=str(err))


def cpu_model() -> str | None:
    # Read here rather than through lab.provenance: this harness imports each compared checkout's
    # graphtree in turn, and imports none of its own.
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def run_child(checkout: Path, cell: str, points: list[tuple[str, int]], args: argparse.Namespace,
              tmp: Path) -> dict[str, Any]:
    """One fresh process on ``checkout``; its result, or an ``error`` when it died."""
    result_file = tmp / "result.json"
    result_file.unlink(missing_ok=True)
    spec = dict(checkout=str(checkout), cell=cell, points=points, threads=args.threads, seconds=args.seconds,
                warmup=args.warmup, seed=args.seed, device=args.device, result=str(result_file))
    env = dict(os.environ, PYTHONPATH=str(checkout), OMP_NUM_THREADS=str(args.threads),
               MKL_NUM_THREADS=str(args.threads))
    command = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)]
    try:
        proc = subprocess.run(command, env=env, cwd=checkout, capture_output=True, text=True,
                              timeout=args.child_timeout)
    except subprocess.TimeoutExpired:
        return dict(points=[], error=f"child timed out after {args.child_timeout} s")
    if proc.returncode == EXIT_WRONG_CHECKOUT:
        raise SystemExit(f"ab_cells: wrong graphtree imported for {checkout}:\n{proc.stderr}")
    if proc.returncode != 0 or not result_file.is_file():
        return dict(points=[], error=f"child exited with {proc.returncode}:\n{proc.stderr[-3000:]}")
    return json.loads(result_file.read_text())


def first_error_line(error: str) -> str:
    lines = [line for line in error.strip().splitlines() if line.strip()]
    return lines[-1] if lines else error


def format_rate(value: float | None) -> str:
    if value is None:
        return "error"
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def summarize(runs: list[dict[str, Any]], cells: list[str], points: list[tuple[str, int]]) -> list[dict[str, Any]]:
    """Per (cell, mode, batch): each side's rates over rounds, their medians and the ratio new/old."""
    rates: dict[tuple[str, str, str, int, int], float] = {}
    for run in runs:
        for point in run["result"]["points"]:
            if "trees_per_s" in point:
                rates[run["side"], run["cell"], point["mode"], point["batch_size"], run["round"]] = point["trees_per_s"]
    rounds = sorted({run["round"] for run in runs})
    rows = []
    for cell in cells:
        for mode, batch_size in points:
            per_side = {side: [rates[side, cell, mode, batch_size, r] for r in rounds
                               if (side, cell, mode, batch_size, r) in rates] for side in ("old", "new")}
            paired = [rates["new", cell, mode, batch_size, r] / rates["old", cell, mode, batch_size, r]
                      for r in rounds if ("new", cell, mode, batch_size, r) in rates
                      and ("old", cell, mode, batch_size, r) in rates]
            median = {side: statistics.median(v) if v else None for side, v in per_side.items()}
            ratio = median["new"] / median["old"] if median["new"] and median["old"] else None
            rows.append(dict(cell=cell, mode=mode, batch_size=batch_size, old=per_side["old"],
                             new=per_side["new"], old_median=median["old"], new_median=median["new"],
                             ratio=ratio, round_ratios=paired))
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    print("| cell | mode | batch | old trees/s | new trees/s | new/old | per-round new/old |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for row in rows:
        ratio = f"{row['ratio']:.3f}" if row["ratio"] is not None else "-"
        spread = (f"{min(row['round_ratios']):.3f}-{max(row['round_ratios']):.3f}"
                  if row["round_ratios"] else "-")
        print(f"| {row['cell']} | {row['mode']} | {row['batch_size']} | {format_rate(row['old_median'])} | "
              f"{format_rate(row['new_median'])} | {ratio} | {spread} |")


def print_notes(runs: list[dict[str, Any]]) -> None:
    """Errors, sides whose kernels differ, and outputs that differ between old and new."""
    notes = set()
    checksums: dict[tuple[str, str, int, str], float] = {}
    for run in runs:
        result, where = run["result"], f"{run['side']} {run['cell']}"
        if "error" in result:
            notes.add(f"- {where}: {first_error_line(result['error'])}")
        native = result.get("native")
        if native is not None and not native["built"]:
            notes.add(f"- {where}: compiled kernels not available ({native['module']}); Python level loop")
        for point in result["points"]:
            label = f"{where} {point['mode']}/{point['batch_size']}"
            if "error" in point:
                notes.add(f"- {label}: {first_error_line(point['error'])}")
                continue
            if point.get("x_requires_grad"):
                notes.add(f"- {run['cell']} train: no parameters, so x requires grad (backward reaches x)")
            checksums[run["cell"], point["mode"], point["batch_size"], run["side"]] = point["checksum"]
    for (cell, mode, batch_size, side), value in checksums.items():
        other = checksums.get((cell, mode, batch_size, "new"))
        if side == "old" and other is not None and abs(other - value) > 1e-3 * max(1.0, abs(value)):
            notes.add(f"- {cell} {mode}/{batch_size}: outputs differ (sum of states on the first batch: "
                      f"old {value:.6g}, new {other:.6g}); same seed, so parameter init or the math changed")
    if notes:
        print("\nNotes:")
        print("\n".join(sorted(notes)))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--old", type=Path, help="checkout of the baseline (a folder holding graphtree/)")
    p.add_argument("--new", type=Path, help="checkout to compare against it")
    p.add_argument("--rounds", type=int, default=5, help="rounds; odd ones run new first (default 5)")
    p.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS and torch.set_num_threads (default 1)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the cells run (default cpu)")
    p.add_argument("--seconds", type=float, default=2.0, help="timed seconds per point (default 2)")
    p.add_argument("--cells", nargs="+", choices=list(CELLS), default=list(CELLS), help="cell configs (default all)")
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument("--batch-sizes", nargs="+", type=int, default=list(BATCH_SIZES))
    p.add_argument("--warmup", type=int, default=3, help="untimed steps before timing (at least one per batch)")
    p.add_argument("--seed", type=int, default=0, help="seed of the trees, the inputs and the parameters")
    p.add_argument("--process-per-point", action="store_true",
                   help="a fresh process for every (mode, batch size), not one per cell config")
    p.add_argument("--child-timeout", type=float, default=1800.0, help="seconds before a child is killed")
    p.add_argument("--out", type=Path, help="JSON of every round (default runs/ab-cells-threads<N>.json: the "
                                            "committed results in benchmarks/results/ are written only when named)")
    p.add_argument("--child", help=argparse.SUPPRESS)  # internal: the JSON spec of one child process
    args = p.parse_args(argv)
    if args.child is None and (args.old is None or args.new is None):
        p.error("--old and --new are required")
    return args


def main() -> None:
    args = parse_args()
    if args.child is not None:
        child_main(json.loads(args.child))
        return
    sides = {"old": args.old.resolve(), "new": args.new.resolve()}
    for side, checkout in sides.items():
        if not (checkout / "graphtree" / "__init__.py").is_file():
            raise SystemExit(f"ab_cells: --{side} {checkout} holds no graphtree package")
    device = "" if args.device == "cpu" else f"-{args.device}"
    out = args.out or Path("runs") / f"ab-cells{device}-threads{args.threads}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    points = [(mode, batch_size) for mode in args.modes for batch_size in args.batch_sizes]
    groups = [[point] for point in points] if args.process_per_point else [points]
    info = dict(
        # The command with the checkouts named by side, not by this machine's paths; their commits are below.
        command=shlex.join(["python", "benchmarks/ab_cells.py", *public_argv(sys.argv[1:])]),
        checkouts={side: git_state(checkout) for side, checkout in sides.items()},
        threads=args.threads, device=args.device, torch=torch.__version__, python=platform.python_version(),
        gpu=torch.cuda.get_device_name() if args.device == "cuda" else None,
        machine=dict(processor=platform.processor(), model_name=cpu_model(), platform=platform.platform(),
                     cpu_count=os.cpu_count()),
        settings=dict(rounds=args.rounds, seconds=args.seconds, warmup=args.warmup, seed=args.seed,
                      cells={name: dict(cls=CELLS[name].cls, args=CELLS[name].args, kwargs=CELLS[name].kwargs)
                             for name in args.cells},
                      points=points, process_per_point=args.process_per_point, tree_pool=TREE_POOL,
                      max_batches=MAX_BATCHES, sst_length_deciles=SST_LENGTH_DECILES, split_skew=SPLIT_SKEW),
        # Which settings were in force; a folder (GRAPHTREE_MIRROR) is this machine's, so only its presence.
        env={k: "(a folder)" if k == "GRAPHTREE_MIRROR" else v for k, v in os.environ.items()
             if k.startswith("GRAPHTREE_") or k.endswith("_NUM_THREADS")},
    )
    for side in sides:
        state = info["checkouts"][side]
        print(f"{side}: {sides[side]} @ {state['head']}{' (dirty)' if state['dirty'] else ''}", file=sys.stderr)

    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ab_cells_") as tmp:
        for r in range(args.rounds):
            order = ("old", "new") if r % 2 == 0 else ("new", "old")
            for cell in args.cells:
                for group in groups:
                    for side in order:  # the two sides of one measurement back to back
                        started = time.time()
                        result = run_child(sides[side], cell, group, args, Path(tmp))
                        runs.append(dict(round=r, side=side, cell=cell, started=started, result=result))
                        rates = ", ".join(f"{p['mode']}/{p['batch_size']} "
                                          f"{format_rate(p.get('trees_per_s'))}" for p in result["points"])
                        status = rates or first_error_line(result.get("error", ""))
                        print(f"[round {r + 1}/{args.rounds}] {cell} {side}: {status}", file=sys.stderr)

    rows = summarize(runs, args.cells, points)
    where = f"{info['gpu']}, " if info["gpu"] else ""
    print(f"\nTrees/s, median of {args.rounds} rounds, {where}{args.threads} thread(s), torch {torch.__version__}, "
          f"{cpu_model() or platform.processor()}")
    print(", ".join(f"{side}: {state['head']}{' (dirty)' if state['dirty'] else ''}"
                    for side, state in info["checkouts"].items()) + "\n")
    print_table(rows)
    print_notes(runs)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dict(info, summary=rows, runs=runs), indent=1) + "\n")
    print(f"\nwrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
