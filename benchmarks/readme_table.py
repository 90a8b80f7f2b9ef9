"""Write the README's speed section from a results JSON of ``tree_lstm.py``.

    python benchmarks/readme_table.py benchmarks/results/cpu-threads1.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from graphtree.train.report import write_readme_section

REPO = Path(__file__).resolve().parent.parent


def section(results: dict, path: str) -> str:
    threads = results["machine"]["torch_threads"]
    lines = ["## Speed", "",
             f"Training (forward, backward, Adagrad step) and inference throughput on SST training trees, hidden "
             f"150, embeddings 300, {threads} thread(s), every ratio measured pair by pair in the same run "
             f"(`python {results['command'].replace('tree_lstm.py', 'benchmarks/tree_lstm.py')}`, results in "
             f"`{path}`; method and all settings in `benchmarks/README.md`). `× N-ary` is training time over the "
             "N-ary cell's; `× bound` is training time over the time of its essential matmul FLOPs at the "
             "machine's measured matmul rate.", ""]
    for batch in sorted({r["batch"] for r in results["rows"]} & {25, 256}):
        lines += [f"Batch {batch}:", "",
                  "| model | train trees/s | × nn.LSTM | × recursive | × N-ary | × bound | inference × nn.LSTM |",
                  "|---|---|---|---|---|---|---|"]
        for r in results["rows"]:
            if r["embedding"] == 300 and r["batch"] == batch:
                vs_nary = r.get("train_time_vs_nary")
                lines.append(f"| {r['model']} | {r['train_trees_per_s']:.0f} | {r['train_vs_lstm']:.2f} | "
                             f"{r['train_vs_recursive']:.1f} | {'—' if vs_nary is None else f'{vs_nary:.2f}'} | "
                             f"{r['train_vs_bound']:.2f} | {r['infer_vs_lstm']:.2f} |")
        lines.append("")
    lines += ["Targets of the speed issue, as measured in that run:", "", "| target | goal | measured | met |",
              "|---|---|---|---|"]
    for t in results["targets"]:
        goal = f"{'≤' if t['at_most'] else '≥'} {t['goal']}"
        measured = "—" if t["measured"] is None else f"{t['measured']:.2f}"
        lines.append(f"| {t['target']} | {goal} | {measured} | {'yes' if t['met'] else 'no'} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results/cpu-threads1.json"
    results = json.loads((REPO / path).read_text())
    if not write_readme_section(REPO / "README.md", "speed", section(results, path)):
        raise SystemExit("README.md has no <!-- results:speed --> markers")
    print(f"README.md speed section from {path}")


if __name__ == "__main__":
    main()
