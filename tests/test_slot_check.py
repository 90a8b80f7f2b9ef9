"""A cell of one's own written the natural way: its empty slots never reach a node's result silently.

A level has as many slots as its widest node has children, so how many of a node's slots are empty depends on
the other graphs of its batch. These tests write the cells a new user writes, and check that the masked
reductions make them right, that the slot check catches the ones that are not (at their first call, and under
``detect_slot_leaks``), and that ``graphtree.testing.check_cell`` passes every paper cell and fails every
broken one. Expected values come from per-node recursion or from the same graph alone, never from the code
under test.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch_geometric.data import Batch, Data

from graphtree import settings
from graphtree.engine import Children, detect_slot_leaks
from graphtree.errors import SlotLeakError
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
from graphtree.testing import check_cell, check_graphs


class Trap(TreeCell):
    """h = tanh(W x + sum over the slots of U h_k), U with a bias, summed with torch: the natural mistake."""

    def __init__(self, in_channels: int = 3, hidden: int = 4) -> None:
        super().__init__(state_channels=(hidden,))
        self.W, self.U = nn.Linear(in_channels, hidden), nn.Linear(hidden, hidden)

    def update(self, children: Children, x: torch.Tensor) -> tuple[torch.Tensor]:
        return (torch.tanh(self.W(x) + self.U(children.states[0]).sum(dim=1)),)


class Summed(Trap):
    """The same cell, reduced with ``children.sum`` of the transformed slots."""

    def update(self, children, x):
        return (torch.tanh(self.W(x) + children.sum(self.U(children.states[0]))),)


class Mapped(Trap):
    """The same cell, the layer applied with ``children.map``."""

    def update(self, children, x):
        return (torch.tanh(self.W(x) + children.sum(children.map(self.U))),)


class GatedMean(Trap):
    """A sigmoid gate per child and a mean: two more functions that do not map 0 to 0."""

    def update(self, children, x):
        (h_k,) = children.states
        gate = torch.sigmoid(self.U(h_k))
        return (torch.tanh(self.W(x) + children.mean(gate * h_k) + children.max(gate)),)


class LevelNorm(Trap):
    """Normalizes across the level's nodes: depends on its batch, though not through empty slots."""

    def update(self, children, x):
        h = self.W(x) + children.sum(children.map(self.U))
        return (torch.tanh(h - h.mean(dim=0, keepdim=True)),)


class WrongBackward(Trap):
    """Right forward, wrong gradient (a straight-through tanh)."""

    def update(self, children, x):
        z = self.W(x) + children.sum(children.map(self.U))
        return (z + (torch.tanh(z) - z).detach(),)


