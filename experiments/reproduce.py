"""Rerun a committed run with its own command at the current code and compare every epoch exactly.

    python experiments/reproduce.py experiments/results/sick/dependency_glove50_s1.json
    python experiments/reproduce.py experiments/results/sst/bicontree_head-gated_glove50_fine_s1.json --epochs 1
    python experiments/reproduce.py experiments/results/trec/contree_glove50_s1.json --record

The run's recorded command is run again for its seed (with ``--out`` a
temporary folder, so nothing committed is touched), for all its epochs or the
first ``--epochs N``; then every epoch's metrics (loss and dev metrics; not the
times) are compared with the committed ones. First it says what to expect here:
bits agree only on the machine the run was made on, the same processor (vendor,
model, vector flags) and the same PyTorch build (version, BLAS, MKL, oneDNN),
with the same kernels and threads, as the run's ``provenance`` block records
them. Where all of these match it expects identical numbers, prints the epochs
that differ and exits 1 if any does. Where one differs, or the run predates its
record ("not recorded"), it says so and expects agreement within
``TOLERANCE`` (relative, every metric of every epoch compared): it prints the
largest difference and exits 0 within the tolerance, 1 beyond it.

``--record`` adds the verdict to ``experiments/results/reproduced.json``, which
the reports read: a row whose runs predate the current numerics version (see
:mod:`lab.provenance`) counts as current once one of its runs is
shown to reproduce there.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from lab.provenance import NUMERICS_VERSION, code_state, rounding_differences
from lab.report import Provenance
from lab.runs import ArgumentParser, check_flags_first, fail, main_guard

REPO = Path(__file__).resolve().parent.parent
CHECKS = REPO / "experiments" / "results" / "reproduced.json"
TOLERANCE = 0.02
"""Where bits cannot be expected to agree: the largest relative difference, |now - committed| / |committed|, that
any compared metric of any epoch may show. Rounding differences grow as training follows them: SICK's Dependency
Tree-LSTM after one epoch on an AMD EPYC against the committed run's machine differs by about 0.5 %."""
# Flags the check sets itself: they choose where and how long a run goes, not what it computes.
OWN_FLAGS = {"--seeds": -1, "--epochs": 1, "--out": 1, "--threads": 1, "--no-progress": 0, "--quick": 0}


def rerun_command(record: dict, out: Path, epochs: int | None) -> list[str]:
    """The run's recorded command for its own seed, writing under ``out``, optionally cut to ``epochs``."""
    words = shlex.split(record["command"])
    if words[:2] != ["python", f"experiments/{record['experiment']}.py"]:
        fail(f"run {record['run']}: its recorded command is not one of experiments/*.py ({record['command']})")
    kept, k = [], 2
    while k < len(words):
        take = OWN_FLAGS.get(words[k])
        if take is None:
            kept.append(words[k])
            k += 1
        elif take == -1:  # a list of values: up to the next flag
            k += 1
            while k < len(words) and not words[k].startswith("--"):
                k += 1
        else:
            k += 1 + take
    command = [sys.executable, words[1], *kept, "--seeds", str(record["seed"]), "--out", str(out),
               "--threads", str(record.get("threads") or 1), "--no-progress"]
    return command + (["--epochs", str(epochs)] if epochs is not None else [])


def differences(committed: list[dict], rerun: list[dict]) -> list[str]:
    """One line per epoch and metric that differs (times excepted); empty when all agree exactly."""
    lines = []
    if len(rerun) > len(committed):
        lines.append(f"the rerun has {len(rerun)} epochs, the committed run {len(committed)}")
    for old, new in zip(committed, rerun):
        for key in sorted(set(old) | set(new)):
            if not key.endswith("seconds") and key != "phases" and old.get(key) != new.get(key):
                lines.append(f"epoch {old.get('epoch')}: {key} {old.get(key)!r} committed, {new.get(key)!r} now")
    return lines


def largest_difference(committed: list[dict], rerun: list[dict]) -> tuple[float, str]:
    """The largest relative difference of a compared metric (times excepted), and a line naming it."""
    worst, line = 0.0, "none"
    for old, new in zip(committed, rerun):
        for key in sorted(set(old) & set(new)):
            then, now = old[key], new[key]
            if key.endswith("seconds") or key in ("phases", "epoch") or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in (then, now)):
                continue
            gap = abs(now - then) / abs(then) if then else (0.0 if now == then else float("inf"))
            if gap > worst:
                worst, line = gap, f"epoch {old.get('epoch')}: {key} {then:.6g} committed, {now:.6g} now"
    return worst, line


