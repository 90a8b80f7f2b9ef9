"""Provenance, stale rows, targets and ``--results`` of the report scripts, on made-up run records with hand-worked
expectations (lab.report and experiments/report_{sst,sick,trec}.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from lab.provenance import NUMERICS_VERSION
from lab.report import SECTIONS, Provenance, git_added, load_checks, summary_label
from lab.scripts import load_script

pytest.importorskip("scipy")
EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"
report_sick, report_trec, report_sst = (load_script(EXPERIMENTS / f"{name}.py")
                                        for name in ("report_sick", "report_trec", "report_sst"))

SHA_A, SHA_B, SHA_C = "a" * 40, "b" * 40, "c" * 40
MARK = "†"


def provenance(commit: str = SHA_C, dirty: bool = False, numerics: int = NUMERICS_VERSION) -> dict:
    return {"commit": commit, "dirty": dirty, "torch": "2.13.0+cpu", "threads": 1, "kernels": "compiled",
            "numerics": numerics}


def sick_run(model: str, seed: int, pearson: float, prov: dict | None = None) -> dict:
    record = {"experiment": "sick", "run": f"{model}_glove50_s{seed}", "seed": seed,
              "config": {"model": model, "epochs": report_sick.EPOCHS, "quick": False},
              "command": f"python experiments/sick.py --model {model} --seeds {seed}",
              "best_epoch": 3, "history": [{}] * report_sick.EPOCHS,
              "dev": {"pearson": pearson - 0.01}, "test": {"pearson": pearson, "spearman": 0.75, "mse": 0.3},
              "wall_time_s": 60.0, "train_seconds_per_epoch": 5.0, "threads": 1, "machine": "x86_64, 2 CPUs",
              "test_by_length": {"length": [5, 6], "pearson": [pearson, pearson]}}
    if prov is not None:
        record["provenance"] = prov
    return record


def trec_run(model: str, seed: int, accuracy: float, prov: dict | None = None) -> dict:
    record = {"experiment": "trec", "run": f"{model}_glove50_s{seed}", "seed": seed,
              "config": {"model": model, "epochs": report_trec.EPOCHS, "quick": False},
              "command": f"python experiments/trec.py --model {model} --seeds {seed}",
              "best_epoch": 3, "history": [{}] * report_trec.EPOCHS,
              "dev": {"accuracy": accuracy - 1.0}, "test": {"accuracy": accuracy},
              "wall_time_s": 60.0, "train_seconds_per_epoch": 5.0, "threads": 1, "machine": "x86_64, 2 CPUs"}
    if prov is not None:
        record["provenance"] = prov
    return record


def sst_run(fine: bool, seed: int, root: float, prov: dict | None = None) -> dict:
    """A BiConTree (gated heads, GloVe) run in its paper's settings."""
    spec = report_sst.MODELS["bicontree"]
    task = "fine" if fine else "binary"
    record = {"experiment": "sst", "run": f"bicontree_head-gated_glove50_{task}_s{seed}", "seed": seed,
              "config": {"model": "bicontree", "embeddings": "glove50", "head": "gated", "fine_grained": fine,
                         "supervision": "all", "structure": "gold", "epochs": spec["epochs"],
                         "paper": spec["paper"], "optimizer": report_sst.PRESETS[spec["paper"]].as_dict()},
              "command": f"python experiments/sst.py --model bicontree --embeddings glove50 --{task} --seeds {seed}",
              "best_epoch": 3, "history": [{"train_loss": 0.5}] * spec["epochs"],
              "dev": {"root": root - 1.0}, "test": {"root": root, "phrase": 80.0},
              "wall_time_s": 60.0, "train_seconds_per_epoch": 5.0, "threads": 1, "machine": "x86_64, 2 CPUs"}
    if prov is not None:
        record["provenance"] = prov
    return record


def write_results(folder: Path, task: str, runs: list[dict], checks: list[dict] | None = None) -> Path:
    (folder / task).mkdir(parents=True, exist_ok=True)
    for r in runs:
        (folder / task / f"{r['run']}.json").write_text(json.dumps(r))
    if checks is not None:
        (folder / "reproduced.json").write_text(json.dumps(checks))
    return folder


def check(run: str, identical: bool, task: str = "sick", numerics: int = NUMERICS_VERSION,
          commit: str = SHA_B) -> dict:
    return {"task": task, "run": run, "numerics": numerics, "commit": commit, "epochs_compared": 1,
            "identical": identical, "command": "python experiments/reproduce.py"}


