"""Build experiments/results/sst.md and the SST plots from the per-run JSON files.

    python experiments/report_sst.py                 # sst.md and its plots, docs/results.md, README's SST rows
    python experiments/report_sst.py --results runs  # your own runs: runs/sst.md and the plots, the rest untouched

Every number of ours comes from ``<results>/sst/*.json`` (written by
``experiments/sst.py``); the only numbers typed here are the papers'. A row
pools the runs whose config matches it: mean ± sample standard deviation
(n - 1) over seeds of the dev-selected test accuracy. Rows without runs say
"not run". Each row names the commits its runs come from, and a number whose
runs predate the current numerics (``lab.provenance``) carries a
stale mark.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

from lab.encoder_runs import encoder_name_parts
from lab.report import (
    Provenance,
    best_dev_run,
    commands_section,
    compute_note,
    line_plot,
    load_runs,
    markdown_table,
    mean_std,
    minutes,
    no_runs,
    orderings_table,
    pooled_counts,
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
    windows,
    with_seeds,
    within,
    within_table,
)
from lab.runs import check_flags_first
from lab.scripts import load_script

# experiments/sst.py's settings tables: the paper's epochs and optimizer per model
REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "experiments" / "results"  # the committed results: the only folder whose report updates README.md

if __name__ == "__main__":  # --help and a bad --results answer here, before the training script and torch load
    check_flags_first(lambda argv: results_folder(__doc__.splitlines()[0], RESULTS, argv), "report_sst.py")

_SST = load_script(Path(__file__).with_name("sst.py"))
MODELS, PRESETS, SETTINGS_MODEL = _SST.MODELS, _SST.PRESETS, _SST.SETTINGS_MODEL


TAI = "Tai et al. 2015"
ZHU = "Zhu et al. 2015"
LZ = "Le & Zuidema 2015"
TENG = "Teng & Zhang 2017"
PAPER_NAMES = {"tai": TAI, "zhu": ZHU, "le_zuidema": LZ, "teng": TENG}
GLOVE_300 = "GloVe 840B 300d, tuned"
GLOVE_50 = "GloVe 6B 50d, tuned"
# A Teng & Zhang model on random vectors: the paper used GloVe 840B 300d, so this is a departure, listed
# next to the model's GloVe row.
RANDOM_FOR_GLOVE = "random 300d vectors U(±0.05) (paper GloVe 840B 300d)"

# One row per result the issue asks for. match: the run config values that define the row (keys absent from
# match must be at their defaults: see DEFAULTS). paper: (fine root, fine phrase, binary root, binary phrase).
DEFAULTS = dict(supervision="all", structure="gold")
ROWS = [
    dict(source=f"{TAI}, Table 2", name="Constituency Tree-LSTM, random vectors",
         match=dict(model="nary", embeddings="random"), paper=(43.9, None, 82.0, None),
         setting="random 300d", ours="random 300d (U(±0.05))"),
    dict(source=f"{TAI}, Table 2", name="Constituency Tree-LSTM, GloVe",
         match=dict(model="nary", embeddings="glove50"), paper=(51.0, None, 88.0, None),
         setting=GLOVE_300, ours=GLOVE_50),
    dict(source=f"{ZHU}, Table 1", name="S-LSTM", match=dict(model="slstm", embeddings="random"),
         paper=(48.9, 81.9, None, None), setting="random vectors, all phrases", ours="random 100d"),
    dict(source=f"{ZHU}, Table 3", name="S-LSTM, root labels",
         match=dict(model="slstm", embeddings="random", supervision="root"), paper=(43.5, None, None, None),
         setting="roots only", ours="random 100d"),
    dict(source=f"{ZHU}, Table 3", name="S-LSTM, root + leaf labels",
         match=dict(model="slstm", embeddings="random", supervision="root+leaf"), paper=(44.1, None, None, None),
         setting="roots and words", ours="random 100d"),
    dict(source=f"{ZHU}, Table 4", name="S-LSTM-LR, root labels",
         match=dict(model="slstm", embeddings="random", supervision="root", structure="left"),
         paper=(40.2, None, None, None), setting="left-recursive", ours="random 100d"),
    dict(source=f"{ZHU}, Table 4", name="S-LSTM-RR, root labels",
         match=dict(model="slstm", embeddings="random", supervision="root", structure="right"),
         paper=(40.3, None, None, None), setting="right-recursive", ours="random 100d"),
    dict(source=f"{ZHU}, Table 4", name="S-LSTM-LR, root + leaf labels",
         match=dict(model="slstm", embeddings="random", supervision="root+leaf", structure="left"),
         paper=(43.1, None, None, None), setting="left-recursive", ours="random 100d"),
    dict(source=f"{ZHU}, Table 4", name="S-LSTM-RR, root + leaf labels",
         match=dict(model="slstm", embeddings="random", supervision="root+leaf", structure="right"),
         paper=(43.2, None, None, None), setting="right-recursive", ours="random 100d"),
    dict(source=f"{LZ}, Table 1", name="LSTM-RNN (tanh)",
         match=dict(model="lstmrnn", embeddings="glove50", activation="tanh"), paper=(48.0, None, 86.2, None),
         setting="GloVe 6B 100d, d = 50; best dev of 10 runs", ours=f"{GLOVE_50}, d = 50"),
    dict(source=f"{LZ}, Fig. 6-7", name="LSTM-RNN (softsign)",
         match=dict(model="lstmrnn", embeddings="glove50", activation="softsign"), paper=(None, None, None, None),
         setting="medians in figures only: softsign best binary (86.4)", ours=f"{GLOVE_50}, d = 50"),
    dict(source=f"{LZ}, Fig. 6-7", name="LSTM-RNN (sigmoid)",
         match=dict(model="lstmrnn", embeddings="glove50", activation="sigmoid"), paper=(None, None, None, None),
         setting="medians in figures only: sigmoid worst", ours=f"{GLOVE_50}, d = 50"),
    dict(source=f"{TENG}, Table 1", name="ConTree", match=dict(model="contree", embeddings="glove50"),
         paper=(51.2, 83.0, 88.5, 92.5), setting=GLOVE_300, ours=GLOVE_50),
    dict(source=f"{TENG}, Table 1", name="Top-down ConTree", match=dict(model="topdown", embeddings="glove50",
                                                                         head="gated"),
         paper=(51.0, 82.9, 87.8, 92.1), setting=GLOVE_300, ours=GLOVE_50),
    dict(source=f"{TENG}, Table 1", name="ConTree + Lex", match=dict(model="contree_lex", embeddings="glove50",
                                                                      head="gated"),
         paper=(52.8, 83.2, 89.2, 92.3), setting=GLOVE_300, ours=GLOVE_50),
    dict(source=f"{TENG}, Table 1 / 5 (G)", name="BiConTree (gated heads)",
         match=dict(model="bicontree", embeddings="glove50", head="gated"),
         paper=(53.5, 83.5, 90.3, 92.8), setting=GLOVE_300, ours=GLOVE_50),
    dict(source=f"{TENG}, Table 5 (L)", name="BiConTree, left heads",
         match=dict(model="bicontree", embeddings="glove50", head="left"), paper=(51.1, None, None, None),
         setting=GLOVE_300, ours=GLOVE_50),
    dict(source=f"{TENG}, Table 5 (R)", name="BiConTree, right heads",
         match=dict(model="bicontree", embeddings="glove50", head="right"), paper=(51.6, None, None, None),
         setting=GLOVE_300, ours=GLOVE_50),
    dict(source=f"{TENG}, Table 5 (A)", name="BiConTree, average heads",
         match=dict(model="bicontree", embeddings="glove50", head="average"), paper=(51.8, None, None, None),
         setting=GLOVE_300, ours=GLOVE_50),
    dict(source=f"{ZHU}, Table 1", name="Naive Bayes, n-grams", match=dict(model="nb"),
         paper=(41.0, 67.2, None, None), setting="bag of words (Socher et al. 2013)",
         ours="scikit-learn, word presence, trained on all phrases"),
    dict(source=f"{ZHU}, Table 1", name="SVM, n-grams", match=dict(model="svm"),
         paper=(40.7, 64.3, None, None), setting="bag of words (Socher et al. 2013)",
         ours="scikit-learn, word presence, trained on all phrases"),
    dict(source=f"{TAI}, Table 2", name="Bidirectional LSTM", match=dict(model="bilstm", embeddings="glove50"),
         paper=(49.1, None, 87.5, None), setting=GLOVE_300, ours=GLOVE_50),
]
COLUMNS = (("fine", "root"), ("fine", "phrase"), ("binary", "root"), ("binary", "phrase"))
PLOT_ROWS = ("Constituency Tree-LSTM, random vectors", "Constituency Tree-LSTM, GloVe", "S-LSTM", "LSTM-RNN (tanh)",
             "ConTree", "Top-down ConTree", "ConTree + Lex", "BiConTree (gated heads)")
# README's rows: one per model, in its paper's main setting (the variants' rows are on docs/results.md)
SUMMARY_ROWS = (*PLOT_ROWS, "Bidirectional LSTM")  # the n-gram baselines: on docs/results.md


def full_runs(results: Path = RESULTS) -> list[dict]:
    """Every finished run (quick runs never land here)."""
    return load_runs(results / "sst", "sst")


def over_encoder(run: dict) -> bool:
    """A run whose leaves are a pretrained transformer's states (``--encoder``): reported in its own table, not
    against the papers' word-vector settings."""
    return bool(run["config"].get("encoder"))


