"""ListOps and Boolean circuits: node values against independent recursive evaluators on hand-checked
examples and on generated sets; determinism per seed; DAG shape; label balance; datasets, caches, loaders."""

from __future__ import annotations

import collections

import pytest
import torch
from torch_geometric.loader import DataLoader

from graphtree.data import NO_WORD
from graphtree.datasets import BooleanCircuits, DatasetError, ListOps
from graphtree.datasets.circuits import NODE_TYPES, circuit_data, generate_circuits
from graphtree.datasets.listops import LISTOPS_VOCAB, generate_listops, listops_tree
from graphtree.engine import schedule_of
from graphtree.errors import TreeFormatError
from graphtree.models.classifier import NodeEmbedding
from graphtree.nn import ChildSumTreeLSTM

# --------------------------------------------------------------------------- independent evaluators


def nest(tokens: list[str]) -> list:
    """``[MAX 2 [MIN 4 7 ] ]`` -> ``['MAX', 2, ['MIN', 4, 7]]``, recursively."""

    def parse(i: int) -> tuple[object, int]:
        if tokens[i].startswith("["):
            node: list = [tokens[i][1:]]
            i += 1
            while tokens[i] != "]":
                child, i = parse(i)
                node.append(child)
            return node, i + 1
        return int(tokens[i]), i + 1

    tree, end = parse(0)
    assert end == len(tokens)
    return tree


def value(tree) -> int:
    """Plain recursive ListOps semantics; MED is the lower-rounded median (int(numpy.median) on digits)."""
    if isinstance(tree, int):
        return tree
    op, args = tree[0], [value(a) for a in tree[1:]]
    if op == "MIN":
        return min(args)
    if op == "MAX":
        return max(args)
    if op == "SM":
        return sum(args) % 10
    assert op == "MED"
    s = sorted(args)
    n = len(s)
    return s[n // 2] if n % 2 == 1 else int((s[n // 2 - 1] + s[n // 2]) / 2)


def preorder_values(tree) -> list[int]:
    """Every node's value in pre-order (the node order of listops_tree)."""
    if isinstance(tree, int):
        return [tree]
    out = [value(tree)]
    for child in tree[1:]:
        out += preorder_values(child)
    return out


def paper_values(tree) -> list[int]:
    """Node labels of the paper's parse in pre-order: a list's value, -1 for its partial lists and operator,
    its arguments' labels in order, -1 for its ``]``."""
    if isinstance(tree, int):
        return [tree]
    out = [value(tree)] + [-1] * (len(tree) - 1) + [-1]
    for child in tree[1:]:
        out += paper_values(child)
    return out + [-1]


def paper_bracketing(tree) -> str:
    """The paper's parse (Nangia & Bowman 2018, Figure 1) written out: left-branching within each list."""
    if isinstance(tree, int):
        return str(tree)
    text = "[" + tree[0]
    for child in tree[1:]:
        text = f"({text} {paper_bracketing(child)})"
    return f"({text} ])"


def bracketing_of(data) -> str:
    """The tree of a ``Data`` written out from its edges, children by ``edge_pos``, leaves by ``word_pos``."""
    children = collections.defaultdict(list)
    for (child, parent), pos in zip(data.edge_index.t().tolist(), data.edge_pos.tolist()):
        children[parent].append((pos, child))

    def write(node: int) -> str:
        if not children[node]:
            return data.tokens[int(data.word_pos[node])]
        return "(" + " ".join(write(c) for _, c in sorted(children[node])) + ")"

    return write(int(data.is_root.nonzero()))


def list_depth(tree) -> int:
    return 0 if isinstance(tree, int) else 1 + max(list_depth(c) for c in tree[1:])


def run_cell(data, channels: int) -> None:
    schedule_of(data)
    x = data.x if getattr(data, "x", None) is not None else torch.randn(data.num_nodes, channels)
    h, c = ChildSumTreeLSTM(channels, 4)(x, data)
    assert h.shape == c.shape == (data.num_nodes, 4) and torch.isfinite(h).all()


# --------------------------------------------------------------------------- ListOps


@pytest.mark.parametrize(("text", "expected"), [
    ("[MAX 2 9 [MIN 4 7 ] 0 ]", 9),
    ("[MED 3 5 [SM 2 6 ] ]", 5),  # SM 2 6 = 8; median of 3 5 8
    ("[SM 9 9 9 ]", 7),  # 27 mod 10
    ("[MED 2 7 ]", 4),  # even count: (2 + 7) / 2 = 4.5, rounded down
    ("[MED 9 1 8 0 ]", 4),  # 0 1 8 9: (1 + 8) / 2
    ("[MIN [MAX 1 2 ] [MED 8 1 3 4 ] 6 ]", 2),  # MAX = 2, MED = 3
    ("[SM [SM 5 5 ] [MIN 9 [MAX 3 1 ] ] 4 ]", 7),  # 0 + 3 + 4
    ("[MAX 0 ]", 0),
])
def test_listops_hand_checked_values(text, expected):
    tree = nest(text.split())
    assert value(tree) == expected
    flat, paper = listops_tree(text, tree="flat"), listops_tree(text)
    for data in (flat, paper):
        assert int(data.graph_y) == expected == int(data.y[0])
        assert int(data.list_depth) == list_depth(tree)
    assert flat.y.tolist() == preorder_values(tree)
    assert paper.y.tolist() == paper_values(tree)
    assert bracketing_of(paper) == paper_bracketing(tree)


def test_listops_paper_tree_layout():
    # Worked by hand from the paper's Figure 1 rule: ((([MAX 2) ((([MIN 4) 7) ])) ]).
    data = listops_tree("[MAX 2 [MIN 4 7 ] ]", LISTOPS_VOCAB)
    assert data.tokens == data.tokens_flat == "[MAX 2 [MIN 4 7 ] ]".split()
    assert data.edge_index.tolist() == [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12],
                                        [0, 1, 2, 2, 1, 5, 6, 7, 7, 6, 5, 0]]
    assert data.edge_pos.tolist() == [0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1, 1]
    assert data.y.tolist() == [4, -1, -1, -1, 2, 4, -1, -1, -1, 4, 7, -1, -1]
    assert data.word_pos.tolist() == [-1, -1, -1, 0, 1, -1, -1, -1, 2, 3, 4, 5, 6]
    assert data.word.tolist() == [NO_WORD] * 3 + [LISTOPS_VOCAB[t] for t in ("[MAX", "2")] + [NO_WORD] * 3 + [
        LISTOPS_VOCAB[t] for t in ("[MIN", "4", "7", "]", "]")]
    assert data.is_leaf.tolist() == [False] * 3 + [True] * 2 + [False] * 3 + [True] * 5
    assert data.height.tolist() == [5, 4, 1, 0, 0, 3, 2, 1, 0, 0, 0, 0, 0]
    assert int(data.list_depth) == 2
    run_cell(data, 3)
    with pytest.raises(ValueError, match="unknown ListOps tree"):
        listops_tree("[MAX 1 ]", tree="binary")


