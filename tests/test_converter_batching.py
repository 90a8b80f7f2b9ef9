"""Every converter's graphs batch with every other's, and a parent array means one thing everywhere.

The batch is checked against the graphs alone: each attribute is the graphs' own values concatenated
(``edge_index`` shifted by the node counts before it), and ``get_example`` gives each graph back.
"""

from __future__ import annotations

import importlib.util
import itertools
import json

import networkx as nx
import pytest
import torch
from torch_geometric.data import Batch

from graphtree.data import NO_LABEL, NO_WORD, binarize, from_heads, from_networkx, from_parents, from_ptb, from_spacy
from graphtree.data.batching import collate_graphs
from graphtree.datasets import GraphFiles
from graphtree.datasets.files import read_graph_file
from graphtree.errors import CycleError, TreeFormatError

CORE = ("edge_index", "edge_pos", "y", "word_pos", "child_pos", "height", "depth", "is_root", "is_leaf", "tokens")
FILE_ONLY = ["line"]  # what a file's graphs carry besides the converters' attributes: the record's line


def _dag() -> nx.DiGraph:
    graph = nx.DiGraph()
    graph.add_edges_from([("a", "r"), ("b", "r"), ("s", "a"), ("s", "b")])  # s feeds a and b: a DAG
    return graph


def _spacy_doc():
    import spacy
    from spacy.tokens import Doc

    return Doc(spacy.blank("en").vocab, words=["John", "saw", "it"], heads=[1, 1, 1], deps=["nsubj", "ROOT", "dobj"])


def _jsonl(tmp_path):
    path = tmp_path / "graphs.jsonl"
    path.write_text(json.dumps({"nodes": [{"token": "hi"}, {"token": "there", "y": 2}], "parents": [-1, 0]}) + "\n")
    return read_graph_file(path)[0]