# Over a pretrained transformer: the published rows to beat (SST-5 root accuracy, %), and our rows, each matched on
# the model, the encoder and how many of its top layers were fine-tuned (None: all of them).
ENCODER_ANCHORS = (
    ("Tai et al. 2015", "Constituency Tree-LSTM, GloVe 840B 300d", 51.0),
    ("Teng & Zhang 2017", "BiConTree, GloVe 840B 300d", 53.5),
    ("Kim et al. 2019", "SATA Tree-LSTM", 54.4),
    ("Yin et al. 2020", "BERT-base, mean-pooled", 50.2),
    ("Yin et al. 2020", "BERT-base, fine-tuned", 53.2),
    ("Yin et al. 2020", "SentiBERT (BERT-base under a constituency-tree attention)", 56.0),
)
ENCODER_NAMES = {"minilm": "MiniLM (all-MiniLM-L6-v2)", "mpnet": "MPNet (all-mpnet-base-v2)"}
ENCODER_LAYERS = {"minilm": 6, "mpnet": 12}
MODEL_NAMES = {"nary": "N-ary Tree-LSTM", "bicontree": "BiConTree", "encoder": "the encoder alone (mean of words)"}
# The encoder alone trained on every phrase (as the trees are) and on the sentences only (as BERT is fine-tuned on
# SST): a mean of word states under one linear layer may not serve every phrase as well as the sentences.
ENCODER_ROWS = [dict(model=model, encoder=encoder, trainable_layers=top, supervision=supervision)
                for encoder, tops in (("mpnet", (None, 4)), ("minilm", (None, 2)))
                for top in tops for model, supervision in (("nary", "all"), ("bicontree", "all"), ("encoder", "all"),
                                                          ("encoder", "root"))]
ENCODER_TARGETS = (("fine", 56.5, "SST-5 root ≥ 56.5 (above SentiBERT's 56.0)"),
                   ("binary", 94.0, "SST-2 root ≥ 94.0"))
TREE_MARGIN = 1.0  # on SST-5 the tree at least this many points above the encoder alone


def encoder_row_runs(row: dict, runs: Sequence[dict]) -> list[dict]:
    """The runs of one encoder row: its model, encoder and tuned layers, and the recipe's other settings (a run
    that changed them is a variant, not the row)."""
    return [r for r in runs if over_encoder(r) and r["config"]["model"] == row["model"]
            and Path(r["config"]["encoder"]).name == row["encoder"]
            and r["config"].get("trainable_layers") == row["trainable_layers"]
            and r["config"].get("supervision", "all") == row["supervision"] and not recipe_changes(r)]


def recipe_changes(run: dict) -> list[str]:
    """How an encoder run left the fine-tuning recipe (``ep5``, ``elr5e-05``, ...; the tuned layers aside, which
    the rows separate), as its run name says it."""
    return [part for part in encoder_name_parts(run["config"])[1] if not part.startswith("top")]


def layers_label(row: dict) -> str:
    top = row["trainable_layers"]
    total = ENCODER_LAYERS.get(row["encoder"])
    return "all" if top is None else "none (frozen)" if top == 0 else f"top {top} of {total}"


def encoder_command(row: dict, task: str, runs: Sequence[dict]) -> str:
    mine = [r for r in encoder_row_runs(row, runs) if task_of(r) == task]
    if mine:
        return with_seeds(mine[0]["command"], sorted({1, 2, 3} | {r["seed"] for r in mine}))
    parts = ["python experiments/sst.py", f"--model {row['model']}", f"--encoder {row['encoder']}"]
    parts += [f"--trainable-layers {row['trainable_layers']}"] if row["trainable_layers"] is not None else []
    parts += [] if task == "fine" else ["--binary"]
    parts += [] if row["supervision"] == "all" else [f"--supervision {row['supervision']}"]
    return " ".join(parts + ["--seeds 1 2 3 --threads 1"])


