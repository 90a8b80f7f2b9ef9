"""Replayed training steps (graphtree.replay): the padded pass equals the plain one on every graph family,
the padded step equals the plain step, asks the host for nothing, and few bucket shapes serve an epoch.

The plain pass is the reference (its ``update`` is checked against per-node recursive references
elsewhere); float64 on both sides. The tests marked ``cuda`` run the captured graphs, where there is a GPU.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import random
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch_geometric.data import Batch, Data
from torch_geometric.nn import global_add_pool, global_max_pool, global_mean_pool
from trees import chain_ptb, random_ptb

from graphtree.data import from_ptb
from graphtree.engine import propagate
from graphtree.models import BiTreeLSTM, NodeEmbedding, TreeClassifier, node_loss
from graphtree.nn import (
    LSTMRNN,
    SLSTM,
    ChildSumTreeLSTM,
    HeadLexicalization,
    LexicalizedTreeLSTM,
    NaryTreeLSTM,
    TreeCell,
)
from graphtree.replay import (
    Bucket,
    Buckets,
    BucketShape,
    PaddedBatch,
    ReplayedForward,
    ReplayedStep,
    ReplayError,
    pad,
    padded_batch,
    weighted_node_loss,
)
from graphtree.train import CapturableAdagrad, make_optimizer

D = 5


class Averaged(TreeCell):
    """A cell of a user's own, ``update`` only: the mean of the children's states plus the input (it divides
    by the number of children, so a node at a level above 0 without children would be 0 / 0)."""

    def __init__(self, channels: int) -> None:
        super().__init__(state_channels=(channels,))
        self.lin = torch.nn.Linear(channels, channels)

    def forward(self, x, edge_index):
        return self.propagate(edge_index, x=x)

    def update(self, children, x):
        (h,) = children.states
        if h.size(1) == 0:
            return (torch.tanh(self.lin(x)),)
        mask = children.mask.unsqueeze(-1).to(h.dtype)
        return (torch.tanh(self.lin(x) + (h * mask).sum(1) / mask.sum(1)),)


# Every bottom-up cell, with the widest arity it takes (None: any) and its input width.
CELLS = {
    "child_sum": (lambda: ChildSumTreeLSTM(D, D), None),
    "nary": (lambda: NaryTreeLSTM(D, D), 2),
    "nary_ternary_general": (lambda: NaryTreeLSTM(D, D, n_ary=3, setting="general"), 3),
    "slstm": (lambda: SLSTM(D, D), 2),
    "lstm_rnn": (lambda: LSTMRNN(D, D), 2),
    "lexicalized": (lambda: LexicalizedTreeLSTM(D, D), 2),
    "gated_head": (lambda: HeadLexicalization(D), 2),
    "average_head": (lambda: HeadLexicalization(D, "average"), 3),
    "own": (lambda: Averaged(D), None),
}


def _trees(*ptbs: str) -> Batch:
    return Batch.from_data_list([from_ptb(p) for p in ptbs])


def _dag() -> Data:
    # 0, 1 -> 2; 1 -> 3; 2, 3 -> 4; 0 -> 4: node 1 has two parents, node 4 children at two levels.
    edge_index = torch.tensor([[0, 1, 1, 2, 3, 0], [2, 2, 3, 4, 4, 4]])
    return Data(edge_index=edge_index, num_nodes=5)


def families(arity: int | None) -> dict[str, Batch | Data]:
    rng = random.Random(arity or 7)
    widest = arity or 4
    out = {
        "one node": _trees("(1 a)"),
        "chain (one-node levels)": _trees(chain_ptb(41)),
        "trees": _trees(*[random_ptb(rng.randint(1, 14), widest, rng) for _ in range(9)]),
        "widest arity": _trees("(1 " + " ".join(f"({k % 5} w{k})" for k in range(widest)) + ")"),
        "mixed depths": _trees("(1 a)", chain_ptb(12), random_ptb(9, widest, rng)),
    }
    if arity is None:  # DAGs: cells without fixed positions
        out["dag"] = _dag()
    return out


def _states_and_grads(cell, x, graph, weights) -> list[torch.Tensor]:
    x = x.detach().requires_grad_()
    states = cell(x, graph)
    states = states if isinstance(states, tuple) else (states,)
    loss = sum((s * w[:, :s.size(1)]).sum() for s, w in zip(states, weights))
    params = list(cell.parameters())
    return [s.detach() for s in states] + list(torch.autograd.grad(loss, [x, *params], allow_unused=True))


CASES = [(name, family) for name, (_, arity) in CELLS.items() for family in families(arity)]


@pytest.mark.parametrize(("name", "family"), CASES, ids=[f"{n}-{f}" for n, f in CASES])
def test_the_padded_pass_equals_the_plain_pass(name, family):
    make, arity = CELLS[name]
    torch.manual_seed(len(name) + len(family))
    cell = make().double()
    graph = families(arity)[family]
    n = graph.num_nodes
    x = torch.randn(n, D, dtype=torch.float64)
    weights = [torch.randn(n, D, dtype=torch.float64) for _ in cell.state_channels]
    want = _states_and_grads(cell, x, graph, weights)

    padded = pad(graph, Buckets(exact_below=2, level_step=4))  # a coarse grid: many replicas
    source, real = padded.source, padded.node_weight.bool()
    assert padded.num_nodes > n
    # Replicas carry their source's inputs and no weight: the loss of the padded pass is the plain one's.
    got = _states_and_grads(cell, x[source], padded, [w[source] * real.unsqueeze(1) for w in weights])
    num_states = len(want) - 1 - len(list(cell.parameters()))
    for k in range(num_states):
        # Every row, replicas too, holds the states of the node it copies.
        torch.testing.assert_close(got[k], want[k][source], rtol=1e-12, atol=1e-12)
    # The gradient of x: replicas' rows are exact zeros, the nodes' rows the plain pass's.
    grad_x = torch.zeros_like(x).index_add_(0, source, got[num_states])
    torch.testing.assert_close(grad_x, want[num_states], rtol=1e-12, atol=1e-12)
    assert torch.all(got[num_states][~real] == 0)
    for g, w in zip(got[num_states + 1:], want[num_states + 1:], strict=True):
        if w is None:
            assert g is None or torch.all(g == 0)
        else:
            torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def test_bucket_grid_and_shape_by_hand():
    b = Buckets()  # exact to 8, then doubling; levels in multiples of 8, dyadic segments
    assert [b.width(n) for n in (0, 1, 7, 8, 9, 16, 17, 100, 129)] == [1, 1, 7, 8, 16, 16, 32, 128, 256]
    shape = Buckets(level_step=4).shape([10, 5, 3, 2, 1], slots=2)
    # Segments [0], [1], [2, 3], [4, 7]: widest 10 -> 16, 5, 3, 1 (levels 5-7 are past the batch's top).
    assert shape.widths == (16, 5, 3, 3, 1, 1, 1, 1)
    assert shape.slots == 2 and shape.num_nodes == 31
    with pytest.raises(ReplayError, match="empty"):
        b.shape([], 0)
    with pytest.raises(ValueError, match="growth"):
        Buckets(growth=1.0)


def test_replicas_copy_a_node_of_their_level_by_hand():
    # Leaves a, b, c (level 0), the node over b and c (level 1), the root (level 2).
    batch = _trees("(1 (2 a) (3 (4 b) (0 c)))")
    shape, tensors = padded_batch(batch, Buckets(exact_below=2, level_step=4))
    assert shape.widths == (4, 1, 1, 1)  # 3 leaves -> 4; one node at levels 1 and 2; level 3 past the top
    source, weight = tensors["source"], tensors["node_weight"]
    height = batch.height[source]
    assert height.tolist() == [0, 0, 0, 0, 1, 2, 2]  # level 3 copies the top level's node (the root)
    assert weight.tolist() == [1, 1, 1, 0, 1, 1, 0]
    assert source[3] == source[0] and source[6] == source[5]
    slots = tensors["slots"]
    assert torch.equal(slots[6], slots[5])  # a replica reads its source's children
    assert torch.all(slots[:4] == shape.num_nodes)  # leaves read nothing


def _classifier(cell: str, vocab: int = 30) -> torch.nn.Module:
    embedding = NodeEmbedding(vocab, D)
    if cell == "nary":
        return TreeClassifier(embedding, NaryTreeLSTM(D, D), 5, dropout=0.0)
    if cell == "child_sum":
        return TreeClassifier(embedding, ChildSumTreeLSTM(D, D), 5, dropout=0.0)
    if cell == "slstm":
        return TreeClassifier(embedding, SLSTM(D, D, leaf="lstm"), 5, dropout=0.0)
    if cell == "lstm_rnn":
        return TreeClassifier(embedding, LSTMRNN(D, D), 5, dropout=0.0)
    if cell == "own":
        return TreeClassifier(embedding, Averaged(D), 5, dropout=0.0)
    return _BiTree(embedding, BiTreeLSTM(D, D, 5, mlp_channels=4, variant=cell))


class _BiTree(torch.nn.Module):
    def __init__(self, embedding, model):
        super().__init__()
        self.embedding, self.model = embedding, model

    def forward(self, batch):
        return self.model(self.embedding(batch.word), batch)


def _sentences(count: int, seed: int, vocab: int = 30) -> list[Data]:
    rng = random.Random(seed)
    trees = [from_ptb(random_ptb(rng.randint(1, 12), 2, rng)) for _ in range(count)]
    for tree in trees:
        tree.word = torch.where(tree.word_pos >= 0, torch.randint(0, vocab, (tree.num_nodes,)), -1)
    return trees


MODELS = ("nary", "child_sum", "slstm", "lstm_rnn", "contree", "contree_lex", "own", "top_down", "bicontree")


@pytest.mark.parametrize("model", MODELS)
def test_the_padded_step_equals_the_plain_step(model):
    torch.manual_seed(0)
    plain = _classifier(model).double()
    padded = copy.deepcopy(plain)
    plain_opt = torch.optim.Adagrad(plain.parameters(), lr=0.1, foreach=False)
    step = ReplayedStep(padded, make_optimizer("adagrad", list(padded.parameters()), 0.1, capturable=True))
    trees = _sentences(24, seed=1)
    for k in range(0, 24, 6):
        batch = Batch.from_data_list(trees[k:k + 6])
        plain_opt.zero_grad()
        want = node_loss(plain(batch), batch.y)
        want.backward()
        plain_opt.step()
        got = step(batch)
        torch.testing.assert_close(got, want.detach(), rtol=1e-12, atol=1e-10)
    assert step.replayable and step.stats.padded_eager == 4 and step.stats.eager == 0
    for a, b in zip(padded.parameters(), plain.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


class _HiddenTopDown(torch.nn.Module):
    """A top-down pass that no module declares (a bottom-up cell run top-down through the engine): its padded
    batches carry no top-down plan."""

    def __init__(self, vocab: int = 30) -> None:
        super().__init__()
        self.embedding, self.cell, self.out = NodeEmbedding(vocab, D), Averaged(D), torch.nn.Linear(D, 5)

    def forward(self, batch):
        (h,) = propagate(self.cell, {"x": self.embedding(batch.word)}, batch, direction="top_down")
        return self.out(h)


def test_a_top_down_pass_that_no_module_declares_runs_eagerly_and_says_so():
    torch.manual_seed(0)
    plain = _HiddenTopDown().double()
    model = copy.deepcopy(plain)
    step = ReplayedStep(model, make_optimizer("adagrad", list(model.parameters()), 0.1, capturable=True))
    plain_opt = CapturableAdagrad(plain.parameters(), lr=0.1)
    batch = Batch.from_data_list(_sentences(5, seed=2))
    with pytest.warns(UserWarning, match="top_down pass"):
        got = step(batch)
    assert not step.replayable and step.stats.eager == 1
    want = node_loss(plain(batch), batch.y)
    want.backward()
    plain_opt.step()
    torch.testing.assert_close(got, want.detach())
    for a, b in zip(model.parameters(), plain.parameters(), strict=True):
        torch.testing.assert_close(a, b)


# Operations that make the host wait for the GPU, or give shapes that depend on the data.
_SYNCING = {"_local_scalar_dense", "nonzero", "masked_select", "unique", "_unique2", "unique_consecutive",
            "unique_dim", "repeat_interleave", "equal", "is_nonzero", "masked_scatter", "item"}


class _SyncSpy(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in _SYNCING:
            self.seen.append(name)
        if name in ("index", "index_put", "index_put_"):  # a boolean mask index is a nonzero in disguise
            indices = args[1] if len(args) > 1 else []
            if any(i is not None and i.dtype == torch.bool for i in indices):
                self.seen.append(f"{name} with a boolean mask")
        if name in ("_to_copy", "copy_") and any(isinstance(a, torch.Tensor) and a.device.type == "meta"
                                                  for a in args):
            self.seen.append(name)
        return func(*args, **kwargs)


def test_the_spy_sees_what_syncs():
    x = torch.randn(5)
    with _SyncSpy() as spy:
        x[x > 0]
        float(x.sum())
        x.nonzero()
    assert spy.seen == ["index with a boolean mask", "_local_scalar_dense", "nonzero"]


@pytest.mark.parametrize("model", MODELS)
def test_the_padded_step_asks_the_host_for_nothing(model):
    torch.manual_seed(0)
    net = _classifier(model)
    step = ReplayedStep(net, make_optimizer("adagrad", list(net.parameters()), 0.1, capturable=True))
    batch = Batch.from_data_list(_sentences(6, seed=3))
    shape, tensors = padded_batch(batch, step.buckets, top_down=True)  # a top-down plan too, whatever the model
    bucket = Bucket.make(shape, tensors, step.device, batch.num_graphs)
    bucket.fill(tensors)
    # The first step runs eagerly before any capture (and may check a cell of one's own on the host, once): the
    # step a graph holds is a later one.
    step._padded_step(bucket)
    with _SyncSpy() as spy:
        step._padded_step(bucket)
    assert spy.seen == []


def test_few_shapes_serve_an_epoch_of_sst_sized_trees():
    # SST's training split: 8,544 sentences; lengths from its deciles (as benchmarks/tree_lstm.py draws them).
    deciles = (2, 7, 11, 13, 16, 18, 21, 24, 27, 32, 52)
    rng = random.Random(0)
    lengths = [rng.randint(deciles[k], deciles[k + 1]) for k in (rng.randrange(10) for _ in range(8544))]
    trees = [from_ptb(random_ptb(n, 2, rng)) for n in lengths]
    # With the top-down plan too (a model with a top-down pass): both plans' shapes, 56 at 25 (14 bottom-up), 9
    # at 256. Its rows pad more than the bottom-up ones (2.2 a node at 25 against 1.6): a batch's nodes spread
    # over more depths than heights, and a segment's levels take its widest depth's groups.
    for B, most_shapes, most_both, most_down_rows in ((25, 64, 64, 2.5), (256, 16, 12, 2.25)):
        shapes, both, nodes, rows, down_rows = set(), set(), 0, 0, 0
        buckets = Buckets()
        for start in range(0, len(trees), B):
            batch = Batch.from_data_list(trees[start:start + B])
            shape, _ = padded_batch(batch, buckets, top_down=True)
            both.add(shape)
            shapes.add(BucketShape(shape.widths, shape.slots))  # the shape without the top-down plan
            nodes += batch.num_nodes
            rows += shape.num_nodes
            down_rows += sum(shape.down_widths)
        assert len(shapes) <= most_shapes, (B, len(shapes))
        assert rows / nodes <= 2.0, (B, rows / nodes)
        assert len(shapes) < math.ceil(len(lengths) / B) / 2  # a shape serves two batches or more on average
        assert len(both) <= most_both and down_rows / nodes <= most_down_rows, (B, len(both), down_rows / nodes)
    assert padded_batch(batch, buckets)[0] == BucketShape(shape.widths, shape.slots)


def test_capturable_adagrad_is_pytorchs_adagrad():
    torch.manual_seed(0)
    a = [torch.randn(4, 3, requires_grad=True), torch.randn(7, requires_grad=True)]
    b = [p.detach().clone().requires_grad_() for p in a]
    mine, theirs = CapturableAdagrad(a, lr=0.05), torch.optim.Adagrad(b, lr=0.05, foreach=False)
    for _ in range(3):
        grads = [torch.randn_like(p) for p in a]
        for p, q, g in zip(a, b, grads):
            p.grad, q.grad = g.clone(), g.clone()
        mine.step()
        theirs.step()
    for p, q in zip(a, b):
        assert torch.equal(p, q)


def test_a_replayed_step_needs_its_model_on_a_gpu_for_graphs():
    net = _classifier("nary")
    with pytest.raises(ValueError, match="GPU"):
        ReplayedStep(net, CapturableAdagrad(net.parameters()), graphs=True)
    assert isinstance(pad(_trees("(1 a)")), PaddedBatch)


def _with_graph_y(trees: list[Data], seed: int) -> list[Data]:
    """Each tree with a graph label (``graph_y``, ``[1]``), as the graph-level datasets give them."""
    generator = torch.Generator().manual_seed(seed)
    for tree in trees:
        tree.graph_y = torch.randint(0, 5, (1,), generator=generator)
    return trees


def _two_leaf_trees(count: int, seed: int, vocab: int = 30) -> list[Data]:
    """``count`` trees of one shape (two leaves under a root), with words and graph labels: batches of 3 and 4
    of them share a bucket shape on a grid of powers of 2 (levels of 6 or 8, then 3 or 4 nodes)."""
    generator = torch.Generator().manual_seed(seed)
    trees = [from_ptb("(1 (2 a) (3 b))") for _ in range(count)]
    for tree in trees:
        tree.word = torch.where(tree.word_pos >= 0, torch.randint(0, vocab, (3,), generator=generator), -1)
    return _with_graph_y(trees, seed)


def _root_of_each_graph(h: torch.Tensor, batch) -> torch.Tensor:
    """Each graph's root row, in graph order, without a boolean index (a replayed step may not ask how many
    roots there are): the rows summed per graph with all but the roots zeroed, the replicas' row dropped."""
    roots = h * batch.is_root.unsqueeze(-1).to(h.dtype)
    return global_add_pool(roots, batch.batch, size=batch.num_graphs + 1)[:batch.num_graphs]


