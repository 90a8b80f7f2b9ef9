"""collate_graphs builds exactly PyG's Batch.from_data_list: every attribute, dtype, key order, batch vectors,
slice and increment dictionaries, on trees, DAGs, generated datasets and odd attributes; and falls back to PyG
where its own rules are not PyG's defaults. separate_graphs, the other way, cuts a dataset's storage into
exactly the graphs PyG's per-graph separate gives."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Batch, Data, InMemoryDataset
from torch_geometric.data.separate import separate
from trees import random_ptb

from graphtree.data import from_networkx, from_ptb
from graphtree.data.batching import BatchCutter, collate_graphs, separate_graphs
from graphtree.datasets import BooleanCircuits, GraphFiles, ListOps
from graphtree.datasets.circuits import circuit_data, generate_circuits
from graphtree.datasets.listops import LISTOPS_VOCAB, generate_listops, listops_tree
from graphtree.datasets.sick import PairData

DATA = Path(__file__).parent / "data"


def assert_same_batch(ours: Batch, theirs: Batch) -> None:
    assert type(ours) is type(theirs)
    assert list(ours.stores[0].keys()) == list(theirs.stores[0].keys())  # same attributes, same order
    for key in theirs.stores[0].keys():
        a, b = ours[key], theirs[key]
        if isinstance(b, torch.Tensor):
            assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), key
        else:
            assert a == b, key
    assert ours.num_graphs == theirs.num_graphs and ours.num_nodes == theirs.num_nodes
    assert ours.stores[0]._num_nodes == theirs.stores[0]._num_nodes
    assert ours._slice_dict.keys() == theirs._slice_dict.keys()
    for key, slices in theirs._slice_dict.items():
        assert torch.equal(ours._slice_dict[key], slices), key
        inc = theirs._inc_dict[key]
        assert (ours._inc_dict[key] is None) == (inc is None), key
        if inc is not None:
            assert torch.equal(ours._inc_dict[key], inc), key
    for mine, reference in zip(ours.to_data_list(), theirs.to_data_list()):  # get_example works the same
        for key in reference.keys():
            value = reference[key]
            assert torch.equal(mine[key], value) if isinstance(value, torch.Tensor) else mine[key] == value


def random_trees(count: int, seed: int) -> list[Data]:
    rng = random.Random(seed)
    vocab: dict[str, int] = {}
    return [from_ptb(random_ptb(rng.randint(1, 12), 3, rng), lambda w: vocab.setdefault(w, len(vocab)))
            for _ in range(count)]


@pytest.mark.parametrize("size", [1, 2, 25])
def test_trees(size):
    trees = random_trees(size, seed=size)
    assert_same_batch(collate_graphs(trees), Batch.from_data_list(trees))


def test_listops_with_a_followed_sequence_and_circuits():
    paper = [listops_tree(t, LISTOPS_VOCAB) for t in generate_listops(9, seed=4)]
    assert_same_batch(collate_graphs(paper, follow_batch=["word_flat"]),
                      Batch.from_data_list(paper, follow_batch=["word_flat"]))
    circuits = [circuit_data(*c) for c in generate_circuits(7, seed=1, num_inputs=3, num_gates=6)]
    assert_same_batch(collate_graphs(circuits), Batch.from_data_list(circuits))


def test_odd_attributes_follow_pygs_rules():
    def graph(k: int) -> Data:
        data = from_ptb(f"(1 (2 a{k}) (3 (4 b) (0 c)))")
        data.pair_index = torch.tensor([[0, k % 3], [1, 2]], dtype=torch.int32)  # 'index': shifted, dtype kept
        data.node_batch = torch.tensor([0, 0, 1, 1, 1])  # 'batch': shifted by max + 1
        data.face = torch.tensor([[0], [1], [2]])  # 'face': shifted like an index
        data.scalar = torch.tensor(float(k))  # 0-dim: stacked
        data.count = k  # a Python int: a tensor
        data.root_index = 2  # an int index: shifted by the node count
        data.flag = k % 2 == 0  # a bool
        data.weight = 0.5 * k
        data.name = f"g{k}"
        data.mask = torch.tensor([True, False, True, True, False])
        return data

    graphs = [graph(k) for k in range(5)]
    ours = collate_graphs(graphs, follow_batch=["mask", "name"], exclude_keys=["weight"])
    assert_same_batch(ours, Batch.from_data_list(graphs, follow_batch=["mask", "name"], exclude_keys=["weight"]))
    assert ours.pair_index.dtype == torch.int32 and "weight" not in ours


def test_other_graphs_go_to_pyg():
    class Pair(Data):
        def __inc__(self, key, value, *args, **kwargs):
            return 7 if key == "left" else super().__inc__(key, value, *args, **kwargs)

    pairs = [Pair(left=torch.tensor([1, 2]), num_nodes=2) for _ in range(3)]
    assert_same_batch(collate_graphs(pairs), Batch.from_data_list(pairs))
    assert collate_graphs(pairs).left.tolist() == [1, 2, 8, 9, 15, 16]
    ragged = random_trees(2, seed=0)
    ragged[1].extra = torch.zeros(1)  # PyG reads the first graph's attributes: the extra one is dropped
    assert_same_batch(collate_graphs(ragged), Batch.from_data_list(ragged))
    ragged.reverse()  # now the first graph has one the second lacks: PyG's bare KeyError, here named
    with pytest.raises(KeyError):
        Batch.from_data_list(ragged)
    with pytest.raises(ValueError, match="graph 1 of the batch has no 'extra', which graph 0 has"):
        collate_graphs(ragged)
    dag = from_networkx(__import__("networkx").DiGraph([(0, 2), (1, 2), (0, 1)]))
    assert_same_batch(collate_graphs([dag, dag]), Batch.from_data_list([dag, dag]))
    with pytest.raises(ValueError, match="empty"):
        collate_graphs([])


def test_plain_trees_take_the_fast_path(monkeypatch):
    trees = random_trees(5, seed=1)
    expected = Batch.from_data_list(trees)

    def refuse(*args, **kwargs):
        raise AssertionError("fell back to Batch.from_data_list")

    monkeypatch.setattr(Batch, "from_data_list", refuse)
    assert_same_batch(collate_graphs(trees), expected)


def odd_graph(k: int) -> Data:
    """A tree with attributes of every kind PyG's default rules treat apart (no ``batch``-named one)."""
    data = from_ptb(f"(1 (2 a{k}) (3 (4 b) (0 c)))" if k % 2 else f"(1 (2 a{k}) (3 b))")
    data.pair_index = torch.tensor([[0, k % 3], [1, 2]], dtype=torch.int32)
    data.face = torch.tensor([[0], [1], [2]])
    data.scalar = torch.tensor(float(k))
    data.count = k
    data.root_index = 2
    data.flag = k % 2 == 0
    data.name = f"g{k}"
    return data