def encoder_table(runs: Sequence[dict], prov: Provenance | None = None) -> list[str]:
    """Our rows over a pretrained encoder (rows with runs), then the published rows they are measured against."""
    rows = []
    for row in ENCODER_ROWS:
        mine = encoder_row_runs(row, runs)
        if not mine:
            continue
        fine = [r for r in mine if task_of(r) == "fine"]
        binary = [r for r in mine if task_of(r) == "binary"]
        rows.append([encoder_row_name(row, layers=False), layers_label(row),
                     mean_std([r["dev"]["root"] for r in fine], empty="—"),
                     mean_std([r["test"]["root"] for r in fine], empty="—") + stale_mark(prov, fine),
                     mean_std([r["test"]["phrase"] for r in fine], empty="—"),
                     mean_std([r["test"]["root"] for r in binary], empty="—") + stale_mark(prov, binary),
                     f"{len(fine)} / {len(binary)}", mean_std([r["wall_time_s"] / 60 for r in mine], 0, empty="—"),
                     code(mine, prov)])
    if not rows:
        return []
    anchors = [[source, name, f"{value:.1f}"] for source, name, value in ENCODER_ANCHORS]
    return ["## Over a pretrained transformer", "",
            "Leaves from a pretrained sentence encoder (`--encoder`, `graphtree.models.EncoderLeaves`: each word's "
            "state the mean of its sub-words' last-layer states), fine-tuned end to end with the tree by the "
            "recipe of `docs/encoders.md` (AdamW, encoder 3e-5, the rest 1e-3, warm-up 10%, linear decay, "
            "minibatches of 16, 3 epochs, dropout 0.1). Test accuracy (%) at the epoch of best dev root accuracy, "
            "mean ± std over seeds; one CPU thread.", "",
            *markdown_table(["Model", "Encoder layers fine-tuned", "Fine dev root", "Fine root", "Fine phrase",
                             "Binary root", "Seeds (fine / bin.)", "Minutes per run", "Code"], rows),
            "", "Published rows, SST-5 root accuracy:", "",
            *markdown_table(["Source", "Model", "Fine root"], anchors), "", *encoder_target_lines(runs), ""]


def encoder_target_lines(runs: Sequence[dict]) -> list[str]:
    """The targets over an encoder: the best row's SST-5 and SST-2 root accuracy, and the tree against the encoder
    alone under the same encoder and tuned layers."""
    lines = ["Targets:", ""]
    for task, floor, what in ENCODER_TARGETS:
        scored = [(statistics.mean(values), row, values) for row in ENCODER_ROWS
                  if (values := [r["test"]["root"] for r in encoder_row_runs(row, runs) if task_of(r) == task])]
        if not scored:
            lines.append(f"- {what}: not run.")
            continue
        best, row, values = max(scored, key=lambda item: item[0])
        verdict = "met" if best >= floor else f"missed by {floor - best:.1f}"
        seeds = f"{len(values)} seed{'s' if len(values) > 1 else ''}" + (
            ", incomplete" if len(values) < MIN_SEEDS else "")
        lines.append(f"- {what}: {verdict}; best row {MODEL_NAMES[row['model']]} over {row['encoder']} "
                     f"({layers_label(row)} layers tuned) {best:.1f} ({seeds}).")
    for tree, supervision in ((row, s) for row in ENCODER_ROWS if row["model"] != "encoder" for s in ("all", "root")):
        alone = {**tree, "model": "encoder", "supervision": supervision}
        ours = [r["test"]["root"] for r in encoder_row_runs(tree, runs) if task_of(r) == "fine"]
        base = [r["test"]["root"] for r in encoder_row_runs(alone, runs) if task_of(r) == "fine"]
        if ours and base:
            gap = statistics.mean(ours) - statistics.mean(base)
            verdict = "met" if gap >= TREE_MARGIN else f"missed by {TREE_MARGIN - gap:.1f}"
            trained = "" if supervision == "all" else f" trained on {SUPERVISION_NAMES[supervision]}"
            lines.append(f"- SST-5, {MODEL_NAMES[tree['model']]} over {tree['encoder']} ({layers_label(tree)} "
                         f"layers tuned) ≥ the encoder alone{trained} + {TREE_MARGIN:g}: {verdict} "
                         f"({statistics.mean(ours):.1f} vs {statistics.mean(base):.1f}; {len(ours)} and {len(base)} "
                         "seeds).")
    return lines


def departures(config: dict) -> list[str]:
    """How a run's training differs from its paper's (epochs, dropout, optimizer), as readable phrases."""
    paper = MODELS.get(config["model"])
    if paper is None:  # the n-gram baselines have no paper settings of this kind
        return []
    changes = []
    if config.get("settings_of"):  # another paper's whole setup; departures from it are listed after it
        paper = MODELS[SETTINGS_MODEL[config["settings_of"]]]
        spec = PRESETS[config["settings_of"]]
        changes.append(f"the settings of {PAPER_NAMES[config['settings_of']]} ({config['dim']}d vectors, memory "
                       f"{config['hidden']}, dropout {paper['dropout']:g}, {paper['epochs']} epochs, "
                       f"{spec.name} {spec.lr:g}, minibatch {spec.batch_size})")
    changes += [f"{key} {config[key]} (paper {paper[key]})" for key in ("dropout", "epochs")
                if config.get(key, paper[key]) != paper[key]]
    if config.get("random_init", "uniform") == "normal":
        changes.append("random vectors N(0, 1) (ours U(±0.05); the paper gives none)")
    if config.get("embeddings") == "random" and config["paper"] == "teng":
        changes.append(RANDOM_FOR_GLOVE)
    if config.get("share_input_weights"):
        changes.append("top-down input maps and biases shared by both positions (Table 4's count and the "
                       "released code; eq 14 gives each position its own)")
    if config.get("optimizer_preset") == "teng_code":
        changes.append("the update of Teng & Zhang's released code (Adam after every sentence, lazy Adam on the "
                       "embeddings, decay 1e-6 per update)")
    preset = PRESETS[config.get("optimizer_preset", config["paper"])].as_dict()
    # The L2 default is the paper's where it reports one, Tai's where it does not (graphtree.train.optim).
    # Teng & Zhang give no minibatch size (graphtree.train.optim): 25 is our default, not the paper's.
    batch_source = ("code" if config.get("optimizer_preset") else "default" if config["paper"] == "teng"
                    else "paper")
    labels = {"batch_size": ("batch size", batch_source),
              "l2": ("L2", "default"), "lr": ("learning rate", "paper"),
              "embedding_lr": ("embedding learning rate", "paper")}
    used = {"decay": 0.0, **config["optimizer"]}  # runs from before OptimizerSpec had a decay
    changed = [key for key in preset if used.get(key) != preset[key]]
    if "lr" in changed and "embedding_lr" in changed and used["lr"] == used["embedding_lr"] \
            and preset["lr"] == preset["embedding_lr"]:
        changed.remove("embedding_lr")  # one learning rate for the parameters and the embeddings, as --lr sets it
    changes += [f"{labels[key][0]} {used[key]:g} ({labels[key][1]} {preset[key]:g})"
                for key in changed if key in labels]
    if any(key not in labels for key in changed):
        changes.append("optimizer")
    return changes


