"""A cell of one's own: what ``TreeCell`` gives (a default ``forward``, masked reductions over the children, its
own initialization) and the mistakes it names. Every expected value is computed here by hand or by a plain
recursive reference, not by the engine under test."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch_geometric.data import Data

from graphtree.data import from_ptb
from graphtree.engine import Children
from graphtree.models import NodeEmbedding, TreeClassifier
from graphtree.nn import ChildSumTreeLSTM, TreeCell


class MaxPool(TreeCell):
    """h = tanh(W x + max over children of h_k): only ``__init__`` and ``update``, as README's cells."""

    def __init__(self, in_channels: int, hidden_channels: int) -> None:
        super().__init__(state_channels=(hidden_channels,))
        self.W = nn.Linear(in_channels, hidden_channels)

    def update(self, children: Children, x: torch.Tensor) -> tuple[torch.Tensor]:
        return (torch.tanh(self.W(x) + children.max()),)


class Attentive(TreeCell):
    """h = tanh(W x + sum_k a_k h_k) with a_k a softmax over the children of (q . h_k)."""

    def __init__(self, channels: int) -> None:
        super().__init__(state_channels=(channels,))
        self.W = nn.Linear(channels, channels)
        self.q = nn.Parameter(torch.randn(channels))

    def update(self, children: Children, x: torch.Tensor) -> tuple[torch.Tensor]:
        (h_k,) = children.states
        return (torch.tanh(self.W(x) + children.attend(h_k @ self.q)),)


def _recursive(cell, x, edges, num_nodes, combine):
    """Each node from its children's states, by memoized recursion over the edge list."""
    children = {v: [] for v in range(num_nodes)}
    for c, p in edges.t().tolist():
        children[p].append(c)
    memo = {}

    def h(v):
        if v not in memo:
            memo[v] = combine(cell, x[v], [h(c) for c in children[v]])
        return memo[v]

    return torch.stack([h(v) for v in range(num_nodes)])


def _max_pool(cell, x_v, hs):
    pooled = torch.stack(hs).amax(dim=0) if hs else torch.zeros(cell.state_channels[0], dtype=x_v.dtype)
    return torch.tanh(cell.W(x_v) + pooled)


def _attentive(cell, x_v, hs):
    if not hs:
        return torch.tanh(cell.W(x_v))
    h_k = torch.stack(hs)
    a = torch.softmax(h_k @ cell.q, dim=0)
    return torch.tanh(cell.W(x_v) + (a.unsqueeze(-1) * h_k).sum(dim=0))


GRAPHS = {
    "tree": (torch.tensor([[1, 2, 3, 4, 5], [0, 0, 1, 1, 1]]), 6),  # node 1 has three children, all negative-able
    "dag": (torch.tensor([[0, 1, 1, 2, 3, 0], [2, 2, 3, 4, 4, 4]]), 5),  # node 1 has two parents
}


@pytest.mark.parametrize("graph", sorted(GRAPHS))
@pytest.mark.parametrize(("make", "combine"), [(lambda: MaxPool(3, 4), _max_pool),
                                               (lambda: Attentive(3), _attentive)], ids=["max", "softmax"])
def test_a_cell_with_only_init_and_update_pools_its_children(graph, make, combine):
    torch.manual_seed(0)
    cell = make().double()
    edges, num_nodes = GRAPHS[graph]
    x = torch.randn(num_nodes, 3, dtype=torch.float64)
    (h,) = cell(x, edges)  # the default forward: a tuple of states, as propagate returns
    want = _recursive(cell, x, edges, num_nodes, combine)
    torch.testing.assert_close(h, want)
    torch.autograd.gradcheck(lambda x: cell(x, edges)[0], x.requires_grad_())


def test_masked_reductions_by_hand():
    h = torch.tensor([[[1.0, -2.0], [3.0, -4.0], [0.0, 0.0]],  # node 0: two children, one empty slot
                      [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]],  # node 1: no children
                      [[-5.0, -6.0], [-1.0, -7.0], [-3.0, -8.0]]])  # node 2: three
    mask = torch.tensor([[True, True, False], [False, False, False], [True, True, True]])
    children = Children((h,), mask, torch.where(mask, 0, -1))
    torch.testing.assert_close(children.sum(), torch.tensor([[4.0, -6.0], [0.0, 0.0], [-9.0, -21.0]]))
    torch.testing.assert_close(children.mean(), torch.tensor([[2.0, -3.0], [0.0, 0.0], [-3.0, -7.0]]))
    # The empty slot's zero is not a maximum of node 0's second column, nor of node 2's.
    torch.testing.assert_close(children.max(), torch.tensor([[3.0, -2.0], [0.0, 0.0], [-1.0, -6.0]]))
    scores = torch.tensor([[0.0, 0.0, 9.0], [1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], requires_grad=True)
    weights = children.softmax_weights(scores)
    torch.testing.assert_close(weights, torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3]]))
    weights[:, 0].sum().backward()  # node 1, with no children, must not send NaN back
    assert torch.isfinite(scores.grad).all() and not scores.grad[1].any()
    leaves = Children((torch.zeros(2, 0, 4),), torch.zeros(2, 0, dtype=torch.bool), torch.zeros(2, 0))
    for reduce in (leaves.sum, leaves.mean, leaves.max):  # K = 0 at the leaves: torch's amax(dim=1) fails there
        torch.testing.assert_close(reduce(), torch.zeros(2, 4))


