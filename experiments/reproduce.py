"""Rerun a committed run with its own command at the current code and compare every epoch exactly.

    python experiments/reproduce.py experiments/results/sick/dependency_glove50_s1.json
    python experiments/reproduce.py experiments/results/sst/bicontree_head-gated_glove50_fine_s1.json --epochs 1
    python experiments/reproduce.py experiments/results/trec/contree_glove50_s1.json --record

The run's recorded command is run again for its seed (with ``--out`` a
temporary folder, so nothing committed is touched), for all its epochs or the
first ``--epochs N``; then every epoch's metrics (loss and dev metrics; not the
times) are compared with the committed ones for equality, to the last bit. It
prints the epochs that differ and exits 1 if any does, 0 if all agree. Bits
agree only on the kind of processor the run was made on (its JSON records it
since results files name the processor): where the processor differs, or the
run does not name one, a difference is reported as such and not recorded.

``--record`` adds the verdict to ``experiments/results/reproduced.json``, which
the reports read: a row whose runs predate the current numerics version (see
:mod:`graphtree.experiments.provenance`) counts as current once one of its runs is
shown to reproduce there.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from graphtree.experiments.provenance import NUMERICS_VERSION, code_state, processor
from graphtree.experiments.report import Provenance
from graphtree.experiments.runs import ArgumentParser, fail, main_guard
from graphtree.train import atomic_write_text

REPO = Path(__file__).resolve().parent.parent
CHECKS = REPO / "experiments" / "results" / "reproduced.json"
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


def record_check(entry: dict) -> None:
    """Add ``entry`` to the committed checks, replacing an earlier check of the same run at the same version."""
    checks = json.loads(CHECKS.read_text()) if CHECKS.is_file() else []
    checks = [c for c in checks if (c["task"], c["run"], c["numerics"]) !=
              (entry["task"], entry["run"], entry["numerics"])]
    checks.append(entry)
    checks.sort(key=lambda c: (c["task"], c["run"], c["numerics"]))
    atomic_write_text(json.dumps(checks, indent=1) + "\n", CHECKS)


def main(argv: list[str]) -> int:
    p = ArgumentParser(description="Rerun a committed run with its recorded command and compare every "
                                            "epoch's metrics exactly (see the module docstring).")
    p.add_argument("result", help="a results file, e.g. experiments/results/sick/dependency_glove50_s1.json")
    p.add_argument("--epochs", type=int, default=None, help="compare only the first N epochs (default: all)")
    p.add_argument("--record", action="store_true", help="add the verdict to experiments/results/reproduced.json")
    args = p.parse_args(argv)
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
        rerun = json.loads(made[0].read_text())["history"]
    compared = committed[:len(rerun)]
    lines = differences(compared, rerun)
    verdict = "identical" if not lines else "differs"
    print(f"{record['run']}: {len(rerun)} epoch(s) compared, {verdict}")
    for line in lines:
        print(f"  {line}")
    recorded = (record.get("provenance") or {}).get("processor")
    elsewhere = recorded != processor()
    if lines and elsewhere:  # across processors a difference says nothing about the code
        print(f"  the run was made on {recorded or 'a processor it does not record'}; this machine is "
              f"{processor()}: vector code rounds differently from one kind of processor to another, so this "
              f"difference does not show a change of the code. Compare on the run's kind of processor.")
    if args.record and lines and elsewhere:
        print("not recorded: a difference across processors is no verdict on the code", file=sys.stderr)
    elif args.record:
        commit, dirty = code_state()
        record_check({"task": record["experiment"], "run": record["run"], "numerics": NUMERICS_VERSION,
                      "run_commit": Provenance.run_commit(record),
                      "commit": commit if not dirty else f"{commit}+dirty", "epochs_compared": len(rerun),
                      "identical": not lines, "command": "python experiments/reproduce.py " + shlex.join(argv)})
        print(f"recorded in {CHECKS.relative_to(REPO)}", file=sys.stderr)
    return 0 if not lines else 1


if __name__ == "__main__":
    raise SystemExit(main_guard(lambda: main(sys.argv[1:]), "reproduce.py"))
