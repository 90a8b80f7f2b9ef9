"""CodeTrees, the method-kind labels, NodeFields and the code experiment's F1, binarization and models, against
hand-computed trees and values."""

from __future__ import annotations

import hashlib
import json
import textwrap
from pathlib import Path

import pytest
import torch
from lab.code_tasks import EOS, UNK, CodeModel, decode_name, lcrs, name_f1, name_targets
from torch_geometric.data import Batch

from graphtree.datasets import CodeTrees
from graphtree.datasets.code import KINDS, SELF_NAME, function_trees, method_kind, package_splits, split_subtokens
from graphtree.datasets.download import DatasetError
from graphtree.models import NodeFields

GETTER = '''
class Store:
    def get_value(self, key):
        """Doc."""
        return self.data[key]
'''

RECURSIVE = '''
class Walker:
    @staticmethod
    def isHTTPOk(n):
        return n > 1 and isHTTPOk(n - 2.5)
'''

NESTED = '''
def outer():
    def helper_fn():
        pass
    return helper_fn
'''


def shape(tree):
    return list(zip(tree.node_types, tree.subtokens, tree.parents))


def test_getter_tree_by_hand():
    (tree,) = function_trees(GETTER)
    assert shape(tree) == [
        ("FunctionDef", [], -1), ("arguments", [], 0), ("arg", ["self"], 1), ("arg", ["key"], 1),
        ("Return", [], 0), ("Subscript", [], 4), ("Attribute", ["data"], 5), ("Name", ["self"], 6),
        ("Name", ["key"], 5)]
    assert (tree.name, tree.qualname, tree.line, tree.kind) == ("get_value", "Store.get_value", 3, KINDS.index("get"))


def test_name_decorators_docstring_removed_operators_folded():
    (tree,) = function_trees(RECURSIVE)
    assert shape(tree) == [
        ("FunctionDef", [], -1), ("arguments", [], 0), ("arg", ["n"], 1), ("Return", [], 0),
        ("BoolOp.And", [], 3), ("Compare.Gt", [], 4), ("Name", ["n"], 5), ("Constant", ["1"], 5),
        ("Call", [], 4), ("Name", [SELF_NAME], 8), ("BinOp.Sub", [], 8), ("Name", ["n"], 10),
        ("Constant", ["<num>"], 10)]
    assert tree.kind == KINDS.index("predicate")


def test_nested_functions_are_graphs_of_their_own():
    outer, helper = function_trees(NESTED)
    assert shape(outer) == [("FunctionDef", [], -1), ("arguments", [], 0), ("FunctionDef", ["helper", "fn"], 0),
                            ("arguments", [], 2), ("Pass", [], 2), ("Return", [], 0), ("Name", ["helper", "fn"], 5)]
    assert shape(helper) == [("FunctionDef", [], -1), ("arguments", [], 0), ("Pass", [], 0)]
    assert (outer.qualname, helper.qualname, outer.kind) == ("outer", "outer.helper_fn", -1)


@pytest.mark.parametrize("text, words", [
    ("parseHTTPResponse", ["parse", "http", "response"]), ("utf8_decode", ["utf", "8", "decode"]),
    ("__init__", ["init"]), ("getX", ["get", "x"]), ("Hello, world!", ["hello", "world"]), ("", [])])
def test_split_subtokens(text, words):
    assert split_subtokens(text) == words


@pytest.mark.parametrize("name, kind", [
    ("__init__", "init"), ("__repr__", "dunder"), ("test_parse", "test"), ("_get_item", "get"),
    ("setValue", "set"), ("isValid", "predicate"), ("has_key", "predicate"), ("to_dict", "convert"),
    ("from_json", "convert"), ("make_app", "create"), ("validate", "check"), ("loadFile", "read"),
    ("dump", "write"), ("append_row", "add"), ("pop", "remove"), ("run", None), ("getter", None), ("___", None)])
def test_method_kind(name, kind):
    assert method_kind(name) == (-1 if kind is None else KINDS.index(kind))


def test_package_splits_partition_and_ratios():
    sizes = {f"p{k:02d}": 5 for k in range(20)}
    chosen = package_splits(sizes, seed=3)
    assert sorted(p for ps in chosen.values() for p in ps) == sorted(sizes)
    assert [len(chosen[s]) for s in ("train", "dev", "test")] == [16, 2, 2]
    assert package_splits(sizes, seed=3) == chosen
    assert any(package_splits(sizes, seed=s) != chosen for s in range(4, 10))