def matches(config: dict, match: dict, *, paper_settings: bool = True) -> bool:
    """A run belongs to a row when every matched key agrees, the rest is at its default, and it ran the
    paper's number of epochs, dropout and optimizer settings (anything else is not a reproduction;
    ``paper_settings=False`` drops that last condition)."""
    if any(config.get(key) != value for key, value in {**DEFAULTS, **match}.items()):
        return False
    return not (paper_settings and departures(config))


def task_of(run: dict) -> str:
    return "fine" if run["config"]["fine_grained"] else "binary"


def cell(runs: list[dict], task: str, metric: str, paper: float | None, prov: Provenance | None = None) -> str:
    """A table's number for one task: mean ± std of ``runs`` of that task, stale mark, the paper's in parentheses."""
    mine = [r for r in runs if task_of(r) == task]
    ours = mean_std([r["test"][metric] for r in mine]) + stale_mark(prov, mine)
    return f"{ours} ({paper:.1f})" if paper is not None else (ours if mine else "—")


def row_runs(row: dict, runs: list[dict]) -> list[dict]:
    return [r for r in runs if matches(r["config"], row["match"])]


def code(runs: list[dict], prov: Provenance | None) -> str:
    """A row's code cell: the commits its runs come from, and how each task was reproduced where it was."""
    if prov is None or not runs:
        return "—"
    notes = [f"{task} {note}" for task in ("fine", "binary")
             if (note := prov.standing([r for r in runs if task_of(r) == task]).note)]
    return "; ".join([prov.origins(runs), *notes])


def command_for(row: dict, task: str, runs: Sequence[dict] = ()) -> str:
    """The command that reproduces a row's task: seeds 1-3, and any further seeds among ``runs``."""
    m = row["match"]
    if m["model"] in ("nb", "svm"):
        return f"python experiments/sst.py --model {m['model']} --{'fine-grained' if task == 'fine' else 'binary'}"
    parts = ["python experiments/sst.py", f"--model {m['model']}", f"--embeddings {m.get('embeddings', 'random')}",
             "--fine-grained" if task == "fine" else "--binary"]
    for key in ("supervision", "structure"):
        if key in m:
            parts.append(f"--{key} {m[key]}")
    if m.get("head", "gated") != "gated":
        parts.append(f"--head {m['head']}")
    if m["model"] == "lstmrnn":
        parts.append(f"--activation {m['activation']}")
    seeds = sorted({1, 2, 3} | {r["seed"] for r in row_runs(row, list(runs)) if task_of(r) == task})
    return " ".join(parts + ["--seeds " + " ".join(map(str, seeds))])


def tasks_of(row: dict) -> list[str]:
    fine = row["paper"][0] is not None or row["paper"][1] is not None or row["match"]["model"] == "lstmrnn"
    binary = row["paper"][2] is not None or row["paper"][3] is not None or row["match"]["model"] == "lstmrnn"
    return [t for t, keep in (("fine", fine), ("binary", binary)) if keep]


def table(runs: list[dict], prov: Provenance | None = None) -> list[str]:
    rows = []
    for row in ROWS:
        mine = row_runs(row, runs)
        seeds = " / ".join(str(sum(task_of(r) == t for r in mine)) for t in ("fine", "binary"))
        rows.append([row["source"], row["name"], row["setting"], row["ours"],
                     *(cell(mine, task, metric, paper, prov) for (task, metric), paper in zip(COLUMNS, row["paper"])),
                     seeds, mean_std([r["wall_time_s"] / 60 for r in mine], 0, empty="—"), code(mine, prov)])
    return markdown_table(["Source", "Model", "Paper's setting", "Ours", "Fine root", "Fine phrase", "Binary root",
                           "Binary phrase", "Seeds (fine / bin.)", "Minutes per run", "Code"], rows)


RUN_COLUMNS = [("Dev root", lambda r: f"{r['dev']['root']:.2f}"), ("Test root", lambda r: f"{r['test']['root']:.2f}"),
               ("Test phrase", lambda r: f"{r['test']['phrase']:.2f}")]


def plots(runs: list[dict], out: Path = RESULTS) -> list[str]:
    """Accuracy by sentence length (Tai et al. Fig. 3), and by node depth and phrase length (Zhu et al. Fig. 4), of
    the fine-grained runs of ``PLOT_ROWS``."""
    series = []
    for row in ROWS:
        if row["name"] in PLOT_ROWS:
            mine = [r for r in row_runs(row, runs) if task_of(r) == "fine"]
            if mine:
                series.append((f"{row['name']} ({len(mine)} seed{'s' if len(mine) > 1 else ''})", mine))
    by_length = [(label, *windows(pooled_counts(mine, "by_length"))) for label, mine in series]
    line_plot(out / "sst_by_length.png", [(by_length, "sentence length (words), window [l-2, l+2]; l = 45 holds all "
                                           "longer", "test root accuracy (%)",
                                           "SST fine-grained: accuracy by sentence length (cf. Tai et al. Fig. 3)")],
              (7, 4.5))
    panels = []
    for key, xlabel, title in (("by_height", "node depth (longest path down to a word)",
                                "by depth (cf. Zhu et al. Fig. 4, upper)"),
                               ("by_span", "phrase length (words)", "by phrase length (cf. Zhu et al. Fig. 4, lower)")):
        lines = []
        for label, mine in series:
            counts = pooled_counts(mine, key)
            keys = sorted(k for k, (c, t) in counts.items() if t >= 20 * len(mine))  # drop sparse tails
            lines.append((label, keys, [100.0 * counts[k][0] / counts[k][1] for k in keys]))
        panels.append((lines, xlabel, "test accuracy, all phrases (%)", title))
    line_plot(out / "sst_by_depth.png", panels, (11, 4.5))
    return ["sst_by_length.png", "sst_by_depth.png"]


