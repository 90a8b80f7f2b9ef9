"""Corpora larger than memory: a graph store on disk against the in-memory dataset, from 10^4 to 10^6 graphs.

The corpus: the abstract syntax trees of the Python standard library's small functions (at most ``--max-nodes``
AST nodes; a node per AST node, its token the node's type, its children in order; node label: whether it is a
``Name``), repeated in order until there are ``N`` training graphs, written as JSON Lines (a train file of
``N`` graphs, dev and test files of ``--eval`` graphs each), read by :class:`graphtree.datasets.GraphFiles`,
in memory or with ``on_disk=True``.

For each ``N`` of ``--sizes``, each in a fresh process (so that its peak RSS is its own):

* **build**: ``GraphFiles(on_disk=True)`` from the file, parsed by 2 worker processes, written in one
  transaction: seconds and the store's bytes (and the in-memory ``.pt`` cache's, up to ``--memory-up-to``).
  Above ``--parse-up-to`` graphs the parse (about 3 ms a graph a worker here) would take most of an hour, so
  the store is written by repeating the encoded graphs of the ``--parse-up-to`` store (the corpus repeats its
  functions, so graph ``k`` is function ``k mod F`` with its own line number, patched in; a sample is checked
  against the file parsed): its time is the writing alone, marked as such, not a build;
* **train**: :class:`graphtree.train.Trainer` (Child-Sum, 32 channels, Adam, minibatches of 25, one thread a
  process) on the training split; graphs/s over minibatches 20 to ``--steps`` of the first epoch (the first
  20 left out: forking the loader workers, a first batch, the in-memory path's one-off concatenation); on
  disk with 2 loader workers a process reading each minibatch in one query and building its schedule, in
  memory batched in the process; in 1 process and in 2 ``torchrun`` processes (each rank training its share
  of every minibatch); the peak RSS of each training process (``ru_maxrss``), and of its largest loader
  worker. The in-memory path stops at ``--memory-up-to`` graphs: beyond, its processing holds the whole
  corpus as Python objects several times over.

    python benchmarks/on_disk.py --quick                                  # 10^3 and 10^4 graphs, minutes
    python benchmarks/on_disk.py --out runs/on-disk.json                  # the table of docs/performance.md
    python benchmarks/on_disk.py --table benchmarks/results/on-disk-cpu.json
    python benchmarks/on_disk.py --sizes 10000 --memory-up-to 10000 --rounds 3   # one size, three interleaved rounds
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import resource
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import lab_path  # noqa: F401  (the lab, not installed)

REPO = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- the corpus


def small_function_records(max_nodes: int) -> list[str]:
    """JSON Lines records of the standard library's functions of at most ``max_nodes`` AST nodes (files in name
    order, functions in source order)."""
    records = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        try:
            module = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(module):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                record = ast_record(node, max_nodes)
                if record is not None:
                    records.append(record)
    return records


def ast_record(root: ast.AST, max_nodes: int) -> str | None:
    """The tree of ``root`` as a GraphFiles JSON Lines record (pre-order ids), or ``None`` past ``max_nodes``."""
    nodes, parents = [], []
    stack: list[tuple[ast.AST, int]] = [(root, -1)]
    while stack:
        node, parent = stack.pop()
        me = len(nodes)
        if me == max_nodes:
            return None
        name = type(node).__name__
        nodes.append({"token": name, "y": int(name == "Name")})
        parents.append(parent)
        stack.extend((child, me) for child in reversed(list(ast.iter_child_nodes(node))))
    return json.dumps({"nodes": nodes, "parents": parents}, separators=(",", ":"))


def write_corpus(folder: Path, size: int, evaluation: int, max_nodes: int) -> Path:
    """``folder/n<size>/{train,dev,test}.jsonl``: the records repeated to ``size`` training graphs; dev and test
    the first ``evaluation`` records."""
    out = folder / f"n{size}"
    if (out / "test.jsonl").is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    records = small_function_records(max_nodes)
    with open(out / "train.jsonl.part", "w") as handle:
        for k in range(size):
            handle.write(records[k % len(records)] + "\n")
    for split in ("dev", "test"):
        (out / f"{split}.jsonl").write_text("".join(r + "\n" for r in records[:evaluation]))
    (out / "meta.json").write_text(json.dumps({"max_nodes": max_nodes, "functions": len(records)}))
    os.replace(out / "train.jsonl.part", out / "train.jsonl")
    return out


def vocabulary() -> dict[str, int]:
    """Every AST node type of this Python: the corpus's tokens (id 0 is never used)."""
    names = sorted(name for name in dir(ast) if isinstance(getattr(ast, name), type)
                   and issubclass(getattr(ast, name), ast.AST))
    return {name: k + 1 for k, name in enumerate(names)}