def test_listops_flat_tree_layout():
    data = listops_tree("[MAX 2 9 [MIN 4 7 ] 0 ]", LISTOPS_VOCAB, tree="flat")
    assert data.tokens == ["[MAX", "2", "9", "[MIN", "4", "7", "0"]  # no ']' nodes
    assert data.tokens_flat == "[MAX 2 9 [MIN 4 7 ] 0 ]".split()
    assert data.edge_index.tolist() == [[1, 2, 3, 4, 5, 6], [0, 0, 0, 3, 3, 0]]
    assert data.edge_pos.tolist() == [0, 1, 2, 0, 1, 3]
    assert data.y.tolist() == [9, 2, 9, 4, 4, 7, 0]
    assert data.is_leaf.tolist() == [False, True, True, False, True, True, True]
    assert data.word.tolist() == [LISTOPS_VOCAB[t] for t in data.tokens]
    assert data.word_flat.tolist() == [LISTOPS_VOCAB[t] for t in data.tokens_flat]
    assert NO_WORD not in data.word.tolist() and 0 not in data.word_flat.tolist()  # no <unk>
    run_cell(data, 3)


@pytest.mark.parametrize(("text", "pattern"), [
    ("[MAX 2 9", "never closed"),
    ("[MAX ]", "no arguments"),
    ("[MAX 1 ] 2", "after the end"),
    ("3", "outside any list"),
    ("] 3", "closes no list"),
    ("[AVG 1 2 ]", "unknown ListOps token"),
    ("", "empty"),
])
def test_listops_malformed(text, pattern):
    for tree in ("paper", "flat"):
        with pytest.raises(TreeFormatError, match=pattern):
            listops_tree(text, tree=tree)


