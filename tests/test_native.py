"""The compiled level kernels (graphtree/csrc) against the recursive references and the PyTorch path.

The recursive references (``nary_reference`` in ``test_tai_cells``,
``reference`` in ``test_slstm`` and ``test_lstm_rnn``, ``ref_lexicalized`` and ``ref_top_down`` in
``test_teng_zhang``) run in float64, one node at a time; the kernels only take
float32, so the tolerances here are float32's. Skipped, with the reason, where the kernels cannot be
built (no C++ compiler or ninja).
"""

from __future__ import annotations

import copy
import random
import subprocess
import sys
from pathlib import Path

import pytest
import test_lstm_rnn
import test_slstm
import test_tai_cells as tai
import test_teng_zhang as teng
import torch
from torch_geometric.data import Batch, Data
from trees import random_ptb

import graphtree.backend.native as native
from graphtree import settings
from graphtree.data import from_ptb
from graphtree.nn import (
    LSTMRNN,
    SLSTM,
    ChildSumTreeLSTM,
    HeadLexicalization,
    LexicalizedTreeLSTM,
    NaryTreeLSTM,
    TopDownTreeLSTM,
)


def _run(cell, x, batch, weights):
    h, c = cell(x, batch)
    loss = (h * weights[0]).sum() + (c * weights[1]).sum()
    return (h, c, *torch.autograd.grad(loss, [x, *cell.parameters()]))


def _reference(cell, x, batch, weights, reference):
    """The recursive float64 reference on float64 copies of the cell and inputs, cast back to float32."""
    cell64 = copy.deepcopy(cell).double()
    x64 = x.detach().double().requires_grad_()
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # the N-ary reference makes its zero states in the default dtype
    try:
        h, c = reference(cell64, x64, batch)
    finally:
        torch.set_default_dtype(previous)
    loss = (h * weights[0].double()).sum() + (c * weights[1].double()).sum()
    grads = torch.autograd.grad(loss, [x64, *cell64.parameters()])
    return tuple(t.float() for t in (h, c, *grads))


@pytest.mark.parametrize("setting", ["constituency", "general"])
@pytest.mark.parametrize("n_ary", [2, 3])
def test_kernels_match_the_recursive_reference(kernels, n_ary, setting, monkeypatch):
    # Either setting runs the whole pass in the engine's compiled level loop.
    monkeypatch.setattr(tai, "HID", 16)
    torch.manual_seed(n_ary)
    cell = NaryTreeLSTM(tai.IN, 16, n_ary=n_ary, setting=setting)
    batch = tai.mixed_batch(max_arity=n_ary, seed=n_ary + 10)
    _assert_kernels_match_reference(kernels, cell, batch, tai.IN, ["NaryLevels"], tai.nary_reference, monkeypatch)


def test_compiled_level_loop_on_a_dag(kernels, monkeypatch):
    # Node 3 and leaf 5 have two parents each: their gradients arrive from two slots, in two levels for 5.
    monkeypatch.setattr(tai, "HID", 16)
    torch.manual_seed(7)
    dag = Data(edge_index=torch.tensor([[1, 2, 3, 4, 5, 5, 3], [0, 0, 1, 1, 3, 2, 2]]),
               edge_pos=torch.tensor([0, 1, 0, 1, 0, 1, 0]), num_nodes=6)
    batch = Batch.from_data_list([dag, from_ptb("(1 (2 a) (3 (4 b) (0 c)))"), dag])
    cell = NaryTreeLSTM(tai.IN, 16)
    _assert_kernels_match_reference(kernels, cell, batch, tai.IN, ["NaryLevels"], tai.nary_reference, monkeypatch)


@pytest.mark.parametrize("frozen", ["inputs", "leaf unit", "gates", "child-sum inputs", "child-sum forget",
                                    "s-lstm inputs", "s-lstm peepholes", "lstm-rnn inputs", "lstm-rnn leaves",
                                    "lexicalized inputs", "lexicalized peepholes", "top-down inputs",
                                    "top-down peepholes"])