# The issue's targets. Rows in settings we can reproduce exactly (random vectors): within one standard deviation
# or one point of the paper. Orderings: the papers' rankings among rows; pairs the paper separates by less than
# ORDER_MIN_GAP points are not counted (one seed's noise is larger than that).
EXACT_ROWS = ("Constituency Tree-LSTM, random vectors", "S-LSTM", "S-LSTM, root labels", "S-LSTM, root + leaf labels",
              "S-LSTM-LR, root labels", "S-LSTM-RR, root labels", "S-LSTM-LR, root + leaf labels",
              "S-LSTM-RR, root + leaf labels")
FLOORS = (("BiConTree (gated heads)", "fine", 50.0), ("BiConTree (gated heads)", "binary", 88.0))
TABLE_1 = ("ConTree", "Top-down ConTree", "ConTree + Lex", "BiConTree (gated heads)")
ORDERINGS = (
    (f"{TENG}, Table 1, fine root", "fine", TABLE_1),
    (f"{TENG}, Table 1, binary root", "binary", TABLE_1),
    (f"{ZHU}, Table 4, root labels", "fine",
     ("S-LSTM, root labels", "S-LSTM-LR, root labels", "S-LSTM-RR, root labels")),
    (f"{ZHU}, Table 4, root + leaf labels", "fine",
     ("S-LSTM, root + leaf labels", "S-LSTM-LR, root + leaf labels", "S-LSTM-RR, root + leaf labels")),
    (f"{TENG}, Table 5, fine root", "fine", ("BiConTree, left heads", "BiConTree, right heads",
                                             "BiConTree, average heads", "BiConTree (gated heads)")),
)
ORDER_MIN_GAP = 0.5
ORDER_P = 0.05  # a pair of rows counts as separated by our seeds below this p (Welch's t-test)
MIN_SEEDS = 3


def task_runs(row: dict, runs: list[dict], task: str) -> list[dict]:
    return [r for r in row_runs(row, runs) if task_of(r) == task]


def root_accuracies(row: dict, runs: list[dict], task: str) -> list[float]:
    return [r["test"]["root"] for r in task_runs(row, runs, task)]


def paper_root(row: dict, task: str) -> float | None:
    return row["paper"][0 if task == "fine" else 2]


def floor_line(name: str, task: str, floor: float, runs: list[dict], prov: Provenance | None = None,
               interval: bool = True) -> str:
    """One of the GloVe targets (``FLOORS``): met or missed by the mean over seeds, with the figure and, where asked,
    the 95% confidence interval of the mean."""
    mine = task_runs(next(row for row in ROWS if row["name"] == name), runs, task)
    return target_line(f"{name}, {task} root", floor, [r["test"]["root"] for r in mine], mark=stale_mark(prov, mine),
                       min_seeds=MIN_SEEDS, interval=interval)


def target_lines(runs: list[dict], prov: Provenance | None = None) -> list[str]:
    """The issue's targets, each checked against the runs so far (``incomplete`` below three seeds)."""
    rows = {row["name"]: row for row in ROWS}
    lines = ["## Targets", "",
             f"Checked from the same files; a check on fewer than {MIN_SEEDS} seeds per row says *incomplete*.", "",
             "Settings we can reproduce exactly (random vectors): within one standard deviation or one point of "
             "the paper's test root accuracy.", "",
             *within_table([(f"{name} | {task}", paper_root(rows[name], task), task_runs(rows[name], runs, task))
                            for name in EXACT_ROWS for task in tasks_of(rows[name])],
                           lambda r: r["test"]["root"], prov, MIN_SEEDS)]
    lines += explained_misses(runs)
    lines += ["", "With the 50d GloVe vectors, test root accuracy (mean ± std of seeds):", ""]
    lines += [f"- {floor_line(name, task, floor, runs, prov)}" for name, task, floor in FLOORS]
    orderings = [(title, {n: paper_root(rows[n], task) for n in names},
                  {n: root_accuracies(rows[n], runs, task) for n in names}) for title, task, names in ORDERINGS]
    lines += ["", *orderings_table(orderings, min_gap=ORDER_MIN_GAP, alpha=ORDER_P, min_seeds=MIN_SEEDS)]
    return lines + [""]


def vectors_gain_lines(runs: list[dict]) -> list[str]:
    """What GloVe 6B 50d adds over random vectors, for each model run with both, next to what Tai's 840B 300d
    vectors add to theirs: the measured size of the input's effect, behind every GloVe row's gap."""
    rows = {row["name"]: row for row in ROWS}
    tai_random, tai_glove = rows["Constituency Tree-LSTM, random vectors"], rows["Constituency Tree-LSTM, GloVe"]
    lines = []
    on_random = [r for r in runs if departures(r["config"]) == [RANDOM_FOR_GLOVE]]
    pairs = [("Constituency Tree-LSTM", row_runs(tai_random, runs), tai_glove)]
    pairs += [(row["name"], [r for r in on_random if varied_row(r["config"]) is row], row) for row in ROWS]
    for name, random_runs, glove_row in pairs:
        for task in ("fine", "binary"):
            random_acc = [r["test"]["root"] for r in random_runs if task_of(r) == task]
            glove_acc = root_accuracies(glove_row, runs, task)
            if not random_acc or not glove_acc:
                continue
            ours_random, ours_glove = statistics.mean(random_acc), statistics.mean(glove_acc)
            paper_random, paper_glove = paper_root(tai_random, task), paper_root(tai_glove, task)
            lines.append(f"- {name}, {task}: GloVe 6B 50d adds {ours_glove - ours_random:+.1f} points over random "
                         f"vectors here ({ours_random:.1f} → {ours_glove:.1f}, {len(random_acc)} and "
                         f"{len(glove_acc)} seeds); Tai's 840B 300d vectors add {paper_glove - paper_random:+.1f} "
                         f"to the Constituency Tree-LSTM ({paper_random:.1f} → {paper_glove:.1f}). Our random-vector "
                         f"mean plus Tai's gain: {ours_random + paper_glove - paper_random:.1f}, against the "
                         f"paper's {paper_root(glove_row, task):.1f} for this model.")
    if not lines:
        return []
    return ["What the vectors are worth, on the models run with both (test root accuracy, mean over seeds):", "",
            *lines, ""]


# Papers that report one model picked by dev among several runs, not a mean: how many runs they pick from.
BEST_OF_RUNS = {TENG: 5, LZ: 10}


