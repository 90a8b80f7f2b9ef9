"""Run set-up shared by the experiment scripts."""

import argparse
import json

import pytest
from lab.runs import (
    QUICK_EPOCHS,
    add_run_arguments,
    default_mirror,
    epochs_of,
    finished_run,
    quick_sample,
)

from graphtree import settings


def test_quick_sample_is_fixed_sorted_and_distinct():
    data = list(range(100))
    first = quick_sample(data, 10)
    assert first == quick_sample(data, 10)  # the same subset every run
    assert first == sorted(first) and len(set(first)) == 10
    assert first != data[:10]  # not simply the head of a sorted corpus


def test_default_mirror_prefers_the_environment(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    monkeypatch.delenv("GRAPHTREE_MIRROR", raising=False)
    settings.reload()  # the environment is read once a process
    assert default_mirror(repo) is None
    (tmp_path / "shared" / "data").mkdir(parents=True)
    assert default_mirror(repo) == str(tmp_path / "shared" / "data")
    monkeypatch.setenv("GRAPHTREE_MIRROR", "http://127.0.0.1:9/mirror")
    settings.reload()  # the environment is read once a process
    assert default_mirror(repo) == "http://127.0.0.1:9/mirror"


def test_common_flags(tmp_path):
    parser = argparse.ArgumentParser()
    add_run_arguments(parser, tmp_path, 10, quick_sample="q")
    args = parser.parse_args(["--seeds", "1", "2", "--quick"])
    assert args.seeds == [1, 2] and args.quick and args.threads == 1 and args.epochs is None
    assert args.data_root == str(tmp_path / "datasets")
    assert epochs_of(args, 10) == QUICK_EPOCHS == 2  # --quick means the same epochs in every experiment
    assert epochs_of(parser.parse_args([]), 10) == 10 and epochs_of(parser.parse_args(["--epochs", "3"]), 10) == 3


def test_finished_run_is_found_by_its_results_file_and_settings(tmp_path):
    config = {"model": "nary", "epochs": 10, "grid": (1, 2)}
    assert finished_run(tmp_path, "nary_s1", config) is None
    (tmp_path / "nary_s1.json").write_text(json.dumps({"config": config, "test": {"root": 50.0}}))
    assert finished_run(tmp_path, "nary_s1", config)["test"]["root"] == 50.0  # tuples and lists compare equal
    with pytest.raises(ValueError, match="differing: epochs"):
        finished_run(tmp_path, "nary_s1", {**config, "epochs": 30})


def test_the_recorded_command_leaves_out_where_the_files_went():
    from lab.runs import recorded_command

    argv = ["--model", "nary", "--out", "/some/machine/folder", "--seeds", "1", "--out=elsewhere", "--quick"]
    assert recorded_command("sst.py", argv) == "python experiments/sst.py --model nary --seeds 1 --quick"


def test_a_run_records_the_commit_it_started_at_not_the_one_it_ended_at(monkeypatch):
    from lab import provenance as prov
    from lab.runs import main_guard

    heads = iter([("a" * 40, False), ("b" * 40, True)])  # the work tree moves on (a pull) during the run
    monkeypatch.setattr(prov, "git_state", lambda root=prov.PACKAGE_ROOT: next(heads))
    prov.code_state.cache_clear()
    try:
        record = main_guard(lambda: prov.provenance(threads=1, kernels="compiled"), "test")
        assert (record["commit"], record["dirty"]) == ("a" * 40, False)
    finally:
        prov.code_state.cache_clear()