def test_compiled_level_loop_with_frozen_parts(kernels, frozen, monkeypatch):
    # Only what needs a gradient gets one; the rest agrees with the PyTorch path.
    torch.manual_seed(1)
    cell = (ChildSumTreeLSTM(9, 12) if frozen.startswith("child-sum")
            else SLSTM(9, 12, leaf="lstm") if frozen.startswith("s-lstm")
            else LexicalizedTreeLSTM(9, 12) if frozen.startswith("lexicalized")
            else TopDownTreeLSTM(9, 12) if frozen.startswith("top-down")
            else LSTMRNN(9, 9) if frozen.startswith("lstm-rnn") else NaryTreeLSTM(9, 12))
    if frozen == "leaf unit":
        cell.W_leaf.requires_grad_(False)
    if frozen == "gates":
        cell.U.requires_grad_(False)
        cell.b_U.requires_grad_(False)
    if frozen == "child-sum forget":
        cell.U_f.requires_grad_(False)
    if frozen == "lstm-rnn leaves":
        cell.W_leaf.requires_grad_(False)
    if frozen in ("s-lstm peepholes", "lexicalized peepholes", "top-down peepholes"):
        cell.W_c.requires_grad_(False)
        cell.W_co.requires_grad_(False)
    batch = tai.mixed_batch(max_arity=2, seed=4)
    x = torch.randn(batch.num_nodes, 9, requires_grad=not frozen.endswith("inputs"))
    wanted = [t for t in (x, *cell.parameters()) if t.requires_grad]

    def grads():
        h, c = cell(x, batch)
        return (h, c, *torch.autograd.grad((h.sin().sum() + c.cos().sum()), wanted))

    _assert_compiled_matches_pytorch(kernels, [f"{type(cell).__name__.replace('TreeLSTM', '')}Levels"], grads,
                                     monkeypatch)


def _assert_compiled_matches_pytorch(kernels, kernel_names, run, monkeypatch) -> None:
    """``run()`` on the compiled level loop (each of ``kernel_names`` must run) against ``run()`` on PyTorch."""
    calls = _count_calls(kernels, kernel_names, monkeypatch)
    with native.use_native(True):
        fast = run()
    assert all(calls.values()), f"the compiled level loop was not used: {calls}"
    with native.use_native(False):
        plain = run()
    for a, b in zip(fast, plain, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)


def _assert_kernels_match_reference(kernels, cell, batch, in_channels, kernel_names, reference, monkeypatch):
    """The cell with its kernels (each of ``kernel_names`` must run) against the float64 recursive reference."""
    x = torch.randn(batch.num_nodes, in_channels, requires_grad=True)
    weights = torch.randn(batch.num_nodes, 16), torch.randn(batch.num_nodes, 16)
    calls = _count_calls(kernels, kernel_names, monkeypatch)
    with native.use_native(True):
        got = _run(cell, x, batch, weights)
    assert all(calls.values()), f"the kernels were not used: {calls}"
    expected = _reference(cell, x, batch, weights, reference=reference)
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)


def _count_calls(kernels, names, monkeypatch) -> dict[str, int]:
    calls = dict.fromkeys(names, 0)
    for name in names:
        original = getattr(kernels, name)

        def counted(*args, _name=name, _original=original):
            calls[_name] += 1
            return _original(*args)
        monkeypatch.setattr(kernels, name, counted)
    return calls


def test_child_sum_kernels_match_the_recursive_reference(kernels, monkeypatch):
    # Trees whose nodes have up to five children: levels with several slot counts.
    monkeypatch.setattr(tai, "HID", 16)
    torch.manual_seed(4)
    cell = ChildSumTreeLSTM(tai.IN, 16)
    rng = random.Random(7)
    batch = Batch.from_data_list([from_ptb(random_ptb(rng.randint(1, 15), 5, rng)) for _ in range(10)])
    _assert_kernels_match_reference(kernels, cell, batch, tai.IN, ["ChildSumLevels"], tai.child_sum_reference,
                                    monkeypatch)


def test_child_sum_compiled_level_loop_on_a_dag(kernels, monkeypatch):
    # Nodes with several parents and levels with several slot counts, in the compiled level loop.
    monkeypatch.setattr(tai, "HID", 16)
    torch.manual_seed(6)
    dag = Data(edge_index=torch.tensor([[1, 2, 3, 4, 4, 5, 5, 5, 3], [0, 0, 0, 1, 2, 1, 2, 3, 2]]),
               edge_pos=torch.tensor([0, 1, 2, 0, 0, 1, 1, 0, 2]), num_nodes=6)
    batch = Batch.from_data_list([dag, from_ptb("(1 (2 a) (3 b) (4 (0 c)))"), dag])
    _assert_kernels_match_reference(kernels, ChildSumTreeLSTM(tai.IN, 16), batch, tai.IN, ["ChildSumLevels"],
                                    tai.child_sum_reference, monkeypatch)