def best_dev_lines(runs: list[dict]) -> list[str]:
    """Our rows under the selection of the papers that report the best-dev run of several, beside our means."""
    lines = []
    for row in ROWS:
        paper_runs = next((n for source, n in BEST_OF_RUNS.items() if row["source"].startswith(source)), None)
        for task in tasks_of(row) if paper_runs else []:
            mine = [r for r in row_runs(row, runs) if task_of(r) == task]
            paper = paper_root(row, task)
            if not mine or paper is None:
                continue
            best = best_dev_run(mine, "root")
            lines.append(f"| {row['name']} | {task} | {paper:.1f} (best dev of {paper_runs}) | "
                         f"{best['test']['root']:.1f} (seed {best['seed']}, best dev of {len(mine)}) | "
                         f"{mean_std([r['test']['root'] for r in mine])} |")
    if not lines:
        return []
    return ["Teng & Zhang and Le & Zuidema report the test accuracy of the one run (of 5 and 10) with the best "
            "dev accuracy, not a mean. The same selection over our seeds, next to our mean (root accuracy):", "",
            "| Row | Task | Paper | Ours, best dev run | Ours, mean of seeds |", "|---|---|---|---|---|",
            *lines, ""]


def fitting_notes(runs: list[dict]) -> list[str]:
    """How fast each supervision setting of the S-LSTM fits its training labels, read from the runs' history."""
    groups: dict[tuple[int, str, str], list[dict]] = {}
    order = ("all", "root", "root+leaf")
    for r in runs:
        config = r["config"]
        if (config["model"] == "slstm" and config["supervision"] in order and config["structure"] == "gold"
                and len(r["history"]) >= 10):
            changed = ", ".join(departures(config))
            groups.setdefault((order.index(config["supervision"]), changed, config["supervision"]), []).append(r)
    lines = []
    for (_, changed, supervision), mine in sorted(groups.items()):
        best = statistics.mean(r["best_epoch"] for r in mine)
        loss = statistics.mean(r["history"][9]["train_loss"] for r in mine)
        setting = f", {changed}" if changed else ""
        count = f"{len(mine)} run{'s' if len(mine) > 1 else ''}"
        lines.append(f"S-LSTM, {supervision} labels{setting} ({count}): best dev epoch {best:.1f} on "
                     f"average; training loss per sentence after epoch 10 {loss:.3g}.")
    if not lines:
        return []
    return ["How fast the S-LSTM fits its training labels (from the runs' per-epoch history): with root labels "
            "only, the training loss is near zero within ten epochs while dev accuracy peaks in the first few; "
            "Zhu et al. tuned on dev and report no regularization strength, we kept Tai's λ and no dropout.", "",
            *[f"- {line}" for line in lines], ""]


def swapped_settings_lines(runs: list[dict]) -> list[str]:
    """Tai's cell and Zhu's S-LSTM, each under its own paper's settings and under the other's (random vectors,
    fine-grained, all labels): whether, in our hands, the cell or the setup carries the papers' difference."""
    rows = {row["name"]: row for row in ROWS}
    cells = {"nary": rows["Constituency Tree-LSTM, random vectors"], "slstm": rows["S-LSTM"]}
    setups = [MODELS[model]["paper"] for model in cells]  # tai, zhu
    results: dict[tuple[str, str], list[float]] = {}
    for r in runs:
        config = r["config"]
        row = cells.get(config["model"])
        if row is None or not config["fine_grained"] or not matches(config, row["match"], paper_settings=False):
            continue
        # Either the paper's own settings, or the other paper's and nothing else changed.
        if len(departures(config)) == (1 if config.get("settings_of") else 0):
            setting = config.get("settings_of") or MODELS[config["model"]]["paper"]
            results.setdefault((config["model"], setting), []).append(r["test"]["root"])
    if not any(setting != MODELS[model]["paper"] for model, setting in results):
        return []
    (tai_cell, tai_paper), (zhu_cell, zhu_paper) = ((model, paper_root(row, "fine")) for model, row in cells.items())
    lines = [f"The same two setups, each cell (random vectors, fine-grained root accuracy on test; {TAI} report "
             f"{tai_paper:.1f} for their cell with their settings, {ZHU} {zhu_paper:.1f} for theirs with "
             "theirs):", "",
             f"| Cell | {TAI}'s settings | {ZHU}'s settings |", "|---|---|---|"]
    for model, row in cells.items():
        values = [f"{mean_std(results[(model, setup)])} ({len(results[(model, setup)])})"
                  if (model, setup) in results else "not run" for setup in setups]
        lines.append(f"| {row['name'].removesuffix(', random vectors')} | {values[0]} | {values[1]} |")
    lines += ["", "(in parentheses: seeds)"]
    if len(results) == 4:
        means = {key: statistics.mean(values) for key, values in results.items()}
        by_setup = max(abs(means[(model, setups[0])] - means[(model, setups[1])]) for model in cells)
        by_cell = max(abs(means[(tai_cell, setup)] - means[(zhu_cell, setup)]) for setup in setups)
        lines += ["", f"Here the setup moves each cell's mean by at most {by_setup:.1f} points and the two cells "
                  f"differ by at most {by_cell:.1f} under either setup, where the papers' numbers for them differ "
                  f"by {zhu_paper - tai_paper:.1f}: neither {ZHU}'s reported settings nor the S-LSTM cell bring a "
                  f"Tree-LSTM on random vectors to {zhu_paper:.1f} here."]
    return lines + [""]


def varied_row(config: dict) -> dict | None:
    """The row a run outside the papers' settings varies: the one it matches but for those settings, or for a run
    on random vectors where the paper used GloVe, the model's GloVe row."""
    candidates = [config] + ([{**config, "embeddings": "glove50"}] if RANDOM_FOR_GLOVE in departures(config) else [])
    return next((row for candidate in candidates for row in ROWS
                 if matches(candidate, row["match"], paper_settings=False)), None)


def variant_runs(runs: list[dict]) -> dict[tuple[str, str, str], list[dict]]:
    """The runs outside their paper's settings, keyed by (row they vary, task, change)."""
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for r in runs:
        changes = departures(r["config"])
        if not changes:
            continue
        row = varied_row(r["config"])
        name = row["name"] if row else r["config"]["model"]
        groups.setdefault((name, task_of(r), ", ".join(changes)), []).append(r)
    return groups


def variant_groups(runs: list[dict], split: str = "test") -> dict[tuple[str, str, str], list[float]]:
    """Root accuracies on ``split`` (at the dev-selected epoch) of the runs outside their paper's settings, keyed by
    (row they vary, task, change)."""
    return {key: [r[split]["root"] for r in mine] for key, mine in variant_runs(runs).items()}


