"""Training throughput of the SST script with 1 and with several processes (``torchrun``), one thread each.

For each model and process count, ``experiments/sst.py`` trains ``--epochs`` epochs of SST (fine-grained, GloVe
50d vectors, the paper's settings and minibatch) into a temporary folder, as a user would start it: plain
``python`` for one process, ``python -m torch.distributed.run --standalone --nproc_per_node N`` for N. The
figure is the epoch's training pass as the results file records it (``train_seconds``: batches, forward,
backward, optimizer, gradient all-reduce; not the dev evaluation nor start-up), turned into training trees per
second. Rounds alternate the order of the process counts so that drift of the machine hits both alike; the
table gives the median over rounds and the speed-up over one process.

    python benchmarks/processes.py --models nary bicontree --processes 1 2 --rounds 2 \
        --out benchmarks/results/processes-cpu-threads1.json --readme

``--readme`` writes the table into README's ``<!-- results:processes -->`` block.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from graphtree.train import atomic_write_text  # noqa: E402
from graphtree.train.report import write_readme_section  # noqa: E402

NAMES = {"nary": "Constituency Tree-LSTM (Tai et al.)", "bicontree": "BiConTree (Teng & Zhang)"}


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()


def train_once(model: str, processes: int, epochs: int, threads: int) -> dict:
    """One run of the SST script; its per-epoch training seconds and training trees per second."""
    script = ["experiments/sst.py", "--model", model, "--embeddings", "glove50", "--fine-grained",
              "--epochs", str(epochs), "--threads", str(threads), "--no-progress"]
    launcher = [sys.executable] if processes == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)]
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = str(threads)
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run([*launcher, *script, "--out", out], cwd=REPO, env=env, capture_output=True,
                              text=True)
        if done.returncode != 0:
            raise SystemExit(f"{shlex.join(launcher + script)} failed:\n{done.stderr[-3000:]}")
        (result,) = Path(out, "sst").glob("*.json")
        record = json.loads(result.read_text())
    trees = int(re.search(r"SST fine-grained: (\d+) /", done.stderr).group(1))
    seconds = [h["train_seconds"] for h in record["history"]]
    return {"train_seconds": seconds, "trees_per_s": [trees / s for s in seconds], "train_trees": trees,
            "command": shlex.join(["python" if processes == 1 else "torchrun", *launcher[3:], *script])}


def table(results: dict) -> str:
    lines = [f"Training trees per second on SST (fine-grained, GloVe 50d, the paper's minibatch), one thread per "
             f"process, {results['machine']}, median of {results['rounds']} rounds of {results['epochs']} "
             f"epoch(s) (`python benchmarks/processes.py {results['arguments']}`, at {results['commit'][:7]}"
             f"{'+dirty' if results['dirty'] else ''}):", "",
             "| model | " + " | ".join(f"{p} process{'es' if p > 1 else ''}" for p in results["processes"]) + " |",
             "|---|" + "---|" * len(results["processes"])]
    for model, rows in results["models"].items():
        base = rows[str(results["processes"][0])]["median_trees_per_s"]
        cells = []
        for p in results["processes"]:
            rate = rows[str(p)]["median_trees_per_s"]
            cells.append(f"{rate:.0f}" + ("" if p == results["processes"][0] else f" ({rate / base:.2f}×)"))
        lines.append(f"| {NAMES.get(model, model)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["nary", "bicontree"])
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="threads per process")
    parser.add_argument("--out", default=None, help="JSON of every run (default: print only)")
    parser.add_argument("--readme", action="store_true", help="write the table into README.md")
    args = parser.parse_args()
    arguments = " ".join(sys.argv[1:]).replace(str(REPO) + os.sep, "")
    results = {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
               "machine": f"{platform.machine()}, {os.cpu_count()} CPUs", "torch": torch.__version__,
               "threads": args.threads, "epochs": args.epochs, "rounds": args.rounds,
               "processes": args.processes, "arguments": arguments, "models": {}}
    for model in args.models:
        runs: dict[int, list[dict]] = {p: [] for p in args.processes}
        for round_ in range(args.rounds):
            order = args.processes if round_ % 2 == 0 else args.processes[::-1]
            for p in order:
                run = train_once(model, p, args.epochs, args.threads)
                runs[p].append(run)
                print(f"{model}, {p} process(es), round {round_ + 1}: "
                      f"{', '.join(f'{r:.0f}' for r in run['trees_per_s'])} trees/s", file=sys.stderr)
        results["models"][model] = {str(p): {"runs": r, "median_trees_per_s": statistics.median(
            x for run in r for x in run["trees_per_s"])} for p, r in runs.items()}
    text = table(results)
    print(text)
    if args.out:
        atomic_write_text(json.dumps(results, indent=1) + "\n", Path(args.out))
    if args.readme and not write_readme_section(REPO / "README.md", "processes", text):
        raise SystemExit("README.md has no <!-- results:processes --> block")


if __name__ == "__main__":
    main()