def row_of(lines: list[str], start: str) -> str:
    (found,) = [line for line in lines if line.startswith(start)]
    return found


DEPENDENCY = "| Dependency Tree-LSTM |"


def test_a_legacy_row_is_stale_and_dated_by_the_commit_that_added_its_files():
    runs = [sick_run("dependency", s, v) for s, v in ((1, 0.84), (2, 0.85), (3, 0.86))]
    # s1 and s2 came in one commit, s3 in another; the runs carry no provenance block.
    added = {"sick/dependency_glove50_s1.json": SHA_A, "sick/dependency_glove50_s2.json": SHA_A,
             "sick/dependency_glove50_s3.json": SHA_B}
    prov = Provenance("sick", added)
    standing = prov.standing(runs)
    assert not standing.current
    assert standing.reason == "3 runs without provenance (legacy), not reproduced"
    assert prov.origin(runs[2]) == "recorded in bbbbbbb"
    assert prov.origins(runs) == "recorded in aaaaaaa (2), bbbbbbb (1)"
    # mean 0.85, std 0.01: each of the row's numbers carries the mark, and the code cell names both commits
    row = row_of(report_sick.table(runs, prov), DEPENDENCY)
    assert row.startswith(f"| Dependency Tree-LSTM | 0.8500 ± 0.0100{MARK} (0.8676) | 0.7500 ± 0.0000{MARK} (0.8083) |")
    assert row.endswith("| recorded in aaaaaaa (2), bbbbbbb (1) |")
    readme = report_sick.results_section(runs, prov)
    assert f"0.8500 ± 0.0100{MARK} (0.8676)" in readme
    assert f"{MARK} stale: the runs predate the current numerics (version {NUMERICS_VERSION})" in readme
    # Outside git nothing dates the file.
    assert Provenance("sick").origin(runs[0]) == "unknown"
    assert Provenance("sick").origins(runs) == "unknown (3)"


def test_runs_at_the_current_numerics_are_current():
    runs = [sick_run("dependency", 1, 0.85, provenance(SHA_C, dirty=True)),
            sick_run("dependency", 2, 0.86, provenance(SHA_C))]
    prov = Provenance("sick")
    assert prov.standing(runs).current and prov.standing(runs).note == ""
    assert prov.origins(runs) == "ran at ccccccc+dirty (1), ccccccc (1)"
    row = row_of(report_sick.table(runs, prov), DEPENDENCY)
    assert MARK not in row and "0.8550 ± 0.0071 (0.8676)" in row  # mean 0.855, std 0.005 * sqrt(2)
    assert MARK not in report_sick.results_section(runs, prov)
    assert "Every row with runs is current." in report_sick.report(runs, False, prov)
    # One run at an older numerics version makes the row stale again.
    older = sick_run("dependency", 3, 0.84, provenance(SHA_A, numerics=NUMERICS_VERSION - 1))
    standing = prov.standing([*runs, older])
    assert not standing.current
    assert standing.reason == (f"1 run at an older numerics version ({NUMERICS_VERSION - 1}; "
                               f"now {NUMERICS_VERSION})")


def test_a_reproduced_run_makes_its_legacy_row_current(tmp_path: Path):
    runs = [sick_run("dependency", s, v) for s, v in ((1, 0.84), (2, 0.85), (3, 0.86))]
    # Checks of another task, or at an older numerics version, vouch for nothing here.
    results = write_results(tmp_path, "sick", runs, [check("dependency_glove50_s2", True, task="sst"),
                                                      check("dependency_glove50_s1", True,
                                                            numerics=NUMERICS_VERSION - 1)])
    assert not Provenance.of(results, "sick").standing(runs).current
    (results / "reproduced.json").write_text(json.dumps([check("dependency_glove50_s2", True)]))
    prov = Provenance.of(results, "sick")
    standing = prov.standing(runs)
    assert standing.current
    assert standing.note == "reproduced at bbbbbbb (seed 2, 1 epoch)"
    row = row_of(report_sick.table(runs, prov), DEPENDENCY)
    assert MARK not in row and row.endswith("| unknown (3); reproduced at bbbbbbb (seed 2, 1 epoch) |")
    md = report_sick.report(runs, False, prov)
    assert "- Dependency Tree-LSTM: reproduced at bbbbbbb (seed 2, 1 epoch)." in md
    assert MARK not in report_sick.results_section(runs, prov)
    # The rescue covers the row of the reproduced run only.
    lstm = [sick_run("lstm", 1, 0.81)]
    assert MARK in row_of(report_sick.table(runs + lstm, prov), "| LSTM |")