@pytest.mark.parametrize(("in_channels", "leaf"), [(16, "embedding"), (7, "lstm")])
def test_slstm_kernels_match_the_recursive_reference(kernels, in_channels, leaf, monkeypatch):
    torch.manual_seed(1)
    cell = SLSTM(in_channels, 16, leaf=leaf)
    rng = random.Random(5)
    batch = Batch.from_data_list([from_ptb(random_ptb(rng.randint(1, 15), 2, rng)) for _ in range(10)]
                                 + [from_ptb("(1 (2 lone))")])
    # The whole pass runs in the engine's compiled level loop.
    _assert_kernels_match_reference(kernels, cell, batch, in_channels, ["SLSTMLevels"], test_slstm.reference,
                                    monkeypatch)


@pytest.mark.parametrize("activation", ["tanh", "softsign", "sigmoid"])
def test_lstm_rnn_kernels_match_the_recursive_reference(kernels, activation, monkeypatch):
    torch.manual_seed(2)
    cell = LSTMRNN(16, 16, activation=activation)
    rng = random.Random(6)
    batch = Batch.from_data_list([from_ptb(random_ptb(rng.randint(1, 15), 2, rng)) for _ in range(10)]
                                 + [from_ptb("(1 (2 lone))")])
    # The whole pass runs in the engine's compiled level loop.
    _assert_kernels_match_reference(kernels, cell, batch, 16, ["LSTMRNNLevels"], test_lstm_rnn.reference,
                                    monkeypatch)


def test_lstm_rnn_compiled_level_loop_on_a_dag(kernels, monkeypatch):
    # The kernel computes, for each node, only the maps its parents read, by the node's position under them:
    # node 3 is child 0 of node 1 and child 1 of node 2, leaf 4 child 1 of node 1 and child 0 of node 2 (both
    # need every map), and the batch's trees have roots on several levels (nodes that need none).
    torch.manual_seed(8)
    dag = Data(edge_index=torch.tensor([[1, 2, 3, 4, 5, 4, 3], [0, 0, 1, 1, 3, 2, 2]]),
               edge_pos=torch.tensor([0, 1, 0, 1, 0, 0, 1]), num_nodes=6)
    rng = random.Random(9)
    trees = [from_ptb(random_ptb(rng.randint(1, 9), 2, rng)) for _ in range(6)]
    batch = Batch.from_data_list([dag, *trees, from_ptb("(1 (2 lone))"), dag])
    cell = LSTMRNN(16, 16)
    _assert_kernels_match_reference(kernels, cell, batch, 16, ["LSTMRNNLevels"], test_lstm_rnn.reference,
                                    monkeypatch)


@pytest.mark.parametrize("make", [lambda: NaryTreeLSTM(8, 8), lambda: LSTMRNN(8, 8)])
def test_a_second_backward_through_a_compiled_pass_is_a_clear_error(kernels, make):
    # The compiled loop frees its saved tensors after the first backward; the Python loop keeps its levels' graphs.
    torch.manual_seed(3)
    cell = make()
    batch = Batch.from_data_list([from_ptb("(1 (2 a) (3 (4 b) (0 c)))"), from_ptb("(3 (2 d) (1 e))")])
    x = torch.randn(batch.num_nodes, 8)
    with native.use_native(True):
        h, _ = cell(x, batch)
        h.sum().backward(retain_graph=True)
        with pytest.raises(RuntimeError, match="second backward through the same graphtree pass"):
            h.sum().backward()
    with native.use_native(False):
        h, _ = cell(x, batch)
        first = torch.autograd.grad(h.sum(), list(cell.parameters()), retain_graph=True)
        second = torch.autograd.grad(h.sum(), list(cell.parameters()))
    for a, b in zip(first, second, strict=True):
        torch.testing.assert_close(a, b)


def _per_tree(trees, reference):
    """A batch reference from ``test_teng_zhang``'s per-tree one."""
    return lambda cell, x, batch: teng.per_tree(trees, x, lambda tree, x_tree: reference(cell, tree, x_tree))


@pytest.mark.parametrize(("lexicalized", "n_ary"), [(True, 2), (False, 2), (True, 3)])
def test_lexicalized_kernels_match_the_recursive_reference(kernels, lexicalized, n_ary, monkeypatch):
    torch.manual_seed(n_ary)
    trees = teng.binary_trees(5) if n_ary == 2 else teng.ternary_trees()
    cell = LexicalizedTreeLSTM(7, 16, n_ary=n_ary, lexicalized=lexicalized)
    # The whole pass runs in the engine's compiled level loop (LexicalizedLevels).
    _assert_kernels_match_reference(kernels, cell, Batch.from_data_list(trees), 7, ["LexicalizedLevels"],
                                    _per_tree(trees, teng.ref_lexicalized), monkeypatch)


