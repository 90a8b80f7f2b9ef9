"""Write the speed section of docs/performance.md from results JSONs of ``tree_lstm.py``: the CPU run, then any
GPU runs.

    python benchmarks/readme_table.py benchmarks/results/cpu-threads2.json benchmarks/results/cuda-threads1.json \
        benchmarks/results/operator-calls.json

The operator-call counts (``tree_lstm.py --count-ops``) are optional.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import lab_path  # noqa: F401  (the lab, not installed)
from lab.report import write_readme_section

REPO = Path(__file__).resolve().parent.parent
BOUND_TARGET = 2.5  # every cell's training step at batch 25 within this factor of its essential-FLOP time


def where(results: dict) -> str:
    machine = results["machine"]
    if machine.get("device") == "cuda":
        return f"{machine.get('gpu', 'a GPU')} (torch {machine['torch']})"
    processor = machine.get("processor") or "x86"
    if machine.get("cpu_capability"):
        processor += f" ({machine['cpu_capability']})"
    rate = f", matmul {results['matmul_gflops']:.0f} GFLOP/s measured" if "matmul_gflops" in results else ""
    return f"{machine['torch_threads']} CPU thread(s) of an {processor} host{rate} (torch {machine['torch']})"


def tables(results: dict, targets: bool = True) -> list[str]:
    """The batch-25 and batch-256 tables, and (``targets``) the speed issues' targets, which are the CPU's."""
    lines = []
    for batch in sorted({r["batch"] for r in results["rows"]} & {25, 256}):
        lines += [f"Batch {batch}:", "",
                  "| model | train trees/s | × nn.LSTM | × recursive | × N-ary | FLOPs × N-ary | × bound | "
                  "inference × nn.LSTM |",
                  "|---|---|---|---|---|---|---|---|"]
        rows = [r for r in results["rows"] if r["embedding"] == 300 and r["batch"] == batch]
        nary_flop = next((r.get("forward_gflop") for r in rows if r["model"] == "nary"), None)
        for r in rows:
            vs_nary = r.get("train_time_vs_nary")
            flop = r.get("forward_gflop")
            flop_ratio = "—" if vs_nary is None or not flop or not nary_flop else f"{flop / nary_flop:.2f}"
            lines.append(f"| {r['model']} | {r['train_trees_per_s']:.0f} | {r['train_vs_lstm']:.2f} | "
                         f"{r['train_vs_recursive']:.1f} | {'—' if vs_nary is None else f'{vs_nary:.2f}'} | "
                         f"{flop_ratio} | {r['train_vs_bound']:.2f} | {r['infer_vs_lstm']:.2f} |")
        lines.append("")
    if not targets:
        return lines
    lines += ["Targets of the speed issues, as measured in that run (each cell's step within 2.5× of its FLOP "
              "bound at batch 25 replaces the earlier ratios to the N-ary cell, which ignored that the cells do "
              "different amounts of arithmetic):", "", "| target | goal | measured | met |", "|---|---|---|---|"]
    for r in results["rows"]:
        if r["embedding"] == 300 and r["batch"] == 25 and r["model"] not in ("lstm", "recursive", "plain"):
            met = "yes" if r["train_vs_bound"] <= BOUND_TARGET else "no"
            lines.append(f"| {r['model']} training at batch 25 / FLOP bound | ≤ {BOUND_TARGET} | "
                         f"{r['train_vs_bound']:.2f} | {met} |")
    for t in results["targets"]:
        if "training time / N-ary" in t["target"]:  # superseded (see above)
            continue
        goal = f"{'≤' if t['at_most'] else '≥'} {t['goal']}"
        measured = "—" if t["measured"] is None else f"{t['measured']:.2f}"
        lines.append(f"| {t['target']} | {goal} | {measured} | {'yes' if t['met'] else 'no'} |")
    return lines + [""]


def plain_versus_engine(results: dict) -> list[str]:
    """What the GPU runs, and the plainest level loop's training time over graphtree's N-ary time in a run."""
    ratios = {r["batch"]: r["train_time_vs_nary"] for r in results["rows"]
              if r["model"] == "plain" and r["embedding"] == 300 and r["batch"] in (25, 256)}
    if not ratios:
        return []
    first = " graphtree's time"
    each = " and ".join(f"{ratio:.2f}×{first if k == 0 else ''} at batch {batch}"
                        for k, (batch, ratio) in enumerate(sorted(ratios.items())))
    sentence = ("On the GPU every cell runs its definition (its `update`, in PyTorch operators; the compiled kernels "
                "are CPU code) through the engine's level loop, the whole pass one autograd graph. The plainest "
                f"level loop (`plain`) trains the N-ary model in {each}")
    if min(ratios.values()) < 1:
        sentence += (": where that is below 1 the plain loop is the faster. At these sizes both wait on the "
                     "host, which launches each level's small kernels one by one.")
    else:
        sentence += ": graphtree is the faster at each."
    return [sentence, ""]


def backends(results: dict) -> list[str]:
    """The oneDNN-versus-addmm comparison of that run, where it has one."""
    rows = results.get("matmul_backends") or []
    if not rows:
        return []
    machine = results["machine"]
    picked = "oneDNN" if machine.get("onednn_preferred") else "`torch.addmm`"
    lines = [f"Matrix products on this {machine.get('cpu_capability', '')} processor: the run used {picked}, "
             "and timed oneDNN's prepacked products against it (its one-product probe had found oneDNN "
             f"{machine['onednn_probe_speedup']:.2f}× as fast). Every cell trained slower on oneDNN, which has "
             "since been removed from graphtree. Training time of each backend, same run:", "",
             "| model | oneDNN ms | addmm ms | oneDNN / addmm |", "|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['onednn_train_s'] * 1e3:.1f} | {r['addmm_train_s'] * 1e3:.1f} | "
              f"{r['onednn_time_vs_addmm']:.2f} |" for r in rows]
    return lines + [""]


def kernels(results: dict) -> list[str]:
    """Every cell with and without its compiled level kernels, same run, where it has that comparison."""
    rows = results.get("native_kernels") or []
    if not rows:
        return []
    lines = ["Every cell with its compiled level kernels (`graphtree/csrc/`, the default where they build) and "
             "with the same arithmetic in PyTorch operators, interleaved in the same run (time ratios to `nn.LSTM` "
             "as throughput, >1 is faster). The PyTorch path of that run was the cells' level math with "
             "hand-written derivatives, since replaced by each cell's `update` under autograd; "
             "`benchmarks/ab_cells.py` compares the two versions (results in `benchmarks/results/`):", "",
             "| model | batch | training speedup | training × nn.LSTM, PyTorch → kernels | inference speedup | "
             "inference × nn.LSTM, PyTorch → kernels |", "|---|---|---|---|---|---|"]
    lines += [f"| {r.get('model', 'nary')} | {r['batch']} | {r['train_speedup']:.2f} | "
              f"{r['pytorch_train_vs_lstm']:.2f} → "
              f"{r['native_train_vs_lstm']:.2f} | {r['infer_speedup']:.2f} | {r['pytorch_infer_vs_lstm']:.2f} → "
              f"{r['native_infer_vs_lstm']:.2f} |" for r in rows]
    return lines + [""]


def operator_calls(results: dict, calls: dict, path: str) -> list[str]:
    """Why small batches fall short: the chain's time per level next to the operator calls per level."""
    chain = max(results.get("chain") or [{}], key=lambda r: r.get("depth", 0))
    lines = ["Where batch-25 time goes: every level costs a fixed time, whatever its size: its operator calls, "
             "issued from the engine's compiled level loop."]
    if chain:
        lines[0] += (f" In the run above a chain of {chain['depth']} one-node levels (N-ary) took "
                     f"{chain['train_ms_per_level']:.3f} ms per level to train and {chain['infer_ms_per_level']:.3f} "
                     "ms to infer.")
    lines[0] += (f" ATen operator calls on the first batch of 25 sentences (`{command(calls)}`, results in "
                 f"`{path}`; views and slices count):")
    lines += ["", "| model | training step | inference | per level, training | per level, inference |",
              "|---|---|---|---|---|"]
    for r in calls["rows"]:
        lines.append(f"| {r['model']} | {r['train_calls']} | {r['infer_calls']} | {r['train_calls_per_level']:.1f} | "
                     f"{r['infer_calls_per_level']:.1f} |")
    return lines + ["", "Per level: over the batch's bottom-up levels; for `nn.LSTM`, over its time steps (its "
                    "loop over time runs inside one operator).", ""]


