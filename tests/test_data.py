"""Converters: PTB strings, parent arrays, networkx DAGs; levels before and after batching."""

import zipfile

import networkx as nx
import pytest
import torch
from corpora import corpus_file, needs_corpora
from torch_geometric.data import Batch
from torch_geometric.loader import DataLoader

from graphtree.data import NO_LABEL, NO_WORD, from_heads, from_networkx, from_ptb, read_ptb, to_ptb
from graphtree.errors import CycleError, TreeFormatError

ROUND_TRIP = [
    "(2 word)",  # a single leaf
    "(1 (2 only))",  # arity 1
    "(3 (2 The) (2 Rock))",  # arity 2
    "(4 (1 a) (2 b) (3 c))",  # arity 3
    "(0 (1 a) (2 b) (3 c) (4 d))",  # arity 4
    "(2 (1 a) (2 (3 b) (4 c)) (2 d) (3 e) (1 f))",  # arity 5 with a nested node
    "(3 (2 8 1\\/2) (2 (2 -LRB-) (3 -RRB-)))",  # a space inside a token, escaped brackets
    "(2 (2 it 's) (2 (2 --) (2 \\*)))",
    "(10 (11 a) (12 b))",  # multi-digit labels
]


@pytest.mark.parametrize("line", ROUND_TRIP)
def test_ptb_round_trip(line):
    assert to_ptb(from_ptb(line)) == line


def test_ptb_structure_by_hand():
    # (3 (2 (2 The) (2 Rock)) (4 (2 is) (4 great)))
    #  node 0 = root, 1 = (The Rock), 2 = The, 3 = Rock, 4 = (is great), 5 = is, 6 = great
    data = from_ptb("(3 (2 (2 The) (2 Rock)) (4 (2 is) (4 great)))")
    assert data.num_nodes == 7
    edges = set(map(tuple, data.edge_index.t().tolist()))
    assert edges == {(1, 0), (4, 0), (2, 1), (3, 1), (5, 4), (6, 4)}
    assert data.y.tolist() == [3, 2, 2, 2, 4, 2, 4]
    assert data.tokens == ["The", "Rock", "is", "great"]
    assert data.word_pos.tolist() == [NO_WORD, NO_WORD, 0, 1, NO_WORD, 2, 3]
    assert data.child_pos.tolist() == [-1, 0, 0, 1, 1, 0, 1]
    assert data.height.tolist() == [2, 1, 0, 0, 1, 0, 0]
    assert data.depth.tolist() == [0, 1, 2, 2, 1, 2, 2]
    assert data.is_root.tolist() == [True] + [False] * 6
    assert data.is_leaf.tolist() == [False, False, True, True, False, True, True]


def test_ptb_vocab_fills_word_ids():
    vocab = {"The": 5, "Rock": 7}
    data = from_ptb("(3 (2 The) (2 Rock))", vocab=vocab)
    assert data.word.tolist() == [NO_WORD, 5, 7]
    data = from_ptb("(3 (2 The) (2 Rock))", vocab=len)
    assert data.word.tolist() == [NO_WORD, 3, 4]


def test_ptb_unbalanced_heights_by_hand():
    # Left-branching: (((a b) c) d)
    data = from_ptb("(1 (1 (1 (1 a) (1 b)) (1 c)) (1 d))")
    # pre-order: 0 root, 1 ((a b) c), 2 (a b), 3 a, 4 b, 5 c, 6 d
    assert data.height.tolist() == [3, 2, 1, 0, 0, 0, 0]
    assert data.depth.tolist() == [0, 1, 2, 3, 3, 2, 1]


@pytest.mark.parametrize("line, position, fragment", [
    ("", 0, "empty"),
    ("   ", 0, "empty"),
    ("(3 (2 a) (2 b)", 14, "never closed"),
    ("(3 (2 a)) (2 b))", 10, "after the end"),
    ("(3 (2 a) (2 b)))", 15, "closes nothing"),
    ("(x (2 a) (2 b))", 1, "not a non-negative integer"),
    ("(3 (2.5 a) (2 b))", 4, "not a non-negative integer"),
    ("(3 (-1 a) (2 b))", 4, "not a non-negative integer"),
    ("(3 (2 a) (2 ))", 12, "neither a word nor children"),
    ("(3 (2 a(b) (2 b))", 7, "unescaped '('"),
    ("(3 (2 a) junk (2 b))", 9, "unexpected"),
    ("word", 0, "expected '('"),
    ("( (2 a))", 1, "missing label"),
])
def test_ptb_errors_name_the_offset(line, position, fragment):
    with pytest.raises(TreeFormatError) as info:
        from_ptb(line)
    assert info.value.position == position
    assert fragment in str(info.value)
    assert isinstance(info.value, ValueError)