@pytest.mark.parametrize("lexicalized", [True, False])
def test_lexicalized_compiled_level_loop_on_a_dag(kernels, lexicalized, monkeypatch):
    # Node 3 and leaf 5 have two parents each, their gradients arriving from two slots: every gradient, the
    # inputs' included, against the float64 recursive reference.
    torch.manual_seed(6)
    dag = Data(edge_index=torch.tensor([[1, 2, 3, 4, 5, 5, 3], [0, 0, 1, 1, 3, 2, 2]]),
               edge_pos=torch.tensor([0, 1, 0, 1, 0, 1, 0]), num_nodes=6)
    trees = [dag, *teng.binary_trees(3), dag]
    cell = LexicalizedTreeLSTM(7, 16, lexicalized=lexicalized)
    _assert_kernels_match_reference(kernels, cell, Batch.from_data_list(trees), 7, ["LexicalizedLevels"],
                                    _per_tree(trees, teng.ref_lexicalized), monkeypatch)


@pytest.mark.parametrize("share", [False, True])
def test_top_down_kernels_match_the_recursive_reference(kernels, share, monkeypatch):
    torch.manual_seed(4)
    trees = teng.binary_trees(9)
    cell = TopDownTreeLSTM(7, 16, share_input_weights=share)
    # Trees: the whole pass runs in the engine's compiled level loop (TopDownLevels).
    _assert_kernels_match_reference(kernels, cell, Batch.from_data_list(trees), 7, ["TopDownLevels"],
                                    _per_tree(trees, teng.ref_top_down), monkeypatch)


def test_top_down_compiled_level_loop_on_ternary_trees_and_a_forest(kernels, monkeypatch):
    # Three parameter sets, levels holding rows of all three positions, and a graph that is two trees.
    torch.manual_seed(8)
    forest = Data(edge_index=torch.tensor([[1, 2, 4, 5, 6], [0, 0, 3, 3, 3]]),
                  edge_pos=torch.tensor([0, 2, 1, 0, 2]), num_nodes=7)
    trees = [forest, *teng.ternary_trees()]
    cell = TopDownTreeLSTM(7, 16, n_ary=3)
    _assert_kernels_match_reference(kernels, cell, Batch.from_data_list(trees), 7, ["TopDownLevels"],
                                    _per_tree(trees, teng.ref_top_down), monkeypatch)


def test_top_down_on_a_dag_runs_its_update(kernels, monkeypatch):
    # Several parents: no kernel (TopDownLevels takes one parent a node), the cell's update on every level.
    torch.manual_seed(5)
    dag = Data(edge_index=torch.tensor([[1, 2, 3, 3, 4, 4, 4, 5], [0, 0, 1, 2, 1, 2, 0, 3]]),
               edge_pos=torch.tensor([0, 1, 1, 0, 0, 2, 2, 0]), num_nodes=6)
    trees = [dag, *teng.ternary_trees(), dag]
    cell = TopDownTreeLSTM(7, 16, n_ary=3)
    calls = _count_calls(kernels, ["TopDownLevels"], monkeypatch)
    _assert_kernels_match_reference(kernels, cell, Batch.from_data_list(trees), 7, [],
                                    _per_tree(trees, teng.ref_top_down), monkeypatch)
    assert calls == {"TopDownLevels": 0}


def test_gated_head_kernels_match_the_recursive_reference(kernels, monkeypatch):
    # Binary gated heads run in the compiled level loop (GatedHeadLevels); unary nodes with their child on the
    # left and on the right take that child's head. Values and every gradient against the float64 reference.
    torch.manual_seed(9)
    right_only = Data(edge_index=torch.tensor([[1, 2, 3], [0, 1, 1]]), edge_pos=torch.tensor([1, 0, 1]),
                      num_nodes=4)
    left_only = Data(edge_index=torch.tensor([[1], [0]]), edge_pos=torch.tensor([0]), num_nodes=2)
    trees = [right_only, left_only, *teng.binary_trees(7)]
    batch = Batch.from_data_list(trees)
    cell = HeadLexicalization(6, "gated")
    x = torch.randn(batch.num_nodes, 6, requires_grad=True)
    upstream = torch.randn(batch.num_nodes, 6)
    calls = _count_calls(kernels, ["GatedHeadLevels"], monkeypatch)
    with native.use_native(True):
        (heads,) = cell(x, batch)
        got = (heads, *torch.autograd.grad((heads * upstream).sum(), [x, *cell.parameters()]))
    assert all(calls.values()), f"the compiled level loop was not used: {calls}"
    cell64 = copy.deepcopy(cell).double()
    x64 = x.detach().double().requires_grad_()
    heads64 = teng.per_tree(trees, x64, lambda tree, x_tree: teng.ref_heads(cell64, tree, x_tree))
    want = (heads64, *torch.autograd.grad((heads64 * upstream.double()).sum(), [x64, *cell64.parameters()]))
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b.float(), atol=2e-5, rtol=1e-4)


