"""Threads on a shared machine: one SST Child-Sum epoch at one thread and at two, on a quiet machine and beside
a busy process.

Each run is ``experiments/sst.py`` as :mod:`epoch` starts it (one process, fine-grained SST, GloVe 50d, the
paper's minibatch, one epoch); the figure is the epoch's training pass as the results file records it
(``train_seconds``). The setups:

* ``1``: ``--threads 1``;
* ``2-fixed``: ``--threads 2 --fixed-threads``, two threads whatever else runs (what ``--threads 2`` did
  before the thread budget);
* ``2``: ``--threads 2``, the default: fewer threads while other processes keep the processors busy
  (:class:`graphtree.backend.thread_budget.ThreadBudget`); the results file's ``threads_used`` says how long
  it ran at each count;
* ``2-passive`` (only when asked): ``2-fixed`` with ``OMP_WAIT_POLICY=PASSIVE``, OpenMP's workers sleeping
  between parallel regions instead of spinning.

Beside a busy process: the benchmark starts one Python process that spins on the processor for the length of
the run, and stops it after. Rounds alternate the order of the setups and of quiet and busy, so that drift of
the machine (other work on it) hits all alike; the table gives the median over rounds and the range, and the
machine's load average (one minute) at the runs' start: a "quiet" run is only as quiet as the machine was.

    python benchmarks/contention.py                       # 3 rounds, prints the table (about 10 minutes on 2 cores)
    python benchmarks/contention.py --rounds 1 --quick    # 1,000 training sentences, a smoke run
    python benchmarks/contention.py --setups 1 2-fixed 2 2-passive --rounds 3 \\
        --out benchmarks/results/contention-cpu.json --readme    # the table of docs/performance.md
    python benchmarks/contention.py --table benchmarks/results/contention-cpu.json   # the table of a results file

Nothing is written unless asked: ``--out`` the JSON of every run, ``--readme`` the table into
docs/performance.md's ``<!-- results:contention -->`` block.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import lab_path  # noqa: F401  (the lab, not installed)
import torch
from epoch import PAGE, REPO, git, train_once
from lab.provenance import processor
from lab.report import write_readme_section

from graphtree.train import atomic_write_text

SETUPS = {"1": (1, [], {}), "2-fixed": (2, ["--fixed-threads"], {}), "2": (2, [], {}),
          "2-passive": (2, ["--fixed-threads"], {"OMP_WAIT_POLICY": "PASSIVE"})}
NAMES = {"1": "1 thread", "2-fixed": "2 threads, fixed", "2": "2 threads (budget, default)",
         "2-passive": "2 threads, fixed, OMP_WAIT_POLICY=PASSIVE"}
CONDITIONS = ("quiet", "busy")
SPIN = "while True: pass"  # the busy process: one thread, always runnable


@contextmanager
def busy_process(busy: bool) -> Iterator[None]:
    """A process spinning on a processor for the duration (none when ``busy`` is false)."""
    if not busy:
        yield
        return
    spinner = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


def measure(args: argparse.Namespace) -> dict:
    """Every run, interleaved; the results JSON."""
    argv, skip = [], False
    for arg in sys.argv[1:]:  # the command without --out, which names a file of this machine
        if skip:
            skip = False
        elif arg == "--out":
            skip = True
        else:
            argv.append(arg)
    results = {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
               "machine": f"{processor()}, {os.cpu_count()} CPUs", "torch": torch.__version__,
               "model": "childsum", "quick": args.quick, "rounds": args.rounds, "setups": args.setups,
               "command": shlex.join(["python", "benchmarks/contention.py", *argv]),
               "runs": {c: {s: [] for s in args.setups} for c in CONDITIONS}}
    flags = ["--quick"] if args.quick else []
    train_once("childsum", 1, 1, 1, REPO, flags=flags)  # not recorded: fills the corpus cache, loads the kernels
    for round_ in range(args.rounds):
        conditions = CONDITIONS if round_ % 2 == 0 else CONDITIONS[::-1]
        for k, condition in enumerate(conditions):
            for setup in args.setups if (round_ + k) % 2 == 0 else args.setups[::-1]:
                threads, more_flags, environment = SETUPS[setup]
                load = os.getloadavg()[0]
                with busy_process(condition == "busy"):
                    run = train_once("childsum", 1, 1, threads, REPO, flags=flags + more_flags,
                                     environment=environment)
                run["load_before"] = round(load, 2)
                results["runs"][condition][setup].append(run)
                used = f", threads used {run['threads_used']}" if "threads_used" in run else ""
                print(f"{NAMES[setup]}, {condition}, round {round_ + 1}: {run['train_seconds'][0]:.1f} s "
                      f"(load {load:.1f}{used})", file=sys.stderr, flush=True)
    return results


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.1f}" + (f" ({min(values):.1f}-{max(values):.1f})" if len(values) > 1 else "")


def table(results: dict) -> str:
    """Epoch seconds by setup, quiet and beside a busy process (median, range), against one thread."""
    runs = results["runs"]

    def seconds(condition: str, setup: str) -> list[float]:
        return [r["train_seconds"][0] for r in runs[condition].get(setup, [])]

    def against_one(condition: str, setup: str) -> str:
        one, these = seconds(condition, "1"), seconds(condition, setup)
        if not one or not these:
            return "-"
        return f"{statistics.median(these) / statistics.median(one):.2f}×"

    loads = {c: [r["load_before"] for s in runs[c].values() for r in s] for c in CONDITIONS}
    sentences = "1,000" if results["quick"] else "8,544"
    lines = [f"SST Child-Sum, one epoch's training pass ({sentences} training sentences), {results['machine']}, "
             f"seconds: median over {results['rounds']} round(s) "
             f"(range) (`{results['command']}`, at {results['commit'][:7]}{'+dirty' if results['dirty'] else ''}). "
             f"Load average before the runs: quiet {_spread(loads['quiet'])}, busy {_spread(loads['busy'])} "
             "(the machine was shared with other work throughout).", "",
             "| setup | quiet | × 1 thread | beside a busy process | × 1 thread | budget's time at 1 thread, busy |",
             "|---|---:|---:|---:|---:|---:|"]
    for setup in results["setups"]:
        used = [r["threads_used"] for r in runs["busy"][setup] if "threads_used" in r]
        at_one = [u.get("1", 0.0) / max(sum(u.values()), 1e-9) for u in used]
        lines.append(f"| {NAMES[setup]} | {_spread(seconds('quiet', setup))} | {against_one('quiet', setup)} | "
                     f"{_spread(seconds('busy', setup))} | {against_one('busy', setup)} | "
                     f"{f'{100 * statistics.median(at_one):.0f} %' if at_one else '-'} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setups", nargs="+", default=["1", "2-fixed", "2"], choices=tuple(SETUPS),
                        help="1, 2-fixed, 2 (default: these three) and 2-passive")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each setup and condition (default 3)")
    parser.add_argument("--quick", action="store_true", help="1,000 training sentences (the SST script's --quick)")
    parser.add_argument("--out", default=None, help="JSON of every run (default: print only)")
    parser.add_argument("--readme", action="store_true",
                        help="write the table into docs/performance.md's <!-- results:contention --> block")
    parser.add_argument("--table", default=None, metavar="JSON", help="only print the table of this results file")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    results = json.loads(Path(args.table).read_text()) if args.table else measure(args)
    text = table(results)
    print(text)
    if args.out:
        atomic_write_text(json.dumps(results, indent=1) + "\n", Path(args.out))
    if args.readme and not write_readme_section(PAGE, "contention", text):
        raise SystemExit("docs/performance.md has no <!-- results:contention --> block")


if __name__ == "__main__":
    main()
