"""``experiments/sst.py --device cuda``, model by model: the epochs a user waits for, the first included.

For each model, the script's own command (``--device cuda --epochs E --seeds 1 --no-progress``, GloVe 50d
vectors and the fine-grained task as ``benchmarks/epoch.py`` runs it on the CPU) trains into a temporary
folder under a time limit of its own. From its results file (or, for a run cut short, its per-epoch CSV) the
summary keeps each epoch's training pass (``train_seconds``), the time spent capturing graphs in it
(``capture_seconds``), the whole epoch with dev (``seconds``), the path that ran (``replay``: replayed, or
eager and why) and the command's wall time. The CPU's epoch beside it: measured here with ``--cpu`` (the same
command on ``--device cpu --threads 2 --replay off``), else the two-thread median of the committed
``benchmarks/results/epoch-cpu.json`` (another machine: its name goes with it). The summary is written after
every model, so a run stopped early keeps what finished.

    python benchmarks/gpu_epochs.py --out runs/gpu/epochs.json
    python benchmarks/gpu_epochs.py --models nary bicontree --cpu --out runs/gpu/epochs.json
    python benchmarks/gpu_epochs.py --dry --out /tmp/epochs.json   # on the CPU: --quick, replay on (a check)
    python benchmarks/gpu_epochs.py --table runs/gpu/epochs.json --step runs/gpu/step.json   # the tables
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODELS = ("nary", "childsum", "slstm", "lstmrnn", "contree", "contree_lex", "topdown", "bicontree")
CPU_REFERENCE = REPO / "benchmarks" / "results" / "epoch-cpu.json"


def command(model: str, args: argparse.Namespace, device: str, out: Path, epochs: int) -> list[str]:
    argv = [sys.executable, "experiments/sst.py", "--model", model, "--embeddings", args.embeddings,
            "--fine-grained", "--epochs", str(epochs), "--seeds", "1", "--no-progress", "--device", device]
    if args.dry:
        argv += ["--quick", "--replay", "on"]
    elif device == "cpu":  # the CPU's own epoch, as benchmarks/epoch.py's two-thread setup runs it
        argv += ["--threads", "2", "--replay", "off"]
    if args.data_root:
        argv += ["--data-root", args.data_root]
    return [*argv, "--out", str(out)]  # last: the recorded command leaves the temporary folder out


def collect(out: Path) -> dict:
    """What the run left in ``out``: its results file's epochs and replay record, else its CSV's epochs."""
    results = [p for p in out.rglob("*.json")]
    if results:
        record = json.loads(results[0].read_text())
        epochs = [{k: h.get(k) for k in ("epoch", "train_seconds", "capture_seconds", "seconds")}
                  for h in record["history"]]
        return {"epochs": epochs, "replay": record.get("replay"), "finished": True, "device": record.get("device"),
                "test_root": record.get("test", {}).get("root")}
    rows = []
    for path in out.rglob("*.csv"):
        with open(path, newline="") as handle:
            rows = [{"epoch": int(r["epoch"]), "train_seconds": float(r["train_seconds"]),
                     "seconds": float(r["seconds"])} for r in csv.DictReader(handle)]
    return {"epochs": rows, "finished": False}


def run(model: str, args: argparse.Namespace, device: str, epochs: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="gpu-epochs-") as tmp:
        argv = command(model, args, device, Path(tmp), epochs)
        started = time.perf_counter()
        try:
            done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=args.timeout)
            status, tail = done.returncode, (done.stderr or "")[-1500:]
        except subprocess.TimeoutExpired as stopped:
            status, tail = "timeout", (stopped.stderr or b"")[-1500:]
            tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
        row = {"model": model, "device": device, "status": status, "command_seconds": time.perf_counter() - started,
               "command": " ".join(["python", *argv[1:-2]]), **collect(Path(tmp))}
        if status != 0:
            row["stderr_tail"] = tail
        return row


def cpu_reference() -> dict:
    """Two-thread CPU epoch medians of the committed epoch-cpu.json, by model, with its machine."""
    if not CPU_REFERENCE.is_file():
        return {}
    results = json.loads(CPU_REFERENCE.read_text())
    medians = {}
    for model, setups in results["models"].items():
        runs = setups.get("1x2", {}).get("runs", [])
        seconds = [s for r in runs for s in r["train_seconds"]]
        if seconds:
            medians[model] = statistics.median(seconds)
    return {"file": str(CPU_REFERENCE.relative_to(REPO)), "machine": results.get("machine"),
            "commit": results.get("commit"), "embeddings": results.get("embeddings"), "train_seconds": medians}


def epoch_table(summary: dict) -> str:
    """Per model: the path, the GPU's first and later epoch (training pass) and the captures in the first,
    against the CPU's two-thread epoch (measured here, else the committed reference) and their ratios."""
    reference = summary.get("cpu_reference") or {}
    measured = {r["model"]: r["epochs"][0]["train_seconds"] for r in summary["runs"]
                if r["device"] == "cpu" and r["epochs"] and not summary.get("dry")}
    source = "measured here" if measured else (f"{reference.get('file')} ({reference.get('machine')}, "
                                               f"{reference.get('embeddings')})" if reference else "none")
    lines = [f"`{summary['command']}`; the CPU's two-thread epoch: {source}. Seconds of the training pass "
             "(`train_seconds` of the run's results file); `captures`: of which capturing graphs.", "",
             "| model | path | first epoch | captures | later epoch | CPU epoch | first / CPU | later / CPU |",
             "|---|---|---|---|---|---|---|---|"]
    if summary.get("dry"):
        lines.insert(0, "A dry run on the CPU (--quick samples, one epoch): it shows that the parts run; its "
                        "seconds and ratios measure nothing.\n")
    for row in summary["runs"]:
        if row["device"] == "cpu" and not summary.get("dry"):
            continue
        epochs = row["epochs"]
        replay = row.get("replay") or {}
        path = replay.get("path", "unfinished" if not row.get("finished") else "-")
        first = epochs[0]["train_seconds"] if epochs else None
        later = epochs[-1]["train_seconds"] if len(epochs) > 1 else None
        captures = epochs[0].get("capture_seconds") if epochs else None
        cpu = measured.get(row["model"], (reference.get("train_seconds") or {}).get(row["model"]))

        def fmt(x: float | None, digits: int = 2) -> str:
            return "—" if x is None else f"{x:.{digits}f}"

        status = "" if row["status"] == 0 else f" ({row['status']})"  # a run that failed or ran out of time
        lines.append(f"| {row['model']} | {path}{status} | "
                     f"{fmt(first)} | {fmt(captures)} | {fmt(later)} | {fmt(cpu)} | "
                     f"{fmt(first / cpu if first and cpu else None)} | {fmt(later / cpu if later and cpu else None)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    p.add_argument("--epochs", type=int, default=2, help="epochs of a model that replays (default 2)")
    p.add_argument("--eager-epochs", type=int, default=1,
                   help="epochs of a model with a top-down pass, which trains eagerly today (default 1)")
    p.add_argument("--embeddings", default="glove50", help="as the CPU reference (default glove50)")
    p.add_argument("--timeout", type=float, default=75.0, help="seconds per command (default 75)")
    p.add_argument("--cpu", action="store_true", help="also measure the two-thread CPU epoch here")
    p.add_argument("--data-root", default=None, help="experiments/sst.py's --data-root")
    p.add_argument("--dry", action="store_true", help="on the CPU: --quick, one epoch, replay on, random vectors")
    p.add_argument("--out", help="summary JSON (written after every model)")
    p.add_argument("--table", metavar="EPOCHS_JSON", help="print the tables of a summary (and --step) and exit")
    p.add_argument("--step", metavar="STEP_JSON", help="with --table: benchmarks/gpu_step.py's results too")
    args = p.parse_args(argv)
    if args.table:
        if args.step and Path(args.step).is_file():
            import gpu_step

            step = json.loads(Path(args.step).read_text())
            if step.get("rows"):
                print(gpu_step.tables(step, None, None), end="\n\n")
        if Path(args.table).is_file():
            print(epoch_table(json.loads(Path(args.table).read_text())))
        return
    if not args.out:
        p.error("--out is required (or --table)")
    if args.dry:
        args.embeddings, args.epochs, args.eager_epochs = "random", 1, 1
    device = "cpu" if args.dry else "cuda"
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    summary = {"command": "python benchmarks/gpu_epochs.py " + " ".join(sys.argv[1:] if argv is None else argv),
               "dry": args.dry, "cpu_reference": cpu_reference(), "runs": []}
    for model in args.models:
        epochs = args.eager_epochs if model in ("topdown", "bicontree") else args.epochs
        for where in (device, "cpu") if args.cpu and not args.dry else (device,):
            row = run(model, args, where, epochs if where != "cpu" or args.dry else 1)
            summary["runs"].append(row)
            first = row["epochs"][0]["train_seconds"] if row["epochs"] else None
            path = (row.get("replay") or {}).get("path", "-")
            print(f"{model:<12} {where:<5} {row['status']!s:<8} path {path:<9} first epoch "
                  f"{'-' if first is None else f'{first:.2f} s'}, epochs "
                  f"{[round(e['train_seconds'], 2) for e in row['epochs']]}", flush=True)
            out.write_text(json.dumps(summary, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
