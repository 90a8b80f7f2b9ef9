"""Python code to train.py's data: ``python -m graphtree.datasets.code`` on a folder this test writes, and
GraphFiles' sub-token fields, against hand-written trees and splits."""

from __future__ import annotations

import json
import textwrap

import pytest
import torch

from graphtree.datasets import GraphFiles
from graphtree.datasets.code import KINDS, main
from graphtree.datasets.files import read_graph_file
from graphtree.errors import TreeFormatError

SOURCES = {
    "alpha/store.py": '''
        class Store:
            def get_value(self, key):
                """Doc."""
                return self.data[key]

            def frobnicate(self):
                return 1
        ''',
    "beta.py": '''
        def is_ready(flag):
            return not flag
        ''',
    "gamma/io.py": '''
        def load_file(path):
            return open(path)

        def save_file(path, text):
            return path
        ''',
    "gamma/broken.py": "def oops(:\n",
}


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "src"
    for name, text in SOURCES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_folder_to_one_file_of_trees_with_fields_and_kinds(folder, tmp_path, capsys):
    out = tmp_path / "functions.jsonl"
    main([str(folder), str(out)])
    found = records(out)
    # frobnicate has no kind and is left out; broken.py does not parse; packages in sorted order, files in order.
    assert [r["y"] for r in found] == [KINDS.index(k) for k in ("get", "predicate", "read", "write")]
    get_value = found[0]
    # FunctionDef, arguments, arg self, arg key, Return, Subscript, Attribute data, Name self, Name key.
    assert get_value["parents"] == [-1, 0, 1, 1, 0, 4, 5, 6, 5]
    assert [n["token"] for n in get_value["nodes"]] == ["FunctionDef", "arguments", "arg", "arg", "Return",
                                                         "Subscript", "Attribute", "Name", "Name"]
    assert [n.get("fields", {}).get("subtokens") for n in get_value["nodes"]] == [
        None, None, ["self"], ["key"], None, None, ["data"], ["self"], ["key"]]
    index = (tmp_path / "functions.functions.tsv").read_text().splitlines()
    assert index[0] == "line\tpackage\tpath\tqualname\tname"
    assert index[1] == "1\talpha\talpha/store.py\tStore.get_value\tget_value"
    assert "1 file(s) did not parse" in capsys.readouterr().err
    # GraphFiles reads it back: the types as tokens, the sub-tokens as a field, the kinds as graph classes.
    (graph, *_) = read_graph_file(out)
    assert graph.tokens[0] == "FunctionDef" and graph.subtokens_tokens == ["self", "key", "data", "self", "key"]
    assert graph.subtokens_index.tolist() == [2, 3, 6, 7, 8] and graph.graph_y.tolist() == [KINDS.index("get")]


def test_all_keeps_the_functions_without_a_kind_unlabelled(folder, tmp_path):
    out = tmp_path / "all.jsonl"
    main([str(folder), str(out), "--all"])
    assert [r["y"] for r in records(out)] == [KINDS.index("get"), None, KINDS.index("predicate"),
                                              KINDS.index("read"), KINDS.index("write")]


def test_split_by_package_puts_no_package_in_two_splits(tmp_path):
    folder = tmp_path / "many"
    folder.mkdir()
    for k in range(10):  # ten packages of two functions: 8 / 1 / 1 packages for 80 / 10 / 10 %
        (folder / f"pkg{k}.py").write_text(f"def get_{k}(x):\n    return x\n\ndef set_{k}(x):\n    return x\n")
    out = tmp_path / "corpus"
    main([str(folder), str(out), "--split"])
    packages = {}
    for split in ("train", "dev", "test"):
        rows = (out / f"{split}.functions.tsv").read_text().splitlines()[1:]
        packages[split] = {row.split("\t")[1] for row in rows}
        assert len(records(out / f"{split}.jsonl")) == len(rows) > 0
    assert sorted(p for s in packages.values() for p in s) == [f"pkg{k}" for k in range(10)]
    assert [len(packages[s]) for s in ("train", "dev", "test")] == [8, 1, 1]


def test_errors_are_one_line(folder, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main([str(tmp_path / "nowhere"), str(tmp_path / "x.jsonl")])
    assert stop.value.code == 2 and "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(folder), str(tmp_path / "x.jsonl"), "--max-nodes", "2"])
    assert "no function" in capsys.readouterr().err


def jsonl(tmp_path, lines):
    path = tmp_path / "g.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


def test_subtokens_split_each_nodes_token_into_a_field(tmp_path):
    path = jsonl(tmp_path, [
        {"nodes": [{"token": "getHTTPValue"}, {}, {"token": "max_nodes2"}], "parents": [-1, 0, 0], "y": 1},
        {"nodes": [{"token": "x"}], "parents": [-1], "y": 0}])
    first, second = read_graph_file(path, subtokens=True)
    assert first.subtokens_tokens == ["get", "http", "value", "max", "nodes", "2"]
    assert first.subtokens_index.tolist() == [0, 0, 0, 2, 2, 2]
    assert first.tokens == ["getHTTPValue", "max_nodes2"]  # the tokens themselves stay
    assert second.subtokens_tokens == ["x"] and second.subtokens_index.tolist() == [0]
    assert not hasattr(read_graph_file(path)[0], "subtokens_tokens")
    # The dataset: the option names its cache, and on disk the chunks give the same fields.
    memory = GraphFiles(tmp_path / "root", "all", files=path, subtokens=True, log=False)
    plain = GraphFiles(tmp_path / "root", "all", files=path, log=False)
    disk = GraphFiles(tmp_path / "root", "all", files=path, subtokens=True, log=False, on_disk=True, workers=1)
    assert memory.options_tag() != plain.options_tag()
    for graph in (memory[0], disk[0]):
        assert graph.subtokens_tokens == first.subtokens_tokens
        assert torch.equal(graph.subtokens_index, first.subtokens_index)


def test_subtokens_refuse_a_field_of_that_name(tmp_path):
    path = jsonl(tmp_path, [{"nodes": [{"token": "a_b", "fields": {"subtokens": ["c"]}}], "parents": [-1]}])
    with pytest.raises(TreeFormatError, match=r"fields\.subtokens: .*already"):
        read_graph_file(path, subtokens=True)