def test_read_ptb_reports_line_numbers(tmp_path):
    path = tmp_path / "trees.txt"
    path.write_text("(3 (2 a) (2 b))\n(2 c)\n\n(3 (2 a) (2 b)\n")
    with pytest.raises(TreeFormatError) as info:
        list(read_ptb(path))
    assert info.value.line == 4 and "line 4" in str(info.value)
    assert [to_ptb(d) for d in read_ptb(["(2 c)\n", "(1 (2 d))"])] == ["(2 c)", "(1 (2 d))"]


def test_to_ptb_refuses_unlabelled_nodes():
    data = from_heads([0, 1], tokens=["a", "b"])
    with pytest.raises(ValueError, match="no label"):
        to_ptb(data)


def test_parents_by_hand():
    # "the cat sat down": the <- cat <- sat (root), down <- sat; token 5 "." outside the tree.
    data = from_heads([2, 3, 0, 3, -1], tokens="the cat sat down .".split(), labels=[1, 2, 3, None, 4])
    assert data.num_nodes == 4
    assert set(map(tuple, data.edge_index.t().tolist())) == {(0, 1), (1, 2), (3, 2)}
    assert data.tokens == ["the", "cat", "sat", "down", "."]
    assert data.word_pos.tolist() == [0, 1, 2, 3]
    assert data.y.tolist() == [1, 2, 3, NO_LABEL]
    assert data.height.tolist() == [0, 1, 2, 0]
    assert data.depth.tolist() == [2, 1, 0, 1]
    assert data.child_pos.tolist() == [0, 0, -1, 1]
    assert from_heads("2 3 0 3").num_nodes == 4


@pytest.mark.parametrize("parents, error, position, fragment", [
    ([], TreeFormatError, None, "empty"),
    ([2, 0, 7], TreeFormatError, 3, "outside -1..3"),
    ([0, 1, 0], TreeFormatError, 3, "two roots"),
    ([2, 1], TreeFormatError, None, "no root"),
    ([2, 3, 1, 0], CycleError, None, "cycle through tokens"),
    ([1, 0], CycleError, None, "its own head"),
    ([0, "x"], TreeFormatError, 2, "not an integer"),
    ([0, 3, -1], TreeFormatError, 2, "outside the tree"),
])
def test_parents_errors(parents, error, position, fragment):
    with pytest.raises(error) as info:
        from_heads(parents)
    assert fragment in str(info.value)
    if position is not None:
        assert info.value.position == position


def test_parents_cycle_names_tokens():
    with pytest.raises(CycleError) as info:
        from_heads([2, 3, 1, 0])
    assert sorted(info.value.nodes) == [1, 2, 3]


def test_parents_length_mismatch():
    with pytest.raises(TreeFormatError, match="2 tokens but 3"):
        from_heads([2, 0, 2], tokens=["a", "b"])


def diamond():
    #      r
    #     / \
    #    a   b        edges point child -> parent
    #     \ / \
    #      s   t      s feeds both a and b; t feeds b
    g = nx.DiGraph()
    g.add_node("r", x=[1.0, 0.0], y=0)
    for name in "abst":
        g.add_node(name, x=[0.0, 1.0], y=1)
    g.add_edges_from([("a", "r"), ("b", "r"), ("s", "a"), ("s", "b"), ("t", "b")])
    return g


def test_networkx_dag_levels_by_hand():
    data = from_networkx(diamond(), names=True)
    names = data.node_names
    assert names == list(diamond().nodes)
    assert "node_names" not in from_networkx(diamond())  # only when asked: it would keep the graph from batching
    height = dict(zip(names, data.height.tolist()))
    depth = dict(zip(names, data.depth.tolist()))
    assert height == {"r": 2, "a": 1, "b": 1, "s": 0, "t": 0}
    assert depth == {"r": 0, "a": 1, "b": 1, "s": 2, "t": 2}
    assert data.x.shape == (5, 2) and data.y.tolist() == [0, 1, 1, 1, 1]
    pos = {(names[c], names[p]): k for (c, p), k in zip(data.edge_index.t().tolist(), data.edge_pos.tolist())}
    assert pos == {("a", "r"): 0, ("b", "r"): 1, ("s", "a"): 0, ("s", "b"): 0, ("t", "b"): 1}