def recorded_in(path: str) -> str:
    """The commit that last changed ``path`` (a results file records the run, not the code it ran)."""
    done = subprocess.run(["git", "log", "-1", "--format=%h", "--", path], cwd=REPO, capture_output=True, text=True)
    return done.stdout.strip() or "an uncommitted file"


def origin(results: dict, path: str) -> str:
    """``ran at 1a2b3c4`` where the run recorded its commit (``+dirty`` for uncommitted changes), else the commit
    that added its file: ``recorded in 1a2b3c4``."""
    commit = results["machine"].get("commit")
    if commit:
        return f"ran at {commit[:7]}{'+dirty' if results['machine'].get('dirty') else ''}"
    return f"recorded in {recorded_in(path)}"


def command(results: dict) -> str:
    environment = "".join(f"{name}={value} " for name, value in results.get("environment", {}).items())
    return f"{environment}python {results['command'].replace('tree_lstm.py', 'benchmarks/tree_lstm.py')}"


def section(results: dict, path: str, gpu_runs: list[tuple[dict, str]] = (),
            calls: tuple[dict, str] | None = None) -> str:
    lines = ["## Speed", "",
             f"Training (forward, backward, Adagrad step) and inference throughput on SST training trees, hidden "
             f"150, embeddings 300, on {where(results)}, every ratio measured pair by pair in the same run "
             f"(`{command(results)}`, results in `{path}`, {origin(results, path)}; method and all settings "
             "in `benchmarks/README.md`). "
             "`× N-ary` is training time over the N-ary cell's, `FLOPs × N-ary` the same ratio for the essential "
             "matmul FLOPs (the part of `× N-ary` that no engineering removes: the cells do different amounts of "
             "arithmetic); `× bound` is training time over the time of its essential matmul FLOPs at the "
             "machine's measured matmul rate. `plain` is the N-ary model written as the plainest level loop in "
             "PyTorch (`benchmarks/plain_level_loop.py`: per level one `index_select` of the children's states, "
             "one `addmm`, the gate math, autograd for the rest), from the N-ary model's weights: its `× N-ary` "
             "is what graphtree's engine and kernels earn over it; `lstm` is `torch.nn.LSTM` over the words, "
             "`recursive` a per-node recursive Tree-LSTM.", ""]
    lines += tables(results) + backends(results) + kernels(results)
    if calls is not None:
        lines += operator_calls(results, *calls)
    for gpu, gpu_path in gpu_runs:
        lines += [f"### On {where(gpu)}", "",
                  f"The same benchmark with `--device cuda` (`{command(gpu)}`, results in `{gpu_path}`, "
                  f"{origin(gpu, gpu_path)}). The "
                  "level loop launches a few small kernels per level, so at these sizes the GPU waits on the "
                  "host; `nn.LSTM` runs as one cuDNN kernel per layer.", ""]
        lines += plain_versus_engine(gpu) + tables(gpu, targets=False)
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> None:
    paths = sys.argv[1:] or ["benchmarks/results/cpu-threads1.json"]
    runs = [(json.loads((REPO / p).read_text()), p) for p in paths]
    calls = next(((r, p) for r, p in runs if "machine" not in r and r["rows"] and "train_calls" in r["rows"][0]),
                 None)
    timed = [(r, p) for r, p in runs if "machine" in r]
    cpu = [(r, p) for r, p in timed if r["machine"].get("device") != "cuda"]
    gpu = [(r, p) for r, p in timed if r["machine"].get("device") == "cuda"]
    if not cpu:
        raise SystemExit("give a CPU results file first (the main table)")
    if not write_readme_section(REPO / "docs" / "performance.md", "speed", section(*cpu[0], gpu, calls)):
        raise SystemExit("docs/performance.md has no <!-- results:speed --> markers")
    print(f"docs/performance.md speed section from {', '.join(paths)}")


if __name__ == "__main__":
    main()