def test_a_check_vouches_only_for_runs_made_by_the_same_code():
    # Seeds 1-2 recorded in one commit, seed 3 in another: a check of seed 1 says nothing of seed 3's code.
    runs = [sick_run("dependency", s, 0.85) for s in (1, 2, 3)]
    added = {"sick/dependency_glove50_s1.json": "a" * 40, "sick/dependency_glove50_s2.json": "a" * 40,
             "sick/dependency_glove50_s3.json": "b" * 40}
    prov = Provenance("sick", added, [check("dependency_glove50_s1", True, commit="c" * 40)])
    standing = prov.standing(runs)
    assert not standing.current
    assert standing.reason == "1 run without provenance (legacy), not reproduced"
    prov = Provenance("sick", added, [check("dependency_glove50_s1", True, commit="c" * 40),
                                      check("dependency_glove50_s3", True, commit="c" * 40)])
    assert prov.standing(runs).current
    assert prov.standing(runs).note == "reproduced at ccccccc (seed 1, 1 epoch), ccccccc (seed 3, 1 epoch)"
    # Runs that ran at the current numerics need no check.
    fresh = [sick_run("dependency", 4, 0.85, provenance())]
    assert Provenance("sick", added, []).standing(fresh).current


def test_a_reproduction_that_differs_keeps_the_row_stale(tmp_path: Path):
    legacy = [sick_run("dependency", s, 0.85) for s in (1, 2)]
    # identical: true for seed 1 but false for seed 2: the difference wins.
    results = write_results(tmp_path, "sick", legacy, [check("dependency_glove50_s1", True),
                                                       check("dependency_glove50_s2", False, commit=SHA_A)])
    prov = Provenance.of(results, "sick")
    standing = prov.standing(legacy)
    assert not standing.current
    assert standing.reason == "reproduced check failed: differs at HEAD (rerun at aaaaaaa (seed 2, 1 epoch))"
    assert f"0.8500 ± 0.0000{MARK}" in row_of(report_sick.table(legacy, prov), DEPENDENCY)
    md = report_sick.report(legacy, False, prov)
    assert ("- Dependency Tree-LSTM: reproduced check failed: differs at HEAD (rerun at aaaaaaa (seed 2, 1 epoch)). "
            "Rerun: `python experiments/sick.py --model dependency --seeds 1 2 3`") in md
    # A check speaks of the run file it reran: a run made since under the same name, at the current numerics, is
    # current despite the legacy file's failed check; once a rerun of that very run differs, it is stale too.
    current = [sick_run("dependency", 2, 0.85, provenance())]
    assert prov.standing(current).current
    own_check = dict(check("dependency_glove50_s2", False, commit=SHA_A), run_commit=SHA_C)
    results = write_results(tmp_path / "again", "sick", current, [own_check])
    assert not Provenance.of(results, "sick").standing(current).current


def test_a_missing_or_foreign_checks_file(tmp_path: Path):
    assert load_checks(tmp_path) == []
    (tmp_path / "reproduced.json").write_text(json.dumps({"task": "sick"}))
    with pytest.raises(ValueError):
        load_checks(tmp_path)


def test_git_added_names_the_commit_that_first_added_each_file(tmp_path: Path):
    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false",
                               *args], cwd=tmp_path, check=True, capture_output=True, text=True).stdout.strip()

    assert git_added(tmp_path) == {}  # not a repository yet
    git("init", "-q")
    results = tmp_path / "results"
    write_results(results, "sick", [sick_run("dependency", 1, 0.85)])
    git("add", ".")
    git("commit", "-q", "-m", "first")
    first = git("rev-parse", "HEAD")
    # A later commit that changes s1 and adds s2: s1 stays dated by its first addition.
    write_results(results, "sick", [sick_run("dependency", 1, 0.86), sick_run("dependency", 2, 0.85)])
    git("add", ".")
    git("commit", "-q", "-m", "second")
    second = git("rev-parse", "HEAD")
    assert git_added(results) == {"sick/dependency_glove50_s1.json": first, "sick/dependency_glove50_s2.json": second}
    prov = Provenance.of(results, "sick")
    assert prov.origin(sick_run("dependency", 2, 0.85)) == f"recorded in {second[:7]}"