# --------------------------------------------------------------------------- one measurement, in its own process


def dataset(corpus: Path, root: Path, split: str, on_disk: bool, rebuild: bool = False):
    from graphtree.datasets import GraphFiles

    files = {s: corpus / f"{s}.jsonl" for s in ("train", "dev", "test")}
    return GraphFiles(root, split, files=files, name=corpus.name, vocab=vocabulary(), log=False, on_disk=on_disk,
                      workers=2, force_reload=rebuild)


class _EnoughStepsError(Exception):
    pass


def measure(args: argparse.Namespace) -> dict:
    """One build or one training run (``--measure``): its numbers, as JSON on the last line of stdout."""
    import torch

    from graphtree.train import distributed

    torch.set_num_threads(1)
    corpus, root = Path(args.corpus), Path(args.root)
    on_disk = args.measure.endswith("disk")
    if args.measure == "replicate-disk":
        return replicate(corpus, root, Path(args.source))
    if args.measure.startswith("build"):
        began = time.perf_counter()
        train = dataset(corpus, root, "train", on_disk, rebuild=True)
        seconds = time.perf_counter() - began
        (path,) = [p for p in Path(train.processed_dir).glob("train-*" if not on_disk else "train-*.sqlite")
                   if p.suffix == (".sqlite" if on_disk else ".pt")]
        return {"graphs": len(train), "seconds": seconds, "bytes": path.stat().st_size,
                "peak_rss_mib": _peak_mib(resource.RUSAGE_SELF)}
    distributed.setup("cpu")
    from graphtree.models import NodeEmbedding, TreeClassifier
    from graphtree.nn import ChildSumTreeLSTM
    from graphtree.train import PRESETS, PaperOptimizer, Trainer

    with distributed.main_first():
        train, dev = dataset(corpus, root, "train", on_disk), dataset(corpus, root, "dev", on_disk)
    torch.manual_seed(0)
    embedding = NodeEmbedding(len(vocabulary()) + 1, 32)
    model = TreeClassifier(embedding, ChildSumTreeLSTM(32, 32), 2, dropout=0.0)
    marks: dict[int, float] = {}

    def on_step(step: int) -> None:
        marks[step] = time.perf_counter()
        if step == args.steps:
            raise _EnoughStepsError

    trainer = Trainer(model, PaperOptimizer.for_model(model, embedding, PRESETS["teng"]), epochs=1, batch_size=25,
                      seed=0, progress=False, verbose=False, on_step=on_step, loader_workers=2)
    try:
        trainer.fit(train, dev)
    except _EnoughStepsError:
        pass
    first = 20
    graphs = (args.steps - first) * 25  # every rank's shares of these minibatches
    rss = distributed.all_gather_objects((_peak_mib(resource.RUSAGE_SELF), _peak_mib(resource.RUSAGE_CHILDREN)))
    return {"graphs": len(train), "steps": args.steps, "processes": distributed.world_size(),
            "graphs_per_s": graphs / (marks[args.steps] - marks[first]),
            "peak_rss_mib": [r[0] for r in rss], "worker_peak_rss_mib": [r[1] for r in rss]}