def explained_misses(runs: list[dict]) -> list[str]:
    """For each exactly reproducible row that misses its paper, the runs outside its settings that land within."""
    rows = {row["name"]: row for row in ROWS}
    found = []
    for (name, task, changed), values in sorted(variant_groups(runs).items()):
        paper = paper_root(rows[name], task) if name in EXACT_ROWS else None
        if paper is None:
            continue
        ours = root_accuracies(rows[name], runs, task)
        if ours and not within(ours, paper) and within(values, paper):
            seeds = f"{len(values)} seed{'s' if len(values) > 1 else ''}"
            found.append(f"- {name}, {task}: with {changed}, {mean_std(values)} over {seeds} (paper {paper:.1f}, "
                         f"ours {mean_std(ours)}).")
    if not found:
        return []
    return ["", "Misses that a run outside our settings brings within (an experiment behind an explanation; the "
            "settings are in *Other settings* below):", "", *found]


def other_settings(runs: list[dict], prov: Provenance | None = None) -> list[str]:
    """Runs outside their paper's training settings (another dropout, epoch count, batch size, L2 strength or
    random-vector scale), grouped by setting, beside the row they vary: experiments behind the explanations,
    not reproductions."""
    groups, dev, grouped = variant_groups(runs), variant_groups(runs, "dev"), variant_runs(runs)
    if not groups:
        return []
    rows = {row["name"]: row for row in ROWS}
    lines = []
    for key, values in sorted(groups.items()):
        name, task, changed = key
        reference = [r for r in row_runs(rows[name], runs) if task_of(r) == task] if name in rows else []
        mine = grouped[key]
        lines.append([name, task, changed, str(len(values)), mean_std(dev[key]),
                      mean_std([r["dev"]["root"] for r in reference]) if reference else "not run",
                      f"{mean_std(values)}{stale_mark(prov, mine)}",
                      mean_std([r["test"]["root"] for r in reference]) if reference else "not run", code(mine, prov)])
    return ["## Other settings", "",
            "Runs outside the papers' settings, each next to the row it varies (root accuracy at the epoch of best "
            "dev root accuracy, mean ± std over seeds). A setting chosen for its dev accuracy is chosen fairly; "
            "one chosen for its test accuracy is not.", "",
            *markdown_table(["Row", "Task", "Changed", "Seeds", "Dev root", "The row's dev root", "Test root",
                             "The row's test root", "Code"], lines), ""]


def provenance_rows(runs: list[dict]) -> list[tuple[str, list[dict], str]]:
    """Every group of runs the report gives a number for, as ``(label, runs, command)``: each row and task of the
    table, then each group of *Other settings*."""
    groups = [(f"{row['name']}, {task}", task_runs(row, runs, task), command_for(row, task, runs))
              for row in ROWS for task in ("fine", "binary")]
    groups += [(f"{name}, {task}, {changed}", mine, with_seeds(mine[0]["command"], [r["seed"] for r in mine]))
               for (name, task, changed), mine in sorted(variant_runs(runs).items())]
    return groups


def report(runs: list[dict], prov: Provenance | None = None, results: str = "experiments/results",
           encoder_runs: Sequence[dict] = ()) -> str:
    """sst.md. ``results``: the results folder as the report names it; ``encoder_runs``: the runs over a pretrained
    encoder, in a table of their own."""
    lines = report_head("Stanford Sentiment Treebank: our runs next to the papers", "sst", results,
                        "Test accuracy (%) of the epoch with the best dev root accuracy: mean ± sample standard "
                        "deviation over seeds, the paper's number in parentheses. Fine: 5 classes; binary: neutral "
                        "sentences dropped and neutral phrases not counted. Phrase accuracy counts every labelled node "
                        "(words and roots included). Paper numbers are means over 5 runs (Tai), single runs (Zhu), the "
                        "best-dev of 10 runs (Le & Zuidema) and the best-dev model of 5 seeds (Teng & Zhang). Code: "
                        "the commits the row's runs come from (see Provenance below).")
    lines += table(runs, prov) + stale_lines(prov, (task_runs(row, runs, task) for row in ROWS
                                                    for task in ("fine", "binary")))
    lines += ["", "Settings: the papers' optimizers (`graphtree.train.optim.PRESETS`), minibatches, dropout and "
              "epochs (`MODELS` in `experiments/sst.py`). The 300d GloVe 840B vectors of Tai, Zhu and Teng & "
              "Zhang and the 100d 6B vectors of Le & Zuidema are not available here; our GloVe rows use the "
              "50d 6B vectors, a smaller and weaker input. Zhu's Table 4 rows train and test on left- or "
              "right-recursive trees over the same words; only the words and the root keep labels.", "",
              *compute_lines(runs), *encoder_table(encoder_runs, prov), *target_lines(runs, prov),
              *vectors_gain_lines(runs), *best_dev_lines(runs),
              *fitting_notes(runs), *swapped_settings_lines(runs),
              "![accuracy by sentence length](sst_by_length.png)", "",
              "![accuracy by depth and phrase length](sst_by_depth.png)", "", *other_settings(runs, prov)]
    lines += provenance_lines(prov, provenance_rows(runs) + encoder_provenance_rows(encoder_runs)) \
        if prov is not None else []
    every = [*runs, *encoder_runs]
    lines += runs_section(every, runs_table(every, prov, RUN_COLUMNS))
    commands = [f"{command_for(row, task, runs)}    # {row['name']}, {task}" for row in ROWS for task in tasks_of(row)]
    commands += [f"{encoder_command(row, task, encoder_runs)}    # {encoder_row_name(row)}, {task}"
                 for row in ENCODER_ROWS for task in ("fine", "binary")
                 if any(task_of(r) == task for r in encoder_row_runs(row, encoder_runs))]
    lines += commands_section(commands, report_script("sst", results))
    return "\n".join(lines)


def compute_lines(runs: list[dict]) -> list[str]:
    """What the runs cost: in all, and split between the papers' settings and the other settings."""
    return compute_note(runs, [([r for r in runs if not departures(r["config"])],
                                "in the papers' settings (the table above)"),
                               ([r for r in runs if departures(r["config"])], "in other settings (below)")],
                        "Wall time counts each epoch's dev evaluation and any time lost to other jobs on the machine.")