def record_check(entry: dict) -> None:
    """Add ``entry`` to the committed checks, replacing an earlier check of the same run at the same version."""
    checks = json.loads(CHECKS.read_text()) if CHECKS.is_file() else []
    checks = [c for c in checks if (c["task"], c["run"], c["numerics"]) !=
              (entry["task"], entry["run"], entry["numerics"])]
    checks.append(entry)
    checks.sort(key=lambda c: (c["task"], c["run"], c["numerics"]))
    from graphtree.train.checkpoint import atomic_write_text  # here, not above: --help needs no torch

    atomic_write_text(json.dumps(checks, indent=1) + "\n", CHECKS)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = ArgumentParser(description="Rerun a committed run with its recorded command and compare every "
                                            "epoch's metrics exactly (see the module docstring).")
    p.add_argument("result", help="a results file, e.g. experiments/results/sick/dependency_glove50_s1.json")
    p.add_argument("--epochs", type=int, default=None, help="compare only the first N epochs (default: all)")
    p.add_argument("--record", action="store_true", help="add the verdict to experiments/results/reproduced.json")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    path = Path(args.result)
    if not path.is_file():
        fail(f"no results file at {path}; give one of experiments/results/<task>/<run>.json")
    try:
        record = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError):
        fail(f"{path} is not a results file of experiments/*.py (not JSON); give one of "
             "experiments/results/<task>/<run>.json")
    if not isinstance(record, dict) or not {"experiment", "run", "seed", "command", "history"} <= record.keys():
        fail(f"{path} is not a results file of experiments/*.py (no command, seed or per-epoch history)")
    committed = record["history"]
    if args.epochs is not None and not 1 <= args.epochs <= len(committed):
        fail(f"--epochs {args.epochs}: the committed run has {len(committed)} epochs")
    cut = args.epochs if args.epochs is not None and args.epochs < len(committed) else None
    with tempfile.TemporaryDirectory(prefix="graphtree-reproduce-") as out:
        command = rerun_command(record, Path(out), cut)
        print("running: " + shlex.join(command[1:]), file=sys.stderr, flush=True)
        if subprocess.run(command, cwd=REPO).returncode != 0:
            fail(f"the rerun of {record['run']} failed (its output is above)")
        made = sorted((Path(out) / record["experiment"]).glob("*.json"))
        if len(made) != 1:
            fail(f"the rerun left {len(made)} results files instead of one")
        made_record = json.loads(made[0].read_text())
        rerun = made_record["history"]
    compared = committed[:len(rerun)]
    lines = differences(compared, rerun)
    # What to expect: bits agree only where processor, PyTorch build and kernels are the run's.
    recorded = record.get("provenance") or {}
    reasons = rounding_differences(recorded)
    kernels = ((made_record.get("provenance") or {}).get("kernels"), recorded.get("kernels"))
    if kernels[0] != kernels[1]:
        reasons.append(f"kernels: {kernels[1] or 'not recorded'} for the run, {kernels[0]} here")
    worst, where = largest_difference(compared, rerun)
    print(f"{record['run']}: {len(rerun)} epoch(s) compared, {'identical' if not lines else 'differs'}")
    if not reasons:
        print("  expected: identical numbers (the run's processor, PyTorch build, kernels and threads)")
        for line in lines:
            print(f"  {line}")
        passed = not lines
    else:
        print(f"  expected: agreement within {TOLERANCE:.0%}, not bit equality: "
              + "; ".join(reasons))
        passed = worst <= TOLERANCE
        print(f"  {'within' if passed else 'beyond'} {TOLERANCE:.0%}: largest difference {worst:.2%} ({where})")
    if args.record and lines and reasons:
        print("not recorded: a difference on another machine is no verdict on the code", file=sys.stderr)
    elif args.record:
        commit, dirty = code_state()
        record_check({"task": record["experiment"], "run": record["run"], "numerics": NUMERICS_VERSION,
                      "run_commit": Provenance.run_commit(record),
                      "commit": commit if not dirty else f"{commit}+dirty", "epochs_compared": len(rerun),
                      "identical": not lines, "command": "python experiments/reproduce.py " + shlex.join(argv)})
        print(f"recorded in {CHECKS.relative_to(REPO)}", file=sys.stderr)
    return 0 if passed else 1


if __name__ == "__main__":
    check_flags_first(parse_args, "reproduce.py")  # --help and a bad flag answer before the run's set-up loads torch
    raise SystemExit(main_guard(lambda: main(sys.argv[1:]), "reproduce.py"))
