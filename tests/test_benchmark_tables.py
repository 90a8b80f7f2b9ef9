"""benchmarks/epoch.py's tables from a results file made here by hand: the phase table's `× step` and the
before/after table of a --baseline run and the figure's bars, against figures worked out by hand; the
figure of the epoch in docs/performance.md against its results file."""

from __future__ import annotations

import copy
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def epoch_module():
    module = importlib.import_module("epoch")
    return module


def run(seconds: float, forward: float) -> dict:
    phases = dict(batches=0.5, forward=forward, backward=3.0, optimizer=0.5, embeddings=0.5, dev=0.2)
    return {"train_seconds": [seconds], "trees_per_s": [1000 / seconds], "phases": [phases]}


def test_step_ratio_and_before_after_table():
    epoch = epoch_module()
    results = {"commit": "a" * 40, "dirty": False, "machine": "test", "epochs": 1, "rounds": 2, "setups": ["1x1"],
               "command": "python benchmarks/epoch.py", "models": {
                   "nary": {"1x1": {"runs": [run(8.0, 4.0), run(10.0, 4.0)], "median_trees_per_s": 111.0}}},
               "baseline": {"commit": "b" * 40, "dirty": False, "models": {
                   "nary": {"1x1": {"runs": [run(12.0, 6.0), run(18.0, 6.0)], "median_trees_per_s": 70.0}}}}}
    phases = epoch.phase_table(results)
    # Step = forward + backward + optimizer + embeddings = 8: epochs of 8 and 10 s are 1.0 and 1.25 of it.
    assert "| 9.00 | 0.50 | 4.00 | 3.00 | 0.50 | 0.50 | 0.20 | 1.12 |" in phases
    comparison = epoch.comparison(results)
    assert "against bbbbbbb" in comparison and "| 15.00 | 9.00 | 0.60 |" in comparison  # medians 15 and 9
    # Paired: round by round 8 / 12 and 10 / 18, whose median (of two: their mean) is 0.611.
    assert "| after / before | paired |" in comparison and "| 0.60 | 0.61 |" in comparison
    assert epoch.comparison({k: v for k, v in results.items() if k != "baseline"}) == ""


def test_whole_command_column_where_the_runs_recorded_it():
    epoch = epoch_module()
    timed = [dict(run(8.0, 4.0), command_seconds=11.0), dict(run(10.0, 4.0), command_seconds=14.0)]
    untimed = [run(12.0, 6.0), run(18.0, 6.0)]
    results = {"commit": "a" * 40, "dirty": False, "machine": "test", "epochs": 1, "rounds": 2,
               "setups": ["1x1", "1x2"], "command": "python benchmarks/epoch.py", "models": {
                   "nary": {"1x1": {"runs": timed, "median_trees_per_s": 111.0},
                            "1x2": {"runs": untimed, "median_trees_per_s": 70.0}}}}
    phases = epoch.phase_table(results)
    assert "| × step | command |" in phases
    assert "| 1.12 | 12.50 |" in phases and "| 1.50 | — |" in phases  # median of 11 and 14; none recorded
    # Before/after: the command's columns only where both sides recorded it.
    baseline = {"commit": "b" * 40, "dirty": False, "models": {"nary": {
        "1x1": {"runs": [dict(r, command_seconds=20.0) for r in untimed], "median_trees_per_s": 70.0},
        "1x2": {"runs": [dict(r, command_seconds=25.0) for r in untimed], "median_trees_per_s": 70.0}}}}
    for_both = copy.deepcopy(results)
    for_both["models"]["nary"]["1x2"]["runs"] = [dict(r, command_seconds=20.0) for r in timed]
    comparison = epoch.comparison({**for_both, "baseline": baseline})
    assert "| command before (s) | command after (s) |" in comparison
    assert "| 20.00 | 12.50 | 0.62 |" in comparison and "| 25.00 | 20.00 | 0.80 |" in comparison
    assert "command" not in epoch.comparison({**results, "baseline": baseline}).split("\n")[2]