def test_listops_generator_matches_the_paper_settings_and_the_evaluator():
    examples = generate_listops(600, seed=0)
    assert len({" ".join(e) for e in examples}) == 600  # no repeats
    operators, depths, labels = collections.Counter(), collections.Counter(), collections.Counter()
    for tokens in examples:
        assert len(tokens) <= 100
        tree = nest(tokens)
        depths[list_depth(tree)] += 1
        assert list_depth(tree) <= 10
        data = listops_tree(tokens, tree="flat")
        assert data.y.tolist() == preorder_values(tree)
        paper = listops_tree(tokens)
        assert paper.y.tolist() == paper_values(tree) and bracketing_of(paper) == paper_bracketing(tree)
        assert int(paper.list_depth) == list_depth(tree)
        children = torch.bincount(paper.edge_index[1], minlength=paper.num_nodes)
        assert set(children[~paper.is_leaf].tolist()) == {2}  # binary everywhere
        labels[int(data.graph_y)] += 1
        for token in tokens:
            if token.startswith("["):
                operators[token] += 1
        stack = []  # arguments per list: 2 to 5
        for token in tokens:
            if token.startswith("["):
                stack.append(0)
            elif token == "]":
                assert 2 <= stack.pop() <= 5
                if stack:
                    stack[-1] += 1
            else:
                stack[-1] += 1
    assert set(operators) == {"[MIN", "[MAX", "[MED", "[SM"}
    assert set(labels) == set(range(10))  # every class occurs
    assert max(depths) >= 4 and depths[1] < 600  # nesting happens, and is not the rule


def test_listops_generator_is_deterministic_per_seed():
    assert generate_listops(50, seed=3) == generate_listops(50, seed=3)
    assert generate_listops(50, seed=3) != generate_listops(50, seed=4)
    short = generate_listops(40, seed=1, max_depth=2, max_args=3, max_length=30)
    assert all(list_depth(nest(t)) <= 2 and len(t) <= 30 for t in short)
    with pytest.raises(ValueError, match="distinct"):
        generate_listops(500, seed=0, max_depth=1, min_args=1, max_args=1)  # only 40 such examples exist


def test_listops_dataset_splits_cache_and_loader(tmp_path):
    sizes = {"train_size": 40, "dev_size": 10, "test_size": 10}
    splits = {s: ListOps(tmp_path, s, **sizes, log=False) for s in ("train", "dev", "test")}
    assert [len(splits[s]) for s in ("train", "dev", "test")] == [40, 10, 10]
    flat = {s: [" ".join(d.tokens_flat) for d in splits[s]] for s in splits}
    assert not set(flat["train"]) & set(flat["test"]) and not set(flat["dev"]) & set(flat["test"])
    for data in splits["test"]:
        assert data.y.tolist() == paper_values(nest(data.tokens_flat))
    # The test set does not depend on the train size; everything depends on the seed.
    bigger = ListOps(tmp_path, "test", train_size=80, dev_size=10, test_size=10, log=False)
    assert [" ".join(d.tokens_flat) for d in bigger] == flat["test"]
    reseeded = ListOps(tmp_path, "test", **sizes, seed=1, log=False)
    assert [" ".join(d.tokens_flat) for d in reseeded] != flat["test"]
    names = sorted(p.name for p in (tmp_path / "listops" / "processed").glob("test-*.pt"))
    assert len(names) == 3 and all("seed" in n and "depth10" in n and "-paper-" in n for n in names)
    flat_test = ListOps(tmp_path, "test", **sizes, tree="flat", log=False)  # cached apart, same examples
    assert [" ".join(d.tokens_flat) for d in flat_test] == flat["test"]
    assert [d.y.tolist() for d in flat_test] == [preorder_values(nest(d.tokens_flat)) for d in flat_test]
    again = ListOps(tmp_path / "fresh", "test", **sizes, log=False)  # regenerated elsewhere: identical
    assert [" ".join(d.tokens_flat) for d in again] == flat["test"]

    embedding, cell = NodeEmbedding(len(LISTOPS_VOCAB), 6), ChildSumTreeLSTM(6, 5)
    seen = 0
    for batch in DataLoader(splits["train"], batch_size=4, num_workers=2, follow_batch=["word_flat"]):
        h, _ = cell(embedding(batch.word), batch)
        assert h.shape == (batch.num_nodes, 5)
        assert batch.graph_y.tolist() == batch.y[batch.is_root].tolist()
        assert int(batch.word_flat_batch.max()) == batch.num_graphs - 1
        seen += batch.num_graphs
    assert seen == 40
    with pytest.raises(DatasetError, match="out of range"):
        ListOps(tmp_path, "test", max_args=1, min_args=2)
    with pytest.raises(DatasetError, match="unknown ListOps tree"):
        ListOps(tmp_path, "test", tree="binary")