def replicate(corpus: Path, root: Path, source: Path) -> dict:
    """The store of ``corpus`` written from the encoded graphs of the store of ``source`` (a smaller corpus of
    the same functions holding each at least once), graph ``k`` being graph ``k mod F`` of it with line ``k + 1``;
    ``F`` graphs of it checked against the file parsed. See the module docstring."""
    import random
    import struct
    import tempfile

    import torch

    from graphtree.datasets import GraphFiles
    from graphtree.datasets.files import read_graph_file
    from graphtree.datasets.store import GraphStore, decode_graph

    functions = len(small_function_records(json.loads((corpus / "meta.json").read_text())["max_nodes"]))
    source_dataset = dataset(source, root, "train", True)
    base = source_dataset._store._rows(list(range(functions)))
    last = decode_graph(base[-1])
    assert list(last.to_dict())[-1] == "line" and int(last.line) == functions, (list(last.to_dict()), last.line)
    assert struct.unpack("<q", base[-1][-8:])[0] == functions  # the last 8 bytes: the line
    size = sum(1 for _ in open(corpus / "train.jsonl", "rb"))

    def chunks():
        for begin in range(0, size, 20_000):
            yield [base[k % functions][:-8] + struct.pack("<q", k + 1) for k in range(begin, min(size, begin + 20_000))]

    def process(self) -> None:
        self.write_graph_store(chunks())

    began = time.perf_counter()
    original, GraphFiles.process = GraphFiles.process, process
    try:
        train = dataset(corpus, root, "train", True, rebuild=True)
    finally:
        GraphFiles.process = original
    seconds = time.perf_counter() - began
    rng = random.Random(0)
    with open(corpus / "train.jsonl") as handle:
        wanted = sorted(rng.sample(range(size), 20))
        picked = {k: line for k, line in enumerate(handle) if k in wanted}
    for k in wanted:
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl") as one:
            one.write(picked[k])
            one.flush()
            (parsed,) = read_graph_file(one.name, vocab=vocabulary())
        stored = train[k]
        parsed.line = torch.tensor([k + 1])
        for key in parsed.keys():
            same = torch.equal(parsed[key], stored[key]) if isinstance(parsed[key], torch.Tensor) else (
                parsed[key] == stored[key])
            assert same, f"graph {k}: {key} differs from the file's"
    path = GraphStore(train._store.path).path
    return {"graphs": len(train), "seconds": seconds, "bytes": path.stat().st_size, "replicated_from": source.name,
            "checked": len(wanted), "peak_rss_mib": _peak_mib(resource.RUSAGE_SELF)}