def test_a_rerun_of_some_models_replaces_their_rows_and_names_its_commit():
    epoch = epoch_module()

    def measured(commit: str, seconds: dict[str, float], baseline: str = "b" * 40, rounds: int = 1) -> dict:
        rows = {m: {"1x1": {"runs": [run(s, 4.0)], "median_trees_per_s": 1000 / s}} for m, s in seconds.items()}
        return {"commit": commit, "dirty": False, "machine": "test", "epochs": 1, "rounds": rounds,
                "setups": ["1x1"], "embeddings": "glove50", "command": f"python benchmarks/epoch.py ({commit[0]})",
                "models": rows, "baseline": {"commit": baseline, "dirty": False, "models": copy.deepcopy(rows)}}

    whole = measured("a" * 40, {"nary": 8.0, "childsum": 20.0})
    merged = epoch.merge_rerun(whole, measured("c" * 40, {"childsum": 10.0}))
    assert merged["models"]["nary"] == whole["models"]["nary"]  # kept
    assert merged["models"]["childsum"]["1x1"]["runs"][0]["train_seconds"] == [10.0]  # replaced
    assert whole["models"]["childsum"]["1x1"]["runs"][0]["train_seconds"] == [20.0]  # the input is left alone
    assert "Child-Sum Tree-LSTM (Tai et al.) rerun at ccccccc" in epoch.phase_table(merged)
    # A second rerun of the same model supersedes the first in the file's account.
    again = epoch.merge_rerun(merged, measured("d" * 40, {"childsum": 9.0}))
    assert [r["commit"][0] for r in again["reruns"]] == ["d"]
    # A rerun of one of two models an earlier rerun measured: the earlier one keeps naming only the other.
    both = epoch.merge_rerun(whole, measured("c" * 40, {"nary": 7.0, "childsum": 10.0}))
    one = epoch.merge_rerun(both, measured("d" * 40, {"childsum": 9.0}))
    assert [(r["commit"][0], r["models"]) for r in one["reruns"]] == [("c", ["nary"]), ("d", ["childsum"])]
    with pytest.raises(SystemExit, match="rounds"):
        epoch.merge_rerun(whole, measured("c" * 40, {"childsum": 10.0}, rounds=2))
    with pytest.raises(SystemExit, match="baseline"):
        epoch.merge_rerun(whole, measured("c" * 40, {"childsum": 10.0}, baseline="e" * 40))


