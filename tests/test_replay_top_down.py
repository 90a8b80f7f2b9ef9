"""Padded top-down plans (graphtree.replay): the top-down pass on a padded batch equals the plain pass on every
graph family, its counts by position are fixed by the bucket shape, and its replicas are inert.

The plain pass is the reference (TopDownTreeLSTM's ``update`` is checked against a per-node recursive reference
in test_teng_zhang.py); float64 on both sides.
"""

from __future__ import annotations

import random

import pytest
import torch
from test_replay import Averaged, _dag, _states_and_grads, _trees
from torch_geometric.data import Batch, Data
from trees import chain_ptb, random_ptb

from graphtree.backend import dispatch, native
from graphtree.data import from_ptb
from graphtree.engine import propagate
from graphtree.errors import HostValueError
from graphtree.nn import TopDownTreeLSTM
from graphtree.replay import Buckets, pad, padded_batch
from graphtree.replay.padding import padded_slots
from graphtree.schedule import Schedule

D = 5


class _AveragedDown(Averaged):
    """A top-down cell of a user's own: the mean of the parents' states plus the input. It divides by the
    number of parents, so a replica below the roots without a parent would be 0 / 0 (NaN, and a NaN gradient
    even at weight 0)."""

    direction = "top_down"


CELLS = {
    "top_down": lambda: TopDownTreeLSTM(D, D, n_ary=4),
    "top_down_shared": lambda: TopDownTreeLSTM(D, D, n_ary=4, share_input_weights=True),
    "own": lambda: _AveragedDown(D),
}


def _wide_dag() -> Data:
    # Two roots (5, 6); node 4 under both at positions 0 and 2; node 3 under 4 and 6 at position 1 of each; the
    # leaves 0-2 under 3 and 4, node 2 twice under 3 (positions 0 and 3): parents at several levels and positions.
    edge_index = torch.tensor([[4, 4, 3, 3, 0, 1, 1, 2, 2, 3],
                               [5, 6, 4, 6, 3, 3, 4, 3, 3, 5]])
    edge_pos = torch.tensor([0, 2, 1, 1, 1, 2, 0, 0, 3, 3])
    return Data(edge_index=edge_index, edge_pos=edge_pos, num_nodes=7)


def _positioned(graph: Data) -> Data:
    """``graph`` with its children's positions stored (numbered in edge order, as a schedule numbers them), so
    that it batches with graphs that store theirs."""
    graph.edge_pos = Schedule.from_data(graph).edge_pos
    return graph


def families() -> dict[str, Batch | Data]:
    rng = random.Random(62)
    return {
        "one node": _trees("(1 a)"),
        "one-node trees (no edges)": _trees("(1 a)", "(2 b)", "(3 c)"),
        "chain (one-node levels)": _trees(chain_ptb(23)),
        "trees": _trees(*[random_ptb(rng.randint(1, 14), 4, rng) for _ in range(9)]),
        "widest arity": _trees("(1 (0 a) (1 b) (2 c) (3 d))", "(2 " + " ".join(f"(1 w{k})" for k in range(4)) + ")"),
        "mixed depths": _trees("(1 a)", chain_ptb(12), random_ptb(9, 4, rng), random_ptb(3, 2, rng)),
        "dag": _dag(),
        "wide dag": _wide_dag(),
        "dags and trees": Batch.from_data_list([_positioned(_dag()), from_ptb(random_ptb(6, 3, rng)), _wide_dag(),
                                                from_ptb("(1 a)")]),
    }


BUCKETS = {"coarse": Buckets(exact_below=2, level_step=4), "default": Buckets()}
CASES = [(cell, family, grid) for cell in CELLS for family in families() for grid in BUCKETS]