def test_targets_say_met_or_missed_with_the_figure():
    # SICK: 0.845, 0.850, 0.858 -> mean 0.851, std sqrt((36 + 1 + 49) / 2) * 0.001 = 0.0066: met.
    met = [sick_run("dependency", s, v) for s, v in ((1, 0.845), (2, 0.850), (3, 0.858))]
    assert report_sick.target(met) == "Dependency Tree-LSTM, test Pearson r ≥ 0.85: 0.8510 ± 0.0066 (3 seeds), met."
    # 0.840, 0.845, 0.850 -> 0.845 ± 0.005: missed; with a legacy provenance the figure carries the mark.
    missed = [sick_run("dependency", s, v) for s, v in ((1, 0.840), (2, 0.845), (3, 0.850))]
    assert report_sick.target(missed, Provenance("sick")) == \
        f"Dependency Tree-LSTM, test Pearson r ≥ 0.85: 0.8450 ± 0.0050{MARK} (3 seeds), missed."
    assert report_sick.target([]) == "Dependency Tree-LSTM, test Pearson r ≥ 0.85: not run."
    assert "- Dependency Tree-LSTM, test Pearson r ≥ 0.85: 0.8510" in report_sick.report(met, False)
    assert "Target: Dependency Tree-LSTM, test Pearson r ≥ 0.85: 0.8510" in report_sick.results_section(met)
    # TREC: 92.0, 93.0, 94.5 -> 93.17, std sqrt(3.1667 / 2) = 1.26: met; two seeds 92.0, 93.0: missed, incomplete.
    assert report_trec.target([trec_run("bicontree", s, v) for s, v in ((1, 92.0), (2, 93.0), (3, 94.5))]) == \
        "BiConTree, test accuracy (%) ≥ 93.0: 93.2 ± 1.3 (3 seeds), met."
    two = [trec_run("bicontree", s, v) for s, v in ((1, 92.0), (2, 93.0))]
    assert report_trec.target(two) == ("BiConTree, test accuracy (%) ≥ 93.0: 92.5 ± 0.7 (2 seeds), missed "
                                       "(incomplete: fewer than 3 seeds).")
    assert "Target: BiConTree, test accuracy (%) ≥ 93.0: 92.5 ± 0.7 (2 seeds), missed" in \
        report_trec.results_section(two)
    # SST: fine 50, 51, 52 -> 51.0 ± 1.0, interval 51 ± 4.303 / sqrt(3) = 48.5 to 53.5: met; binary 87.0, 87.5,
    # 88.0 -> 87.5 ± 0.5, interval 87.5 ± 4.303 * 0.5 / sqrt(3) = 86.3 to 88.7: missed.
    sst = [sst_run(True, s, v) for s, v in ((1, 50.0), (2, 51.0), (3, 52.0))]
    sst += [sst_run(False, s, v) for s, v in ((1, 87.0), (2, 87.5), (3, 88.0))]
    lines = report_sst.target_lines(sst)
    assert row_of(lines, "- BiConTree (gated heads), fine root") == (
        "- BiConTree (gated heads), fine root ≥ 50.0: 51.0 ± 1.0 (3 seeds; 95% confidence interval of the mean 48.5 "
        "to 53.5), met.")
    assert row_of(lines, "- BiConTree (gated heads), binary root") == (
        "- BiConTree (gated heads), binary root ≥ 88.0: 87.5 ± 0.5 (3 seeds; 95% confidence interval of the mean "
        "86.3 to 88.7), missed.")
    assert ("Targets (GloVe 6B 50d): BiConTree (gated heads), fine root ≥ 50.0: 51.0 ± 1.0 (3 seeds), met; BiConTree "
            "(gated heads), binary root ≥ 88.0: 87.5 ± 0.5 (3 seeds), missed.") in report_sst.results_section(sst)