def test_bicontree_runs_every_pass_in_the_compiled_loop(kernels, monkeypatch):
    # Heads, bottom-up, top-down and leaf sums: each pass on its kernel, the logits and gradients as on PyTorch.
    from graphtree.models import BiTreeLSTM

    torch.manual_seed(10)
    trees = teng.binary_trees(11)
    batch = Batch.from_data_list(trees)
    model = BiTreeLSTM(6, 8, num_classes=3, mlp_channels=5)
    x = torch.randn(batch.num_nodes, 6, requires_grad=True)

    def run():
        logits = model(x, batch)
        return (logits, *torch.autograd.grad(logits.pow(2).sum(), [x, *model.parameters()]))

    _assert_compiled_matches_pytorch(kernels, ["GatedHeadLevels", "LexicalizedLevels", "TopDownLevels",
                                               "FixedCombinationLevels"], run, monkeypatch)


def test_side_by_side_passes_give_what_they_give_on_one_thread(kernels, monkeypatch):
    # BiConTree's two directions on two threads at once, forward and backward: each pass on one thread, so its
    # states and every gradient are those of the two passes run one after the other on one thread, to rounding.
    # Not bit for bit: nothing in the arithmetic promises it, as the BLAS may block a product otherwise inside
    # a worker thread of an OpenMP region (on an Intel Xeon with AVX-512 the bottom-up cell's weight gradients
    # came out up to 6.7e-6 apart, its states and input gradients equal).
    import graphtree.engine as engine

    torch.manual_seed(11)
    rng = random.Random(5)
    # Large levels too (a few hundred rows), where a product on two threads is split over both.
    batch = Batch.from_data_list([from_ptb(random_ptb(rng.randint(1, 40), 2, rng)) for _ in range(60)])
    up, down = LexicalizedTreeLSTM(12, 10), TopDownTreeLSTM(12, 10)
    x = torch.randn(batch.num_nodes, 12, requires_grad=True)
    weights = [torch.randn(batch.num_nodes, 10) for _ in range(2)]
    params = [x, *up.parameters(), *down.parameters()]
    passes = [up.pass_of(batch, x=x), down.pass_of(batch, x=x)]

    def gradients(states):
        loss = sum((h * w).sum() for (h, _), w in zip(states, weights))
        return [*(h for h, _ in states), *torch.autograd.grad(loss, params)]

    calls = _count_calls(kernels, ["run_passes_forward", "run_passes_backward"], monkeypatch)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one_thread = gradients([engine.propagate(*p) for p in passes])
        with torch.no_grad():
            one_thread_unsaved = [engine.propagate(*p) for p in passes]
        torch.set_num_threads(2)
        if torch.get_num_threads() < 2:
            pytest.skip("one intra-op thread only")
        side_by_side = gradients(engine.propagate_side_by_side(passes))
        assert calls == {"run_passes_forward": 1, "run_passes_backward": 1}
        with torch.no_grad():
            unsaved = engine.propagate_side_by_side(passes)
        assert calls["run_passes_forward"] == 2
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(side_by_side, one_thread, strict=True):
        _assert_equal_to_rounding(a, b)
    for states, expected in zip(unsaved, one_thread_unsaved, strict=True):
        for a, b in zip(states, expected, strict=True):
            _assert_equal_to_rounding(a, b)


def _assert_equal_to_rounding(got: torch.Tensor, want: torch.Tensor) -> None:
    """Equal to float32 rounding, relative to the tensor's own scale (a weight gradient sums hundreds of rows)."""
    scale = float(want.detach().abs().max()) if want.numel() else 0.0
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * max(scale, 1e-6))


