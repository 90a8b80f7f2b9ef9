"""Every fast path of every cell against that cell's ``update``, and the cells as PyG layers.

A paper cell's ``update`` is its definition (checked against the papers' per-node references in
``test_tai_cells``, ``test_slstm``, ``test_lstm_rnn`` and ``test_teng_zhang``). Its one fast path, the compiled
level kernel (:mod:`graphtree.backend.compiled`), must compute the same function: here in float32 against
``update`` in float64 (states, and gradients of the inputs and every parameter), with ``update`` in float32
beside it as the yardstick of float32 rounding. Skipped where the kernels cannot be built.
"""

from __future__ import annotations

import copy
import random

import pytest
import torch
from torch_geometric.data import Batch, Data
from trees import chain_ptb, random_ptb

import graphtree.engine as engine
from graphtree.backend import native
from graphtree.data import from_ptb
from graphtree.models.bicontree import _LeafSum
from graphtree.nn import (
    LSTMRNN,
    SLSTM,
    ChildSumTreeLSTM,
    HeadLexicalization,
    LexicalizedTreeLSTM,
    NaryTreeLSTM,
    TopDownTreeLSTM,
    TreeCell,
)

# Every cell setting that has a fast path: (make, input width, maximum arity of the trees it takes).
FAST_CELLS = {
    "child_sum": (lambda: ChildSumTreeLSTM(7, 6), 7, 3),
    "nary_constituency": (lambda: NaryTreeLSTM(7, 6), 7, 2),
    "nary_ternary": (lambda: NaryTreeLSTM(7, 6, n_ary=3), 7, 3),
    "nary_general": (lambda: NaryTreeLSTM(7, 6, setting="general"), 7, 2),
    "nary_general_ternary": (lambda: NaryTreeLSTM(7, 6, n_ary=3, setting="general"), 7, 3),
    "slstm_embedding": (lambda: SLSTM(6, 6), 6, 2),
    "slstm_lstm_leaf": (lambda: SLSTM(7, 6, leaf="lstm"), 7, 2),
    "lstm_rnn_tanh": (lambda: LSTMRNN(6, 6), 6, 2),
    "lstm_rnn_softsign": (lambda: LSTMRNN(6, 6, "softsign"), 6, 2),
    "lstm_rnn_sigmoid": (lambda: LSTMRNN(6, 6, "sigmoid"), 6, 2),
    "lexicalized": (lambda: LexicalizedTreeLSTM(7, 6), 7, 2),
    "contree": (lambda: LexicalizedTreeLSTM(7, 6, lexicalized=False), 7, 2),
    "lexicalized_ternary": (lambda: LexicalizedTreeLSTM(7, 6, n_ary=3), 7, 3),
    "top_down": (lambda: TopDownTreeLSTM(7, 6), 7, 2),
    "top_down_shared": (lambda: TopDownTreeLSTM(7, 6, n_ary=3, share_input_weights=True), 7, 3),
    "gated_head": (lambda: HeadLexicalization(7), 7, 2),
    "left_head": (lambda: HeadLexicalization(7, "left"), 7, 3),
    "right_head": (lambda: HeadLexicalization(7, "right"), 7, 3),
    "average_head": (lambda: HeadLexicalization(7, "average"), 7, 3),
    "leaf_sum": (lambda: _LeafSum(7), 7, 2),
}


def _batch(max_arity: int, seed: int) -> Batch:
    rng = random.Random(seed)
    return Batch.from_data_list([from_ptb(random_ptb(rng.randint(1, 12), max_arity, rng)) for _ in range(9)])


def _run(cell: torch.nn.Module, x: torch.Tensor, batch: Batch, upstream: list[torch.Tensor]) -> list[torch.Tensor]:
    """States, then the gradients of a weighted sum of them with respect to ``x`` and every parameter."""
    x = x.detach().requires_grad_()
    states = cell(x, batch)
    states = states if isinstance(states, tuple) else (states,)
    loss = sum((s * w.to(s.dtype)[:, :s.size(1)]).sum() for s, w in zip(states, upstream))
    params = [p for p in cell.parameters()]
    return [s.detach() for s in states] + list(torch.autograd.grad(loss, [x, *params]))