def _graph_loss(model, batch) -> torch.Tensor:
    return F.cross_entropy(_root_of_each_graph(model(batch), batch), batch.graph_y, reduction="sum")


def _root_loss(model, batch) -> torch.Tensor:
    """A loss over the roots by a boolean index, with no node weights: right once replicas are never roots."""
    return F.cross_entropy(model(batch)[batch.is_root], batch.y[batch.is_root], reduction="sum")


def _plain_steps(model, loss, batches: list) -> list[torch.Tensor]:
    """The reference: the unpadded batches, the ordinary engine, PyTorch's AdaGrad."""
    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.1, foreach=False)
    losses = []
    for batch in batches:
        optimizer.zero_grad()
        value = loss(model, batch)
        value.backward()
        optimizer.step()
        losses.append(value.detach())
    return losses


def test_replicas_are_never_roots():
    batch = Batch.from_data_list(_sentences(5, seed=6))
    padded = pad(batch)  # levels rounded up to 8: the levels above a batch's top copy a root
    real = padded.node_weight.bool()
    assert batch.is_root[padded.source[~real]].any(), "no replica copies a root: the test would prove nothing"
    assert int(padded.is_root.sum()) == int(batch.is_root.sum()) == 5
    assert not padded.is_root[~real].any()
    assert torch.equal(padded.is_root[real], batch.is_root[padded.source[real]])
    # A replica reads its source's children (its slots), so it is a leaf where its source is.
    assert torch.equal(padded.is_leaf, batch.is_leaf[padded.source])


