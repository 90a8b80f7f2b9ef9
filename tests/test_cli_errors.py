"""The experiment scripts answer a user's mistake with one line naming it and the fix, exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lab.runs import RunPaths, finished_run, in_command_line_terms, main_guard, resolve_device
from lab.scripts import load_script

from graphtree import settings

REPO = Path(__file__).resolve().parent.parent
sick, sst, trec = (load_script(REPO / "experiments" / f"{name}.py") for name in ("sick", "sst", "trec"))


def one_line_error(run, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main_guard(run, "script.py")
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert err.startswith("script.py: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("module", [sst, sick, trec])
def test_an_unknown_embeddings_name_is_told_in_command_line_terms(module, capsys):
    err = one_line_error(lambda: module.parse_args(["--embeddings", "glove100"]), capsys)
    assert "--embeddings glove100" in err and "source=None" not in err


def test_a_missing_mirror_is_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GRAPHTREE_MIRROR", str(tmp_path / "no-such-mirror"))
    settings.reload()  # the environment is read once a process
    argv = ["--model", "mean", "--data-root", str(tmp_path / "data"), "--out", str(tmp_path)]
    err = one_line_error(lambda: sick.main(argv), capsys)
    assert str(tmp_path / "no-such-mirror") in err


def test_a_bad_device_is_named(capsys):
    assert "--device gpu7" in one_line_error(lambda: resolve_device("gpu7"), capsys)


def test_a_run_with_other_settings_under_the_same_name_points_to_out(tmp_path, capsys):
    paths = RunPaths.under(tmp_path, "sst")
    paths.results.mkdir(parents=True)
    (paths.results / "nary_s1.json").write_text(json.dumps({"config": {"epochs": 10, "lr": 0.05}}))
    assert finished_run(paths.results, "nary_s1", {"epochs": 10, "lr": 0.05}) is not None
    err = one_line_error(lambda: finished_run(paths.results, "nary_s1", {"epochs": 10, "lr": 0.01}), capsys)
    assert "(differing: lr)" in err and "--out DIR" in err


def test_run_paths_keep_quick_runs_and_checkpoints_apart(tmp_path):
    assert RunPaths.under(tmp_path, "sst") == RunPaths(tmp_path / "sst", tmp_path / "checkpoints" / "sst")
    assert RunPaths.under(tmp_path, "sst", quick=True) == RunPaths(tmp_path / "quick" / "sst",
                                                                   tmp_path / "quick" / "checkpoints" / "sst")


def bad_flag_error(run, capsys) -> str:
    """The one line argparse prints for a bad value (lab.runs.ArgumentParser), exit status 2."""
    with pytest.raises(SystemExit) as exit_info:
        run()
    captured = capsys.readouterr()
    assert exit_info.value.code == 2 and captured.out == "", captured
    err = captured.err
    assert err.count("\n") == 1 and " error: " in err and "Traceback" not in err and "usage:" not in err, err
    return err


@pytest.mark.parametrize("script", ["sst", "sick", "trec", "structure", "train"])
@pytest.mark.parametrize(("flag", "value"), [("--threads", "0"), ("--threads", "-1"), ("--epochs", "0")])
def test_threads_and_epochs_below_one_are_refused(script, flag, value, capsys):
    module = load_script(REPO / "experiments" / f"{script}.py")
    required = {"structure": ["--task", "listops"], "train": ["--data", "examples/graphs.jsonl"]}.get(script, [])
    err = bad_flag_error(lambda: module.parse_args([*required, flag, value]), capsys)
    assert f"argument {flag}: must be at least 1, got {value}" in err


def test_reproduce_names_a_file_that_is_not_a_results_file(capsys):
    reproduce = load_script(REPO / "experiments" / "reproduce.py")
    err = one_line_error(lambda: reproduce.main([str(REPO / "README.md")]), capsys)
    assert "README.md is not a results file" in err


@pytest.mark.parametrize("script", ["report_sst", "report_sick", "report_trec", "report_structure"])
def test_a_report_on_a_missing_results_folder_is_refused(script, tmp_path, capsys):
    pytest.importorskip("scipy")
    report = load_script(REPO / "experiments" / f"{script}.py")
    err = bad_flag_error(lambda: report.main(["--results", str(tmp_path / "missing")]), capsys)
    assert f"--results {tmp_path / 'missing'}: no such folder" in err


REPORTS = {"report_sst": "sst", "report_sick": "sick", "report_trec": "trec", "report_structure": "structure"}


@pytest.mark.parametrize("script", sorted(REPORTS))
@pytest.mark.parametrize("layout", ["empty", "task folder", "other runs"])
def test_a_report_with_no_runs_to_report_is_refused_alike(script, layout, tmp_path, capsys):
    """Every report script, given a folder without runs of its task (empty; with an empty task folder; with
    another task's run), exits 2 with one line naming the folder, and writes nothing there."""
    pytest.importorskip("scipy")
    task = REPORTS[script]
    if layout == "task folder":
        (tmp_path / task).mkdir()
    elif layout == "other runs":  # a run of another task, where this task's would be
        other = "sick" if task != "sick" else "sst"
        (tmp_path / task).mkdir()
        (tmp_path / task / "run.json").write_text(json.dumps({"experiment": other, "config": {"epochs": 1}}))
    before = sorted(tmp_path.rglob("*"))
    report = load_script(REPO / "experiments" / f"{script}.py")
    with pytest.raises(SystemExit) as exit_info:
        report.main(["--results", str(tmp_path)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert err.startswith(f"{script}.py: error: --results {tmp_path}: no ") and err.count("\n") == 1, err
    assert "nothing written" in err and f"experiments/{task}.py --out {tmp_path}" in err
    where = tmp_path / task if layout != "empty" or task != "structure" else tmp_path
    assert f"{where}/*.json" in err
    assert sorted(tmp_path.rglob("*")) == before  # no empty report left behind


def test_errors_name_the_flags_and_variables_not_python_arguments(tmp_path, capsys):
    train = load_script(REPO / "experiments" / "train.py")
    (tmp_path / "trees.txt").write_text("(1 (1 a) (1 film))\n")
    argv = ["--data", str(tmp_path / "trees.txt"), "--out", str(tmp_path), "--data-root", str(tmp_path / "data")]
    err = one_line_error(lambda: train.main(argv), capsys)
    assert "give --format one of" in err and "format=" not in err
    # The library's wording of a mirror without the file, as a script's user reads it.
    assert in_command_line_terms("the mirror /m lacks a (looked for /m/a); add the file there, or point mirror= / "
                                 "$GRAPHTREE_MIRROR at a folder laid out like the data folder") == (
        "the mirror /m lacks a (looked for /m/a); add the file there, or point $GRAPHTREE_MIRROR at a folder laid "
        "out like the data folder")


def test_a_missing_mirror_folder_names_the_variable(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GRAPHTREE_MIRROR", str(tmp_path / "no-such-mirror"))
    settings.reload()  # the environment is read once a process
    argv = ["--model", "mean", "--data-root", str(tmp_path / "data"), "--out", str(tmp_path)]
    err = one_line_error(lambda: sick.main(argv), capsys)
    assert f"$GRAPHTREE_MIRROR='{tmp_path / 'no-such-mirror'}'" in err and "mirror=" not in err.replace(
        "$GRAPHTREE_MIRROR=", "")