def test_overriding_message_or_aggregate_is_an_error_naming_the_cell():
    for name in ("message", "aggregate"):
        with pytest.raises(TypeError, match=f"Mine overrides {name}, which a tree cell never calls"):
            type("Mine", (TreeCell,), {name: lambda self, *a: None})


def test_a_compiled_kernel_without_its_declared_weights_is_an_error_naming_the_cell():
    with pytest.raises(TypeError, match=r"Mine has a compiled kernel \(level_kernel\) .* define compiled_weights"):
        type("Mine", (TreeCell,), {"level_kernel": lambda self, kernels, plan, weights: None})


def test_inputs_passed_by_position_are_named():
    class Positional(MaxPool):
        def forward(self, x, edge_index):
            return self.propagate(edge_index, x)  # PyG's layers take update's inputs by name

    with pytest.raises(TypeError, match=r"Positional.propagate takes update's inputs by name.*x=x"):
        Positional(3, 4)(torch.randn(2, 3), torch.tensor([[0], [1]]))


def test_a_state_of_the_wrong_width_names_the_cell():
    class Wide(MaxPool):
        def update(self, children, x):
            return (torch.cat([self.W(x), self.W(x)], dim=1),)

    with pytest.raises(ValueError, match=r"Wide.update returned state 0 of shape \[1, 8\] for a level of 1 nodes; "
                                         r"expected \[1, 4\]"):
        Wide(3, 4)(torch.randn(2, 3), torch.tensor([[0], [1]]))


def test_reset_parameters_leaves_a_layers_own_initialization_alone():
    cell = Attentive(5)
    torch.manual_seed(7)
    cell.reset_parameters()
    torch.manual_seed(7)
    linear = nn.Linear(5, 5)  # its own init: Kaiming-uniform weights, biases in 1/sqrt(fan_in)
    torch.testing.assert_close(cell.W.weight, linear.weight)
    torch.testing.assert_close(cell.W.bias, linear.bias)
    assert cell.q.abs().max() <= 1 / 5 ** 0.5  # the cell's own parameter: uniform in 1/sqrt(d)


def test_a_paper_cells_initialization_is_uniform_everywhere():
    cell = ChildSumTreeLSTM(4, 9)
    torch.manual_seed(3)
    cell.reset_parameters()
    torch.manual_seed(3)
    want = [torch.empty_like(p).uniform_(-1 / 3, 1 / 3) for p in cell.parameters()]  # d = 9, as nn.LSTM
    for got, w in zip(cell.parameters(), want, strict=True):
        torch.testing.assert_close(got, w)


def test_repr_shows_the_channels():
    assert repr(MaxPool(3, 4)) == "MaxPool(state_channels=(4,))"


def test_the_classifier_reads_a_bare_h_as_the_first_state():
    # A cell whose forward returned a bare h of 10 nodes used to give logits of shape (5,): [0] of h.
    class BareH(MaxPool):
        def forward(self, x, edge_index):
            (h,) = self.propagate(edge_index, x=x)
            return h

    data = from_ptb("(1 (2 (3 a) (4 b)) (0 (1 c) (2 (3 d) (4 e))))", vocab={w: k for k, w in enumerate("abcde")})
    model = TreeClassifier(NodeEmbedding(5, 3), BareH(3, 4), num_classes=5, dropout=0.0)
    assert model(data).shape == (data.num_nodes, 5)


def test_a_top_down_cell_of_ones_own_reads_its_parents():
    class Depth(TreeCell):  # h = 1 + the mean of the parents' h: a node's depth on a tree
        def __init__(self):
            super().__init__(state_channels=(1,), direction="top_down")

        def update(self, parents, x):
            return (1 + parents.mean() + 0 * x,)

    edges = torch.tensor([[1, 2, 3], [0, 1, 1]])  # 0 <- 1 <- {2, 3}
    (h,) = Depth()(torch.zeros(4, 1), Data(edge_index=edges, num_nodes=4))
    torch.testing.assert_close(h.squeeze(1), torch.tensor([1.0, 2.0, 3.0, 3.0]))
