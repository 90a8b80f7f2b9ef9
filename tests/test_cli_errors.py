"""The experiment scripts answer a user's mistake with one line naming it and the fix, exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graphtree.experiments.scripts import load_script
from graphtree.train.runs import RunPaths, finished_run, main_guard, resolve_device

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