# --------------------------------------------------------------------------- Boolean circuits


def truth(circuit: dict, node: str) -> int:
    """Plain recursive evaluation of a circuit written as ``{name: value or (gate, [operands])}``."""
    spec = circuit[node]
    if isinstance(spec, int):
        return spec
    gate, operands = spec
    bits = [truth(circuit, o) for o in operands]
    table = {
        "AND": lambda b: int(all(b)),
        "OR": lambda b: int(any(b)),
        "NOT": lambda b: int(not b[0]),
        "XOR": lambda b: int(b[0] != b[1]),
        "MAJ": lambda b: sorted(b)[1],
    }
    return table[gate](bits)


def as_dict(inputs, gates) -> dict:
    circuit = {f"n{k}": v for k, v in enumerate(inputs)}
    for g, (gate, operands) in enumerate(gates):
        circuit[f"n{len(inputs) + g}"] = (gate, [f"n{o}" for o in operands])
    return circuit


HAND_BUILT = [
    # inputs, gates, every node's value worked out by hand
    ([1, 0, 1], [("AND", [0, 1]), ("OR", [0, 1]), ("XOR", [3, 4]), ("MAJ", [2, 4, 5]), ("NOT", [6])],
     [1, 0, 1, 0, 1, 1, 1, 0]),
    ([0, 0, 1], [("MAJ", [0, 1, 2]), ("NOT", [3]), ("XOR", [4, 2]), ("AND", [4, 5])], [0, 0, 1, 0, 1, 0, 0]),
    ([1, 1], [("XOR", [0, 1]), ("OR", [2, 1]), ("NOT", [2]), ("MAJ", [2, 3, 4])], [1, 1, 0, 1, 1, 1]),
]


@pytest.mark.parametrize(("inputs", "gates", "values"), HAND_BUILT)
def test_hand_built_circuits(inputs, gates, values):
    data = circuit_data(inputs, gates)
    circuit = as_dict(inputs, gates)
    assert [truth(circuit, f"n{k}") for k in range(len(values))] == values
    assert data.y.tolist() == values
    assert data.graph_y.tolist() == [values[-1]]
    assert data.circuit_size.tolist() == [len(gates)]
    # Child -> parent: each gate is the parent of its operands, in operand order.
    got = sorted(zip(data.edge_index[1].tolist(), data.edge_pos.tolist(), data.edge_index[0].tolist()))
    want = sorted((len(inputs) + g, slot, operand)
                  for g, (_, operands) in enumerate(gates) for slot, operand in enumerate(operands))
    assert got == want
    kinds = [f"INPUT_{v}" for v in inputs] + [gate for gate, _ in gates]
    assert data.x.argmax(1).tolist() == [NODE_TYPES.index(k) for k in kinds] == data.node_type.tolist()
    assert data.x.sum(1).tolist() == [1.0] * data.num_nodes
    run_cell(data, len(NODE_TYPES))


def test_hand_built_circuit_shape():
    data = circuit_data(*HAND_BUILT[0][:2])
    out_degree = torch.bincount(data.edge_index[0], minlength=data.num_nodes)
    assert out_degree.tolist() == [2, 2, 1, 1, 2, 1, 1, 0]  # inputs 0, 1 and the OR gate feed two gates
    assert data.is_root.tolist() == [False] * 7 + [True]
    assert data.circuit_depth.tolist() == [4]  # AND/OR -> XOR -> MAJ -> NOT