@pytest.mark.parametrize("name", sorted(FAST_CELLS))
def test_the_fast_path_computes_the_update(kernels, name, monkeypatch):
    make, in_channels, arity = FAST_CELLS[name]
    torch.manual_seed(0)
    cell = make()
    batch = _batch(arity, seed=len(name))
    x = torch.randn(batch.num_nodes, in_channels)
    upstream = [torch.randn(batch.num_nodes, 8), torch.randn(batch.num_nodes, 8)]
    ran = []
    original = engine.level_kernel

    def spy(*args):
        made = original(*args)
        ran.append(made is not None)
        return made

    monkeypatch.setattr(engine, "level_kernel", spy)
    with native.use_native(True):
        fast = _run(cell, x, batch, upstream)
    assert ran and all(ran), "the compiled level loop did not run"
    with native.use_native(False):
        update32 = _run(cell, x, batch, upstream)
        update64 = _run(copy.deepcopy(cell).double(), x.double(), batch, upstream)
    for got, plain, want in zip(fast, update32, update64, strict=True):
        scale = max(1.0, float(want.abs().max()))
        # The fast path is as close to float64 as the update in float32 is, within float32 rounding.
        err_fast = float((got.double() - want).abs().max())
        err_plain = float((plain.double() - want).abs().max())
        assert err_fast <= max(4 * err_plain, 1e-5 * scale), (name, err_fast, err_plain)


@pytest.mark.parametrize("name", sorted(FAST_CELLS))
def test_no_grad_fast_path_computes_the_update(kernels, name):
    make, in_channels, arity = FAST_CELLS[name]
    torch.manual_seed(1)
    cell = make()
    batch = _batch(arity, seed=len(name) + 1)
    x = torch.randn(batch.num_nodes, in_channels)
    with torch.no_grad():
        with native.use_native(True):
            fast = cell(x, batch)
        with native.use_native(False):
            plain = copy.deepcopy(cell).double()(x.double(), batch)
    fast = fast if isinstance(fast, tuple) else (fast,)
    plain = plain if isinstance(plain, tuple) else (plain,)
    for a, b in zip(fast, plain, strict=True):
        torch.testing.assert_close(a.double(), b, atol=1e-5, rtol=1e-5)


def test_a_subclass_with_its_own_update_runs_it(kernels):
    class Scaled(ChildSumTreeLSTM):
        def update(self, children, Wx):
            h, c = super().update(children, Wx)
            return 2 * h, c

    torch.manual_seed(2)
    cell, plain = Scaled(5, 4), ChildSumTreeLSTM(5, 4)
    plain.load_state_dict(cell.state_dict())
    data = from_ptb("(1 (2 a) (3 b))")
    x = torch.randn(data.num_nodes, 5)
    with native.use_native(True):
        h, _ = cell(x, data)
        h_plain, _ = plain(x, data)
    leaves = ~data.is_root
    torch.testing.assert_close(h[leaves], 2 * h_plain[leaves])  # the leaves: the subclass's update ran


# --------------------------------------------------------------------------- PyG's calling convention


def test_a_cell_takes_a_bare_edge_index_as_pyg_layers_do():
    torch.manual_seed(3)
    trees = [from_ptb("(3 (2 The) (3 (2 Rock) (4 rocks)))"), from_ptb("(1 (2 a) (1 dull))")]
    batch = Batch.from_data_list(trees)
    x = torch.randn(batch.num_nodes, 6)
    for cell in (ChildSumTreeLSTM(6, 5), NaryTreeLSTM(6, 5), TopDownTreeLSTM(6, 5)):
        want = cell(x, batch)
        got = cell(x, batch.edge_index, batch.edge_pos) if not isinstance(cell, ChildSumTreeLSTM) else \
            cell(x, batch.edge_index)
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b)


def test_the_schedule_of_a_bare_edge_index_follows_its_edits():
    # Cached on the tensor, keyed by its version: an in-place edit gives a new schedule, not the old levels.
    cell = ChildSumTreeLSTM(3, 4)
    x = torch.randn(4, 3)
    edges = torch.tensor([[0, 1, 2], [2, 2, 3]])  # 0, 1 -> 2 -> 3
    first = engine.schedule_of(edges, num_nodes=4)
    assert engine.schedule_of(edges, num_nodes=4) is first
    h_before, _ = cell(x, edges)
    edges[1, 2] = 0  # now 2 -> 0 is impossible (0 is a child of 2): a cycle, which must be reported
    with pytest.raises(Exception, match="cycle"):
        cell(x, edges)
    edges[:, 2] = torch.tensor([3, 2])  # 0, 1 -> 2 and 3 -> 2: node 2 has three children
    h_after, _ = cell(x, edges)
    assert not torch.allclose(h_after[2], h_before[2])


def test_propagate_keeps_pygs_meaning_and_names_bad_calls():
    cell = ChildSumTreeLSTM(3, 4)
    edges = torch.tensor([[0, 1], [2, 2]])
    x = torch.randn(3, 3)
    h, _ = cell.propagate(edges, Wx=cell.W(x))  # PyG: propagate(edge_index, **the arguments of update)
    torch.testing.assert_close(h, cell(x, edges)[0])
    with pytest.raises(ValueError, match="size must be None"):
        cell.propagate(edges, size=(3, 3), Wx=cell.W(x))
    with pytest.raises(ValueError, match="needs the per-node inputs"):
        cell.propagate(edges)