def test_side_by_side_passes_run_one_after_the_other_on_one_thread(kernels, monkeypatch):
    # One thread, or a pass without a kernel: nothing to gain, so propagate, pass by pass.
    import graphtree.engine as engine

    torch.manual_seed(12)
    batch = Batch.from_data_list(teng.binary_trees(5))
    up, down = LexicalizedTreeLSTM(6, 4), TopDownTreeLSTM(6, 4)
    x = torch.randn(batch.num_nodes, 6)
    calls = _count_calls(kernels, ["run_passes_forward"], monkeypatch)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        states = engine.propagate_side_by_side([up.pass_of(batch, x=x), down.pass_of(batch, x=x)])
    finally:
        torch.set_num_threads(threads)
    with native.use_native(False):
        states_plain = engine.propagate_side_by_side([up.pass_of(batch, x=x), down.pass_of(batch, x=x)])
    assert calls["run_passes_forward"] == 0
    for got, plain in zip(states, states_plain, strict=True):
        for a, b in zip(got, plain, strict=True):
            torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)


def test_a_bad_position_is_named_before_any_pass_runs():
    # The top-down cell's check of its children's positions holds for a pass made for side-by-side runs too.
    import graphtree.engine as engine
    from graphtree.errors import ScheduleError

    cell = TopDownTreeLSTM(3, 2, n_ary=2)
    x = torch.randn(4, 3)
    edge_index = torch.tensor([[0, 1, 2], [3, 3, 3]])
    with pytest.raises(ScheduleError, match="child 2 of"):
        engine.propagate_side_by_side([cell.pass_of(edge_index, x=x, edge_pos=torch.tensor([0, 1, 2]))])


@pytest.mark.parametrize("make", [lambda: NaryTreeLSTM(30, 24), lambda: SLSTM(30, 24, leaf="lstm"),
                                  lambda: ChildSumTreeLSTM(30, 24), lambda: LexicalizedTreeLSTM(30, 24),
                                  lambda: TopDownTreeLSTM(30, 24), lambda: LSTMRNN(24, 24, "softsign")])
@pytest.mark.parametrize("threads", [1, 2])
def test_kernels_and_pytorch_path_agree_on_a_large_batch(kernels, make, threads):
    # Levels of a few hundred rows, whose products two threads split; at two threads the kernels also run a
    # level's independent products side by side (common.h's side_by_side), one a thread.
    torch.manual_seed(0)
    cell = make()
    rng = random.Random(3)
    batch = Batch.from_data_list([from_ptb(random_ptb(rng.randint(1, 40), 2, rng)) for _ in range(400)])
    x = torch.randn(batch.num_nodes, cell.in_channels, requires_grad=True)
    weights = torch.randn(batch.num_nodes, 24), torch.randn(batch.num_nodes, 24)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with native.use_native(True):
            fast = _run(cell, x, batch, weights)
    finally:
        torch.set_num_threads(before)
    with native.use_native(False):
        plain = _run(cell, x, batch, weights)
    for a, b in zip(fast, plain, strict=True):
        # Weight gradients sum over ~17k nodes and reach a few hundred: float32 rounding scales with them.
        torch.testing.assert_close(a, b, atol=2e-5 * max(1.0, float(b.detach().abs().max())), rtol=1e-4)


def test_compiled_pass_follows_every_change_of_the_weights(kernels):
    # The compiled N-ary loop takes its rescaled, transposed gate weights from U and b_U as they are at each pass:
    # after an in-place update, a load_state_dict, a replaced parameter, a write through .data and a fused
    # optimizer's step (which bumps no version counter), each no-grad pass must agree with the PyTorch path.
    torch.manual_seed(0)
    cell = NaryTreeLSTM(9, 12)
    batch = tai.mixed_batch(max_arity=2, seed=5)
    x = torch.randn(batch.num_nodes, 9)
    other = NaryTreeLSTM(9, 12).state_dict()

    def agree():
        with torch.no_grad(), native.use_native(True):
            fast = cell(x, batch)[0]
        with torch.no_grad(), native.use_native(False):
            plain = cell(x, batch)[0]
        torch.testing.assert_close(fast, plain, atol=2e-5, rtol=1e-4)
        return fast

    first = agree()
    with torch.no_grad():
        cell.U.mul_(1.5)
    assert not torch.allclose(agree(), first)
    with torch.no_grad():
        cell.b_U.add_(0.5)
    agree()
    cell.load_state_dict(other)
    agree()
    cell.U = torch.nn.Parameter(torch.randn_like(cell.U))
    agree()
    cell.U.data.mul_(-1)  # invisible to the version counter
    agree()
    optimizer = torch.optim.Adagrad(cell.parameters(), lr=0.5, fused=True)
    with native.use_native(True):
        cell(x, batch)[0].pow(2).sum().backward()
    before = agree()
    optimizer.step()
    assert not torch.allclose(agree(), before)


