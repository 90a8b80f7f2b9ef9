"""Build experiments/results/sick.md and sick_by_length.png from the per-run JSON files.

    python experiments/report_sick.py

Every number of ours comes from ``experiments/results/sick/*.json`` (written by
``experiments/sick.py``); the only numbers typed here are Tai et al.'s (Table 3).
A row pools the full runs of its model: mean ± sample standard deviation
(n - 1) over seeds of the dev-selected test Pearson r, Spearman ρ and MSE. Rows
without runs say "not run"; the plot shows only models with runs.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sick import EPOCHS, MODELS  # the models and their default epochs

from graphtree.train.pairs import pearson

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "experiments" / "results"
RUNS = RESULTS / "sick"

# Tai et al. 2015, Table 3 (mean over 5 runs, GloVe 840B 300d, fixed): Pearson r, Spearman ρ, MSE.
PAPER = {
    "dependency": (0.8676, 0.8083, 0.2532),
    "constituency": (0.8582, 0.7966, 0.2734),
    "lstm": (0.8528, 0.7911, 0.2831),
    "bilstm": (0.8567, 0.7966, 0.2736),
    "mean": (0.7577, 0.6738, 0.4557),
}
METRICS = ("pearson", "spearman", "mse")


def load_runs(folder: Path = RUNS) -> list[dict]:
    """Every full run at the default epochs (quick runs never land here)."""
    runs = []
    for path in sorted(folder.glob("*.json")):
        record = json.loads(path.read_text())
        cfg = record["config"]
        if record.get("experiment") == "sick" and not cfg.get("quick") and cfg["epochs"] == EPOCHS:
            runs.append(record)
    return runs


def mean_std(values: list[float]) -> str:
    if not values:
        return "not run"
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}"


def table(runs: list[dict]) -> list[str]:
    lines = ["| Model (Tai et al. Table 3) | Pearson r | Spearman ρ | MSE | Seeds | Minutes per run |",
             "|---|---|---|---|---|---|"]
    for model, spec in MODELS.items():
        mine = [r for r in runs if r["config"]["model"] == model]
        cells = [f"{mean_std([r['test'][m] for r in mine])} ({paper:.4f})" for m, paper in zip(METRICS, PAPER[model])]
        minutes = mean_std([r["wall_time_s"] / 60 for r in mine]).replace("not run", "—")
        lines.append(f"| {spec['name']} | " + " | ".join(cells) + f" | {len(mine)} | {minutes} |")
    return lines


def runs_table(runs: list[dict]) -> list[str]:
    lines = ["| Run | Best epoch / epochs | Dev r | Test r | Test ρ | Test MSE | s per epoch (train) | Threads |",
             "|---|---|---|---|---|---|---|---|"]
    for r in sorted(runs, key=lambda r: r["run"]):
        lines.append(f"| {r['run']} | {r['best_epoch']} / {len(r['history'])} | {r['dev']['pearson']:.4f} | "
                     f"{r['test']['pearson']:.4f} | {r['test']['spearman']:.4f} | {r['test']['mse']:.4f} | "
                     f"{r['train_seconds_per_epoch']:.0f} | {r['threads']} |")
    return lines


def by_length(run: dict, half: float = 2.0, min_pairs: int = 30) -> tuple[list[int], list[float]]:
    """Tai et al. Fig. 4: Pearson r of the test pairs whose mean sentence length lies in [l - 2, l + 2]."""
    pairs = run["test_pairs"]
    xs, ys = [], []
    lengths = pairs["mean_length"]
    for center in range(int(min(lengths)), int(max(lengths)) + 1):
        keep = [k for k, n in enumerate(lengths) if center - half <= n <= center + half]
        if len(keep) >= min_pairs:  # r of a handful of pairs is noise
            xs.append(center)
            ys.append(pearson([pairs["pred"][k] for k in keep], [pairs["gold"][k] for k in keep]))
    return xs, ys


def plot(runs: list[dict]) -> bool:
    """Mean over seeds of r by length, one line per model with runs; False when there is nothing to draw."""
    series = []
    for model, spec in MODELS.items():
        mine = [r for r in runs if r["config"]["model"] == model]
        if mine:
            curves = [dict(zip(*by_length(r))) for r in mine]
            xs = sorted(set.intersection(*(set(c) for c in curves)))
            series.append((f"{spec['name']} ({len(mine)} seed{'s' if len(mine) > 1 else ''})", xs,
                           [statistics.mean(c[x] for c in curves) for x in xs]))
    if not series:
        return False
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, xs, ys in series:
        ax.plot(xs, ys, label=label, lw=1.4, marker="o", ms=3)
    ax.set_xlabel("mean sentence length of the pair (words), window [l-2, l+2], at least 30 pairs")
    ax.set_ylabel("test Pearson r")
    ax.set_title("SICK: Pearson r by sentence length (cf. Tai et al. Fig. 4)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "sick_by_length.png", dpi=120)
    plt.close(fig)
    return True


def report(runs: list[dict], plotted: bool) -> str:
    lines = ["# SICK semantic relatedness: our runs next to Tai et al. (2015), Table 3", "",
             "Generated by `python experiments/report_sick.py` from `experiments/results/sick/*.json`; do not edit.",
             "", "Test Pearson r, Spearman ρ and MSE of the epoch with the best dev Pearson r: mean ± sample "
             "standard deviation over seeds, Tai et al.'s number (mean of 5 runs) in parentheses.", ""]
    lines += table(runs)
    lines += ["", "Settings: Tai et al.'s similarity network (eq 15, hidden layer 50), KL loss to the sparse "
              "target, AdaGrad 0.05, minibatch 25, per-minibatch L2 1e-4, no dropout, word vectors held fixed, "
              f"{EPOCHS} epochs; memory sizes of Tai's Table 1 (150; 142 for the Constituency Tree-LSTM). "
              "Differences: GloVe 6B 50d vectors instead of 840B 300d; the Constituency Tree-LSTM runs on the "
              "Stanford dependency trees binarized (`graphtree.data.spacy.binarize`), not on constituency "
              "parses.", ""]
    lines += ["![Pearson r by sentence length](sick_by_length.png)", ""] if plotted else \
        ["Plot of Pearson r by sentence length: no runs yet.", ""]
    lines += ["## Runs", ""] + (runs_table(runs) if runs else ["No runs yet."])
    lines += ["", "## Commands", "", "```"]
    lines += [f"python experiments/sick.py --model {m} --seeds 1 2 3    # {s['name']}" for m, s in MODELS.items()]
    lines += ["python experiments/report_sick.py", "```", ""]
    return "\n".join(lines)


def main() -> None:
    runs = load_runs()
    plotted = plot(runs)
    (RESULTS / "sick.md").write_text(report(runs, plotted))
    print(f"{len(runs)} runs -> {RESULTS / 'sick.md'}" + (", sick_by_length.png" if plotted else ""))


if __name__ == "__main__":
    main()
