"""Build experiments/results/sick.md, sick_by_length.png, the SICK section of docs/results.md and README's SICK rows
from the per-run JSON files.

    python experiments/report_sick.py                  # the committed results, docs/results.md and README
    python experiments/report_sick.py --results runs   # your own runs: runs/sick.md and the plot, the rest untouched

Every number of ours comes from ``<results>/sick/*.json`` (written by
``experiments/sick.py``); the only numbers typed here are Tai et al.'s (Table 3).
A row pools the full runs of its model: mean ± sample standard deviation
(n - 1) over seeds of the dev-selected test Pearson r, Spearman ρ and MSE. Rows
without runs say "not run"; the plot shows only models with runs. Each row names
the commits its runs come from, and a row whose runs predate the current
numerics (``lab.provenance``) carries a stale mark.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

from lab.report import (
    Provenance,
    code_cell,
    commands_section,
    compute_note,
    line_plot,
    load_runs,
    markdown_table,
    mean_std,
    minutes,
    no_runs,
    provenance_lines,
    publish,
    report_head,
    report_script,
    results_folder,
    runs_section,
    runs_table,
    shown,
    stale_lines,
    stale_mark,
    summary_label,
    target_line,
    wall_minutes,
)
from lab.runs import check_flags_first
from lab.scripts import load_script

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "experiments" / "results"  # the committed results: the only folder whose report updates README.md

if __name__ == "__main__":  # --help and a bad --results answer here, before the training script and torch load
    check_flags_first(lambda argv: results_folder(__doc__.splitlines()[0], RESULTS, argv), "report_sick.py")

_SICK = load_script(Path(__file__).with_name("sick.py"))
EPOCHS, MODELS = _SICK.EPOCHS, _SICK.MODELS  # the models and their default epochs


# Tai et al. 2015, Table 3 (mean over 5 runs, GloVe 840B 300d, fixed): Pearson r, Spearman ρ, MSE.
PAPER = {
    "dependency": (0.8676, 0.8083, 0.2532),
    "constituency": (0.8582, 0.7966, 0.2734),
    "lstm": (0.8528, 0.7911, 0.2831),
    "bilstm": (0.8567, 0.7966, 0.2736),
    "mean": (0.7577, 0.6738, 0.4557),
}
METRICS = ("pearson", "spearman", "mse")
# The target: the Dependency Tree-LSTM's mean test Pearson r over seeds (with our 50d vectors).
TARGET = ("dependency", 0.85)


def full_runs(results: Path = RESULTS) -> list[dict]:
    """Every full run at the default epochs."""
    return load_runs(results / "sick", "sick", lambda r: r["config"]["epochs"] == EPOCHS)


def command_for(model: str) -> str:
    return f"python experiments/sick.py --model {model} --seeds 1 2 3"


def model_runs(runs: list[dict], model: str) -> list[dict]:
    return [r for r in runs if r["config"]["model"] == model]


def table(runs: list[dict], prov: Provenance | None = None) -> list[str]:
    rows = []
    for model, spec in MODELS.items():
        mine = model_runs(runs, model)
        mark = stale_mark(prov, mine)
        rows.append([spec["name"], *(f"{mean_std([r['test'][m] for r in mine], 4)}{mark} ({paper:.4f})"
                                     for m, paper in zip(METRICS, PAPER[model])),
                     str(len(mine)), wall_minutes(mine), code_cell(prov, mine)])
    return markdown_table(["Model (Tai et al. Table 3)", "Pearson r", "Spearman ρ", "MSE", "Seeds", "Minutes per run",
                           "Code"], rows)


RUN_COLUMNS = [("Dev r", lambda r: f"{r['dev']['pearson']:.4f}"), ("Test r", lambda r: f"{r['test']['pearson']:.4f}"),
               ("Test ρ", lambda r: f"{r['test']['spearman']:.4f}"), ("Test MSE", lambda r: f"{r['test']['mse']:.4f}")]


def target(runs: list[dict], prov: Provenance | None = None) -> str:
    """The target, checked on the mean over seeds: met or missed, with the figure."""
    model, floor = TARGET
    mine = model_runs(runs, model)
    return target_line(f"{MODELS[model]['name']}, test Pearson r", floor, [r["test"]["pearson"] for r in mine], 4,
                       floor_digits=2, mark=stale_mark(prov, mine))


def plot(runs: list[dict], out: Path = RESULTS) -> bool:
    """Mean over seeds of r by length (Tai et al. Fig. 4), one line per model with runs; False when there is
    nothing to draw."""
    series = []
    for model, spec in MODELS.items():
        mine = model_runs(runs, model)
        if mine:
            curves = [dict(zip(r["test_by_length"]["length"], r["test_by_length"]["pearson"])) for r in mine]
            xs = sorted(set.intersection(*(set(c) for c in curves)))
            series.append((f"{spec['name']} ({len(mine)} seed{'s' if len(mine) > 1 else ''})", xs,
                           [statistics.mean(c[x] for c in curves) for x in xs]))
    if series:
        line_plot(out / "sick_by_length.png", [(series, "mean sentence length of the pair (words), window [l-2, l+2], "
                                                "at least 30 pairs", "test Pearson r",
                                                "SICK: Pearson r by sentence length (cf. Tai et al. Fig. 4)")],
                  (7, 4.5), marker="o", ms=3)
    return bool(series)


def report(runs: list[dict], plotted: bool, prov: Provenance | None = None, results: str = "experiments/results",
           others: Sequence[dict] = ()) -> str:
    """sick.md. ``results``: the results folder as the report names it; ``others``: the runs at other epochs."""
    lines = report_head("SICK semantic relatedness: our runs next to Tai et al. (2015), Table 3", "sick", results,
                        "Test Pearson r, Spearman ρ and MSE of the epoch with the best dev Pearson r: mean ± sample "
                        "standard deviation over seeds, Tai et al.'s number (mean of 5 runs) in parentheses. Code: "
                        "the commits the row's runs come from (see Provenance below).")
    lines += table(runs, prov) + stale_lines(prov, (model_runs(runs, model) for model in MODELS))
    lines += ["", "Settings: Tai et al.'s similarity network (eq 15, hidden layer 50), KL loss to the sparse "
              "target, AdaGrad 0.05, minibatch 25, per-minibatch L2 1e-4, no dropout, word vectors held fixed, "
              f"{EPOCHS} epochs; memory sizes of Tai's Table 1 (150; 142 for the Constituency Tree-LSTM). "
              "Differences: GloVe 6B 50d vectors instead of 840B 300d; the Constituency Tree-LSTM runs on the "
              "Stanford dependency trees binarized (`graphtree.data.spacy.binarize`), not on constituency "
              "parses.", ""]
    lines += ["## Target", "", f"- {target(runs, prov)}", "", *compute_note(runs)]
    lines += ["![Pearson r by sentence length](sick_by_length.png)", ""] if plotted else \
        ["Plot of Pearson r by sentence length: no runs yet.", ""]
    if prov is not None:
        rows = [(spec["name"], model_runs(runs, model), command_for(model)) for model, spec in MODELS.items()]
        rows += [(f"{name}, {epochs} epochs", mine, command) for name, epochs, mine, command in epoch_groups(others)]
        lines += provenance_lines(prov, rows)
    lines += runs_section(runs, runs_table(runs, prov, RUN_COLUMNS)) + other_epochs(others, prov)
    lines += commands_section((f"{command_for(m)}    # {s['name']}" for m, s in MODELS.items()),
                              report_script("sick", results))
    return "\n".join(lines)


def other_runs(results: Path = RESULTS) -> list[dict]:
    """Runs at other epoch counts than the default (checks of the training length)."""
    return load_runs(results / "sick", "sick", lambda r: r["config"]["epochs"] != EPOCHS)


def epoch_groups(runs: Sequence[dict]) -> list[tuple[str, int, list[dict], str]]:
    """``runs`` pooled by model and epochs: (model name, epochs, runs, the command of the first)."""
    groups = []
    for model, epochs in sorted({(r["config"]["model"], r["config"]["epochs"]) for r in runs}):
        mine = [r for r in runs if (r["config"]["model"], r["config"]["epochs"]) == (model, epochs)]
        groups.append((MODELS[model]["name"], epochs, mine, mine[0]["command"]))
    return groups


def other_epochs(runs: Sequence[dict], prov: Provenance | None = None) -> list[str]:
    """Runs at other epoch counts than the default, pooled by model and epochs."""
    if not runs:
        return []
    rows = [[name, str(epochs), *(mean_std([r["test"][m] for r in mine], 4) + stale_mark(prov, mine) for m in METRICS),
             str(len(mine)), f"`{command}`", code_cell(prov, mine)]
            for name, epochs, mine, command in epoch_groups(runs)]
    return ["", f"## Other training lengths (not in the table above, which uses {EPOCHS} epochs)", "",
            *markdown_table(["Model", "Epochs", "Pearson r", "Spearman ρ", "MSE", "Seeds", "Command", "Code"], rows)]


def results_section(runs: list[dict], prov: Provenance | None = None) -> str:
    """The SICK section of docs/results.md: Pearson r and MSE, wall time and command of each model, the target."""
    rows = []
    for model, spec in MODELS.items():
        mine = model_runs(runs, model)
        r_paper, _, mse_paper = PAPER[model]
        mark = stale_mark(prov, mine)
        rows.append([spec["name"], f"{mean_std([r['test']['pearson'] for r in mine], 4)}{mark} ({r_paper:.4f})",
                     f"{mean_std([r['test']['mse'] for r in mine], 4)}{mark} ({mse_paper:.4f})", minutes(mine),
                     f"`{command_for(model)}`"])
    lines = ["Test Pearson r and MSE, mean ± std over seeds, Tai et al.'s Table 3 in parentheses; settings, "
             "differences, Spearman ρ, the by-length plot, every run and the commits the runs come from in "
             "[`experiments/results/sick.md`](../experiments/results/sick.md).", "",
             *markdown_table(["Model", "Pearson r", "MSE", "Minutes per run (1 thread)", "Command"], rows),
             *stale_lines(prov, (model_runs(runs, model) for model in MODELS), "experiments/results/reproduced.json",
                          "beside it"),
             "", f"Target: {target(runs, prov)}"]
    return "\n".join(lines) + "\n"


def summary_rows(runs: list[dict], prov: Provenance | None = None) -> list[list[str]]:
    """README's rows: each model's test Pearson r against Tai et al.'s."""
    return [[summary_label("sick", "SICK"), spec["name"],
             mean_std([r["test"]["pearson"] for r in mine], 4) + stale_mark(prov, mine),
             f"{PAPER[model][0]:.4f}", minutes(mine), f"`{command_for(model)}`"]
            for model, spec in MODELS.items() if (mine := model_runs(runs, model))]


def main(argv: Sequence[str] | None = None) -> None:
    results, committed = results_folder(__doc__.splitlines()[0], RESULTS, argv)
    runs, others = full_runs(results), other_runs(results)
    if not runs and not others:
        no_runs("sick", results, [results / "sick"], "SICK runs")
    prov = Provenance.of(results, "sick")
    plotted = plot(runs, results)
    (results / "sick.md").write_text(report(runs, plotted, prov, shown(results, REPO), others))
    # Only the committed results speak for docs/results.md and README: a report on one's own runs stays in their folder.
    written = publish(REPO, "sick", results_section(runs, prov), summary_rows(runs, prov)) if committed else []
    print(f"{len(runs)} runs -> {results / 'sick.md'}" + (", sick_by_length.png" if plotted else "")
          + "".join(f", {path}" for path in written))


if __name__ == "__main__":
    main()