# The kernels that derive transposed and rearranged copies of their weights: each with a cell that runs it and
# that cell's input width.
DERIVING_KERNELS = {
    "ChildSumLevels": (lambda: ChildSumTreeLSTM(7, 12), 7),
    "SLSTMLevels": (lambda: SLSTM(7, 12, leaf="lstm"), 7),
    "LSTMRNNLevels": (lambda: LSTMRNN(12, 12), 12),
    "LexicalizedLevels": (lambda: LexicalizedTreeLSTM(7, 12), 7),
    "TopDownLevels": (lambda: TopDownTreeLSTM(7, 12), 7),
    "GatedHeadLevels": (lambda: HeadLexicalization(7, "gated"), 7),
}


@pytest.mark.parametrize("optimizer", ["sgd", "adam_fused", "adagrad_fused"])
@pytest.mark.parametrize("kernel", sorted(DERIVING_KERNELS))
def test_compiled_kernels_rederive_their_weights_after_every_change(kernels, kernel, optimizer):
    # Three optimizer steps on the compiled path and on the PyTorch path, from the same weights: the paths must
    # agree in every training pass and every no-grad pass between steps (stale derived weights would make the
    # compiled path lag behind). The fused optimizers update the weights without bumping their version counters;
    # a write through .data bumps none either.
    torch.manual_seed(11)
    make, in_channels = DERIVING_KERNELS[kernel]
    fast = make()
    plain = copy.deepcopy(fast)
    batch = Batch.from_data_list(teng.binary_trees(6))
    x = torch.randn(batch.num_nodes, in_channels)
    kind, _, fused = optimizer.partition("_")
    make_optimizer = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adagrad": torch.optim.Adagrad}[kind]
    optimizers = {m: make_optimizer(m.parameters(), lr=0.05, **({"fused": True} if fused else {}))
                  for m in (fast, plain)}

    def run(model, compiled):
        with native.use_native(compiled):
            out = model(x, batch)
        return out[0] if isinstance(out, tuple) else out

    for _ in range(3):
        with torch.no_grad():
            torch.testing.assert_close(run(fast, True), run(plain, False), atol=2e-5, rtol=1e-4)
        losses = []
        for model, compiled in ((fast, True), (plain, False)):
            optimizers[model].zero_grad()
            loss = run(model, compiled).pow(2).sum()
            loss.backward()
            optimizers[model].step()
            losses.append(loss.detach())
        torch.testing.assert_close(losses[0], losses[1], atol=1e-4, rtol=1e-4)
    with torch.no_grad():
        torch.testing.assert_close(run(fast, True), run(plain, False), atol=2e-5, rtol=1e-4)
        for a, b in zip(fast.parameters(), plain.parameters(), strict=True):
            a.data.mul_(-0.5)
            b.data.mul_(-0.5)
        torch.testing.assert_close(run(fast, True), run(plain, False), atol=2e-5, rtol=1e-4)


def test_gather_in_the_compiled_loop_checks_its_slots(kernels):
    # A slot index past the buffers is an error, not a read out of bounds.
    buffers = [torch.zeros(4, 3)]
    bad = [torch.zeros(0, dtype=torch.long), torch.tensor([9, 0])]  # level 0: the leaves, no slots
    cell = NaryTreeLSTM(3, 3)
    kernel = cell.level_kernel(kernels, None, [w.detach() for w in cell.compiled_weights()])  # as the engine calls it
    with pytest.raises(RuntimeError, match="out of range"):
        kernels.run_levels_forward(kernel, [buffers[0], torch.zeros(4, 3)], [torch.zeros(3, 3)], [0, 2, 3],
                                   bad, [], False)


def test_scatter_add_rows_adds_repeated_rows_like_index_put(kernels):
    # The engine's child-gradient accumulation: rows repeat (several parents, the padding row of empty slots).
    torch.manual_seed(0)
    dst = torch.randn(7, 5)
    index = torch.tensor([3, 0, 3, 6, 3, 1])
    src = torch.randn(6, 5)
    expected = dst.clone()
    for r, row in enumerate(index.tolist()):  # plain Python: one row at a time
        expected[row] += src[r]
    kernels.scatter_add_rows_(dst, index, src)
    torch.testing.assert_close(dst, expected)
    with pytest.raises(RuntimeError, match="out of range"):
        kernels.scatter_add_rows_(dst, torch.tensor([7]), src[:1])