def results_section(every: list[dict], prov: Provenance | None = None) -> str:
    """The SST section of docs/results.md from every run: rows with runs, with the test root accuracy, wall time and
    command of each task; the stale marks' footnote and the GloVe targets; then the rows over an encoder."""
    runs, encoder_runs = split_encoder_runs(every)
    rows, marked = [], []
    for row in ROWS:
        mine = row_runs(row, runs)
        if mine:
            done = [task for task in tasks_of(row) if any(task_of(r) == task for r in mine)]
            marked += [task_runs(row, runs, task) for task in done]
            rows.append([row["source"], row["name"], cell(mine, "fine", "root", row["paper"][0], prov),
                         cell(mine, "binary", "root", row["paper"][2], prov), minutes(mine),
                         "<br>".join(f"`{command_for(row, task, runs)}`" for task in done)])
    targets = [floor_line(name, task, floor, runs, prov, interval=False).removesuffix(".")
               for name, task, floor in FLOORS]
    lines = ["Test root accuracy (%), mean ± std over seeds, the paper's number in parentheses; rows that have "
             "runs so far. The full table (phrase accuracies, every row of the four papers), the plots and the "
             "settings are in [`experiments/results/sst.md`](../experiments/results/sst.md), with the machine each "
             "run used, the commits the runs come from and the reproduction targets checked row by row.", "",
             *markdown_table(["Source", "Model", "Fine", "Binary", "Minutes per run (1 CPU thread)", "Command"], rows),
             *stale_lines(prov, marked, "experiments/results/reproduced.json", "beside it"),
             "", f"Targets (GloVe 6B 50d): {'; '.join(targets)}."]
    encoder_rows = encoder_summary_rows(encoder_runs, prov)
    if encoder_rows:
        lines += ["", "Over a pretrained transformer (fine-tuned with the tree; the published rows to beat and the "
                  "targets are in the full table's section *Over a pretrained transformer*):", "",
                  *markdown_table(["Task", "Model", "Ours", "Published", "Minutes per run (1 CPU thread)",
                                   "Command"], [[row[0].split("](")[0].lstrip("["), *row[1:]]
                                               for row in encoder_rows])]
    return "\n".join(lines) + "\n"


def split_encoder_runs(every: Sequence[dict]) -> tuple[list[dict], list[dict]]:
    """The runs over word vectors, and those over a pretrained encoder."""
    return [r for r in every if not over_encoder(r)], [r for r in every if over_encoder(r)]


def summary_rows(every: list[dict], prov: Provenance | None = None) -> list[list[str]]:
    """README's rows from every run: each of ``SUMMARY_ROWS`` with runs, its test root accuracy per task (fine /
    binary) against the paper's; then the rows over an encoder."""
    runs, encoder_runs = split_encoder_runs(every)
    found = []
    for row in (row for row in ROWS if row["name"] in SUMMARY_ROWS):
        mine = row_runs(row, runs)
        done = [task for task in tasks_of(row) if any(task_of(r) == task for r in mine)]
        if not done:
            continue
        papers = [paper_root(row, task) for task in done]
        found.append([summary_label("sst", "SST " + " / ".join(done)), row["name"],
                      " / ".join(f"{mean_std(root_accuracies(row, runs, task))}"
                                 f"{stale_mark(prov, task_runs(row, runs, task))}" for task in done),
                      " / ".join(f"{p:.1f}" if p is not None else "—" for p in papers) if any(papers) else "—",
                      minutes(mine), "<br>".join(f"`{command_for(row, task, runs)}`" for task in done)])
    # README leaves out the encoder alone trained on every phrase: it collapses at the root (docs/encoders.md), and
    # the fair comparison is the encoder alone on sentence labels.
    return found + encoder_summary_rows(encoder_runs, prov, every_phrase_alone=False)


def encoder_row_name(row: dict, layers: bool = True) -> str:
    """A row's name: model, encoder, the layers tuned where not all (``layers``), the labels where not all."""
    tuned = "" if row["trainable_layers"] is None or not layers else f", {layers_label(row)} layers tuned"
    labels = "" if row["supervision"] == "all" else f", trained on {SUPERVISION_NAMES[row['supervision']]}"
    return f"{MODEL_NAMES[row['model']]} over {ENCODER_NAMES.get(row['encoder'], row['encoder'])}{tuned}{labels}"


SUPERVISION_NAMES = {"root": "sentence labels only"}


def encoder_provenance_rows(runs: Sequence[dict]) -> list[tuple[str, list[dict], str]]:
    return [(f"{encoder_row_name(row)}, {task}", mine, encoder_command(row, task, runs))
            for row in ENCODER_ROWS for task in ("fine", "binary")
            if (mine := [r for r in encoder_row_runs(row, runs) if task_of(r) == task])]


def encoder_summary_rows(runs: Sequence[dict], prov: Provenance | None = None,
                         every_phrase_alone: bool = True) -> list[list[str]]:
    """The rows over a pretrained encoder: each row with runs, per task, beside the best published tree-LSTM row
    and SentiBERT; without the encoder alone trained on every phrase unless ``every_phrase_alone``."""
    published = {"fine": "54.4 (SATA Tree-LSTM); SentiBERT 56.0", "binary": "—"}
    found = []
    for row in ENCODER_ROWS:
        if not every_phrase_alone and row["model"] == "encoder" and row["supervision"] == "all":
            continue
        for task in ("fine", "binary"):
            mine = [r for r in encoder_row_runs(row, runs) if task_of(r) == task]
            if not mine:
                continue
            seeds = "" if len(mine) >= MIN_SEEDS else f" ({len(mine)} seed{'s' if len(mine) > 1 else ''})"
            found.append([summary_label("sst", f"SST {task}"), encoder_row_name(row),
                          mean_std([r["test"]["root"] for r in mine]) + stale_mark(prov, mine) + seeds,
                          published[task], minutes(mine), f"`{encoder_command(row, task, runs)}`"])
    return found


def main(argv: Sequence[str] | None = None) -> None:
    results, committed = results_folder(__doc__.splitlines()[0], RESULTS, argv)
    every = full_runs(results)
    runs, encoder_runs = split_encoder_runs(every)
    if not every:
        no_runs("sst", results, [results / "sst"], "full SST runs")
    prov = Provenance.of(results, "sst")
    (results / "sst.md").write_text(report(runs, prov, shown(results, REPO), encoder_runs))
    written = plots(runs, results) if runs else []
    # Only the committed results speak for docs/results.md and README: a report on one's own runs stays in their folder.
    written += publish(REPO, "sst", results_section(every, prov), summary_rows(every, prov)) if committed else []
    print(f"{len(every)} runs -> {results / 'sst.md'}, " + ", ".join(written))


if __name__ == "__main__":
    main()
