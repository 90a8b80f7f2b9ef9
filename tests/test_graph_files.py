"""GraphFiles: CoNLL-U, PTB and JSON Lines files become the hand-expected graphs; malformed records give
located errors (file, line, field); the cache follows the file's bytes; splits; batches with workers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch_geometric.loader import DataLoader

from graphtree import settings
from graphtree.data import NO_LABEL, NO_WORD
from graphtree.datasets import DatasetError, GraphFiles
from graphtree.datasets.files import default_files_root, read_graph_file, split_indices
from graphtree.engine import schedule_of
from graphtree.errors import CycleError, TreeFormatError
from graphtree.models.classifier import NodeEmbedding
from graphtree.nn import ChildSumTreeLSTM
from graphtree.vocab import Vocab

DATA = Path(__file__).parent / "data"
EXAMPLES = {"conllu": DATA / "example.conllu", "ptb": DATA / "example.ptb", "jsonl": DATA / "example.jsonl",
            "features": DATA / "features.jsonl"}


def edges(data) -> list[list[int]]:
    return data.edge_index.tolist()


def write(folder: Path, name: str, text: str | bytes) -> Path:
    path = folder / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def run_cell(data) -> torch.Tensor:
    """Every graph (or batch) must schedule and run through a cell: the point of reading it."""
    schedule_of(data)
    x = data.x if getattr(data, "x", None) is not None else torch.randn(data.num_nodes, 5)
    h, c = ChildSumTreeLSTM(x.size(1), 6)(x, data)
    assert h.shape == c.shape == (data.num_nodes, 6) and torch.isfinite(h).all()
    return h


# --------------------------------------------------------------------------- the three formats


def test_conllu_example_is_the_hand_expected_trees():
    first, second = read_graph_file(EXAMPLES["conllu"])
    assert first.tokens == ["Birds", "sing", "."]
    assert edges(first) == [[0, 2], [1, 1]]  # Birds -> sing, . -> sing (child -> parent)
    assert first.edge_pos.tolist() == [0, 1]
    assert first.is_root.tolist() == [False, True, False]
    assert first.lemmas == ["bird", "sing", "."]
    assert first.upos == ["NOUN", "VERB", "PUNCT"]
    assert first.deprel == ["nsubj", "root", "punct"]
    assert first.y.tolist() == [NO_LABEL] * 3
    assert first.graph_y.dtype == torch.long and first.graph_y.tolist() == [1]
    assert first.line.tolist() == [1]
    # The multiword line 1-2 is skipped: the nodes are the syntactic words.
    assert second.tokens == ["Do", "n't", "go"]
    assert edges(second) == [[0, 1], [2, 2]]
    assert second.deprel == ["aux", "advmod", "root"]
    assert second.graph_y.tolist() == [0]
    assert second.line.tolist() == [7]


def test_conllu_empty_nodes_are_skipped_and_vocab_fills_word(tmp_path):
    path = write(tmp_path, "e.conllu", "1\tI\tI\tPRON\t_\t_\t2\tnsubj\t_\t_\n"
                                       "1.1\tgo\tgo\tVERB\t_\t_\t_\t_\t0:root\t_\n"
                                       "2\tleft\tleave\tVERB\t_\t_\t0\troot\t_\t_\n")
    vocab = Vocab(["left", "I"])
    (data,) = read_graph_file(path, vocab=vocab)
    assert data.tokens == ["I", "left"] and edges(data) == [[0], [1]]
    assert data.word.tolist() == [vocab["I"], vocab["left"]] == [2, 1]
    assert not hasattr(data, "graph_y")  # no label anywhere in the file


def test_ptb_example_has_labels_where_written():
    trees = read_graph_file(EXAMPLES["ptb"])
    assert len(trees) == 10
    rock = trees[0]  # (3 (2 The) (3 (2 Rock) (4 rocks)))
    assert rock.tokens == ["The", "Rock", "rocks"]
    assert edges(rock) == [[1, 2, 3, 4], [0, 0, 2, 2]]
    assert rock.y.tolist() == [3, 2, 3, 2, 4]
    assert rock.word_pos.tolist() == [NO_WORD, 0, NO_WORD, 1, 2]
    dull = trees[1]  # (_ (_ (_ A) (_ dull)) (1 film)): '_' is an unlabelled node
    assert edges(dull) == [[1, 2, 3, 4], [0, 1, 1, 0]]
    assert dull.y.tolist() == [NO_LABEL, NO_LABEL, NO_LABEL, NO_LABEL, 1]
    yes = trees[8]  # (_ (_ Yes) (_ ,) (_ no)): three children, in order
    assert edges(yes) == [[1, 2, 3], [0, 0, 0]] and yes.edge_pos.tolist() == [0, 1, 2]
    assert yes.tokens == ["Yes", ",", "no"]
    assert [int(t.line) for t in trees] == list(range(1, 11))
    assert not hasattr(rock, "graph_y")  # the root's label is y[0], as in SST


def test_jsonl_example_trees_and_dags():
    graphs = read_graph_file(EXAMPLES["jsonl"])
    assert len(graphs) == 10
    expected = [  # edge_index, edge_pos, y, tokens, graph_y
        ([[1], [0]], [0], [1, 1], ["good", "very"], 1),
        ([[], []], [], [0], ["bad"], 0),
        ([[1, 2], [0, 0]], [0, 1], [-1, -1, -1], ["fine", "it", "is"], 1),
        ([[0, 2], [1, 1]], [0, 1], [-1, 0, -1], ["not", "bad", "at all"], NO_LABEL),  # root is node 1
        ([[1], [0]], [0], [-1, -1], ["ok", "."], NO_LABEL),  # "y": null
        ([[1, 2], [0, 0]], [0, 1], [-1, -1, -1], ["out", "a", "b"], 1),
        ([[1, 2, 2], [0, 0, 1]], [0, 1, 0], [-1, -1, -1], ["and", "or", "p"], 0),  # p has two parents
        ([[1, 2, 2], [0, 0, 1]], [1, 0, 0], [1, 0, -1], [], NO_LABEL),  # explicit positions
        ([[], []], [], [-1, -1], ["p", "q"], 0),  # two isolated nodes: two roots
        ([[1, 2, 2], [0, 0, 1]], [0, 1, 0], [-1, -1, -1], ["top", "mid", "low"], NO_LABEL),
    ]
    for k, (data, (edge_index, edge_pos, y, tokens, graph_y)) in enumerate(zip(graphs, expected)):
        assert edges(data) == edge_index, k
        assert data.edge_pos.tolist() == edge_pos, k
        assert data.y.tolist() == y, k
        assert data.tokens == tokens, k
        assert data.graph_y.dtype == torch.long and data.graph_y.tolist() == [graph_y], k
        assert int(data.line) == k + 1
    assert graphs[3].is_root.tolist() == [False, True, False]
    assert graphs[7].word_pos.tolist() == [NO_WORD] * 3  # no node has a token
    assert graphs[8].is_root.tolist() == [True, True]
    assert graphs[9].height.tolist() == [2, 1, 0]  # low -> mid -> top and low -> top


def test_jsonl_features_and_regression_targets():
    first, second = read_graph_file(EXAMPLES["features"])
    assert first.x.dtype == torch.float and first.x.tolist() == [[0.5, 1.0], [0.0, 2.5]]
    assert second.x.shape == (3, 2)
    # 0.75 is not an integer, so the file's labels are regression targets: 3 becomes 3.0.
    assert first.graph_y.dtype == torch.float
    assert first.graph_y.tolist() == [0.75] and second.graph_y.tolist() == [3.0]
    # Integer labels are classes unless target says otherwise; unlabelled graphs are then NaN.
    regression = read_graph_file(EXAMPLES["jsonl"], target="regression")
    assert regression[0].graph_y.dtype == torch.float and regression[0].graph_y.tolist() == [1.0]
    assert torch.isnan(regression[3].graph_y).all()


def test_format_page_examples_are_the_example_files(tmp_path):
    """The examples of the formats' specification (docs/data-formats.md, before its section on examples/) parse
    to the same graphs as the files under tests/data."""
    page = (Path(__file__).resolve().parent.parent / "docs" / "data-formats.md").read_text(encoding="utf-8")
    spec = page.split("\n## The files in `examples/`\n", 1)[0]
    blocks = re.findall(r"```text\n(.*?)```", spec, re.S)
    assert len(blocks) == 4
    for text, (key, name) in zip(blocks, [("conllu", "doc.conllu"), ("ptb", "doc.ptb"), ("jsonl", "doc.jsonl"),
                                          ("features", "doc_features.jsonl")]):
        from_doc = read_graph_file(write(tmp_path, name, text))
        from_file = read_graph_file(EXAMPLES[key])
        assert len(from_doc) == len(from_file) > 1
        for a, b in zip(from_doc, from_file):
            for attr in ("edge_index", "edge_pos", "y", "graph_y", "x", "line"):
                expected = getattr(b, attr, None)
                assert getattr(a, attr, None) is None if expected is None else torch.equal(getattr(a, attr), expected)
            assert a.tokens == b.tokens


@pytest.mark.parametrize("key", sorted(EXAMPLES))
def test_every_graph_schedules_and_runs_through_child_sum(key):
    for data in read_graph_file(EXAMPLES[key]):
        run_cell(data)


# --------------------------------------------------------------------------- labels files


def test_labels_file_gives_graph_labels(tmp_path):
    ptb = write(tmp_path, "t.ptb", "(1 (0 a) (1 b))\n(_ (_ c))\n(0 d)\n")
    labels = write(tmp_path, "t.labels", "2.5\n_\n-1\n")
    trees = read_graph_file(ptb, labels=labels)
    assert [t.graph_y.item() for t in trees][::2] == [2.5, -1.0]
    assert torch.isnan(trees[1].graph_y).all()  # '_' leaves the graph unlabelled: NaN for regression
    assert trees[0].y.tolist() == [1, 0, 1]  # node labels stay as written
    conllu = write(tmp_path, "u.conllu", "1\ta\ta\tX\t_\t_\t0\troot\t_\t_\n\n1\tb\tb\tX\t_\t_\t0\troot\t_\t_\n")
    classes = read_graph_file(conllu, labels=write(tmp_path, "u.labels", "4\n0\n"))
    assert [t.graph_y.tolist() for t in classes] == [[4], [0]] and classes[0].graph_y.dtype == torch.long


def test_labels_file_count_and_conflicts(tmp_path):
    conllu = write(tmp_path, "u.conllu", "# label = 1\n1\ta\ta\tX\t_\t_\t0\troot\t_\t_\n")
    with pytest.raises(DatasetError, match=r"2 labels but .*u\.conllu has 1 graphs"):
        read_graph_file(conllu, labels=write(tmp_path, "two.labels", "1\n0\n"))
    with pytest.raises(TreeFormatError, match="give each label in one place") as info:
        read_graph_file(conllu, labels=write(tmp_path, "one.labels", "0\n"))
    assert info.value.line == 1 and info.value.path.endswith("one.labels")


# --------------------------------------------------------------------------- located errors


def tok(i, form, head, deprel="dep") -> str:
    return "\t".join([str(i), form, form.lower(), "X", "_", "_", str(head), deprel, "_", "_"]) + "\n"


GOOD_CONLLU = tok(1, "ok", 0, "root") + "\n"  # lines 1-2: every bad record below starts at line 3
GOOD_JSONL = '{"nodes": [{"token": "ok"}], "parents": [-1]}\n'  # line 1

# (name, file name, text, line, field, message pattern, error class, read_graph_file keywords)
MALFORMED = [
    ("conllu head out of range", "a.conllu", GOOD_CONLLU + tok(1, "a", 2) + tok(2, "b", 7), 4, "HEAD",
     r"HEAD 7 of token 2 is outside 0\.\.2 \(0 for the root", TreeFormatError, {}),
    ("conllu head not a number", "a.conllu", GOOD_CONLLU + tok(1, "a", 0) + tok(2, "b", "_"), 4, "HEAD",
     r"HEAD '_' of token 2 is not a token ID", TreeFormatError, {}),
    ("conllu negative head", "a.conllu", GOOD_CONLLU + tok(1, "a", -1) + tok(2, "b", 0), 3, "HEAD",
     r"HEAD '-1'", TreeFormatError, {}),
    ("conllu cycle", "a.conllu", GOOD_CONLLU + tok(1, "a", 0) + tok(2, "b", 3) + tok(3, "c", 2), 4, "HEAD",
     r"cycle", CycleError, {}),
    ("conllu own head", "a.conllu", GOOD_CONLLU + tok(1, "a", 0) + tok(2, "b", 2), 4, "HEAD",
     r"token 2 is its own head", CycleError, {}),
    ("conllu two roots", "a.conllu", GOOD_CONLLU + tok(1, "a", 0) + tok(2, "b", 0), 4, "HEAD",
     r"two roots", TreeFormatError, {}),
    ("conllu no root", "a.conllu", GOOD_CONLLU + tok(1, "a", 2) + tok(2, "b", 1), 3, "HEAD",
     r"no root", TreeFormatError, {}),
    ("conllu missing column", "a.conllu", GOOD_CONLLU + "1\ta\ta\tX\t_\t_\t0\troot\t_\n", 3, "columns",
     r"9 columns, expected 10", TreeFormatError, {}),
    ("conllu ID out of sequence", "a.conllu", GOOD_CONLLU + tok(1, "a", 0) + tok(3, "b", 1), 4, "ID",
     r"ID '3' where 2 was expected", TreeFormatError, {}),
    ("conllu label not a number", "a.conllu", GOOD_CONLLU + "# label = positive\n" + tok(1, "a", 0), 3,
     "label", r"label 'positive' is not a number", TreeFormatError, {}),
    ("conllu two labels", "a.conllu", GOOD_CONLLU + "# label = 1\n# label = 0\n" + tok(1, "a", 0), 4,
     "label", r"second '# label =' comment", TreeFormatError, {}),
    ("ptb unbalanced", "a.ptb", "(1 a)\n(3 (2 a)\n", 2, "tree", r"unbalanced brackets", TreeFormatError, {}),
    ("ptb label not a number", "a.ptb", "(1 a)\n(1 (pos a))\n", 2, "tree", r"label 'pos' is not a non-negative",
     TreeFormatError, {}),
    ("ptb two trees on a line", "a.ptb", "(1 a) (2 b)\n", 1, "tree", r"text after the end", TreeFormatError, {}),
    ("jsonl not json", "a.jsonl", GOOD_JSONL + '{"nodes": [\n', 2, "JSON", r"not valid JSON", TreeFormatError, {}),
    ("jsonl not an object", "a.jsonl", GOOD_JSONL + "[1, 2]\n", 2, "record", r"got a list", TreeFormatError, {}),
    ("jsonl missing nodes", "a.jsonl", GOOD_JSONL + '{"parents": [-1]}\n', 2, "nodes", r"missing field 'nodes'",
     TreeFormatError, {}),
    ("jsonl empty nodes", "a.jsonl", GOOD_JSONL + '{"nodes": [], "parents": []}\n', 2, "nodes", r"non-empty",
     TreeFormatError, {}),
    ("jsonl missing structure", "a.jsonl", GOOD_JSONL + '{"nodes": [{}]}\n', 2, "parents",
     r"missing field 'parents' .* or 'edges'", TreeFormatError, {}),
    ("jsonl misspelt field", "a.jsonl", GOOD_JSONL + '{"nodes": [{}], "parent": [-1]}\n', 2, "parent",
     r"unknown field 'parent'", TreeFormatError, {}),
    ("jsonl misspelt node field", "a.jsonl", GOOD_JSONL + '{"nodes": [{"tok": "a"}], "parents": [-1]}\n', 2,
     "nodes[0].tok", r"unknown field 'tok'", TreeFormatError, {}),
    ("jsonl repeated field", "a.jsonl", GOOD_JSONL + '{"nodes": [{}], "parents": [-1], "parents": [0]}\n', 2,
     "parents", r"appears twice", TreeFormatError, {}),
    ("jsonl parents not a list", "a.jsonl", GOOD_JSONL + '{"nodes": [{}, {}], "parents": "-1 0"}\n', 2,
     "parents", r"must be a list", TreeFormatError, {}),
    ("jsonl parent not an integer", "a.jsonl", GOOD_JSONL + '{"nodes": [{}, {}], "parents": [-1, 0.5]}\n', 2,
     "parents[1]", r"must be an integer node index, got a number 0.5", TreeFormatError, {}),
    ("jsonl parent is a boolean", "a.jsonl", GOOD_JSONL + '{"nodes": [{}, {}], "parents": [-1, false]}\n', 2,
     "parents[1]", r"got a boolean", TreeFormatError, {}),
    ("jsonl parent out of range", "a.jsonl", GOOD_JSONL + '{"nodes": [{}, {}], "parents": [-1, 2]}\n', 2,
     "parents[1]", r"parent 2 of node 1 is outside -1..1", TreeFormatError, {}),
    ("jsonl parent below -1", "a.jsonl", GOOD_JSONL + '{"nodes": [{}, {}], "parents": [-1, -2]}\n', 2,
     "parents[1]", r"outside -1..1", TreeFormatError, {}),
    ("jsonl parents count", "a.jsonl", GOOD_JSONL + '{"nodes": [{}, {}], "parents": [-1]}\n', 2, "parents",
     r"1 parents for 2 nodes", TreeFormatError, {}),
    ("jsonl two roots", "a.jsonl", GOOD_JSONL + '{"nodes": [{}, {}], "parents": [-1, -1]}\n', 2, "parents",
     r"nodes 0 and 1 both have parent -1", TreeFormatError, {}),
    ("jsonl no root", "a.jsonl", GOOD_JSONL + '{"nodes": [{}, {}], "parents": [1, 0]}\n', 2, "parents",
     r"no node has parent -1", TreeFormatError, {}),
    ("jsonl tree cycle", "a.jsonl", GOOD_JSONL + '{"nodes": [{}, {}, {}], "parents": [-1, 2, 1]}\n', 2,
     "parents", r"cycle through nodes (1 -> 2|2 -> 1)", CycleError, {}),
    ("jsonl own parent", "a.jsonl", GOOD_JSONL + '{"nodes": [{}, {}], "parents": [-1, 1]}\n', 2, "parents",
     r"cycle through nodes 1", CycleError, {}),
    ("jsonl dag cycle", "a.jsonl", GOOD_JSONL + '{"nodes": [{}, {}, {}], "edges": [[0, 1], [1, 2], [2, 0]]}\n',
     2, "edges", r"cycle", CycleError, {}),
    ("jsonl dag self-loop", "a.jsonl", GOOD_JSONL + '{"nodes": [{}, {}], "edges": [[1, 1]]}\n', 2, "edges",
     r"own parent", CycleError, {}),
    ("jsonl edge not a pair", "a.jsonl", GOOD_JSONL + '{"nodes": [{}, {}], "edges": [[0, 1, 1]]}\n', 2,
     "edges[0]", r"pair \[child, parent\]", TreeFormatError, {}),
    ("jsonl edge out of range", "a.jsonl", GOOD_JSONL + '{"nodes": [{}, {}], "edges": [[0, 1], [5, 0]]}\n', 2,
     "edges[1]", r"outside 0..1", TreeFormatError, {}),
    ("jsonl edge twice", "a.jsonl", GOOD_JSONL + '{"nodes": [{}, {}], "edges": [[0, 1], [0, 1]]}\n', 2,
     "edges[1]", r"listed twice", TreeFormatError, {}),
    ("jsonl position not an integer", "a.jsonl",
     GOOD_JSONL + '{"nodes": [{}, {}, {}], "edges": [[1, 0], [2, 0]], "positions": [0, 1.5]}\n', 2, "positions",
     r"not a non-negative integer", TreeFormatError, {}),
    ("jsonl positions repeat", "a.jsonl",
     GOOD_JSONL + '{"nodes": [{}, {}, {}], "edges": [[1, 0], [2, 0]], "positions": [0, 0]}\n', 2, "positions",
     r"two children of node 0 share", TreeFormatError, {}),
    ("jsonl positions count", "a.jsonl",
     GOOD_JSONL + '{"nodes": [{}, {}, {}], "edges": [[1, 0], [2, 0]], "positions": [0]}\n', 2, "positions",
     r"one entry per edge \(2\)", TreeFormatError, {}),
    ("jsonl positions on a tree", "a.jsonl", GOOD_JSONL + '{"nodes": [{}], "parents": [-1], "positions": []}\n',
     2, "positions", r"goes with 'edges'", TreeFormatError, {}),
    ("jsonl token not a string", "a.jsonl", GOOD_JSONL + '{"nodes": [{"token": 3}], "parents": [-1]}\n', 2,
     "nodes[0].token", r"token must be a string, got an integer 3", TreeFormatError, {}),
    ("jsonl ragged x", "a.jsonl", '{"nodes": [{"x": [1, 2]}], "parents": [-1]}\n'
     '{"nodes": [{"x": [1, 2]}, {"x": [3]}], "parents": [-1, 0]}\n', 2, "nodes[1].x",
     r"node 1 has 1 features but node 0 has 2", TreeFormatError, {}),
    ("jsonl x missing on a node", "a.jsonl", GOOD_JSONL + '{"nodes": [{"x": [1]}, {}], "parents": [-1, 0]}\n',
     2, "nodes[1].x", r"node 1 has no 'x' but node 0 has", TreeFormatError, {}),
    ("jsonl x not numbers", "a.jsonl", GOOD_JSONL + '{"nodes": [{"x": [1, "2"]}], "parents": [-1]}\n', 2,
     "nodes[0].x", r"list of finite numbers", TreeFormatError, {}),
    ("jsonl x width differs between graphs", "a.jsonl", '{"nodes": [{"x": [1, 2]}], "parents": [-1]}\n'
     '{"nodes": [{"x": [1, 2, 3]}], "parents": [-1]}\n', 2, "x", r"3 values here but 2 in the graph at line 1",
     TreeFormatError, {}),
    ("jsonl x in one graph only", "a.jsonl", '{"nodes": [{"x": [1, 2]}], "parents": [-1]}\n' + GOOD_JSONL, 2,
     "x", r"have no 'x' but those of the graph at line 1 do", TreeFormatError, {}),
    ("jsonl node label not an integer", "a.jsonl", GOOD_JSONL + '{"nodes": [{"y": 1.5}], "parents": [-1]}\n', 2,
     "nodes[0].y", r"node label 1.5 is not a class", TreeFormatError, {}),
    ("jsonl node label a string", "a.jsonl", GOOD_JSONL + '{"nodes": [{"y": "1"}], "parents": [-1]}\n', 2,
     "nodes[0].y", r"node label '1' is not a class", TreeFormatError, {}),
    ("jsonl node label negative", "a.jsonl", GOOD_JSONL + '{"nodes": [{"y": -2}], "parents": [-1]}\n', 2,
     "nodes[0].y", r"node label -2", TreeFormatError, {}),
    ("jsonl graph label a string", "a.jsonl", GOOD_JSONL + '{"nodes": [{}], "parents": [-1], "y": "pos"}\n', 2,
     "y", r"must be a number .* got a string 'pos'", TreeFormatError, {}),
    ("jsonl graph label a boolean", "a.jsonl", GOOD_JSONL + '{"nodes": [{}], "parents": [-1], "y": true}\n', 2,
     "y", r"got a boolean", TreeFormatError, {}),
    ("jsonl fraction as a class", "a.jsonl", GOOD_JSONL + '{"nodes": [{}], "parents": [-1], "y": 1.5}\n', 2,
     "y", r"label 1.5 is not a class", TreeFormatError, {"target": "class"}),
    ("jsonl negative class", "a.jsonl", GOOD_JSONL + '{"nodes": [{}], "parents": [-1], "y": -3}\n', 2,
     "y", r"label -3 is not a class", TreeFormatError, {}),
    ("jsonl class beyond int64", "a.jsonl",
     GOOD_JSONL + '{"nodes": [{}], "parents": [-1], "y": 99999999999999999999}\n',
     2, "y", r"within int64", TreeFormatError, {}),
    ("jsonl x beyond float", "a.jsonl", GOOD_JSONL + '{"nodes": [{"x": [1e999]}], "parents": [-1]}\n', 2,
     "nodes[0].x", r"finite numbers", TreeFormatError, {}),
    ("not utf-8", "a.ptb", b"(1 a)\n(1 \xff)\n", 2, "encoding", r"byte 0xff is not UTF-8", TreeFormatError, {}),
]


@pytest.mark.parametrize(("name", "file", "text", "line", "field", "pattern", "cls", "kwargs"), MALFORMED,
                         ids=[case[0] for case in MALFORMED])
def test_malformed_record_is_a_located_error(tmp_path, name, file, text, line, field, pattern, cls, kwargs):
    path = write(tmp_path, file, text)
    with pytest.raises(cls) as info:
        read_graph_file(path, **kwargs)
    err = info.value
    assert isinstance(err, TreeFormatError)
    assert (err.path, err.line, err.field) == (str(path), line, field)
    message = str(err)
    assert message.startswith(f"{path}: {field}: ") and f"line {line}" in message
    assert re.search(pattern, message), message


def test_bad_label_in_labels_file_names_that_file(tmp_path):
    ptb = write(tmp_path, "t.ptb", "(1 a)\n(1 b)\n")
    labels = write(tmp_path, "t.labels", "1\n\npositive\n")
    with pytest.raises(TreeFormatError, match="label 'positive' is not a number") as info:
        read_graph_file(ptb, labels=labels)
    assert (info.value.path, info.value.line, info.value.field) == (str(labels), 3, "label")


def test_error_in_dataset_caches_nothing(tmp_path):
    path = write(tmp_path, "bad.jsonl", GOOD_JSONL + '{"nodes": [{}], "parents": [0]}\n')
    with pytest.raises(TreeFormatError, match="line 2"):
        GraphFiles(tmp_path / "root", "all", files=path, log=False)
    assert not list((tmp_path / "root").rglob("*.pt"))


# --------------------------------------------------------------------------- the dataset: cache, splits, loaders


def test_default_root_is_the_cache_folder_not_the_working_directory(tmp_path, monkeypatch):
    data = write(tmp_path, "mine.jsonl", '{"nodes": [{"token": "a"}], "parents": [-1]}\n')
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    with settings.overridden(cache=tmp_path / "cache"):
        assert default_files_root() == tmp_path / "cache" / "datasets"
        dataset = GraphFiles(split="all", files=data, log=False)
        assert dataset[0].tokens == ["a"]
    assert list(work.iterdir()) == []  # nothing written where it was called from
    assert list((tmp_path / "cache" / "datasets" / "mine" / "processed").glob("all-jsonl-*.pt"))
    # A root given, as PyG datasets take it, is where the processed graphs go.
    GraphFiles(tmp_path / "mine-root", "all", files=data, log=False)
    assert list((tmp_path / "mine-root" / "mine" / "processed").glob("all-jsonl-*.pt"))


def test_cache_follows_the_bytes_of_the_file(tmp_path, monkeypatch):
    path = write(tmp_path, "mine.jsonl", '{"nodes": [{"token": "a"}], "parents": [-1], "y": 1}\n')
    root = tmp_path / "root"
    first = GraphFiles(root, "all", files=path, log=False)
    assert first[0].graph_y.tolist() == [1]
    processed = root / "mine" / "processed"
    cached = sorted(p.name for p in processed.glob("all-*.pt"))
    assert len(cached) == 1 and cached[0].startswith("all-jsonl-")

    def no_processing(self):
        raise AssertionError("processed again although the file did not change")

    with monkeypatch.context() as patch:
        patch.setattr(GraphFiles, "process", no_processing)
        assert GraphFiles(root, "all", files=path, log=False)[0].graph_y.tolist() == [1]

    path.write_text('{"nodes": [{"token": "a"}], "parents": [-1], "y": 0}\n')  # same size, new content
    edited = GraphFiles(root, "all", files=path, log=False)
    assert edited[0].graph_y.tolist() == [0]
    assert len(list(processed.glob("all-*.pt"))) == 2
    # Other options name other caches too: the vocabulary, the target, the split settings.
    vocab = Vocab(["a"])
    assert GraphFiles(root, "all", files=path, vocab=vocab, log=False)[0].word.tolist() == [1]
    assert GraphFiles(root, "all", files=path, target="regression", log=False)[0].graph_y.dtype == torch.float
    assert len(list(processed.glob("all-*.pt"))) == 4


def test_seeded_split_of_one_file(tmp_path):
    lines = [f'{{"nodes": [{{"token": "w{i}"}}], "parents": [-1], "y": {i}}}' for i in range(20)]
    path = write(tmp_path, "twenty.jsonl", "\n".join(lines) + "\n")
    root = tmp_path / "root"
    got = {split: [int(d.graph_y) for d in GraphFiles(root, split, files=path, log=False)]
           for split in ("train", "dev", "test", "all")}
    assert [len(got[s]) for s in ("train", "dev", "test")] == [16, 2, 2]
    assert sorted(got["train"] + got["dev"] + got["test"]) == got["all"] == list(range(20))
    assert all(got[s] == sorted(got[s]) for s in got)  # each split keeps file order
    assert got["test"] == split_indices(20, (0.8, 0.1, 0.1), 0)["test"]
    again = [int(d.graph_y) for d in GraphFiles(tmp_path / "other", "test", files=path, log=False)]
    assert again == got["test"]
    other_seed = [int(d.graph_y) for d in GraphFiles(root, "test", files=path, seed=1, log=False)]
    assert other_seed != got["test"]
    halves = split_indices(20, (0.5, 0.25, 0.25), 3)
    assert [len(halves[s]) for s in ("train", "dev", "test")] == [10, 5, 5]
    with pytest.raises(DatasetError, match="summing to 1"):
        GraphFiles(root, "train", files=path, split_ratios=(0.8, 0.3, 0.1))


def test_one_file_per_split(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    raw = tmp_path / "root" / "ud" / "raw"
    raw.mkdir(parents=True)
    sentence = "1\t{0}\t{0}\tX\t_\t_\t0\troot\t_\t_\n\n"
    write(raw, "train.conllu", sentence.format("a") + sentence.format("b"))
    write(tmp_path, "dev.conllu", sentence.format("c"))
    write(raw, "train.labels", "1\n0\n")
    files = {"train": "train.conllu", "dev": "dev.conllu"}  # train is found in <root>/ud/raw, dev as given
    train = GraphFiles("root", "train", files=files, labels={"train": "train.labels"}, name="ud", log=False)
    assert [d.tokens for d in train] == [["a"], ["b"]] and train.graph_y.tolist() == [1, 0]
    dev = GraphFiles("root", "dev", files=files, labels={"train": "train.labels"}, name="ud", log=False)
    assert [d.tokens for d in dev] == [["c"]] and not hasattr(dev[0], "graph_y")
    assert (tmp_path / "root" / "ud" / "processed").is_dir()
    with pytest.raises(DatasetError, match="no file for split 'test'"):
        GraphFiles("root", "test", files=files, name="ud")
    with pytest.raises(DatasetError, match="no split 'all'"):
        GraphFiles("root", "all", files=files, name="ud")


def test_argument_errors(tmp_path):
    path = write(tmp_path, "g.jsonl", GOOD_JSONL)
    with pytest.raises(DatasetError, match="no split 'valid'"):
        GraphFiles(tmp_path, "valid", files=path)
    with pytest.raises(DatasetError, match="no such file"):
        GraphFiles(tmp_path, "all", files=tmp_path / "missing.jsonl")
    with pytest.raises(DatasetError, match="cannot tell the format"):
        GraphFiles(tmp_path, "all", files=write(tmp_path, "g.txt", "(1 a)\n"))
    assert len(GraphFiles(tmp_path, "all", files=tmp_path / "g.txt", format="ptb", log=False)) == 1
    with pytest.raises(DatasetError, match="format must be one of"):
        GraphFiles(tmp_path, "all", files=path, format="csv")
    with pytest.raises(DatasetError, match="target must be one of"):
        GraphFiles(tmp_path, "all", files=path, target="ordinal")
    with pytest.raises(DatasetError, match="no examples left"):
        GraphFiles(tmp_path, "test", files=path, log=False)  # 10% of one graph is none


def test_dataloader_with_workers_runs_child_sum(tmp_path):
    vocab = Vocab.build(GraphFiles(tmp_path, "all", files=EXAMPLES["jsonl"], log=False))
    dataset = GraphFiles(tmp_path, "all", files=EXAMPLES["jsonl"], vocab=vocab, log=False)
    embedding = NodeEmbedding(len(vocab), 5)
    cell = ChildSumTreeLSTM(5, 6)
    seen = 0
    for batch in DataLoader(dataset, batch_size=4, num_workers=2):
        h, _ = cell(embedding(batch.word), batch)
        assert h.shape == (batch.num_nodes, 6)
        assert batch.graph_y.shape == (batch.num_graphs,) and len(batch.tokens) == batch.num_graphs
        seen += batch.num_graphs
    assert seen == 10
    features = GraphFiles(tmp_path, "all", files=EXAMPLES["features"], log=False)
    (batch,) = list(DataLoader(features, batch_size=4, num_workers=2))
    run_cell(batch)
    assert batch.x.shape == (5, 2) and batch.graph_y.tolist() == [0.75, 3.0]