@pytest.mark.parametrize("threads", [1, 2])
def test_transposed_is_the_plain_transpose(kernels, threads):
    # The kernels' weight transposition, tiled and split over threads: every element where a plain loop puts it,
    # for shapes off the 16-row tiles and 128-row bands, a view, and a single row and column.
    torch.manual_seed(0)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        matrices = [torch.randn(rows, cols) for rows, cols in [(750, 300), (257, 33), (17, 16), (1, 5), (5, 1),
                                                               (129, 200), (0, 4)]]
        matrices.append(torch.randn(40, 70)[3:31, 5:60])  # a strided view
        for w in matrices:
            out = kernels.transposed(w)
            expected = torch.empty(w.size(1), w.size(0))
            for r in range(w.size(0)):  # plain Python: one row of w into one column
                expected[:, r] = w[r]
            assert out.is_contiguous() and torch.equal(out, expected), tuple(w.shape)
    finally:
        torch.set_num_threads(previous)
    with pytest.raises(RuntimeError, match="float32"):
        kernels.transposed(torch.zeros(3, 4, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="matrix"):
        kernels.transposed(torch.zeros(3))



def test_the_set_up_benchmark_runs_and_finds_the_copies_equal(kernels):
    # benchmarks/kernel_setup.py in a short form: every cell's row, each with the two transposes equal.
    repo = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "benchmarks/kernel_setup.py", "--reps", "2", "--threads", "1"],
                          cwd=repo, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [line.split(" | ") for line in done.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    assert [row[0].lstrip("| ") for row in rows[1:]] == ["nary", "child_sum", "slstm", "lstm_rnn", "contree_lex",
                                                          "top_down"], done.stdout
    assert all(row[4] == "yes" for row in rows[1:]), done.stdout

def test_saturated_gates_stay_finite(kernels):
    # Pre-activations far beyond the sigmoid's range: the kernels' clamps must give 0 and 1, not NaN or inf, as
    # the cells' update does.
    torch.manual_seed(6)
    for cell in (NaryTreeLSTM(4, 3), ChildSumTreeLSTM(4, 3), SLSTM(4, 3, leaf="lstm"), LexicalizedTreeLSTM(4, 3)):
        with torch.no_grad():
            for p in cell.parameters():
                p.mul_(1e4)
        batch = tai.mixed_batch(max_arity=2, seed=6)
        x = 1e3 * torch.randn(batch.num_nodes, 4)
        with native.use_native(True):
            fast = _run(cell, x.requires_grad_(), batch, (torch.ones(batch.num_nodes, 3),) * 2)
        with native.use_native(False):
            plain = _run(cell, x, batch, (torch.ones(batch.num_nodes, 3),) * 2)
        for a, b in zip(fast[:2], plain[:2], strict=True):  # the states; the gradients reach 1e8 and beyond
            assert torch.isfinite(a).all()
            torch.testing.assert_close(a, b, atol=1e-3, rtol=1e-4)
        assert all(torch.isfinite(g).all() for g in fast[2:])


def test_the_pytorch_path_is_taken_where_the_kernels_do_not_apply(kernels):
    x64 = torch.zeros(3, 4, dtype=torch.float64)
    x32 = torch.zeros(3, 4)
    with native.use_native(True):
        assert native.native_kernels(x64) is None  # float64
        assert native.native_kernels(x32.requires_grad_()) is None  # under autograd
        assert native.native_kernels(torch.zeros(3, 4)) is kernels
    with native.use_native(False):
        assert native.native_kernels(torch.zeros(3, 4)) is None


def test_the_variable_is_checked(monkeypatch):
    monkeypatch.setenv("GRAPHTREE_NATIVE", "yes")
    with pytest.raises(ValueError, match=r"native \(\$GRAPHTREE_NATIVE\) must be 0, 1 or auto, got 'yes'"):
        settings.reload()


def test_a_failed_build_falls_back_with_one_warning(monkeypatch):
    monkeypatch.setattr(native, "_kernels", None)
    monkeypatch.setattr(native, "_failed", None)
    monkeypatch.setattr(native.kernel_build, "SOURCES", ("does_not_exist.cpp",))
    monkeypatch.setenv("GRAPHTREE_NATIVE", "auto")
    settings.reload()
    with pytest.warns(RuntimeWarning, match="pure-PyTorch path"):
        assert native.native_kernels(torch.zeros(2, 2)) is None
    assert native.native_kernels(torch.zeros(2, 2)) is None  # no second attempt, no second warning
    with native.use_native(True), pytest.raises(RuntimeError, match="could not be built"):
        native.native_kernels(torch.zeros(2, 2))
