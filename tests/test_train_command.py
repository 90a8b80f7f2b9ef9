"""experiments/train.py: trains on files of one's own (tests/data), writes results, CSV and predictions that agree
with the files, resumes a killed run to the same numbers, and answers bad input with one located line, exit 2."""

from __future__ import annotations

import csv
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from lab.own_data import TaskTrainer
from lab.runs import main_guard
from lab.scripts import load_script

from graphtree.datasets.files import split_indices

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"
train = load_script(REPO / "experiments" / "train.py")

SMALL = ["--dim", "8", "--hidden", "8", "--no-progress", "--threads", "1"]
PTB_SPLIT = ["--split", "0.6", "0.2", "0.2", "--split-seed", "1"]  # dev and test trees with labels


@pytest.fixture(autouse=True)
def keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def run(argv: list[str], out: Path, capsys) -> tuple[dict, list[dict], str]:
    """Run the command in this process; its results JSON, predictions rows and stderr (the run's line, on stdout,
    checked here)."""
    main_guard(lambda: train.main([*argv, *SMALL, "--out", str(out), "--data-root", str(out / "data")]), "train.py")
    captured = capsys.readouterr()
    (path,) = (out / "train").glob("*.json")
    record = json.loads(path.read_text())
    (line,) = captured.out.splitlines()  # the results: one line for the one seed
    assert line.startswith(f"{record['run']}: best dev epoch {record['best_epoch']}, ") and (
        f"predictions in {record['predictions']}" in line), line
    with open(path.parent / record["predictions"], newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    return record, rows, captured.err + line


def one_error_line(argv: list[str], out: Path, capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        main_guard(lambda: train.main([*argv, *SMALL, "--out", str(out), "--data-root", str(out / "data")]),
                   "train.py")
    err = capsys.readouterr().err
    assert stop.value.code == 2, err
    assert err.startswith("train.py: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


# --------------------------------------------------------------------------- what a run writes


def test_graph_classes_of_a_jsonl_file(tmp_path, capsys):
    record, rows, err = run(["--data", str(DATA / "example.jsonl"), "--split", "0.6", "0.2", "0.2", "--epochs", "2"],
                            tmp_path, capsys)
    lines = (DATA / "example.jsonl").read_text().splitlines()
    test = split_indices(len(lines), (0.6, 0.2, 0.2), 0)["test"]
    assert record["config"]["task"] == "graph-class" and record["config"]["classes"] == 2
    assert record["config"]["data"]["sizes"] == {"train": 6, "dev": 2, "test": 2}
    # One row per test graph: its index and line in the file, the prediction, the label written there.
    assert [int(r["graph"]) for r in rows] == test and [int(r["line"]) for r in rows] == [k + 1 for k in test]
    gold = [json.loads(lines[k]).get("y") for k in test]
    assert [r["gold"] for r in rows] == ["_" if y is None else str(y) for y in gold]
    assert all(r["prediction"] in ("0", "1") for r in rows)
    labelled = [r for r in rows if r["gold"] != "_"]
    correct = sum(r["prediction"] == r["gold"] for r in labelled)
    assert record["test"]["total"] == len(labelled) and record["test"]["correct"] == correct
    # The CSV: one row per epoch, the dev-selected one marked.
    with open(tmp_path / "train" / f"{record['run']}.csv") as handle:
        epochs = list(csv.DictReader(handle))
    assert [int(e["epoch"]) for e in epochs] == [1, 2]
    assert [int(e["best"]) for e in epochs] == [int(k + 1 == record["best_epoch"]) for k in range(2)]
    assert float(epochs[record["best_epoch"] - 1]["dev_accuracy"]) == record["dev"]["accuracy"]
    assert (tmp_path / "checkpoints" / "train" / f"{record['run']}.pt").is_file()
    assert record["run"] == "example_childsum_graph-class_random_ep2_s1"
    assert record["provenance"] and record["threads"] == 1
    assert "epoch 2/2: loss" in err


def test_node_classes_of_ptb_trees(tmp_path, capsys):
    record, rows, _ = run(["--data", str(DATA / "example.ptb"), "--model", "nary", *PTB_SPLIT, "--epochs", "1"],
                          tmp_path, capsys)
    assert record["config"]["task"] == "node-class" and record["config"]["n_ary"] == 3  # "(_ (_ Yes) (_ ,) (_ no))"
    assert record["config"]["setting"] == "constituency"  # PTB words are at the leaves
    lines = (DATA / "example.ptb").read_text().splitlines()
    for row in rows:
        labels = re.findall(r"\((\S+)", lines[int(row["line"]) - 1])  # pre-order, as the nodes
        assert row["gold"].split() == labels
        assert len(row["prediction"].split()) == len(labels)
    labelled = [(p, g) for r in rows for p, g in zip(r["prediction"].split(), r["gold"].split()) if g != "_"]
    assert record["test"]["total"] == len(labelled)
    assert record["test"]["correct"] == sum(p == g for p, g in labelled)
    assert set(record["test"]) >= {"accuracy", "root_accuracy"}


def test_graph_regression_on_node_features_and_words(tmp_path, capsys):
    rng = random.Random(0)
    path = tmp_path / "sums.jsonl"
    with open(path, "w") as handle:
        for _ in range(20):
            xs = [[round(rng.random(), 3), 1.0] for _ in range(rng.randint(1, 4))]
            parents = [-1] + [rng.randrange(k) for k in range(1, len(xs))]
            handle.write(json.dumps({"nodes": [{"x": x, "token": rng.choice("ab")} for x in xs], "parents": parents,
                                     "y": round(sum(x[0] for x in xs), 3)}) + "\n")
    record, rows, err = run(["--data", str(path), "--epochs", "2"], tmp_path, capsys)
    assert record["config"]["task"] == "graph-regression" and record["config"]["features"] == 2
    assert record["config"]["in_channels"] == 8 + 2  # word vectors and features side by side
    lines = path.read_text().splitlines()
    assert [float(r["gold"]) for r in rows] == [json.loads(lines[int(r["line"]) - 1])["y"] for r in rows]
    mse = sum((float(r["prediction"]) - float(r["gold"])) ** 2 for r in rows) / len(rows)
    assert record["test"]["n"] == len(rows) == 2 and record["test"]["mse"] == pytest.approx(mse, rel=1e-4)
    assert "dev MSE" in err


def test_a_folder_of_split_files(tmp_path, capsys):
    folder = tmp_path / "treebank"
    folder.mkdir()
    for split in ("train", "dev", "test"):
        (folder / f"{split}.conllu").write_bytes((DATA / "example.conllu").read_bytes())
    record, rows, _ = run(["--data", str(folder), "--epochs", "1"], tmp_path / "out", capsys)
    assert record["run"].startswith("treebank_childsum_graph-class_")
    assert record["config"]["split"] is None and record["config"]["data"]["sizes"] == {"train": 2, "dev": 2, "test": 2}
    assert [(r["graph"], r["line"], r["gold"]) for r in rows] == [("0", "1", "1"), ("1", "7", "0")]


# --------------------------------------------------------------------------- resume


def test_a_killed_run_resumes_to_the_numbers_of_an_uninterrupted_one(tmp_path, capsys, monkeypatch):
    argv = ["--data", str(DATA / "example.jsonl"), "--model", "nary", "--dropout", "0.3", "--epochs", "3",
            "--batch-size", "3"]
    whole, whole_rows, _ = run(argv, tmp_path / "whole", capsys)

    save = TaskTrainer._save

    def save_then_die(self, epoch, *rest):
        save(self, epoch, *rest)
        if epoch == 1:
            raise KeyboardInterrupt  # killed right after the first epoch's checkpoint

    monkeypatch.setattr(TaskTrainer, "_save", save_then_die)
    with pytest.raises(SystemExit) as stop:
        run(argv, tmp_path / "killed", capsys)
    assert stop.value.code == 130
    assert not list((tmp_path / "killed" / "train").glob("*.json"))
    monkeypatch.undo()
    resumed, resumed_rows, err = run(argv, tmp_path / "killed", capsys)
    assert "(resumed after epoch 1)" in err
    timing = ("train_seconds", "seconds", "phases")
    assert ([{k: v for k, v in h.items() if k not in timing} for h in resumed["history"]]
            == [{k: v for k, v in h.items() if k not in timing} for h in whole["history"]])
    assert resumed["best_epoch"] == whole["best_epoch"] and resumed["test"] == whole["test"]
    assert resumed_rows == whole_rows
    # A third time: finished, skipped.
    main_guard(lambda: train.main([*argv, *SMALL, "--out", str(tmp_path / "killed"), "--data-root",
                                   str(tmp_path / "killed" / "data")]), "train.py")
    assert "finished earlier" in capsys.readouterr().err


# --------------------------------------------------------------------------- bad input


def test_a_malformed_record_is_one_located_line_from_the_command(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"nodes": [{"token": "a"}], "parents": [-1], "y": 1}\n'
                   '{"nodes": [{"token": "b"}, {"token": "c"}], "parents": [-1, 5], "y": 0}\n')
    result = subprocess.run([sys.executable, "experiments/train.py", "--data", str(bad), "--out", str(tmp_path),
                             "--data-root", str(tmp_path / "data")], cwd=REPO, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(f"train.py: error: {bad}: parents[1]: parent 5 of node 1 is outside -1..1")
    assert "(at line 2)" in result.stderr


@pytest.mark.parametrize("argv, expected", [
    (["--data", "no/such/file.jsonl"], "--data no/such/file.jsonl: no such file or folder"),
    (["--data", str(DATA / "example.ptb"), "--model", "slstm", *PTB_SPLIT],
     f"{DATA / 'example.ptb'}, line 9: --model slstm takes at most 2 children per node"),
    (["--data", str(DATA / "example.conllu"), "--model", "contree", "--split", "0.5", "0.5", "0"],
     "its 2 graphs leave the test split empty with --split 0.5 0.5 0"),
    (["--data", str(DATA / "example.ptb"), "--task", "graph", *PTB_SPLIT],
     f"{DATA / 'example.ptb'}: --task graph, but none of its 6 training graphs has a graph label"),
    (["--data", str(DATA / "example.ptb")],  # seed 0 puts an unlabelled tree alone in dev
     f"{DATA / 'example.ptb'}: the dev graphs have no node labels, and dev selects the epoch to keep"),
    (["--data", str(DATA / "features.jsonl"), "--labels", str(DATA / "example.ptb")],
     f"{DATA / 'example.ptb'} has 10 labels but {DATA / 'features.jsonl'} has 2 graphs"),
])
def test_bad_input_is_one_line_naming_file_and_line(argv, expected, tmp_path, capsys):
    assert expected in one_error_line(argv, tmp_path, capsys)


def test_a_binary_model_refuses_words_at_inner_nodes(tmp_path, capsys):
    folder = tmp_path / "deps"
    folder.mkdir()
    for split in ("train", "dev", "test"):
        (folder / f"{split}.conllu").write_bytes((DATA / "example.conllu").read_bytes())
    err = one_error_line(["--data", str(folder), "--model", "bicontree"], tmp_path, capsys)
    assert f"{folder / 'train.conllu'}, line 1: --model bicontree reads inputs at leaves only" in err


def test_a_folder_without_a_dev_file_is_told(tmp_path, capsys):
    (tmp_path / "train.ptb").write_text("(1 a)\n")
    err = one_error_line(["--data", str(tmp_path)], tmp_path / "out", capsys)
    assert f"{tmp_path}: no dev file" in err and "dev.ptb" in err


def test_a_file_of_fewer_graphs_than_splits_trains_on_the_whole_file_and_says_so(tmp_path, capsys):
    # examples/trees.conllu: two sentences, no split leaves one in each of train, dev and test.
    _, rows, err = run(["--data", str(REPO / "examples" / "trees.conllu"), "--epochs", "1"], tmp_path, capsys)
    assert "2 graph(s), too few to split into train, dev and test: each of the three is the whole file" in err
    assert [r["graph"] for r in rows] == ["0", "1"]  # the test split: both graphs


@pytest.mark.parametrize("data", [["--data", str(REPO / "examples" / "graphs.jsonl"), "--model", "childsum"],
                                  ["--data", str(DATA / "example.ptb"), "--model", "nary", *PTB_SPLIT]])
def test_on_disk_runs_as_in_memory(tmp_path, capsys, data):
    # --on-disk: the graphs in a store, read by loader workers; the same run, epoch by epoch and graph by graph.
    memory, memory_rows, _ = run([*data, "--epochs", "2"], tmp_path / "memory", capsys)
    disk, disk_rows, _ = run([*data, "--epochs", "2", "--on-disk"], tmp_path / "disk", capsys)
    assert list((tmp_path / "disk" / "data").rglob("*.sqlite"))
    for a, b in zip(memory["history"], disk["history"], strict=True):
        assert {k: v for k, v in a.items() if "seconds" not in k and k != "phases"} == {
            k: v for k, v in b.items() if "seconds" not in k and k != "phases"}
    assert memory["test"] == disk["test"] and memory_rows == disk_rows


# --------------------------------------------------------------------------- fields, readouts and the baselines


def code_like_file(path: Path, count: int = 30) -> Path:
    """Graphs whose class is whether an identifier's sub-token 'get' is among their leaves' fields."""
    rng = random.Random(1)
    with open(path, "w") as handle:
        for k in range(count):
            label = k % 2
            words = [rng.choice(["value", "key", "item"]), "get" if label else rng.choice(["put", "drop"])]
            nodes = [{"token": "FunctionDef"}] + [{"token": "Name", "fields": {"subtokens": [w]}} for w in words]
            handle.write(json.dumps({"nodes": nodes, "parents": [-1, 0, 0], "y": label}) + "\n")
    return path


def test_fields_are_embedded_beside_the_token_and_the_readout_is_recorded(tmp_path, capsys):
    path = code_like_file(tmp_path / "code.jsonl")
    record, rows, err = run(["--data", str(path), "--epochs", "1", "--readout", "attention"], tmp_path, capsys)
    assert record["config"]["readout"] == "attention" and record["config"]["fields"] > 0
    assert record["run"] == "code_childsum_graph-class_random_attention_ep1_s1"
    assert "field tokens" in err and "readout attention" in err and len(rows) == 3


def test_node_inputs_with_fields_are_the_type_vector_plus_the_mean_of_the_bag():
    from lab.own_data import NodeInputs

    from graphtree.models import NodeFields

    fields = NodeFields(4, 5, 3)
    inputs = NodeInputs(None, 0, fields)
    batch = type("B", (), {})()
    batch.word = torch.tensor([2, -1, 0])           # the third node has word 0, the second none
    batch.field_word = torch.tensor([1, 4, 2])
    batch.field_index = torch.tensor([0, 0, 2])
    types, bag = fields.types.weight, fields.subtokens.weight
    expected = torch.stack([types[3] + (bag[1] + bag[4]) / 2, types[0], types[1] + bag[2]])
    assert torch.allclose(inputs(batch), expected)


def test_the_baselines_run_on_the_same_split_and_write_the_same_files(tmp_path, capsys):
    path = code_like_file(tmp_path / "code.jsonl")
    split = ["--split", "0.6", "0.2", "0.2"]
    _, tree_rows, _ = run(["--data", str(path), *split, "--epochs", "1"], tmp_path / "tree", capsys)
    bilstm, bilstm_rows, _ = run(["--data", str(path), *split, "--epochs", "1", "--model", "bilstm"],
                                 tmp_path / "bilstm", capsys)
    main_guard(lambda: train.main(["--data", str(path), *split, "--model", "tfidf", *SMALL, "--out",
                                   str(tmp_path / "tfidf"), "--data-root", str(tmp_path / "tfidf" / "data")]),
               "train.py")
    line = capsys.readouterr().out.strip()
    (json_file,) = (tmp_path / "tfidf" / "train").glob("*.json")
    tfidf = json.loads(json_file.read_text())
    assert tfidf["run"] == "code_tfidf_graph-class_s1" and line.startswith(f"{tfidf['run']}: best dev strength ")
    with open(json_file.parent / tfidf["predictions"], newline="") as handle:
        tfidf_rows = list(csv.DictReader(handle, delimiter="\t"))
    # One test split for all three: the same graphs and gold labels, row for row.
    assert [(r["graph"], r["gold"]) for r in tfidf_rows] == [(r["graph"], r["gold"]) for r in tree_rows] == [
        (r["graph"], r["gold"]) for r in bilstm_rows]
    correct = sum(r["prediction"] == r["gold"] for r in tfidf_rows)
    assert tfidf["test"]["correct"] == correct and tfidf["test"]["total"] == len(tfidf_rows) == 6
    assert tfidf["config"]["num_features"] > 0 and len(tfidf["history"]) > 1
    assert bilstm["config"]["model"] == "bilstm" and bilstm["run"] == "code_bilstm_graph-class_random_ep1_s1"


def test_a_readout_for_a_model_with_its_own_output_is_refused(tmp_path, capsys):
    err = one_error_line(["--data", str(DATA / "example.ptb"), "--model", "contree", "--readout", "mean"],
                         tmp_path, capsys)
    assert "own output layer at the root" in err


def test_tfidf_refuses_node_labels(tmp_path, capsys):
    err = one_error_line(["--data", str(DATA / "example.ptb"), *PTB_SPLIT, "--model", "tfidf"], tmp_path, capsys)
    assert "graph labels" in err