@pytest.mark.parametrize(("name", "family", "grid"), CASES, ids=[f"{c}-{f}-{g}" for c, f, g in CASES])
def test_the_padded_top_down_pass_equals_the_plain_pass(name, family, grid):
    torch.manual_seed(len(name) + len(family))
    cell = CELLS[name]().double()
    graph = families()[family]
    n = graph.num_nodes
    x = torch.randn(n, D, dtype=torch.float64)
    weights = [torch.randn(n, D, dtype=torch.float64) for _ in cell.state_channels]
    want = _states_and_grads(cell, x, graph, weights)

    padded = pad(graph, BUCKETS[grid])
    source, real = padded.source, padded.node_weight.bool()
    assert padded.schedule.plan("top_down").num_nodes > n  # replicas in the top-down plan too
    got = _states_and_grads(cell, x[source], padded, [w[source] * real.unsqueeze(1) for w in weights])
    num_states = len(want) - 1 - len(list(cell.parameters()))
    for k in range(num_states):
        # Every padded row, bottom-up replicas too, holds the top-down states of the node it copies.
        torch.testing.assert_close(got[k], want[k][source], rtol=1e-12, atol=1e-12)
    grad_x = torch.zeros_like(x).index_add_(0, source, got[num_states])
    torch.testing.assert_close(grad_x, want[num_states], rtol=1e-12, atol=1e-12)
    assert torch.all(got[num_states][~real] == 0)  # no replica row is read: its input's gradient is exactly 0
    for g, w in zip(got[num_states + 1:], want[num_states + 1:], strict=True):
        if w is None:
            assert g is None or torch.all(g == 0)
        else:
            assert torch.isfinite(g).all()
            torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("family", list(families()))
def test_every_padded_level_has_the_counts_of_its_shape_and_no_row_without_a_parent(family):
    graph = families()[family]
    shape, tensors = padded_batch(graph, Buckets(exact_below=2, level_step=4), top_down=True)
    slots, positions, order = tensors["down_slots"], tensors["down_slot_pos"], tensors["down_order"]
    rows = sum(shape.down_widths)
    assert slots.shape == (rows, shape.down_slots) and order.shape == (rows,)
    assert len(shape.down_widths) == len(shape.widths) == len(shape.down_counts)
    start = 0
    for level, (width, counts) in enumerate(zip(shape.down_widths, shape.down_counts, strict=True)):
        level_slots, level_pos = slots[start:start + width], positions[start:start + width]
        filled = level_slots != rows
        assert torch.equal(filled, level_pos >= 0)
        # Parents lie in earlier levels; every row below the roots has one; the roots none.
        assert torch.all(level_slots[filled] < start)
        assert bool(filled.any(dim=1).all()) == (level > 0 and shape.down_slots > 0)
        assert not (level == 0 and filled.any())
        # Its filled slots by position are the shape's, whatever the batch.
        by_position = torch.bincount(level_pos[filled], minlength=len(counts)).tolist()
        assert by_position == list(counts), (level, by_position, counts)
        start += width
    # Every padded row returns its source node's row, and every plan row reads a real node's inputs.
    real, source = tensors["node_weight"].bool(), tensors["source"]
    assert torch.all(real[order])
    assert torch.equal(source[order[tensors["down_rank"]]], source)


def test_the_top_down_shape_and_replicas_by_hand():
    # The root (depth 0); x = (2 a) at position 0 and y = (3 ...) at 1 (depth 1); b at 0 and c at 1 under y.
    batch = _trees("(1 (2 a) (3 (4 b) (0 c)))")
    shape, tensors = padded_batch(batch, Buckets(exact_below=2, level_step=4), top_down=True)
    # Segments [0], [1], [2, 3]: each depth's slots at positions 0 and 1 are (1, 1); depth 3 (past the deepest)
    # takes depth 2's segment's.
    assert shape.down_widths == (1, 2, 2, 2) and shape.down_slots == 1
    assert shape.down_counts == ((0, 0), (1, 1), (1, 1), (1, 1))
    depth, source = batch.depth, tensors["source"]
    order = tensors["down_order"]
    assert depth[source[order]].tolist() == [0, 1, 1, 2, 2, 2, 2]  # depth 3 runs depth 2's first node again
    assert source[order[5]] == source[order[6]] == source[order[3]]
    # ... from its parent (row 2, y), at position 0 and then 1, as the level's blocks need.
    assert tensors["down_slots"].view(-1).tolist() == [7, 0, 0, 2, 2, 2, 2]
    assert tensors["down_slot_pos"].view(-1).tolist() == [-1, 0, 1, 0, 1, 0, 1]
    # Rounding: 3 nodes at position 0 in a level take a block of 4.
    wide = _trees("(1 (2 a) (3 b))", "(1 (2 a) (3 b))", "(1 (2 a) (3 b))")
    shape, _ = padded_batch(wide, Buckets(exact_below=2, level_step=4), top_down=True)
    assert shape.down_counts[1] == (4, 4) and shape.down_widths[:2] == (4, 8)