def _recursive(cell: Trap, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
    """h of every node by memoized recursion: tanh(W x_v + sum over v's children of (U h_k + b))."""
    children: dict[int, list[int]] = {v: [] for v in range(x.size(0))}
    for c, p in edge_index.t().tolist():
        children[p].append(c)
    memo: dict[int, torch.Tensor] = {}

    def h(v: int) -> torch.Tensor:
        if v not in memo:
            total = sum((cell.U(h(c)) for c in children[v]), torch.zeros(cell.state_channels[0], dtype=x.dtype))
            memo[v] = torch.tanh(cell.W(x[v]) + total)
        return memo[v]

    return torch.stack([h(v) for v in range(x.size(0))])


def _tree_and_wider() -> tuple[Data, Data]:
    tree = Data(edge_index=torch.tensor([[1, 2, 3], [0, 0, 1]]), num_nodes=4)  # 0 <- 1, 2; 1 <- 3
    wider = Data(edge_index=torch.tensor([[1, 2, 3, 4, 5], [0, 0, 0, 0, 0]]), num_nodes=6)  # five children
    return tree, wider


def test_the_trap_cell_is_caught_at_its_first_call_not_batch_dependent():
    # At the commit before the slot check, the trap cell gave the tree alone and the tree beside a wider one
    # different states (by 0.3 and more), with no error.
    torch.manual_seed(0)
    tree, wider = _tree_and_wider()
    cell = Trap().double()
    x = torch.randn(4, 3, dtype=torch.float64)
    with pytest.raises(SlotLeakError, match=r"Trap.update lets empty slots into its result: state 0 of node \d.*"
                                            r"children.sum\(t\)"):
        cell(x, tree)
    # ... on the batch too, naming the node with its graph; and with the check off, the silent difference it
    # guards against is real.
    batch = Batch.from_data_list([wider, tree])
    with pytest.raises(SlotLeakError, match=r"of graph \d in the batch"):
        Trap().double()(torch.randn(10, 3, dtype=torch.float64), batch)
    with settings.overridden(slot_check="off"):
        alone = cell(x, tree)[0]
        together = cell(torch.cat([torch.randn(6, 3, dtype=torch.float64), x]), batch)[0][6:]
    assert (alone - together).abs().max() > 1e-3


@pytest.mark.parametrize("make", [Summed, Mapped], ids=["sum", "map"])
def test_the_natural_cell_with_masked_reductions_is_right_in_any_batch(make):
    torch.manual_seed(1)
    tree, wider = _tree_and_wider()
    cell = make().double()
    x, x_wide = torch.randn(4, 3, dtype=torch.float64), torch.randn(6, 3, dtype=torch.float64)
    want = _recursive(cell, x, tree.edge_index)
    torch.testing.assert_close(cell(x, tree)[0], want, rtol=1e-13, atol=1e-13)
    together = cell(torch.cat([x_wide, x]), Batch.from_data_list([wider, tree]))[0]
    torch.testing.assert_close(together[6:], want, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(together[:6], _recursive(cell, x_wide, wider.edge_index), rtol=1e-13, atol=1e-13)


def test_reductions_of_a_tensor_computed_from_the_slots_by_hand():
    h = torch.tensor([[[1.0], [2.0], [0.0]], [[4.0], [0.0], [0.0]]])  # node 0: two children; node 1: one
    mask = torch.tensor([[True, True, False], [True, False, False]])
    children = Children((h,), mask, torch.where(mask, 0, -1))
    shifted = h + 10  # what a biased layer makes of the slots: 10 in the empty ones
    torch.testing.assert_close(children.sum(shifted), torch.tensor([[23.0], [14.0]]))
    torch.testing.assert_close(children.mean(shifted), torch.tensor([[11.5], [14.0]]))
    torch.testing.assert_close(children.max(-shifted), torch.tensor([[-11.0], [-14.0]]))
    torch.testing.assert_close(children.map(lambda rows: rows + 10), torch.tensor([[[11.0], [12.0], [0.0]],
                                                                                    [[14.0], [0.0], [0.0]]]))
    nan_in_empty = shifted.masked_fill(~mask.unsqueeze(-1), float("nan"))
    torch.testing.assert_close(children.sum(nan_in_empty), torch.tensor([[23.0], [14.0]]))  # not even NaN
    # attend: softmax weights over the filled slots, times the values: node 0 weighs 1 and 2 by e^0, e^1.
    scores = torch.tensor([[0.0, 1.0, 5.0], [3.0, 9.0, 9.0]])
    a = torch.tensor([1.0, torch.e]) / (1 + torch.e)
    torch.testing.assert_close(children.attend(scores, shifted), torch.stack([a @ torch.tensor([11.0, 12.0]),
                                                                              torch.tensor(14.0)]).unsqueeze(1))
    with pytest.raises(ValueError, match=r"a state index or a tensor of shape \[n, K, \.\.\.\] = \[2, 3, \.\.\.\]"):
        children.sum(torch.zeros(2, 4))
    with pytest.warns(FutureWarning, match="renamed softmax_weights"):
        torch.testing.assert_close(children.softmax(scores), children.softmax_weights(scores))


def test_detect_slot_leaks_catches_a_leak_on_every_pass_and_the_first_use_check_runs_once():
    tree, _ = _tree_and_wider()
    x = torch.randn(4, 3)
    calls = []

    class Counted(GatedMean):
        def update(self, children, x):
            calls.append(children.mask.size(1))
            return super().update(children, x)

    cell = Counted()
    cell(x, tree)  # right, and checked: levels with slots run three times
    first = len(calls)
    calls.clear()
    cell(x, tree)
    assert len(calls) < first  # not checked again
    trap = Trap()
    with settings.overridden(slot_check="off"):
        trap(x, tree)  # the first use passes unchecked when the check is off ...
    with detect_slot_leaks(), pytest.raises(SlotLeakError):
        trap(x, tree)  # ... and the anomaly mode checks every pass
    with detect_slot_leaks(), pytest.raises(SlotLeakError):
        trap(x, tree)
    trap(x, tree)  # the first use was checked under detect_slot_leaks: no check now


def test_check_cell_fails_each_broken_cell_with_what_is_wrong():
    with pytest.raises(SlotLeakError, match=r"Trap.update lets empty slots"):
        check_cell(Trap(), in_channels=3)
    with pytest.raises(AssertionError, match=r"LevelNorm: state 0 of the .* alone differs"):
        check_cell(LevelNorm(), in_channels=3)
    with pytest.raises(AssertionError, match="WrongBackward: gradcheck failed"):
        check_cell(WrongBackward(), in_channels=3)


PAPER_CELLS = {
    "childsum": (lambda: ChildSumTreeLSTM(3, 4), 3),
    "nary": (lambda: NaryTreeLSTM(3, 4), 3),
    "slstm": (lambda: SLSTM(4, 4), 4),
    "lstm_rnn": (lambda: LSTMRNN(4, 4), 4),
    "lexicalized": (lambda: LexicalizedTreeLSTM(3, 4), 3),
    "top_down": (lambda: TopDownTreeLSTM(3, 4, n_ary=6), 3),
    "heads_gated": (lambda: HeadLexicalization(3), 3),
    "heads_average": (lambda: HeadLexicalization(3, method="average"), 3),
    "heads_left": (lambda: HeadLexicalization(3, method="left"), 3),
    "leaf_sums": (lambda: _LeafSum(3), 3),
    "own_sum": (Summed, 3),
    "own_map": (Mapped, 3),
    "own_gated_mean": (GatedMean, 3),
}


@pytest.mark.parametrize("name", sorted(PAPER_CELLS))
def test_check_cell_passes_every_paper_cell_and_the_right_cells_of_ones_own(name):
    make, channels = PAPER_CELLS[name]
    torch.manual_seed(2)
    check_cell(make(), in_channels=channels)


def test_check_graphs_respect_a_fixed_arity():
    for arity in (1, 2, 3, None):
        for graph in check_graphs(arity):
            most = int(torch.bincount(graph.edge_index[1]).max()) if graph.edge_index.numel() else 0
            assert arity is None or most <= arity