def write_folder(root: Path) -> Path:
    files = {
        "alpha/__init__.py": GETTER,
        "alpha/deep/mod.py": RECURSIVE,
        "beta.py": NESTED,
        "gamma/a.py": "def to_list(x):\n    return [x]\n",
        "delta/b.py": "def run():\n    return 1 + 2 + 3 + 4 + 5 + 6\n",
        "delta/broken.py": "def (:\n",
    }
    for name, text in files.items():
        path = root / "src" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root / "src"


def test_dataset_graphs_manifest_and_reproducibility(tmp_path):
    source = write_folder(tmp_path)
    options = dict(source=source, max_nodes=12, split_ratios=(0.5, 0.25, 0.25), seed=0, log=False)
    splits = {s: CodeTrees(tmp_path / "one", s, **options) for s in ("train", "dev", "test")}
    manifest = splits["train"].manifest
    packages = manifest["packages"]
    assert sorted(p for ps in packages.values() for p in ps) == ["alpha", "beta", "delta", "gamma"]
    assert manifest["unparsed_files"] == ["delta/broken.py"]
    # RECURSIVE has 13 nodes and run() 14 (FunctionDef, arguments, Return, 5 BinOps, 6 Constants): above 12.
    split_of = {p: s for s, ps in packages.items() for p in ps}
    expected_large = {s: 0 for s in splits}
    expected_large[split_of["alpha"]] += 1
    expected_large[split_of["delta"]] += 1
    assert manifest["too_large"] == expected_large
    assert manifest["versions"] == dict.fromkeys(["alpha", "beta", "delta", "gamma"])
    graphs = {g.qualname: g for d in splits.values() for g in d}
    assert sorted(graphs) == ["Store.get_value", "outer", "outer.helper_fn", "to_list"]
    getter = graphs["Store.get_value"]
    types, words = splits["train"].node_types, splits["train"].subtokens
    assert [types[t] for t in getter.node_type] == ["FunctionDef", "arguments", "arg", "arg", "Return", "Subscript",
                                                    "Attribute", "Name", "Name"]
    assert getter.edge_index.tolist() == [[1, 2, 3, 4, 5, 6, 7, 8], [0, 1, 1, 0, 4, 5, 6, 5]]
    assert getter.edge_pos.tolist() == [0, 0, 1, 1, 0, 0, 0, 1]
    assert [words[w] for w in getter.subtoken] == ["self", "key", "data", "self", "key"]
    assert getter.subtoken_index.tolist() == [2, 3, 6, 7, 8]
    assert (getter.name, int(getter.kind), getter.package, getter.path) == (
        ["get", "value"], KINDS.index("get"), "alpha", "alpha/__init__.py")
    # Same sources, another root: the same bytes.
    again = CodeTrees(tmp_path / "two", "train", **options)
    for name in ("train.pt", "dev.pt", "test.pt", "manifest.json", "vocab.json"):
        one, two = Path(splits["train"].processed_dir) / name, Path(again.processed_dir) / name
        assert hashlib.sha256(one.read_bytes()).digest() == hashlib.sha256(two.read_bytes()).digest(), name
    assert json.loads((Path(again.processed_dir) / "manifest.json").read_text())["functions"] == {
        s: len(d) for s, d in splits.items()}


def test_dataset_errors(tmp_path):
    source = write_folder(tmp_path)
    with pytest.raises(DatasetError, match="split must be"):
        CodeTrees(tmp_path, "validation", source=source)
    with pytest.raises(DatasetError, match="does not exist"):
        CodeTrees(tmp_path, "train", source=tmp_path / "nowhere")
    with pytest.raises(DatasetError, match="no functions of package"):
        CodeTrees(tmp_path, "train", source=source, packages=["alpha", "omega"], log=False)
    with pytest.raises(DatasetError, match="cannot fill the splits"):
        CodeTrees(tmp_path, "train", source=source, packages=["alpha", "beta"], log=False)


def test_node_fields_by_hand():
    fields = NodeFields(num_types=3, num_subtokens=4, channels=2)
    with torch.no_grad():
        fields.types.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]]))
        fields.subtokens.weight.copy_(torch.tensor([[10.0, 0.0], [0.0, 10.0], [4.0, 4.0], [1.0, 3.0]]))
    node_type = torch.tensor([2, 0, 1])
    subtoken, index = torch.tensor([0, 1, 3]), torch.tensor([0, 0, 2])  # node 0: tokens 0 and 1; node 2: token 3
    out = fields(node_type, subtoken, index)
    assert torch.allclose(out, torch.tensor([[2 + 5.0, 2 + 5.0], [1.0, 0.0], [1.0, 4.0]]))
    fields.combine, fields.bag = "concat", "sum"
    out = fields(node_type, subtoken, index)
    assert torch.allclose(out, torch.tensor([[2.0, 2.0, 10.0, 10.0], [1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 1.0, 3.0]]))
    with pytest.raises(ValueError, match="combine"):
        NodeFields(3, 4, 2, combine="max")
    with pytest.raises(ValueError, match="one node per sub-token"):
        fields(node_type, subtoken, index[:2])


