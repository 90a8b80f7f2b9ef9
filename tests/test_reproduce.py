"""``experiments/reproduce.py``: the rerun command it builds, the comparison, and (slow) committed runs reproducing.

The slow tests rerun one cheap committed run per task with its recorded command and require every epoch's
metrics to equal the committed ones exactly: a change that alters the numbers without bumping
``graphtree.experiments.provenance.NUMERICS_VERSION`` (and rerunning the results) fails here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from corpora import needs_corpora

from graphtree.experiments.scripts import load_script

REPO = Path(__file__).resolve().parent.parent
reproduce = load_script(REPO / "experiments" / "reproduce.py")


def test_rerun_command_keeps_the_settings_and_sets_seed_output_and_length(tmp_path):
    record = {"experiment": "sst", "run": "slstm_random_fine_sup-root_s4", "seed": 4, "threads": 1,
              "command": "python experiments/sst.py --threads 1 --no-progress --model slstm --supervision root "
                         "--seeds 4 5 6 7 --epochs 20 --out experiments/results"}
    argv = reproduce.rerun_command(record, tmp_path, 1)
    assert argv[1:] == ["experiments/sst.py", "--model", "slstm", "--supervision", "root", "--seeds", "4",
                        "--out", str(tmp_path), "--threads", "1", "--no-progress", "--epochs", "1"]
    assert "--epochs" not in reproduce.rerun_command(record, tmp_path, None)


def test_rerun_command_refuses_a_command_of_another_script(tmp_path):
    record = {"experiment": "sick", "run": "x_s1", "seed": 1, "command": "python experiments/sst.py --model nary"}
    with pytest.raises(ValueError, match="not one of experiments"):
        reproduce.rerun_command(record, tmp_path, None)


def test_differences_compare_every_metric_exactly_but_not_times():
    committed = [{"epoch": 1, "train_loss": 1.5, "dev_root": 40.0, "seconds": 3.0},
                 {"epoch": 2, "train_loss": 1.25, "dev_root": 41.0, "seconds": 3.0}]
    same = [dict(row, seconds=9.0, phases={"forward": 2.0}) for row in committed]  # times, and their split
    assert reproduce.differences(committed, same) == []
    off = [dict(committed[0]), dict(committed[1], train_loss=1.25 + 2 ** -40)]
    assert reproduce.differences(committed, off) == [
        f"epoch 2: train_loss 1.25 committed, {1.25 + 2 ** -40!r} now"]


# Cheap committed runs per task, rerun whole with their recorded command: of each task the first run made on
# this kind of processor (the vector code rounds differently on another), else the first, which then skips.
CHEAP_RUNS = {"sick": ["experiments/results/sick/dependency_glove50_s1.json"],
              "trec": ["experiments/results/trec/childsum_glove50_s1.json"],
              "sst": ["experiments/results/sst/slstm_random_fine_sup-root_s4.json",   # AMD EPYC (AVX2)
                      "experiments/results/sst/slstm_random_fine_sup-root_s1.json"]}  # Intel Xeon (AVX512)


def cheap_run(task: str) -> str:
    from graphtree.experiments.provenance import processor

    def made_here(path: str) -> bool:
        block = json.loads((REPO / path).read_text()).get("provenance") or {}
        return block.get("processor") == processor()

    return next((path for path in CHEAP_RUNS[task] if made_here(path)), CHEAP_RUNS[task][0])


def test_every_cheap_run_is_committed():
    for path in (path for paths in CHEAP_RUNS.values() for path in paths):
        assert (REPO / path).is_file(), path


@pytest.mark.slow
@needs_corpora
@pytest.mark.parametrize("task", sorted(CHEAP_RUNS))
def test_a_committed_run_reproduces_at_this_checkout(task):
    result = cheap_run(task)
    done = subprocess.run([sys.executable, "experiments/reproduce.py", result], cwd=REPO, capture_output=True,
                          text=True, timeout=3600)
    if done.returncode != 0 and "does not show a change of the code" in done.stdout:
        pytest.skip(f"{result} was made on another kind of processor (or does not name one): {done.stdout[-600:]}")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "identical" in done.stdout


def test_results_name_the_processor_they_ran_on():
    from graphtree.experiments.provenance import processor, provenance

    name = processor()
    assert name.endswith(f"({torch.backends.cpu.get_cpu_capability()})")
    cpuinfo = Path("/proc/cpuinfo")
    models = [line.split(":", 1)[1].strip() for line in (cpuinfo.read_text().splitlines() if cpuinfo.exists() else [])
              if line.startswith("model name")]
    if models:
        assert name.startswith(models[0])
    assert provenance(1, "compiled")["processor"] == name