@pytest.mark.parametrize(("inputs", "gates", "pattern"), [
    ([1, 0], [("AND", [0, 2])], "distinct earlier nodes"),
    ([1, 0], [("AND", [0, 0])], "distinct earlier nodes"),
    ([1, 0], [("AND", [0])], "has 1 operand"),
    ([1, 0], [("NAND", [0, 1])], "gates are"),
    ([2, 0], [("AND", [0, 1])], "inputs are 0 or 1"),
    ([1, 0], [], "at least one gate"),
])
def test_malformed_circuits(inputs, gates, pattern):
    with pytest.raises(TreeFormatError, match=pattern):
        circuit_data(inputs, gates)


def test_generated_circuits_are_dags_with_balanced_labels():
    circuits = generate_circuits(300, seed=0, num_inputs=4, num_gates=10)
    outputs = []
    node_values = collections.Counter()
    fan_in = {"AND": 2, "OR": 2, "XOR": 2, "NOT": 1, "MAJ": 3}
    for inputs, gates in circuits:
        data = circuit_data(inputs, gates)
        circuit = as_dict(inputs, gates)
        assert data.y.tolist() == [truth(circuit, f"n{k}") for k in range(data.num_nodes)]
        out_degree = torch.bincount(data.edge_index[0], minlength=data.num_nodes)
        assert int(out_degree.max()) >= 2  # some node feeds two gates: a DAG, not a tree
        assert data.is_root.tolist() == [False] * (data.num_nodes - 1) + [True]  # the output is the one root
        in_degree = torch.bincount(data.edge_index[1], minlength=data.num_nodes).tolist()
        for k, (gate, _) in enumerate(gates):
            assert in_degree[len(inputs) + k] == fan_in[gate]
        assert 1 <= int(data.circuit_size) <= 10 and 1 <= int(data.circuit_depth) <= int(data.circuit_size)
        outputs.append(int(data.graph_y))
        node_values.update(data.y.tolist())
    share = sum(outputs) / len(outputs)
    assert 0.3 < share < 0.7, share  # neither output value dominates
    assert 0.3 < node_values[1] / (node_values[0] + node_values[1]) < 0.7


def test_circuit_generator_is_deterministic_per_seed():
    assert generate_circuits(30, seed=5) == generate_circuits(30, seed=5)
    assert generate_circuits(30, seed=5) != generate_circuits(30, seed=6)
    only_not = generate_circuits(5, seed=0, num_inputs=2, num_gates=6, gates=("AND", "NOT"))
    assert all(gate in ("AND", "NOT") for _, gates in only_not for gate, _ in gates)
    with pytest.raises(ValueError, match="none of the gates"):
        generate_circuits(1, num_inputs=2, gates=("MAJ",))


def test_circuits_dataset_splits_cache_and_loader(tmp_path):
    sizes = {"train_size": 24, "dev_size": 6, "test_size": 6, "num_inputs": 3, "num_gates": 6}
    train = BooleanCircuits(tmp_path, "train", **sizes, log=False)
    test = BooleanCircuits(tmp_path, "test", **sizes, log=False)
    assert (len(train), len(test)) == (24, 6)
    key = lambda d: (d.node_type.tolist(), d.edge_index.tolist())  # noqa: E731
    assert not {str(key(d)) for d in train} & {str(key(d)) for d in test}
    again = BooleanCircuits(tmp_path / "fresh", "test", **sizes, log=False)
    assert [key(d) for d in again] == [key(d) for d in test]
    other = BooleanCircuits(tmp_path, "test", **{**sizes, "seed": 1}, log=False)
    assert [key(d) for d in other] != [key(d) for d in test]
    names = sorted(p.name for p in (tmp_path / "circuits" / "processed").glob("test-*.pt"))
    assert len(names) == 2 and all("in3-gates6" in n for n in names)

    cell = ChildSumTreeLSTM(len(NODE_TYPES), 5)
    seen = 0
    for batch in DataLoader(train, batch_size=4, num_workers=2):
        h, _ = cell(batch.x, batch)
        assert h.shape == (batch.num_nodes, 5)
        assert batch.graph_y.shape == batch.circuit_depth.shape == (batch.num_graphs,)
        assert batch.graph_y.tolist() == batch.y[batch.is_root].tolist()
        seen += batch.num_graphs
    assert seen == 24
    with pytest.raises(DatasetError, match="none of the gates"):
        BooleanCircuits(tmp_path, "test", num_inputs=2, gates=("MAJ",))