def test_name_f1_as_ogb_computes_it():
    gold = [["get", "value"], ["get", "value"], ["to", "dict"], ["run"]]
    predicted = [["get"], [UNK, "value", "x"], [], ["run", "run"]]
    # per example (precision, recall, F1): (1, 1/2, 2/3), (1/3, 1/2, 2/5), (0, 0, 0), (1, 1, 1)
    scores = name_f1(gold, predicted)
    assert scores["precision"] == pytest.approx(100 * (1 + 1 / 3 + 0 + 1) / 4)
    assert scores["recall"] == pytest.approx(100 * (0.5 + 0.5 + 0 + 1) / 4)
    assert scores["f1"] == pytest.approx(100 * (2 / 3 + 2 / 5 + 0 + 1) / 4)
    with pytest.raises(ValueError):
        name_f1(gold, predicted[:2])


def test_name_targets_and_decoding():
    words = ["get", "value", UNK, EOS]
    index = {w: i for i, w in enumerate(words)}
    assert name_targets(["get", "big", "value", "a", "b", "c"], index) == [0, 2, 1, 2, 2]
    assert name_targets(["get"], index) == [0, 3, 3, 3, 3]
    assert decode_name([0, 2, 3, 1, 1], words) == ["get", UNK]


def test_lcrs_by_hand():
    # root 0 with children 1, 2, 3 in order; node 1 with child 4
    edge_index = torch.tensor([[1, 2, 3, 4], [0, 0, 0, 1]])
    index, pos = lcrs(edge_index, 5)
    got = sorted(zip(index[0].tolist(), index[1].tolist(), pos.tolist()))
    assert got == [(1, 0, 0), (2, 1, 1), (3, 2, 1), (4, 1, 0)]
    empty = lcrs(torch.zeros(2, 0, dtype=torch.long), 1)
    assert empty[0].shape == (2, 0)


@pytest.mark.parametrize("model", ["childsum", "nary", "bilstm"])
def test_code_model_shapes_and_preorder_states(model):
    from torch_geometric.data import Data

    torch.manual_seed(0)
    graphs = []
    for parents in ([-1, 0, 0, 1], [-1, 0], [-1]):
        child = [k for k, p in enumerate(parents) if p >= 0]
        edge_index = torch.tensor([child, [parents[k] for k in child]], dtype=torch.long).view(2, -1)
        edge_pos = torch.tensor([sum(parents[j] == parents[k] for j in child if j < k) for k in child],
                                dtype=torch.long)
        if model == "nary":
            edge_index, edge_pos = lcrs(edge_index, len(parents))
        n = len(parents)
        graphs.append(Data(edge_index=edge_index, edge_pos=edge_pos, node_type=torch.arange(n) % 3,
                           subtoken=torch.tensor([1, 2]), subtoken_index=torch.tensor([0, n - 1]), num_nodes=n))
    net = CodeModel(model, 3, 4, dim=6, hidden=8, outputs=5, classes=7)
    batch = Batch.from_data_list(graphs)
    assert net(batch).shape == (3, 5, 7)
    if model == "bilstm":  # states in node order: each graph's alone gives the same
        states = net.encode(batch)
        alone = torch.cat([net.encode(Batch.from_data_list([g])) for g in graphs])
        assert torch.allclose(states, alone, atol=1e-6)


