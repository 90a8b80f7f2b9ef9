"""The SST training epoch a user waits for, in one process and in several (``torchrun``), phase by phase.

For each model and each setup ``PxT`` (P processes of T threads), ``experiments/sst.py`` trains ``--epochs``
epochs of SST (fine-grained, GloVe 50d vectors, the paper's settings and minibatch) into a temporary folder, as
a user would start it: plain ``python`` for one process, ``python -m torch.distributed.run --standalone
--nproc_per_node P`` for several. The figures are the epoch's training pass as the results file records it
(``train_seconds``: batches, forward, backward, optimizer, gradient all-reduce; not the dev evaluation nor
start-up), as training trees per second, and its split into the trainer's phases
(:data:`graphtree.train.trainer.PHASES`, rank 0's, and the dev evaluation). Rounds alternate the order of the
setups so that drift of the machine hits all alike; tables give the median over rounds.

    python benchmarks/epoch.py --models nary bicontree --setups 1x1 2x1 1x2 --rounds 2 \
        --out benchmarks/results/processes-cpu.json --readme processes
    python benchmarks/epoch.py --setups 1x1 1x2 --rounds 1 --out benchmarks/results/epoch-cpu.json --readme epoch
    python benchmarks/epoch.py --table benchmarks/results/epoch-cpu.json --readme epoch   # tables only

``--readme processes`` writes the speed-up table into README's ``<!-- results:processes -->`` block,
``--readme epoch`` the phase table into ``<!-- results:epoch -->``.
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

NAMES = {"nary": "Constituency Tree-LSTM (Tai et al.)", "childsum": "Child-Sum Tree-LSTM (Tai et al.)",
         "slstm": "S-LSTM (Zhu et al.)", "lstmrnn": "LSTM-RNN (Le & Zuidema)", "contree": "ConTree (Teng & Zhang)",
         "contree_lex": "ConTree + Lex (Teng & Zhang)", "topdown": "Top-down (Teng & Zhang)",
         "bicontree": "BiConTree (Teng & Zhang)"}
ALL_MODELS = list(NAMES)
PHASE_COLUMNS = ("batches", "forward", "backward", "optimizer", "embeddings", "dev")


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()


def setup_name(setup: str) -> str:
    processes, threads = (int(v) for v in setup.split("x"))
    return (f"{processes} process{'es' if processes > 1 else ''} × {threads} thread{'s' if threads > 1 else ''}")


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
            "phases": [h.get("phases") for h in record["history"]],
            "command": shlex.join(["python" if processes == 1 else "torchrun", *launcher[3:], *script])}


def source(results: dict) -> str:
    return (f"SST (fine-grained, GloVe 50d, the paper's minibatch), {results['machine']}, median of "
            f"{results['rounds']} round(s) of {results['epochs']} epoch(s) (`{results['command']}`, at "
            f"{results['commit'][:7]}{'+dirty' if results['dirty'] else ''})")


def phase_table(results: dict) -> str:
    """Seconds of one training epoch and of its phases, by model and setup."""
    lines = [f"Seconds of one training epoch and its phases, {source(results)}:", "",
             "| model | setup | trees/s | epoch (training) | " + " | ".join(PHASE_COLUMNS) + " |",
             "|---|---|---|---|" + "---|" * len(PHASE_COLUMNS)]
    for model, rows in results["models"].items():
        for setup in results["setups"]:
            runs = rows[setup]["runs"]
            epochs = [(run["train_seconds"][k], phases) for run in runs
                      for k, phases in enumerate(run.get("phases") or []) if phases]
            if not epochs:
                continue
            median = statistics.median(seconds for seconds, _ in epochs)
            cells = [f"{statistics.median(p[c] for _, p in epochs):.2f}" for c in PHASE_COLUMNS]
            lines.append(f"| {NAMES.get(model, model)} | {setup_name(setup)} | "
                         f"{rows[setup]['median_trees_per_s']:.0f} | {median:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n" if len(lines) > 4 else ""  # runs from before the trainer timed phases: none


def table(results: dict) -> str:
    setups = results["setups"]
    lines = [f"Training trees per second, {source(results)}; × the first column:", "",
             "| model | " + " | ".join(setup_name(s) for s in setups) + " |", "|---|" + "---|" * len(setups)]
    for model, rows in results["models"].items():
        base = rows[setups[0]]["median_trees_per_s"]
        cells = []
        for s in setups:
            rate = rows[s]["median_trees_per_s"]
            cells.append(f"{rate:.0f}" + ("" if s == setups[0] else f" ({rate / base:.2f}×)"))
        lines.append(f"| {NAMES.get(model, model)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def measure(args: argparse.Namespace) -> dict:
    """Every run of every model and setup, interleaved; the results JSON."""
    # The command without --out, which names a file of this machine, not a setting of the measurement.
    argv = [a for k, a in enumerate(sys.argv[1:]) if a != "--out" and (k == 0 or sys.argv[k] != "--out")]
    results = {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
               "machine": f"{platform.machine()}, {os.cpu_count()} CPUs", "torch": torch.__version__,
               "epochs": args.epochs, "rounds": args.rounds, "setups": args.setups,
               "command": shlex.join(["python", "benchmarks/epoch.py", *argv]),
               "models": {}}
    for model in args.models:
        runs: dict[str, list[dict]] = {s: [] for s in args.setups}
        for round_ in range(args.rounds):
            for setup in args.setups if round_ % 2 == 0 else args.setups[::-1]:
                processes, threads = (int(v) for v in setup.split("x"))
                run = train_once(model, processes, args.epochs, threads)
                runs[setup].append(run)
                print(f"{model}, {setup_name(setup)}, round {round_ + 1}: "
                      f"{', '.join(f'{r:.0f}' for r in run['trees_per_s'])} trees/s", file=sys.stderr)
        results["models"][model] = {s: {"runs": r, "median_trees_per_s": statistics.median(
            x for run in r for x in run["trees_per_s"])} for s, r in runs.items()}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=ALL_MODELS, choices=ALL_MODELS)
    parser.add_argument("--setups", nargs="+", default=["1x1", "2x1", "1x2"],
                        help="PxT: P processes of T threads each (default: 1x1 2x1 1x2)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--out", default=None, help="JSON of every run (default: print only)")
    parser.add_argument("--table", default=None, help="only write the table of this JSON (no runs)")
    parser.add_argument("--readme", choices=("processes", "epoch"), default=None,
                        help="write the speed-up table (processes) or the phase table (epoch) into README.md")
    args = parser.parse_args()
    if args.table:
        results = json.loads(Path(args.table).read_text())
    else:
        if any(not re.fullmatch(r"[1-9]\d*x[1-9]\d*", s) for s in args.setups):
            parser.error("--setups: each one PxT, e.g. 2x1")
        results = measure(args)
    tables = {"processes": table(results), "epoch": phase_table(results)}
    print(*(t for t in tables.values() if t), sep="\n")
    if args.out:
        atomic_write_text(json.dumps(results, indent=1) + "\n", Path(args.out))
    if args.readme and not write_readme_section(REPO / "README.md", args.readme, tables[args.readme]):
        raise SystemExit(f"README.md has no <!-- results:{args.readme} --> block")


if __name__ == "__main__":
    main()