def test_a_dags_padded_levels_have_a_row_per_node_and_one_per_replica_slot():
    graph = _wide_dag()
    shape, _ = padded_batch(graph, Buckets(exact_below=2, level_step=4), top_down=True)
    assert shape.down_slots == 3  # node 2 has three parent slots (3 twice, 4)
    depth = Schedule.from_data(graph).depth
    child = graph.edge_index[0]
    for level, (width, counts) in enumerate(zip(shape.down_widths, shape.down_counts, strict=True)):
        if level == 0:
            continue
        nodes = (depth == level).nonzero().view(-1)
        slots = int(torch.isin(child, nodes).sum())
        # Rows: the level's nodes, and one per slot its replicas add (each has one parent).
        assert width == len(nodes) + sum(counts) - slots, level


def test_a_padded_batch_without_its_top_down_plan_says_how_to_make_one():
    batch = _trees("(1 (2 a) (3 b))")
    padded = pad(batch, top_down=False)
    cell = TopDownTreeLSTM(D, D)
    with pytest.raises(HostValueError, match="top_down=True"):
        cell(torch.randn(padded.num_nodes, D), padded)
    # A bottom-up cell run top-down through the engine works on a padded batch made with its top-down plan.
    padded = pad(batch)
    x = torch.randn(batch.num_nodes, D, dtype=torch.float64)
    own = Averaged(D).double()
    (want,) = propagate(own, {"x": x}, batch, direction="top_down")
    (got,) = propagate(own, {"x": x[padded.source]}, padded, direction="top_down")
    torch.testing.assert_close(got, want[padded.source], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("split", [None, 4])
def test_padded_slots_are_each_levels_block_padded(split):
    # A hub of 9 children beside binary nodes: split by width (split cost 4), its level's nodes run as levels
    # of their own widths; and a graph with no edges, whose plan has no slots at all.
    hub = _trees("(1 " + " ".join(f"(0 w{k})" for k in range(9)) + ")", "(1 (2 a) (3 (4 b) (0 c)))", "(2 x)")
    for graph in (hub, _trees("(1 a)", "(2 b)")):
        for direction in ("bottom_up", "top_down"):
            plan = Schedule.from_data(graph).plan(direction, split)
            index, position = padded_slots(plan)
            widest = max(plan.widths, default=0)
            assert index.shape == position.shape == (plan.num_nodes, widest)
            for (a, b, w), rows, pos in zip(zip(plan.ptr, plan.ptr[1:], plan.widths), plan.slots, plan.slot_pos):
                assert torch.equal(index[a:b, :w], rows) and torch.equal(position[a:b, :w], pos)
                assert torch.all(index[a:b, w:] == plan.num_nodes) and torch.all(position[a:b, w:] == -1)


@pytest.mark.parametrize("family", ["trees", "widest arity", "mixed depths", "one-node trees (no edges)"])
def test_the_compiled_top_down_kernel_reads_the_padded_plans_position_groups(kernels, family):
    # On the CPU in float32 the engine runs TopDownTreeLSTM's compiled kernel (a weight set per block of
    # position_groups) on a padded forest too: the shape's groups must be the rows' positions.
    graph = families()[family]
    padded = pad(graph, Buckets(exact_below=2, level_step=4))
    torch.manual_seed(0)
    cell = TopDownTreeLSTM(D, D, n_ary=4)
    x = torch.randn(graph.num_nodes, D)[padded.source]
    weights = [torch.randn(padded.num_nodes, D) * padded.node_weight.unsqueeze(1) for _ in range(2)]
    decided = []
    original = dispatch.bound_kernel

    def spy(*args):
        made = original(*args)
        decided.append(made is not None)
        return made

    dispatch.bound_kernel = spy
    try:
        with native.use_native(True):
            fast = _states_and_grads(cell, x, padded, weights)
    finally:
        dispatch.bound_kernel = original
    assert decided and all(decided)
    with native.use_native(False):
        want = _states_and_grads(cell, x, padded, weights)
    for got, expected in zip(fast, want, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