def test_graph_files_node_fields(tmp_path):
    from graphtree.datasets import GraphFiles
    from graphtree.errors import TreeFormatError

    path = tmp_path / "ast.jsonl"
    path.write_text(
        '{"nodes": [{"token": "FunctionDef"}, {"token": "Name", "fields": {"sub": ["get", "value"], "kind": "id"}}],'
        ' "parents": [-1, 0], "y": 1}\n'
        '{"nodes": [{"token": "Return"}, {"token": "Name"}, {"token": "Attr", "fields": {"sub": ["data"]}}],'
        ' "parents": [-1, 0, 0], "y": 0}\n')
    graphs = GraphFiles(tmp_path / "data", "all", files=path, log=False)
    first, second = graphs[0], graphs[1]
    assert (first.sub_tokens, first.sub_index.tolist(), first.kind_tokens, first.kind_index.tolist()) == (
        ["get", "value"], [1, 1], ["id"], [1])
    assert (second.sub_tokens, second.sub_index.tolist(), second.kind_tokens, second.kind_index.tolist()) == (
        ["data"], [2], [], [])
    batch = Batch.from_data_list([first, second])
    assert batch.sub_index.tolist() == [1, 1, 4]  # the second graph's node 2 is the batch's node 4
    plain = tmp_path / "plain.jsonl"
    plain.write_text('{"nodes": [{"token": "a"}, {"token": "b"}], "parents": [-1, 0], "y": 1}\n' * 2)
    assert not any(key.endswith("_index") and key != "edge_index"
                   for key in GraphFiles(tmp_path / "data", "all", files=plain, log=False)[0].keys())
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"nodes": [{"token": "a", "fields": {"sub": [1]}}], "parents": [-1], "y": 1}\n')
    with pytest.raises(TreeFormatError, match=r"nodes\[0\]\.fields\.sub"):
        GraphFiles(tmp_path / "data", "all", files=bad, log=False)


@pytest.mark.slow
@pytest.mark.parametrize("task, model", [("name", "childsum"), ("kind", "nary"), ("kind", "bilstm"),
                                         ("name", "tfidf")])
def test_code_experiment_short_run(tmp_path, task, model):
    """experiments/code.py end to end on a folder of ten small packages, one quick epoch."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parent.parent
    prefixes = ["get", "set", "is", "to", "make", "check", "load", "save", "add", "remove"]
    for k in range(10):
        lines = [f"def {prefixes[(k + j) % 10]}_item{j}(self, value):\n    return self.items[value] + {j}\n"
                 for j in range(8)]
        (tmp_path / "src" / f"pkg{k}").mkdir(parents=True)
        (tmp_path / "src" / f"pkg{k}" / "mod.py").write_text("\n".join(lines))
    out = tmp_path / "runs"
    command = [sys.executable, str(repo / "experiments" / "code.py"), "--task", task, "--model", model,
               "--source", str(tmp_path / "src"), "--packages", *(f"pkg{k}" for k in range(10)),
               "--data-root", str(tmp_path / "data"), "--out", str(out), "--quick", "--epochs", "1",
               "--threads", "1", "--no-progress"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "PYTHONPATH": str(repo)})
    assert done.returncode == 0, done.stderr[-2000:]
    (record_path,) = (out / "quick" / "code").glob("*.json")
    record = json.loads(record_path.read_text())
    metric = "f1" if task == "name" else "accuracy"
    assert 0 <= record["test"][metric] <= 100 and record["corpus"]["functions"]["train"] > 0


def test_prepare_gives_each_node_its_position_among_its_siblings_by_hand():
    from lab.code_tasks import InputVocab, prepare

    from graphtree.datasets.code import to_data

    (tree,) = function_trees(GETTER)
    types = {k: i for i, k in enumerate(sorted(set(tree.node_types)))}
    words = {w: i for i, w in enumerate(sorted({w for ws in tree.subtokens for w in ws}))}
    graph = to_data(tree, types, words)
    vocab = InputVocab([graph], len(types), len(words), 1)
    # parents [-1, 0, 1, 1, 0, 4, 5, 6, 5]: 1-based positions under the parent, 0 at the root.
    for model in ("childsum", "nary"):  # nary's binarized edges, the positions of the AST itself
        (prepared,) = prepare([graph], vocab, [[0]], model)
        assert prepared.child_pos.tolist() == [0, 1, 1, 2, 2, 1, 1, 1, 2]
    net = CodeModel("childsum", vocab.num_types, vocab.num_subtokens, 6, 8, 1, 13, positions=True)
    (prepared,) = prepare([graph], vocab, [[0]], "childsum")
    batch = Batch.from_data_list([prepared])
    plain = net.fields(batch.node_type, batch.subtoken, batch.subtoken_index)
    with torch.no_grad():
        net.positions.weight.zero_()
        net.positions.weight[2] = 1.0  # second children only
    shifted = net.fields(batch.node_type, batch.subtoken, batch.subtoken_index) + net.positions(batch.child_pos)
    assert torch.equal((shifted - plain).sum(1) != 0, torch.tensor([0, 0, 0, 1, 1, 0, 0, 0, 1]).bool())
    assert net(batch).shape == (1, 1, 13)