def test_a_cell_that_defines_no_update_says_so():
    class Empty(TreeCell):
        def forward(self, x, edge_index):
            return self.propagate(edge_index, x=x)

    cell = Empty(state_channels=(2,))
    with pytest.raises(NotImplementedError, match="must define update"):
        cell(torch.randn(2, 2), Data(edge_index=torch.tensor([[0], [1]]), num_nodes=2))


# --------------------------------------------------------------------------- levels of one node


def _one_node_levels(arity: int) -> dict[str, Batch]:
    """Graphs with one node at some or every level, where a level's buffers are single rows."""
    return {"one node": Batch.from_data_list([from_ptb("(1 a)")]),
            "one edge": Batch.from_data_list([from_ptb("(1 (2 a))")]),
            "chain": Batch.from_data_list([from_ptb(chain_ptb(30))]),
            "leaf under a spine": Batch.from_data_list([from_ptb(chain_ptb(12)), from_ptb(random_ptb(6, arity,
                                                                                               random.Random(3)))])}


def _run_allowing_unused(cell, x, batch, upstream) -> list[torch.Tensor | None]:
    """:func:`_run`, where a parameter the graph does not use gets ``None``."""
    x = x.detach().requires_grad_()
    states = cell(x, batch)
    states = states if isinstance(states, tuple) else (states,)
    loss = sum((s * w.to(s.dtype)[:, :s.size(1)]).sum() for s, w in zip(states, upstream))
    grads = torch.autograd.grad(loss, [x, *cell.parameters()], allow_unused=True)
    return [s.detach() for s in states] + list(grads)


ONE_NODE_CASES = [(name, family) for name in sorted(FAST_CELLS) for family in ("one node", "one edge", "chain",
                                                                                "leaf under a spine")]


@pytest.mark.parametrize(("name", "family"), ONE_NODE_CASES, ids=[f"{n}-{f}" for n, f in ONE_NODE_CASES])
def test_the_fast_path_computes_the_update_on_one_node_levels(kernels, name, family):
    make, in_channels, arity = FAST_CELLS[name]
    torch.manual_seed(4)
    cell = make()
    batch = _one_node_levels(arity)[family]
    x = torch.randn(batch.num_nodes, in_channels)
    upstream = [torch.randn(batch.num_nodes, 8), torch.randn(batch.num_nodes, 8)]
    with native.use_native(True):
        fast = _run_allowing_unused(cell, x, batch, upstream)
    with native.use_native(False):
        want = _run_allowing_unused(copy.deepcopy(cell).double(), x.double(), batch, upstream)
    for got, w in zip(fast, want, strict=True):
        if w is None:  # a parameter the graph never uses (a leaf alone uses no child weights)
            assert got is None or not got.any(), name
            continue
        scale = max(1.0, float(w.abs().max()))
        assert float((got.double() - w).abs().max()) <= 1e-5 * scale, name


def test_the_general_nary_cell_with_one_child_is_the_standard_lstm_on_a_chain(kernels):
    # The compiled general N-ary level once added into its bias in place on a level of one node (a view of the
    # bias was its gates), so every later level read a corrupted bias: off by 0.46 here.
    torch.manual_seed(0)
    cell = NaryTreeLSTM(5, 6, n_ary=1, setting="general")
    chain = torch.stack([torch.arange(49), torch.arange(1, 50)])  # node k is the child of node k + 1
    x = torch.randn(50, 5)
    lstm = torch.nn.LSTMCell(5, 6)
    d = 6
    W_i, W_o, W_u, W_f = cell.W.weight.split(d)
    b_i, b_o, b_u, b_f = cell.W.bias.split(d)
    U_i, U_o, U_u, U_f = cell.U.split(d)
    bias_U = cell.b_U.sum(0)
    with torch.no_grad():  # LSTMCell's gate order: i, f, g (= u), o
        lstm.weight_ih.copy_(torch.cat([W_i, W_f, W_u, W_o]))
        lstm.bias_ih.copy_(torch.cat([b_i, b_f, b_u, b_o]))
        lstm.weight_hh.copy_(torch.cat([U_i, U_f, U_u, U_o]))
        lstm.bias_hh.copy_(torch.cat([bias_U[:d], bias_U[3 * d:], bias_U[2 * d:3 * d], bias_U[d:2 * d]]))
        h, c = torch.zeros(1, d), torch.zeros(1, d)
        want = []
        for k in range(50):
            h, c = lstm(x[k:k + 1], (h, c))
            want.append(h)
        want = torch.cat(want)
        with native.use_native(True):
            got = cell(x, chain)[0]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