@pytest.mark.parametrize("batch_size", [1, 4, 25, 100])
def test_cut_minibatches_are_pygs_batches_of_the_same_graphs(batch_size):
    rng = random.Random(batch_size)
    listops = [listops_tree(t, LISTOPS_VOCAB) for t in generate_listops(9, seed=4)]
    circuits = [circuit_data(*c) for c in generate_circuits(7, seed=1, num_inputs=3, num_gates=6)]
    dag = from_networkx(__import__("networkx").DiGraph([(0, 2), (1, 2), (0, 1), (3, 1)]))
    for graphs in (random_trees(37, seed=batch_size), [odd_graph(k) for k in range(11)], listops, circuits,
                   [dag, dag, dag]):
        cutter = BatchCutter.of(graphs)
        assert cutter is not None
        for _ in range(2):  # two epochs: the cutter keeps no state between them
            order = list(range(len(graphs)))
            rng.shuffle(order)
            batches = list(cutter.batches(order, batch_size))
            assert len(batches) == -(-len(graphs) // batch_size)
            for k, batch in enumerate(batches):
                picked = [graphs[i] for i in order[k * batch_size:(k + 1) * batch_size]]
                assert_same_batch(batch, Batch.from_data_list(picked))


def test_a_cutter_is_refused_where_pygs_rules_are_not_the_defaults():
    class Pair(Data):
        pass

    assert BatchCutter.of([Pair(left=torch.tensor([1]), num_nodes=1)]) is None
    shifted_by_value = random_trees(3, seed=0)
    for tree in shifted_by_value:
        tree.node_batch = torch.zeros(tree.num_nodes, dtype=torch.long)  # shifted by its max + 1
    assert BatchCutter.of(shifted_by_value) is None
    assert BatchCutter.of([]) is None
    with pytest.raises(ValueError, match="batch_size"):
        next(BatchCutter.of(random_trees(2, seed=0)).batches([0, 1], 0))
    with pytest.raises(IndexError, match=r"outside 0\.\.1"):
        next(BatchCutter.of(random_trees(2, seed=0)).batches([0, 2], 1))


def assert_same_graphs(ours: list[Data], reference: list[Data]) -> None:
    assert len(ours) == len(reference)
    for mine, theirs in zip(ours, reference):
        assert type(mine) is type(theirs)
        assert list(mine.to_dict()) == list(theirs.to_dict())  # same attributes, same order, num_nodes included
        for key, value in theirs.to_dict().items():
            got = mine[key]
            if isinstance(value, torch.Tensor):  # views of the storage, as PyG's narrow makes them
                assert (got.dtype, got.shape, got.stride()) == (value.dtype, value.shape, value.stride()), key
                assert torch.equal(got, value) and got.data_ptr() == value.data_ptr(), key
            else:
                assert type(got) is type(value) and got == value, key


def pyg_graphs(dataset) -> list[Data]:
    """Each graph of an InMemoryDataset cut on its own by PyG, as ``InMemoryDataset.get`` does."""
    return [separate(cls=type(dataset._data), batch=dataset._data, idx=k, slice_dict=dataset.slices, decrement=False)
            for k in range(dataset.len())]


def test_separate_graphs_is_pygs_cut_on_every_generated_and_file_dataset(tmp_path):
    datasets = [
        ListOps(tmp_path, "test", train_size=20, dev_size=5, test_size=30, log=False),
        ListOps(tmp_path, "dev", train_size=20, dev_size=5, test_size=30, tree="flat", log=False),
        BooleanCircuits(tmp_path, "test", train_size=10, dev_size=5, test_size=12, num_inputs=3, num_gates=6,
                        log=False),
    ]
    for example in ("example.ptb", "example.jsonl", "example.conllu", "features.jsonl"):
        datasets.append(GraphFiles(tmp_path / "files", "all", files=DATA / example, log=False))
    for dataset in datasets:
        reference = pyg_graphs(dataset)
        assert_same_graphs(separate_graphs(dataset._data, dataset.slices), reference)
        assert_same_graphs(list(dataset), reference)  # the dataset takes the one-pass cut
        assert dataset._data_list is not None and all(g is not None for g in dataset._data_list)
        last = len(reference) - 1
        picked = dataset[[last, 0]]  # index_select: the same graphs again, copies of the cut ones
        assert_same_graphs([picked[0], picked[1]], [reference[last], reference[0]])


@pytest.mark.parametrize("batch_size", [1, 5, 25])
def test_a_cutter_reads_a_datasets_storage_and_gives_pygs_batches_of_its_graphs(tmp_path, batch_size):
    datasets = [
        ListOps(tmp_path, "test", train_size=20, dev_size=5, test_size=30, log=False),
        BooleanCircuits(tmp_path, "test", train_size=10, dev_size=5, test_size=12, num_inputs=3, num_gates=6,
                        log=False),
    ]
    for example in ("example.ptb", "example.jsonl", "example.conllu", "features.jsonl"):
        datasets.append(GraphFiles(tmp_path / "files", "all", files=DATA / example, log=False))
    odd = [odd_graph(k) for k in range(11)]
    storage = InMemoryDataset()
    storage.data, storage.slices = InMemoryDataset.collate(odd)
    datasets.append(storage)
    rng = random.Random(batch_size)
    for dataset in datasets:
        reference = pyg_graphs(dataset)  # each graph cut by PyG on its own
        cutter = BatchCutter.of(dataset)
        assert cutter is not None and dataset._data_list is None  # read from the storage: no graph was cut
        order = list(range(len(reference)))
        rng.shuffle(order)
        for k, batch in enumerate(cutter.batches(order, batch_size)):
            picked = [reference[i] for i in order[k * batch_size:(k + 1) * batch_size]]
            assert_same_batch(batch, Batch.from_data_list(picked))
    # A view of a dataset, or one with a transform, is read graph by graph, as before: the same batches.
    view = datasets[0][[3, 1, 4, 1, 5]]
    assert_same_batch(next(BatchCutter.of(view).batches([0, 1, 2, 3, 4], 5)),
                      Batch.from_data_list([reference_graph for reference_graph in view]))

    class Doubled(InMemoryDataset):  # a get() of its own: its graphs are not the storage's
        def get(self, idx):
            graph = super().get(idx)
            graph.scalar = 2 * graph.scalar
            return graph

    doubled = Doubled()
    doubled.data, doubled.slices = InMemoryDataset.collate(odd)
    batch = next(BatchCutter.of(doubled).batches(list(range(len(odd))), len(odd)))
    assert batch.scalar.tolist() == [2.0 * k for k in range(len(odd))]


def test_separate_graphs_with_odd_attributes_and_fallbacks():
    def graph(k: int) -> Data:
        data = from_ptb(f"(1 (2 a{k}) (3 (4 b) (0 c)))")
        data.scalar = torch.tensor(float(k))  # 0-dim: one entry per graph
        data.count = k
        data.name = f"g{k}"
        data.names = [f"n{k}", "m"]  # a list per graph
        data.pair_index = torch.tensor([[0, k % 3], [1, 2]])
        return data

    graphs = [graph(k) for k in range(4)]
    data, slices = InMemoryDataset.collate(graphs)
    reference = [separate(cls=Data, batch=data, idx=k, slice_dict=slices, decrement=False) for k in range(4)]
    assert_same_graphs(separate_graphs(data, slices), reference)
    assert separate_graphs(data, {}) is None
    pairs = [PairData(x=torch.zeros(2, 1)) for _ in range(3)]
    assert separate_graphs(*InMemoryDataset.collate(pairs)) is None  # a Data subclass: PyG's own cut
    nested = [Data(parts={"a": torch.zeros(2)}, num_nodes=2) for _ in range(3)]
    assert separate_graphs(*InMemoryDataset.collate(nested)) is None  # a dict attribute: likewise