def test_graph_attributes_are_carried_refilled_and_keyed():
    trees = _two_leaf_trees(11, seed=9)
    first = Batch.from_data_list(trees[:3])
    relabelled = first.clone()
    relabelled.graph_y = (relabelled.graph_y + 1) % 5  # the same shape, other graph labels: another loss
    four = Batch.from_data_list(trees[3:7])  # the same level shape, one graph more
    last = Batch.from_data_list(trees[7:10])
    buckets = Buckets(exact_below=1)
    assert padded_batch(first, buckets)[0] == padded_batch(four, buckets)[0]

    padded = pad(first, buckets)
    assert torch.equal(padded.graph_y, first.graph_y) and padded.num_graphs == 3
    # As many edges as graphs: PyG's size test takes graph_y for a per-edge attribute too; a row per graph wins.
    odd = Batch.from_data_list(_with_graph_y([from_ptb("(1 (2 a) (3 b))"), from_ptb("(1 a)")], seed=1))
    assert odd.num_edges == odd.num_graphs == 2
    assert torch.equal(pad(odd).graph_y, odd.graph_y)

    torch.manual_seed(0)
    plain = _classifier("nary").double()
    net = copy.deepcopy(plain)
    batches = [first, relabelled, four, last, four]
    want = _plain_steps(plain, _graph_loss, batches)
    step = ReplayedStep(net, CapturableAdagrad(net.parameters(), lr=0.1), loss=_graph_loss, buckets=buckets)
    got = [step(batch) for batch in batches]
    torch.testing.assert_close(torch.stack(got), torch.stack(want), rtol=1e-12, atol=1e-10)
    assert len(step.stats.shapes) == 1 and len(step.replayer) == 2  # one level shape, served per graph count
    for a, b in zip(net.parameters(), plain.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_a_padded_batch_pools_per_graph_with_one_row_more():
    batch = Batch.from_data_list(_sentences(5, seed=7))
    padded = pad(batch, Buckets(exact_below=2, level_step=4))
    real = padded.node_weight.bool()
    assert padded.num_graphs == 5
    assert torch.equal(padded.batch[real], batch.batch[padded.source[real]])
    assert torch.all(padded.batch[~real] == 5)
    torch.manual_seed(0)
    model = _classifier("nary").double()
    with torch.no_grad():
        h_plain, h_padded = model(batch), model(padded)
    for pool in (global_add_pool, global_mean_pool, global_max_pool):
        want = pool(h_plain, batch.batch)
        got = pool(h_padded, padded.batch)
        assert got.size(0) == 6  # the real graphs' rows, then the replicas'
        torch.testing.assert_close(got[:5], want, rtol=1e-12, atol=1e-12)
        # The line the docstring advises gives the same on the plain batch and on the padded one.
        torch.testing.assert_close(pool(h_padded, padded.batch, size=padded.num_graphs + 1)[:padded.num_graphs], want,
                                   rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(pool(h_plain, batch.batch, size=batch.num_graphs + 1)[:batch.num_graphs], want,
                                   rtol=1e-12, atol=1e-12)
    with pytest.raises(RuntimeError, match="out of bounds"):  # size=num_graphs: the replicas' id is past it
        global_add_pool(h_padded, padded.batch, size=padded.num_graphs)
    # Rows are level-sorted, not grouped by graph: no ptr can describe them.
    with pytest.raises(ReplayError, match="ptr"):
        _ = padded.ptr
    with pytest.raises(ReplayError, match="ptr"):
        padded["ptr"]
    # A single graph without a batch vector: graph 0, and the replicas' graph 1.
    single = pad(_dag(), Buckets(exact_below=2, level_step=4))
    assert single.num_graphs == 1
    assert torch.equal(single.batch, (single.node_weight == 0).long())


def test_a_loss_over_the_roots_passes_the_check_and_is_the_plain_one():
    trees = _sentences(15, seed=10)
    batches = [Batch.from_data_list(trees[k:k + 5]) for k in (0, 5, 10)]
    torch.manual_seed(0)
    plain = _classifier("child_sum").double()
    net = copy.deepcopy(plain)
    want = _plain_steps(plain, _root_loss, batches)
    step = ReplayedStep(net, CapturableAdagrad(net.parameters(), lr=0.1), loss=_root_loss)
    got = [step(batch) for batch in batches]
    torch.testing.assert_close(torch.stack(got), torch.stack(want), rtol=1e-12, atol=1e-10)
    assert step.replayable and step.stats.padded_eager == 3


def _mean_loss(model, batch):
    return model(batch).mean()  # every row counts, replicas too


def _pooled_loss_with_the_replica_row(model, batch):
    return F.cross_entropy(global_mean_pool(model(batch), batch.batch), batch.graph_y, reduction="sum")


def _pooled_sum_with_the_replica_row(model, batch):
    return global_add_pool(model(batch), batch.batch).pow(2).sum()  # no shape error: silently one row more


@pytest.mark.parametrize(("loss", "says"), [
    (_mean_loss, "read 'word'"),  # the attribute the loss read that replicas copy
    (_pooled_loss_with_the_replica_row, "read 'batch'"),
    (_pooled_sum_with_the_replica_row, "read 'batch'"),
], ids=["mean over all rows", "pooled, shapes differ", "pooled, silently"])
@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_a_loss_that_padding_changes_is_caught_at_the_first_step(loss, says, dropout):
    torch.manual_seed(0)
    net = TreeClassifier(NodeEmbedding(30, D), NaryTreeLSTM(D, D), 5, dropout=dropout).double()
    before = copy.deepcopy(net.state_dict())
    step = ReplayedStep(net, CapturableAdagrad(net.parameters(), lr=0.1), loss=loss)
    batch = Batch.from_data_list(_with_graph_y(_sentences(5, seed=8), seed=8))
    with pytest.raises(ReplayError, match="node_weight") as caught:
        step(batch)
    assert says in str(caught.value)
    assert "replica" in str(caught.value)
    # Caught before any update, and the model left in its mode.
    for key, value in net.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert net.training and net.cell.training


def test_the_check_leaves_the_random_stream_and_passes_dropout():
    batch = Batch.from_data_list(_with_graph_y(_sentences(6, seed=11), seed=11))
    params = []
    for checked in (False, True):
        torch.manual_seed(0)
        net = TreeClassifier(NodeEmbedding(30, D), NaryTreeLSTM(D, D), 5, dropout=0.5, input_dropout=0.2)
        step = ReplayedStep(net, CapturableAdagrad(net.parameters(), lr=0.1), loss=_graph_loss)
        step._checked = checked  # True: as if checked before, so this step draws the training masks only
        torch.manual_seed(1)
        step(batch)
        step(batch)
        params.append([p.detach().clone() for p in net.parameters()])
    for a, b in zip(*params, strict=True):
        assert torch.equal(a, b)  # the check drew nothing from the training's random stream


def test_a_replayed_step_refuses_an_optimizer_a_graph_cannot_hold():
    net = _classifier("nary")
    params = list(net.parameters())
    for optimizer in (torch.optim.Adagrad(params, lr=0.1), torch.optim.Adam(params, lr=0.1),
                      torch.optim.RMSprop(params, lr=0.1), make_optimizer("adagrad", params, 0.1, dense=False),
                      make_optimizer("adagrad", params, 0.1)):
        with pytest.raises(ValueError, match="capturable=True") as caught:
            ReplayedStep(net, optimizer)
        assert type(optimizer).__name__ in str(caught.value) and "CapturableAdagrad" in str(caught.value)
    for optimizer in (CapturableAdagrad(params, lr=0.1), make_optimizer("adagrad", params, 0.1, capturable=True),
                      make_optimizer("sgd", params, 0.1, capturable=True), torch.optim.SGD(params, lr=0.1),
                      torch.optim.Adam(params, lr=0.1, capturable=True)):
        ReplayedStep(net, optimizer)


# --------------------------------------------------------------------------- captured graphs, on a GPU

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")


@cuda
@pytest.mark.parametrize("model", MODELS)
def test_the_replayed_step_equals_the_plain_step_on_a_gpu(model):
    torch.manual_seed(0)
    device = torch.device("cuda")
    plain = _classifier(model).double().to(device)
    replayed = copy.deepcopy(plain)
    plain_opt = CapturableAdagrad(plain.parameters(), lr=0.1)
    step = ReplayedStep(replayed, CapturableAdagrad(replayed.parameters(), lr=0.1))
    trees = _sentences(12, seed=4)
    # Batches of the same two shapes, again and again: the later ones replay.
    batches = [Batch.from_data_list(trees[k:k + 3]) for k in (0, 3)] * 3
    for batch in batches:
        plain_opt.zero_grad()
        on_device = batch.to(device)
        want = node_loss(plain(on_device), on_device.y)
        want.backward()
        plain_opt.step()
        got = step(batch)
        torch.testing.assert_close(got, want.detach(), rtol=1e-10, atol=1e-10)
    assert step.replayable
    # The first batch runs eagerly, then is captured; every later one replays (a new shape after a capture).
    assert step.stats.captures == len(step.stats.shapes)
    assert step.stats.padded_eager == 1 and step.stats.replayed == 5
    for a, b in zip(replayed.parameters(), plain.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


@cuda
def test_a_replay_reads_the_new_batch_not_the_captured_one():
    torch.manual_seed(0)
    device = torch.device("cuda")
    net = _classifier("nary").to(device)
    step = ReplayedStep(net, CapturableAdagrad(net.parameters(), lr=0.0))  # lr 0: the weights stay
    first = Batch.from_data_list(_sentences(3, seed=5))
    second = first.clone()
    second.y = (second.y + 1) % 5  # the same shape, other labels: another loss
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        step(first)
        replayed = step(second)
    assert step.stats.replayed == 1
    with torch.no_grad():
        on_device = second.to(device)
        want = node_loss(net(on_device), on_device.y)
    torch.testing.assert_close(replayed, want, rtol=1e-5, atol=1e-5)


def test_performance_pages_gpu_tables_are_what_its_command_prints():
    """The GPU tables of docs/performance.md (linked from README) are what their command prints."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    page = (root / "docs" / "performance.md").read_text()
    command = "python benchmarks/gpu_step.py --table benchmarks/results/gpu/step.json benchmarks/results/gpu/epoch.json"
    assert command in page
    printed = subprocess.run([sys.executable, *command.split()[1:]], cwd=root, capture_output=True, text=True,
                             timeout=300, check=True).stdout
    got = page.split("<!-- results:gpu -->\n", 1)[1].split("\n<!-- /results:gpu -->", 1)[0]
    assert got == printed.strip(), "docs/performance.md's GPU tables differ from the --table of the committed results"


def test_the_gpu_benchmark_runs_in_a_short_form_on_the_cpu(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    out = tmp_path / "step.json"
    subprocess.run([sys.executable, "benchmarks/gpu_step.py", "--device", "cpu", "--cells", "nary,bicontree",
                    "--batch-sizes", "25", "--workload", "25", "--reps", "1", "--epoch", "--epoch-trees", "50",
                    "--out", str(out)], cwd=root, capture_output=True, text=True, timeout=600, check=True,
                   env={**os.environ, "GRAPHTREE_NATIVE": "0"})  # never a kernel build inside this test
    results = json.loads(out.read_text())
    rows = {(r["model"], r["mode"]) for r in results["rows"]}
    # BiConTree, top-down pass and all, replays too.
    assert rows == {("nary", "eager"), ("nary", "replayed"), ("bicontree", "eager"), ("bicontree", "replayed"),
                    ("plain", "eager"), ("lstm", "eager")}
    assert {(r["model"], r["mode"], r["epoch"]) for r in results["epochs"]} == {
        ("nary", "replayed", 1), ("nary", "replayed", 2), ("nary", "eager", 1)}


# --------------------------------------------------------------------------- the capture loop, without a GPU


class _FakeCuda:
    """Stand-ins for torch.cuda's streams and graphs, so that the capture loop's own logic (warm-up, capture,
    bookkeeping, fallbacks) runs on the CPU: a capture runs its block eagerly, a replay does nothing (its output
    is the captured one). ``capturing`` says whether a block runs inside a capture."""

    def __init__(self, monkeypatch) -> None:
        self.capturing, self.captured, self.replays = False, 0, 0
        fake = self

        class Stream:
            def __init__(self, device=None) -> None:
                pass

            def wait_stream(self, other) -> None:
                pass

        class Graph:
            def replay(self) -> None:
                fake.replays += 1

        @contextlib.contextmanager
        def graph(cuda_graph, pool=None):
            fake.capturing = True
            try:
                yield
            finally:
                fake.capturing = False
            fake.captured += 1

        monkeypatch.setattr(torch.cuda, "Stream", Stream)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
        monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
        monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
        monkeypatch.setattr(torch.cuda, "graph", graph)
        monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: object())


def test_the_evaluation_pass_warms_up_captures_and_replays_each_shape(monkeypatch):
    fake = _FakeCuda(monkeypatch)
    torch.manual_seed(0)
    net = _classifier("nary").double().eval()
    calls = []

    def forward(model, batch):
        calls.append(fake.capturing)
        return model(batch)

    evaluate = ReplayedForward(net, forward, lambda model, batch: model(batch), graphs=True)
    batch = Batch.from_data_list(_sentences(5, seed=7))
    with torch.no_grad():
        want = net(batch)
    torch.testing.assert_close(evaluate(batch), want, rtol=1e-12, atol=1e-12)  # the captured output, in node order
    assert calls == [False, True]  # a warm-up, then the capture
    evaluate(batch)  # the same shape: replayed, nothing run
    assert calls == [False, True] and fake.replays == 2
    assert evaluate.captures == 1 and evaluate.passes == dict(replayed=2, padded=0, eager=0)
    assert evaluate.record()["path"] == "replayed"


def test_an_evaluation_pass_a_graph_cannot_hold_runs_padded_and_one_that_asks_the_host_runs_plainly(monkeypatch):
    fake = _FakeCuda(monkeypatch)
    torch.manual_seed(0)
    net = _classifier("nary").double().eval()
    batch = Batch.from_data_list(_sentences(5, seed=7))
    with torch.no_grad():
        want = net(batch)

    def uncapturable(model, batch):
        if fake.capturing:
            raise RuntimeError("operation not permitted when stream is capturing")
        return model(batch)

    evaluate = ReplayedForward(net, uncapturable, lambda model, batch: model(batch), graphs=True)
    with pytest.warns(UserWarning, match="could not be captured"):
        got = evaluate(batch)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert not evaluate.graphs and evaluate.captures == 0 and evaluate.passes["padded"] == 1

    def host_bound(model, batch):  # raised at the warm-up: not a failed capture, a pass that cannot be padded
        raise ReplayError("reads the host")

    evaluate = ReplayedForward(net, host_bound, lambda model, batch: model(batch), graphs=True)
    with pytest.warns(UserWarning, match="not replayed"):
        got = evaluate(batch)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert not evaluate.replayable and evaluate.fallback == "reads the host" and len(evaluate.replayer) == 0
    assert evaluate.passes == dict(replayed=0, padded=0, eager=1) and fake.captured == 0


def test_the_step_trains_its_first_batch_then_captures_and_replays(monkeypatch):
    fake = _FakeCuda(monkeypatch)
    torch.manual_seed(0)
    net = _classifier("nary").double()
    step = ReplayedStep(net, CapturableAdagrad(net.parameters(), lr=0.1))
    step.graphs = True  # as on a GPU; the fake graph runs the captured step on the CPU
    first, other = Batch.from_data_list(_sentences(6, seed=1)), Batch.from_data_list(_sentences(40, seed=2))
    step(first)  # checked, trained eagerly, then captured
    assert fake.captured == 1 and step.stats.captures == 1 and step.stats.padded_eager == 1
    assert all(p.grad is None for p in net.parameters())  # the capture's gradients are not left behind
    step(first)  # replayed
    assert step.stats.replayed == 1 and fake.replays == 1
    assert padded_batch(other, step.buckets)[0] != padded_batch(first, step.buckets)[0]
    step(other)  # a new shape, warm already: captured at once, then its first replay
    assert fake.captured == 2 and step.stats.captures == 2 and step.stats.replayed == 2
    assert step.stats.capture_seconds > 0 and step.replayable


def test_a_step_a_graph_cannot_hold_runs_eagerly(monkeypatch):
    fake = _FakeCuda(monkeypatch)
    torch.manual_seed(0)
    net = _classifier("nary").double()

    def loss(model, batch):
        if fake.capturing:
            raise RuntimeError("operation not permitted when stream is capturing")
        return weighted_node_loss(model(batch), batch.y, batch.node_weight)

    step = ReplayedStep(net, CapturableAdagrad(net.parameters(), lr=0.1), loss=loss)
    step.graphs = True
    batch = Batch.from_data_list(_sentences(6, seed=1))
    with pytest.warns(UserWarning, match="could not be captured"):
        step(batch)
    assert not step.replayable and step.reason.startswith("the step could not be captured")
    assert len(step.replayer) == 0 and all(p.grad is None for p in net.parameters())
    step(batch)
    assert step.stats.eager == 1 and step.stats.padded_eager == 1 and step.stats.captures == 0