def _peak_mib(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024  # KiB on Linux


def run_measure(kind: str, corpus: Path, root: Path, steps: int, processes: int = 1, source: Path | None = None,
                repo: Path = REPO) -> dict:
    """One measurement in a fresh process, with the graphtree and this script of the checkout ``repo``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(repo)}
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)]
                if processes > 1 else [sys.executable])
    script = str(repo / "benchmarks" / "on_disk.py")
    argv = [*launcher, script, "--measure", kind, "--corpus", str(corpus), "--root", str(root), "--steps",
            str(steps), *(["--source", str(source)] if source is not None else [])]
    result = subprocess.run(argv, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- the table


def _cell(row: dict, key: str, sub: str, fmt: str) -> str:
    value = row.get(key)
    if value is None:
        return "—"
    value = value[sub]
    return format(max(value) if isinstance(value, list) else value, fmt)


def _ratio(row: dict, disk: str, memory: str) -> str:
    if row.get(memory) is None or row.get(disk) is None:
        return "—"
    paired = row.get(f"paired{disk[-1]}")
    if paired and len(paired) > 1:  # the median of the rounds' ratios, and their range
        return f"{statistics.median(paired):.2f} ({paired[0]:.2f}-{paired[-1]:.2f})"
    return f"{row[disk]['graphs_per_s'] / row[memory]['graphs_per_s']:.2f}"


def table(result: dict) -> str:
    lines = ["| graphs | store: build s | store MB | .pt MB | peak RSS MiB on disk (its loader worker) | in memory | "
             "graphs/s on disk, 1 process | in memory | × | on disk, 2 processes | in memory | × |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in result["rows"]:
        build = row["build_disk"]
        seconds = f"{build['seconds']:.1f}" + (" (repeated)" if "replicated_from" in build else "")
        memory_mb = f"{row['build_memory']['bytes'] / 1e6:,.0f}" if row.get("build_memory") else "—"
        lines.append(
            f"| {row['graphs']:,} | {seconds} | {build['bytes'] / 1e6:,.0f} | {memory_mb} | "
            f"{_cell(row, 'disk1', 'peak_rss_mib', '.0f')} ({_cell(row, 'disk1', 'worker_peak_rss_mib', '.0f')}) | "
            f"{_cell(row, 'memory1', 'peak_rss_mib', '.0f')} | {_cell(row, 'disk1', 'graphs_per_s', '.0f')} | "
            f"{_cell(row, 'memory1', 'graphs_per_s', '.0f')} | {_ratio(row, 'disk1', 'memory1')} | "
            f"{_cell(row, 'disk2', 'graphs_per_s', '.0f')} | {_cell(row, 'memory2', 'graphs_per_s', '.0f')} | "
            f"{_ratio(row, 'disk2', 'memory2')} |")
    rows = [r for r in result["rows"] if r.get("disk1")]
    if len(rows) > 1:
        low, high = rows[0], rows[-1]
        lines += ["", f"Peak RSS of the training process on disk, {high['graphs']:,} graphs against {low['graphs']:,}: "
                  f"{max(high['disk1']['peak_rss_mib']) / max(low['disk1']['peak_rss_mib']):.2f}×."]
        both = [r for r in result["rows"] if r.get("memory1")]
        if len(both) > 1:
            lines[-1] += (f" In memory, {both[-1]['graphs']:,} against {both[0]['graphs']:,}: "
                          f"{max(both[-1]['memory1']['peak_rss_mib']) / max(both[0]['memory1']['peak_rss_mib']):.2f}×.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000],
                        help="training graphs (default 10^4 10^5 10^6)")
    parser.add_argument("--memory-up-to", type=int, default=100_000, help="largest size run in memory (10^5)")
    parser.add_argument("--steps", type=int, default=200, help="minibatches of 25 trained (default 200)")
    parser.add_argument("--eval", type=int, default=500, help="dev and test graphs (default 500)")
    parser.add_argument("--max-nodes", type=int, default=40, help="largest function AST kept (default 40 nodes)")
    parser.add_argument("--work", default="runs/on_disk", help="corpora and data root (default runs/on_disk)")
    parser.add_argument("--no-torchrun", action="store_true", help="one process only")
    parser.add_argument("--baseline", metavar="CHECKOUT",
                        help="also train on disk with another checkout's graphtree, interleaved with the rest (an A/B "
                             "of the disk path; its store and the in-memory runs are this checkout's)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="training runs of each mode, disk and memory interleaved (default 1); the table gives "
                             "the median round and, above one round, the median and range of the rounds' ratios")
    parser.add_argument("--quick", action="store_true", help="10^3 and 10^4 graphs, 60 steps")
    parser.add_argument("--out", help="write the results here as JSON (default: print only)")
    parser.add_argument("--table", metavar="JSON", help="print the table of a results file and exit")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--source", help=argparse.SUPPRESS)
    parser.add_argument("--parse-up-to", type=int, default=100_000,
                        help="largest store built by parsing its file; larger ones repeat its graphs (10^5)")
    args = parser.parse_args()
    if args.measure:
        out = measure(args)
        from graphtree.train import distributed
        if distributed.is_main():
            print(json.dumps(out))
        return
    if args.table:
        print(table(json.loads(Path(args.table).read_text())))
        return
    if args.quick:
        args.sizes, args.steps, args.memory_up_to, args.parse_up_to = [1_000, 10_000], 60, 10_000, 10_000
    import torch
    from lab.provenance import code_state, processor

    code = code_state()  # the code this run imports, asked before it runs
    baseline = Path(args.baseline).resolve() if args.baseline else None
    work = Path(args.work)
    rows = []
    for size in args.sizes:
        corpus = write_corpus(work / "corpora", size, args.eval, args.max_nodes)
        root = work / "data"
        row: dict = {"graphs": size}
        parsed = [s for s in args.sizes if s <= args.parse_up_to]
        if size <= args.parse_up_to or not parsed:
            row["build_disk"] = run_measure("build-disk", corpus, root, args.steps)
        else:
            source = write_corpus(work / "corpora", max(parsed), args.eval, args.max_nodes)
            row["build_disk"] = run_measure("replicate-disk", corpus, root, args.steps, source=source)
        print(f"{size:,}: store built in {row['build_disk']['seconds']:.1f} s", file=sys.stderr)
        if size <= args.memory_up_to:
            row["build_memory"] = run_measure("build-memory", corpus, root, args.steps)
        modes = ["disk"] + (["memory"] if size <= args.memory_up_to else []) + (["disk_baseline"] if baseline else [])
        for processes in (1,) if args.no_torchrun else (1, 2):
            runs: dict[str, list[dict]] = {mode: [] for mode in modes}
            for round_ in range(args.rounds):  # interleaved, the order turned each round: disk, memory, memory, disk
                for mode in modes if round_ % 2 == 0 else modes[::-1]:
                    run = run_measure(f"train-{mode.removesuffix('_baseline')}", corpus, root, args.steps, processes,
                                      repo=baseline if mode.endswith("_baseline") else REPO)
                    runs[mode].append(run)
                    print(f"{size:,} {mode} {processes} proc, round {round_ + 1}: {run}", file=sys.stderr)
            for mode, done in runs.items():  # the round of the median speed stands for the mode
                done = sorted(done, key=lambda run: run["graphs_per_s"])
                row[f"{mode}{processes}"] = {**done[(len(done) - 1) // 2], "rounds": done}
            if "memory" in runs:  # each round's disk over memory: drift of the machine between rounds cancels
                row[f"paired{processes}"] = sorted(d["graphs_per_s"] / m["graphs_per_s"]
                                                   for d, m in zip(runs["disk"], runs["memory"]))
                if baseline:
                    row[f"paired_baseline{processes}"] = sorted(d["graphs_per_s"] / m["graphs_per_s"] for d, m in
                                                                zip(runs["disk_baseline"], runs["memory"]))
        rows.append(row)
    argv = sys.argv[1:]
    if baseline:  # named by its commit, not by a folder of this machine
        at = argv.index("--baseline") if "--baseline" in argv else None
        argv = [a for k, a in enumerate(argv) if at is None or k not in (at, at + 1)]
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=baseline, capture_output=True,
                                text=True).stdout.strip()
        argv += ["--baseline", f"<checkout of {commit}>"]
    command = "python benchmarks/on_disk.py " + " ".join(argv)
    result = dict(command=command, code=code, processor=processor(), torch=torch.__version__,
                  cpus=os.cpu_count(), args={k: v for k, v in vars(args).items() if k not in ("out", "table")},
                  rows=rows)
    print(table(result))
    for row in rows:  # each round's disk over memory (median, range), and the baseline checkout's
        for key in sorted(k for k in row if k.startswith("paired")):
            ratios = row[key]
            print(f"{row['graphs']:,} graphs, {key}: {statistics.median(ratios):.2f} "
                  f"({ratios[0]:.2f}-{ratios[-1]:.2f}) over {len(ratios)} round(s)")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