def test_figure_segments_add_up_to_the_table_epoch(tmp_path):
    epoch = epoch_module()
    results = {"commit": "a" * 40, "dirty": False, "machine": "test", "epochs": 1, "rounds": 2, "setups": ["1x1"],
               "command": "python benchmarks/epoch.py", "models": {
                   "nary": {"1x1": {"runs": [run(8.0, 4.0), run(10.0, 2.0)], "median_trees_per_s": 111.0}},
                   "childsum": {"1x1": {"runs": [{"train_seconds": [5.0], "phases": [None]}],
                                        "median_trees_per_s": 200.0}}},  # no phases: no bar
               "baseline": {"commit": "b" * 40, "dirty": False, "models": {
                   "nary": {"1x1": {"runs": [run(12.0, 6.0), run(18.0, 6.0)], "median_trees_per_s": 70.0}}}}}
    [bar] = epoch.phase_bars(results)
    # Medians: epoch (8 + 10) / 2 = 9; forward (4 + 2) / 2 = 3; the other phases 0.5, 3, 0.5, 0.5. They add
    # up to 7.5, so the loop around them is 1.5, and the bar ends at the table's 9.
    assert bar["segments"] == {"batches": 0.5, "forward": 3.0, "backward": 3.0, "optimizer": 0.5,
                               "embeddings": 0.5, "loop": 1.5}
    assert sum(bar["segments"].values()) == bar["epoch"] == 9.0
    assert bar["before"] == 15.0 and bar["paired"] == pytest.approx((8 / 12 + 10 / 18) / 2)
    assert "before" not in epoch.phase_bars({k: v for k, v in results.items() if k != "baseline"})[0]
    pytest.importorskip("matplotlib")
    epoch.plot(results, tmp_path / "figure" / "epoch.png")
    assert (tmp_path / "figure" / "epoch.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SystemExit, match="no epoch split into phases"):
        epoch.plot({**results, "models": {"childsum": results["models"]["childsum"]}}, tmp_path / "none.png")


def test_epoch_figure_command_draws_its_results_file_and_the_figure_is_not_stale(tmp_path):
    """docs/performance.md's command for its epoch figure runs (drawing into a temporary file), and the committed
    figure names the measurement its results file holds: a rerun of the results without the figure fails here."""
    pytest.importorskip("matplotlib")
    from PIL import Image

    page = " ".join((BENCHMARKS.parent / "docs" / "performance.md").read_text().split())
    [command] = re.findall(r"`(python benchmarks/epoch\.py --table \S+ --plot \S+)`", page)
    words = command.split()
    results, figure = words[words.index("--table") + 1], words[words.index("--plot") + 1]
    assert f"](../{figure})" in page  # the figure the page shows is the one the command draws
    drawn = tmp_path / "epoch.png"
    done = subprocess.run([sys.executable, *words[1:-1], str(drawn)], cwd=BENCHMARKS.parent,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    epoch = epoch_module()
    described = epoch.source(json.loads((BENCHMARKS.parent / results).read_text()))
    assert Image.open(drawn).text["Description"] == described
    assert Image.open(BENCHMARKS.parent / figure).text["Description"] == described, (
        f"{figure} draws another run than {results}: redraw it with `{command}`")


def test_readme_says_which_is_faster_on_the_gpu_plain_loop_or_graphtree():
    table = importlib.import_module("readme_table")

    def results(at_25: float, at_256: float) -> dict:
        rows = [{"model": "plain", "embedding": 300, "batch": 25, "train_time_vs_nary": at_25},
                {"model": "plain", "embedding": 300, "batch": 256, "train_time_vs_nary": at_256},
                {"model": "plain", "embedding": 50, "batch": 25, "train_time_vs_nary": 0.1}]  # not read
        return {"rows": rows}

    mixed = table.plain_versus_engine(results(0.94, 1.07))[0]
    assert "0.94× graphtree's time at batch 25 and 1.07× at batch 256" in mixed
    assert "where that is below 1 the plain loop is the faster" in mixed
    ahead = table.plain_versus_engine(results(1.2, 1.5))[0]
    assert ahead.endswith("graphtree is the faster at each.") and "below 1" not in ahead
    assert table.plain_versus_engine({"rows": []}) == []


def test_performance_page_blocks_are_what_their_commands_write(tmp_path, monkeypatch):
    """docs/performance.md's speed, processes and epoch blocks are what benchmarks/readme_table.py and
    benchmarks/epoch.py --readme write from the committed results files: written into a copy of the page whose
    blocks are blanked, they give the page back."""
    root = BENCHMARKS.parent
    page = (root / "docs" / "performance.md").read_text()
    keys = ("speed", "processes", "epoch", "epoch-random")
    blank = page
    for key in keys:
        blank = re.sub(f"<!-- results:{key} -->\n.*?\n<!-- /results:{key} -->",
                       f"<!-- results:{key} -->\nold\n<!-- /results:{key} -->", blank, flags=re.S)
    assert blank.count("\nold\n") == len(keys)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "performance.md").write_text(blank)
    (tmp_path / "benchmarks").symlink_to(BENCHMARKS)
    monkeypatch.chdir(root)

    table = importlib.import_module("readme_table")
    monkeypatch.setattr(table, "REPO", tmp_path)
    results = ["benchmarks/results/cpu-threads2.json", "benchmarks/results/cuda-threads1.json",
               "benchmarks/results/operator-calls.json"]
    monkeypatch.setattr(sys, "argv", ["readme_table.py", *results])
    table.main()
    epoch = epoch_module()
    monkeypatch.setattr(epoch, "PAGE", tmp_path / "docs" / "performance.md")
    for results, key in [("processes-cpu", "processes"), ("epoch-cpu", "epoch"), ("epoch-random-cpu", "epoch-random")]:
        monkeypatch.setattr(sys, "argv", ["epoch.py", "--table", f"benchmarks/results/{results}.json", "--readme", key])
        epoch.main()
    assert (tmp_path / "docs" / "performance.md").read_text() == page, (
        "docs/performance.md's blocks differ from what their commands write from the committed results")


def test_the_hub_table_of_the_performance_page_is_what_its_results_file_gives():
    hubs = importlib.import_module("hubs")
    result = json.loads((BENCHMARKS / "results" / "hubs-cpu.json").read_text())
    page = (BENCHMARKS.parent / "docs" / "performance.md").read_text()
    assert hubs.table(result) in page
    assert result["command"] in page and result["code"][0][:7] in page


def test_the_level_waste_table_of_the_performance_page_is_what_its_results_file_gives():
    waste = importlib.import_module("level_waste")
    result = json.loads((BENCHMARKS / "results" / "level-waste.json").read_text())
    assert waste.table(result) in (BENCHMARKS.parent / "docs" / "performance.md").read_text()
    # The default splits no batch of the experiments' sentences, and the trees' slots per edge fall with the cost.
    assert all(row["split_batches"][str(result["default_cost"])] == 0 for row in result["sentences"])


def contention_module():
    module = importlib.import_module("contention")
    return module


def test_the_contention_table_by_hand():
    # Medians, ranges and ratios to one thread worked out by hand; the budget's share of time at one thread.
    def runs(*seconds, used=None):
        return [{"train_seconds": [s], "load_before": 1.0, **({"threads_used": u} if u else {})}
                for s, u in zip(seconds, used or [None] * len(seconds))]

    results = {"commit": "abcdef0123", "dirty": False, "machine": "x86_64, 2 CPUs", "quick": True, "rounds": 3,
               "setups": ["1", "2-fixed", "2"], "command": "python benchmarks/contention.py --quick",
               "runs": {"quiet": {"1": runs(4.0, 5.0, 6.0), "2-fixed": runs(3.0, 2.5, 4.0),
                                  "2": runs(3.5, 3.0, 2.0, used=[{"2": 9.0}, {"2": 8.0}, {"2": 7.0, "1": 1.0}])},
                        "busy": {"1": runs(8.0, 6.0, 7.0), "2-fixed": runs(30.0, 21.0, 35.0),
                                 "2": runs(7.0, 7.7, 6.3, used=[{"2": 1.0, "1": 9.0}, {"1": 10.0},
                                                                {"2": 3.0, "1": 7.0}])}}}
    text = contention_module().table(results)
    assert "| 1 thread | 5.0 (4.0-6.0) | 1.00× | 7.0 (6.0-8.0) | 1.00× | - |" in text
    assert "| 2 threads, fixed | 3.0 (2.5-4.0) | 0.60× | 30.0 (21.0-35.0) | 4.29× | - |" in text
    assert "| 2 threads (budget, default) | 3.0 (2.0-3.5) | 0.60× | 7.0 (6.3-7.7) | 1.00× | 90 % |" in text
    assert "1,000 training sentences" in text and "at abcdef0" in text


def test_the_contention_table_of_the_performance_page_is_what_its_results_file_gives():
    result = json.loads((BENCHMARKS / "results" / "contention-cpu.json").read_text())
    page = (BENCHMARKS.parent / "docs" / "performance.md").read_text()
    assert contention_module().table(result).strip() in page


def test_the_on_disk_table_of_the_performance_page_is_what_its_results_file_gives():
    on_disk = importlib.import_module("on_disk")
    result = json.loads((BENCHMARKS / "results" / "on-disk-cpu.json").read_text())
    page = (BENCHMARKS.parent / "docs" / "performance.md").read_text()
    assert on_disk.table(result) in page
    assert result["command"] in page and result["code"][0][:7] in page
    # A store written by repeating graphs is marked so, never shown as a build.
    for row in result["rows"]:
        assert ("replicated_from" in row["build_disk"]) == (row["graphs"] > result["args"]["parse_up_to"])


def test_the_epoch_breakdown_tables_of_the_performance_page_are_what_their_results_files_give():
    """Each committed piece-by-piece epoch (``benchmarks/epoch.py --breakdown``) is on the page as its table
    writes it, and the table's last line is the sum of the parts it names over the benchmark's step."""
    epoch = epoch_module()
    page = (BENCHMARKS.parent / "docs" / "performance.md").read_text()
    files = sorted((BENCHMARKS / "results").glob("epoch-breakdown-*.json"))
    assert files
    for path in files:
        result = json.loads(path.read_text())
        assert epoch.breakdown_table(result) in page, f"{path.name}'s table is not on docs/performance.md"
        parts = result["outside the step"]
        whole = parts["cutting minibatches"] + parts["schedules"] + result["step seconds"]["as trained"]
        assert abs(whole - result["epoch (training)"]) < 1e-9
        assert abs(result["epoch over the benchmark's step"]
                   - whole / result["step seconds"]["as the step benchmark"]) < 1e-9


def test_the_on_disk_ratio_is_the_median_of_the_rounds_where_there_are_several():
    on_disk = importlib.import_module("on_disk")
    row = {"disk1": {"graphs_per_s": 90.0}, "memory1": {"graphs_per_s": 100.0}, "paired1": [0.5, 0.8, 1.0]}
    assert on_disk._ratio(row, "disk1", "memory1") == "0.80 (0.50-1.00)"
    assert on_disk._ratio({**row, "paired1": [0.7]}, "disk1", "memory1") == "0.90"  # one round: the two rates
    assert on_disk._ratio({"disk1": {"graphs_per_s": 1.0}}, "disk1", "memory1") == "—"