def _graph_files(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text(json.dumps({"nodes": [{}, {}, {"token": "w"}], "edges": [[1, 0], [2, 0], [2, 1]]}) + "\n")
    return GraphFiles(tmp_path / "root", "all", files=path, log=False)[0]


needs_spacy = pytest.mark.skipif(importlib.util.find_spec("spacy") is None, reason="spaCy is not installed")
MAKERS = {
    "ptb": lambda tmp: from_ptb("(3 (2 The) (4 (2 very) (3 good)))"),
    "parents": lambda tmp: from_parents([-1, 0, 0, 1], "a b c d"),
    "heads": lambda tmp: from_heads("2 0 2 -1", "x y z ."),
    "networkx": lambda tmp: from_networkx(_dag()),
    "binarize": lambda tmp: binarize(from_heads("2 0 2", "one two three")),
    "spacy": pytest.param(lambda tmp: from_spacy(_spacy_doc()), marks=needs_spacy),
    "jsonl": lambda tmp: _jsonl(tmp),
    "graph_files": lambda tmp: _graph_files(tmp),
}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """Each converter's graph, made once (a GraphFiles dataset takes a second to process)."""
    cache = {}

    def make(name):
        if name not in cache:
            value = MAKERS[name]
            maker = value.values[0] if hasattr(value, "values") else value
            cache[name] = maker(tmp_path_factory.mktemp(name))
        return cache[name]
    return make


PAIRS = [pytest.param(a, b, id=f"{a}+{b}",
                      marks=[m for n in (a, b) if hasattr(MAKERS[n], "marks") for m in MAKERS[n].marks])
         for a, b in itertools.product(MAKERS, repeat=2)]


@pytest.mark.parametrize(("first", "second"), PAIRS)
@pytest.mark.parametrize("collate", ["pyg", "graphtree"])
def test_every_pair_of_converters_batches(first, second, collate, made):
    graphs = [made(first), made(second)]
    # A file's graphs also carry their line, which the converters' graphs cannot have: leave it out.
    exclude = FILE_ONLY if {first, second} & {"jsonl", "graph_files"} else None
    batch = (Batch.from_data_list(graphs, exclude_keys=exclude) if collate == "pyg"
             else collate_graphs(graphs, exclude_keys=exclude))
    sizes = [g.num_nodes for g in graphs]
    assert batch.num_graphs == 2 and batch.num_nodes == sum(sizes)
    assert batch.batch.tolist() == [0] * sizes[0] + [1] * sizes[1]
    for key in CORE:
        if key == "tokens":
            assert batch.tokens == [g.tokens for g in graphs]
        elif key == "edge_index":
            assert torch.equal(batch.edge_index, torch.cat([graphs[0].edge_index, graphs[1].edge_index + sizes[0]], 1))
        else:
            assert torch.equal(batch[key], torch.cat([g[key] for g in graphs])), key
    for k, graph in enumerate(graphs):
        back = batch.get_example(k)
        for key in CORE:
            assert (back[key] == graph[key]) if key == "tokens" else torch.equal(back[key], graph[key]), key


@pytest.mark.parametrize("name", [n if n != "spacy" else pytest.param(n, marks=needs_spacy) for n in MAKERS])
def test_every_converter_gives_the_same_attributes(name, made):
    graph = made(name)
    extra = set(FILE_ONLY) if name in ("jsonl", "graph_files") else set()
    assert set(graph.keys()) - extra == {*CORE, "num_nodes"}


def test_networkx_defaults_are_unlabelled_and_wordless():
    graph = from_networkx(_dag())
    assert graph.y.tolist() == [NO_LABEL] * 4 and graph.word_pos.tolist() == [NO_WORD] * 4 and graph.tokens == []


def test_missing_attribute_is_named():
    with_x = from_ptb("(1 (2 a) (3 b))")
    with_x.x = torch.zeros(3, 2)
    with pytest.raises(ValueError, match=r"graph 1 of the batch has no 'x', which graph 0 has"):
        collate_graphs([with_x, from_ptb("(2 c)")])


# --------------------------------------------------------------------------- parent arrays and head arrays


def test_from_parents_is_zero_based_with_minus_one_at_the_root():
    # The example of docs/data-formats.md: node 0 is the root, 1 and 2 its children, 3 a child of 1.
    data = from_parents([-1, 0, 0, 1], "a b c d")
    assert sorted(map(tuple, data.edge_index.t().tolist())) == [(1, 0), (2, 0), (3, 1)]
    assert data.height.tolist() == [2, 1, 0, 0]
    assert data.depth.tolist() == [0, 1, 1, 2]
    assert data.child_pos.tolist() == [-1, 0, 1, 0]
    assert data.word_pos.tolist() == [0, 1, 2, 3] and data.tokens == ["a", "b", "c", "d"]
    # The same tree in CoNLL's numbering (1-based heads, 0 at the root) is from_heads'.
    heads = from_heads([0, 1, 1, 2], "a b c d")
    for key in CORE:
        assert (heads[key] == data[key]) if key == "tokens" else torch.equal(heads[key], data[key]), key


def test_from_parents_matches_the_json_lines_field(tmp_path):
    path = tmp_path / "t.jsonl"
    parents = [2, 2, -1, 4, 2]
    path.write_text(json.dumps({"nodes": [{"token": t} for t in "abcde"], "parents": parents}) + "\n")
    from_file = read_graph_file(path)[0]
    direct = from_parents(parents, "a b c d e")
    for key in CORE:
        assert (from_file[key] == direct[key]) if key == "tokens" else torch.equal(from_file[key], direct[key]), key


@pytest.mark.parametrize(("parents", "error", "position", "fragment"), [
    ([], TreeFormatError, None, "empty parent array"),
    ([-1, 0, 3], TreeFormatError, 2, "node 2 has parent 3, outside -1..2"),
    ([-1, 0, -1], TreeFormatError, 2, "nodes 0 and 2 have parent -1"),
    ([1, 2, 0], TreeFormatError, None, "no root"),
    ([-1, 2, 3, 1], CycleError, None, "parents form a cycle through nodes"),
    ([-1, 1], CycleError, None, "node 1 is its own parent"),
    ([-1, "x"], TreeFormatError, 1, "parent entry 'x' of node 1 is not an integer"),
    ([-1, 0, -2], TreeFormatError, 2, "outside -1..2"),
])
def test_from_parents_errors_name_zero_based_nodes(parents, error, position, fragment):
    with pytest.raises(error) as info:
        from_parents(parents)
    assert fragment in str(info.value)
    if position is not None:
        assert info.value.position == position


def test_from_parents_cycle_nodes_are_zero_based():
    with pytest.raises(CycleError) as info:
        from_parents([-1, 2, 3, 1])
    assert sorted(info.value.nodes) == [1, 2, 3]


def test_from_parents_labels_name_the_node():
    with pytest.raises(TreeFormatError, match=r"label 1\.5 of node 1"):
        from_parents([-1, 0], labels=[0, 1.5])
    assert from_parents([-1, 0, 0], labels=[None, 3, -1]).y.tolist() == [NO_LABEL, 3, NO_LABEL]