def test_networkx_explicit_positions_and_errors():
    g = nx.DiGraph()
    g.add_edge("x", "p", position=1)
    g.add_edge("y", "p", position=0)
    data = from_networkx(g)
    assert data.edge_pos.tolist() == [1, 0]

    g.add_edge("p", "x")
    with pytest.raises(CycleError) as info:
        from_networkx(g)
    assert set(info.value.nodes) == {"x", "p"}

    with pytest.raises(TypeError, match="DiGraph"):
        from_networkx(nx.Graph([(0, 1)]))
    h = nx.DiGraph([(0, 1)])
    h.nodes[0]["x"] = 1.0
    with pytest.raises(TreeFormatError, match="lacks the attribute 'x'"):
        from_networkx(h)
    with pytest.raises(CycleError, match="own parent"):
        from_networkx(nx.DiGraph([(3, 3)]))


def test_batching_keeps_levels_and_positions():
    trees = [from_ptb("(3 (2 (2 The) (2 Rock)) (4 (2 is) (4 great)))"), from_ptb("(1 (2 only))"),
             from_heads([2, 0, 2], tokens=["a", "b", "c"], labels=[1, 2, 3])]
    batch = Batch.from_data_list(trees)
    assert batch.height.tolist() == [2, 1, 0, 0, 1, 0, 0] + [1, 0] + [0, 1, 0]
    assert batch.depth.tolist() == [0, 1, 2, 2, 1, 2, 2] + [0, 1] + [1, 0, 1]
    assert batch.child_pos.tolist() == [-1, 0, 0, 1, 1, 0, 1] + [-1, 0] + [0, -1, 1]
    assert batch.word_pos.tolist() == [-1, -1, 0, 1, -1, 2, 3] + [-1, 0] + [0, 1, 2]
    assert batch.tokens == [["The", "Rock", "is", "great"], ["only"], ["a", "b", "c"]]
    assert batch.batch.tolist() == [0] * 7 + [1] * 2 + [2] * 3
    # edge_index is offset by the node counts 7 and 2; nothing else is.
    expected = [(1, 0), (4, 0), (2, 1), (3, 1), (5, 4), (6, 4), (8, 7), (9, 10), (11, 10)]
    assert sorted(map(tuple, batch.edge_index.t().tolist())) == sorted(expected)
    assert batch.edge_pos.tolist() == torch.cat([t.edge_pos for t in trees]).tolist()

    loader = DataLoader(trees[:2] * 3, batch_size=4, shuffle=False)
    first = next(iter(loader))
    assert first.height.tolist() == ([2, 1, 0, 0, 1, 0, 0] + [1, 0]) * 2
    assert int(first.is_root.sum()) == 4 and int(first.is_leaf.sum()) == 10


def test_batching_dags():
    batch = Batch.from_data_list([from_networkx(diamond()), from_networkx(diamond())])
    assert batch.height.tolist() == [2, 1, 1, 0, 0] * 2
    assert batch.depth.tolist() == [0, 1, 1, 2, 2] * 2
    assert batch.x.shape == (10, 2)
    assert batch.edge_index[:, 5:].tolist() == (batch.edge_index[:, :5] + 5).tolist()


@needs_corpora
def test_every_sst_line_converts_and_round_trips():
    counts = {}
    SST_ZIP = corpus_file("sst", "trainDevTestTrees_PTB.zip")
    with zipfile.ZipFile(SST_ZIP) as archive:
        for split in ("train", "dev", "test"):
            lines = archive.read(f"trees/{split}.txt").decode("utf-8").splitlines()
            trees = list(read_ptb(lines))
            counts[split] = len(trees)
            for line, tree in zip(lines, trees):
                src, dst = tree.edge_index
                assert (tree.height[src] < tree.height[dst]).all()
                assert to_ptb(tree) == line
    assert counts == {"train": 8544, "dev": 1101, "test": 2210}
