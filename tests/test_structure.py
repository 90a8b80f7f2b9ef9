"""experiments/structure.py and report_structure.py end to end on --quick runs: the results JSON, its per-depth and
per-size breakdowns against counts made here from the generated test graphs, and the markdown table."""

from __future__ import annotations

import collections
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from lab.own_data import Task
from lab.structure import (
    SequenceLSTM,
    add_sequences,
    structure_model,
    token_sequence,
    topological_sequence,
)

from graphtree.datasets import BooleanCircuits, ListOps

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "experiments" / "structure.py"


def script_module(path: Path = SCRIPT):
    spec = importlib.util.spec_from_file_location(f"{path.stem}_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def nesting(tokens: list[str]) -> int:
    """Most lists open at once: ListOps depth from the brackets alone."""
    depth = most = 0
    for token in tokens:
        depth += token.startswith("[")
        depth -= token == "]"
        most = max(most, depth)
    return most


def longest_path(graph) -> int:
    """Gates on the longest input -> output path, from the edges alone (circuit nodes are numbered topologically)."""
    gates = [0] * graph.num_nodes
    for child, parent in sorted(graph.edge_index.t().tolist(), key=lambda e: e[1]):
        gates[parent] = max(gates[parent], gates[child] + 1)
    return gates[-1]


def expected(task: str, data_root: Path, quick: dict, train_max_depth: int) -> dict:
    """Depth (and size) of every test graph, and the depths of the training graphs, counted independently."""
    if task == "listops":
        make = lambda split: ListOps(data_root, split, **quick["listops"], log=False)  # noqa: E731
        depth = lambda g: nesting(g.tokens_flat)  # noqa: E731
    else:
        make = lambda split: BooleanCircuits(data_root, split, **quick["circuits"], log=False)  # noqa: E731
        depth = longest_path
    test = list(make("test"))
    train = [depth(g) for g in make("train")]
    if task == "circuits":
        train = [d for d in train if d <= train_max_depth]
    out = {"depth": collections.Counter(depth(g) for g in test), "train_max": max(train), "total": len(test)}
    if task == "circuits":
        out["size"] = collections.Counter(int((g.node_type >= 2).sum()) for g in test)  # gates: types after inputs
    return out


@pytest.mark.parametrize(("task", "model"), [("listops", "childsum"), ("circuits", "lstm")])
def test_quick_run_and_report(tmp_path, task, model):
    data_root = tmp_path / "data"
    done = run(str(SCRIPT), "--task", task, "--model", model, "--quick", "--epochs", "1", "--out", str(tmp_path),
               "--data-root", str(data_root), "--no-progress")
    assert done.returncode == 0, done.stderr
    results = tmp_path / "quick" / "structure"
    record = json.loads((results / f"{task}_{model}_s1.json").read_text())
    assert record["experiment"] == "structure" and record["config"]["quick"] and record["config"]["epochs"] == 1
    assert (results / f"{task}_{model}_s1.csv").is_file() and len(record["history"]) == 1
    test = record["test"]
    assert 0 <= test["accuracy"] <= 100 and test["total"] == record["sizes"]["test"]

    module = script_module()
    want = expected(task, data_root, module.QUICK, module.TRAIN_MAX_DEPTH)
    assert test["total"] == want["total"]
    assert {int(k): v["total"] for k, v in test["by_depth"].items()} == dict(want["depth"])
    assert sum(v["correct"] for v in test["by_depth"].values()) == test["correct"]
    for entry in test["by_depth"].values():
        assert entry["accuracy"] == pytest.approx(100.0 * entry["correct"] / entry["total"])
    assert record["train_depths"][-1] == want["train_max"]
    assert record["out_of_range_depths"] == sorted(d for d in want["depth"] if d > want["train_max"])
    if task == "circuits":
        assert want["train_max"] == module.TRAIN_MAX_DEPTH and record["out_of_range_depths"]  # deeper ones exist
        assert {int(k): v["total"] for k, v in test["by_size"].items()} == dict(want["size"])
        deeper = sum(n for d, n in want["depth"].items() if d > want["train_max"])
        assert test["deeper_than_training"]["total"] == deeper
        assert test["in_training_depths"]["total"] == want["total"] - deeper
        assert test["deeper_than_training"]["correct"] + test["in_training_depths"]["correct"] == test["correct"]

    report_script = script_module(REPO / "experiments" / "report_structure.py")
    # --results as the other report scripts take it (the folder above the task's) finds the same runs
    assert report_script.main(["--results", str(tmp_path / "quick"), "--quick"]) == results / "structure.md"
    written = report_script.main(["--results", str(results), "--quick"])
    assert written == results / "structure.md"
    table = written.read_text()
    assert f"| {'Child-Sum Tree-LSTM' if model == 'childsum' else 'LSTM (sequence)'} | {test['accuracy']:.1f} |" \
        in table
    assert "by depth" in table and ("by size" in table) == (task == "circuits")
    assert str(tmp_path) not in table  # commands as a user would type them, no paths of this machine


def test_binary_cells_fit_the_paper_parse_and_say_why_not_the_flat_tree(tmp_path):
    common = ("--task", "listops", "--model", "slstm", "--quick", "--epochs", "1", "--out", str(tmp_path),
              "--data-root", str(tmp_path / "data"), "--no-progress")
    flat = run(str(SCRIPT), *common, "--listops-tree", "flat")
    assert flat.returncode == 2 and "at most 2 children" in flat.stderr
    paper = run(str(SCRIPT), *common)
    assert paper.returncode == 0, paper.stderr
    assert json.loads((tmp_path / "quick" / "structure" / "listops_slstm_s1.json").read_text())["config"]["tree"] \
        == "paper"


def test_sequences_and_sequence_lstm(tmp_path):
    listops = token_sequence(ListOps(tmp_path, "test", train_size=0, dev_size=0, test_size=3, log=False)[0])
    assert listops.seq.tolist() == listops.word_flat.tolist() and int(listops.seq_len) == len(listops.tokens_flat)
    circuit = topological_sequence(BooleanCircuits(tmp_path, "test", train_size=0, dev_size=0, test_size=2,
                                                   log=False)[0], slots=3, max_offset=32)
    assert circuit.seq.shape == (circuit.num_nodes, 7 + 3 * 32)
    assert int(circuit.seq[:, 7:].sum()) == circuit.edge_index.size(1)  # one offset per operand
    assert circuit.seq[-1, :7].argmax() == circuit.node_type[-1]  # the output comes last
    from torch_geometric.data import Batch

    batch = Batch.from_data_list([circuit, circuit])
    out = SequenceLSTM(7 + 96, 8, 2)(batch)
    assert out.shape == (2, 2) and torch.allclose(out[0], out[1])


def test_the_sequence_model_reads_the_sequences_made_for_it(tmp_path):
    """structure_model's LSTM is as wide as add_sequences' rows for circuits, and reads ListOps' token ids."""
    task = Task("graph", "class", 2)
    circuits = list(BooleanCircuits(tmp_path, "test", train_size=0, dev_size=0, test_size=2, log=False))
    add_sequences(circuits, "circuits", max_offset=5)
    model, settings, embedding = structure_model("circuits", "lstm", {"test": circuits}, task, dim=4, hidden=3,
                                                 dropout=0.0, max_offset=5)
    assert embedding is None and settings["in_channels"] == circuits[0].seq.size(1)
    from torch_geometric.data import Batch

    assert model(Batch.from_data_list(circuits)).shape == (2, 2)
    listops = list(ListOps(tmp_path, "test", train_size=0, dev_size=0, test_size=2, log=False))
    add_sequences(listops, "listops", max_offset=5)
    model, settings, embedding = structure_model("listops", "lstm", {"test": listops}, task, dim=4, hidden=3,
                                                 dropout=0.0, max_offset=5)
    assert settings["sequence"] == "tokens" and model(Batch.from_data_list(listops)).shape == (2, 2)
    with pytest.raises(ValueError, match="task must be one of listops, circuits"):
        structure_model("sst", "lstm", {}, task, dim=4, hidden=3, dropout=0.0, max_offset=5)


def test_report_keeps_runs_of_another_length_apart(tmp_path):
    """A run trained longer than the default is a row of its own, with its own command and target verdict."""
    report = script_module(REPO / "experiments" / "report_structure.py")
    assert report.DEFAULT_EPOCHS == script_module().EPOCHS

    def record(seed: int, epochs: int, accuracy: float) -> dict:
        return {"experiment": "structure", "seed": seed, "wall_time_s": 60.0,
                "config": {"task": "listops", "model": "childsum", "tree": "paper", "epochs": epochs, "quick": False},
                "test": {"accuracy": accuracy, "by_depth": {"1": {"accuracy": accuracy, "total": 10}}},
                "provenance": {"commit": "a" * 40, "dirty": False}}

    for name, (seed, epochs, accuracy) in {"listops_childsum_s1": (1, 20, 97.5),
                                           "listops_childsum_ep30_s1": (1, 30, 98.25)}.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(record(seed, epochs, accuracy)))
    table = report.main(["--results", str(tmp_path)]).read_text()
    assert "| Child-Sum Tree-LSTM | 97.5 |" in table and "| Child-Sum Tree-LSTM, 30 epochs | 98.2 |" in table
    assert "`python experiments/structure.py --task listops --model childsum --epochs 30 --seeds 1`" in table
    assert "Child-Sum Tree-LSTM 97.5 (missed), Child-Sum Tree-LSTM, 30 epochs 98.2 (met)" in table