def test_sst_marks_each_task_of_a_row_by_its_own_runs(tmp_path: Path):
    # Fine runs reproduced (seed 2), binary runs legacy and not: only the binary number is marked.
    runs = [sst_run(True, s, v) for s, v in ((1, 50.0), (2, 51.0), (3, 52.0))]
    runs += [sst_run(False, s, v) for s, v in ((1, 87.0), (2, 88.0))]
    results = write_results(tmp_path, "sst", runs, [check("bicontree_head-gated_glove50_fine_s2", True, task="sst")])
    prov = Provenance.of(results, "sst")
    row = row_of(report_sst.table(runs, prov), "| Teng & Zhang 2017, Table 1 / 5 (G) | BiConTree (gated heads) |")
    # phrase accuracies follow their task's runs: fine unmarked, binary marked
    assert f"| 51.0 ± 1.0 (53.5) | 80.0 ± 0.0 (83.5) | 87.5 ± 0.7{MARK} (90.3) | 80.0 ± 0.0{MARK} (92.8) |" in row
    assert row.endswith("| unknown (5); fine reproduced at bbbbbbb (seed 2, 1 epoch) |")
    readme = report_sst.results_section(runs, prov)
    assert f"| 51.0 ± 1.0 (53.5) | 87.5 ± 0.7{MARK} (90.3) |" in readme
    md = report_sst.report(runs, prov)
    assert "- BiConTree (gated heads), binary: 2 runs without provenance (legacy), not reproduced." in md
    assert "- BiConTree (gated heads), fine: reproduced at bbbbbbb (seed 2, 1 epoch)." in md


def fake_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module) -> tuple[Path, Path, Path]:
    """A stand-in repository for ``module``: README with its summary table's markers, docs/results.md with each
    task's markers, and an empty committed results folder. Returns (README, docs/results.md, committed folder)."""
    repo = tmp_path / "repo"
    committed = repo / "experiments" / "results"
    committed.mkdir(parents=True)
    (repo / "docs").mkdir()
    readme, page = repo / "README.md", repo / "docs" / "results.md"
    readme.write_text("<!-- results:summary -->\n<!-- /results:summary -->\n")
    page.write_text("".join(f"<!-- results:{k} -->\nold\n<!-- /results:{k} -->\n" for k in ("sst", "sick", "trec")))
    monkeypatch.setattr(module, "REPO", repo)
    monkeypatch.setattr(module, "RESULTS", committed)
    return readme, page, committed


REAL_RESULTS = Path(__file__).resolve().parent.parent / "experiments" / "results"


def stamps(paths: list[Path]) -> dict[Path, tuple[int, bytes]]:
    return {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in paths if p.exists()}


@pytest.mark.parametrize("task", ["sick", "trec", "sst"])
def test_results_elsewhere_are_reported_there_and_leave_committed_files_alone(
        task: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    module = {"sick": report_sick, "trec": report_trec, "sst": report_sst}[task]
    make = {"sick": lambda s: sick_run("dependency", s, 0.85, provenance()),
            "trec": lambda s: trec_run("bicontree", s, 93.0, provenance()),
            "sst": lambda s: sst_run(True, s, 50.0, provenance())}[task]
    plots = {"sick": ["sick_by_length.png"], "trec": [], "sst": ["sst_by_length.png", "sst_by_depth.png"]}[task]
    # The real committed report and plots must not change either (the scripts' own REPO is patched, but a write
    # through a path computed elsewhere would land there).
    real = stamps([REAL_RESULTS / f"{task}.md", *(REAL_RESULTS / p for p in plots)])
    readme, page, committed = fake_repo(tmp_path, monkeypatch, module)
    before, page_before = readme.read_text(), page.read_text()
    mine = write_results(tmp_path / "mine", task, [make(1), make(2)])

    module.main(["--results", str(mine)])
    report = (mine / f"{task}.md").read_text()
    assert f"--results {mine}" in report and f"`{mine}/{task}/*.json`" in report
    assert "ran at ccccccc (2)" in report and "Every row with runs is current." in report
    assert f"{MARK} stale" not in report
    assert all((mine / p).exists() for p in plots)
    assert readme.read_text() == before and page.read_text() == page_before
    assert list(committed.iterdir()) == []
    assert stamps([REAL_RESULTS / f"{task}.md", *(REAL_RESULTS / p for p in plots)]) == real

    # The control: the default folder is the committed one, whose report does rewrite its section of the results page
    # and its rows of README's table.
    write_results(committed, task, [make(1)])
    module.main([])
    assert (committed / f"{task}.md").exists()
    assert f"<!-- results:{task} -->\n## {SECTIONS[task]}\n" in page.read_text()
    (row,) = [line for line in readme.read_text().splitlines() if line.startswith("| [")]
    assert summary_label(task, "")[1:] in row.split(" | ")[0]  # the row links to the task's section
    assert "`python experiments/report_" in (committed / f"{task}.md").read_text()
