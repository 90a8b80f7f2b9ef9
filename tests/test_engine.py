"""The propagation engine's contract with a cell, on a toy cell against a plain recursive reference."""

import random

import pytest
import torch
from torch import Tensor
from torch_geometric.data import Batch
from trees import random_ptb

from graphtree.data import from_ptb
from graphtree.engine import Children, propagate


class InternalStateCell(torch.nn.Module):
    """h = sum of an internal state s, s = tanh(W [x; sum of the children's s]): s never leaves the pass."""

    state_channels = (1, 3)
    output_states = 1

    def __init__(self) -> None:
        super().__init__()
        self.W = torch.nn.Parameter(torch.randn(3, 5, dtype=torch.float64) * 0.5)

    def update(self, children: Children, x: Tensor) -> tuple[Tensor, Tensor]:
        s = torch.tanh(torch.cat([x, children.states[1].sum(dim=1)], dim=1) @ self.W.t())
        return s.sum(dim=1, keepdim=True), s


def recursive(cell: InternalStateCell, x: Tensor, edge_index: Tensor) -> Tensor:
    children: dict[int, list[int]] = {}
    for child, parent in edge_index.t().tolist():
        children.setdefault(parent, []).append(child)
    memo: dict[int, Tensor] = {}

    def s_of(node: int) -> Tensor:
        if node not in memo:
            below = sum((s_of(c) for c in children.get(node, [])), torch.zeros(3, dtype=x.dtype))
            memo[node] = torch.tanh(cell.W @ torch.cat([x[node], below]))
        return memo[node]

    return torch.stack([s_of(v).sum().unsqueeze(0) for v in range(x.size(0))])


def test_internal_states_are_not_returned_and_still_carry_gradients():
    torch.manual_seed(0)
    rng = random.Random(0)
    batch = Batch.from_data_list([from_ptb(random_ptb(k, 3, rng)) for k in (1, 4, 7, 12)])
    cell = InternalStateCell()
    x = torch.randn(batch.num_nodes, 2, dtype=torch.float64, requires_grad=True)
    outputs = propagate(cell, (x,), batch)
    assert len(outputs) == 1 and outputs[0].shape == (batch.num_nodes, 1)
    expected = recursive(cell, x, batch.edge_index)
    torch.testing.assert_close(outputs[0], expected)
    weights = torch.randn(batch.num_nodes, 1, dtype=torch.float64)
    grads = torch.autograd.grad((outputs[0] * weights).sum(), (x, cell.W))
    expected_grads = torch.autograd.grad((expected * weights).sum(), (x, cell.W))
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want)
    with torch.no_grad():
        (h,) = propagate(cell, (x,), batch)
    torch.testing.assert_close(h, expected)


def test_output_states_out_of_range_is_an_error():
    rng = random.Random(1)
    batch = from_ptb(random_ptb(5, 2, rng))
    cell = InternalStateCell()
    cell.output_states = 3
    with pytest.raises(ValueError, match="between 1 and its 2 state components, got 3"):
        propagate(cell, (torch.randn(batch.num_nodes, 2, dtype=torch.float64),), batch)


def test_a_second_backward_through_a_pass_of_update_gives_the_same_gradients():
    # retain_graph=True: the pass's gradient buffers are made anew by each backward, not added to the last ones'.
    torch.manual_seed(2)
    rng = random.Random(2)
    batch = Batch.from_data_list([from_ptb(random_ptb(k, 3, rng)) for k in (3, 9, 5)])
    cell = InternalStateCell()
    x = torch.randn(batch.num_nodes, 2, dtype=torch.float64, requires_grad=True)
    (h,) = propagate(cell, (x,), batch)
    weights = torch.randn(batch.num_nodes, 1, dtype=torch.float64)
    first = torch.autograd.grad((h * weights).sum(), (x, cell.W), retain_graph=True)
    second = torch.autograd.grad((h * weights).sum(), (x, cell.W))
    expected = torch.autograd.grad((recursive(cell, x, batch.edge_index) * weights).sum(), (x, cell.W))
    for got_first, got_second, want in zip(first, second, expected):
        torch.testing.assert_close(got_first, want)
        torch.testing.assert_close(got_second, want)


class _WrittenElements(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the elements of every new tensor the operators under it return (not views, not in-place
    results: those return their argument's memory)."""

    def __init__(self) -> None:
        super().__init__()
        self.elements = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        def storages(tree):
            return {t.untyped_storage().data_ptr() for t in torch.utils._pytree.tree_leaves(tree)
                    if isinstance(t, Tensor)}

        before = storages((args, kwargs))
        out = func(*args, **(kwargs or {}))
        self.elements += sum(t.numel() for t in torch.utils._pytree.tree_leaves(out)
                             if isinstance(t, Tensor) and t.untyped_storage().data_ptr() not in before)
        return out


@pytest.mark.parametrize("depth", [500, 2000])
def test_backward_through_a_pass_of_update_writes_elements_linear_in_the_nodes(depth):
    # A chain of `depth` levels. Recording `buffer[level rows] = states` under autograd would make backward
    # copy the whole gradient buffer at every level: depth^2 / 2 rows, 250 to 1000 times what is counted here.
    from graphtree.data import from_heads
    torch.manual_seed(3)
    data = from_heads([*range(2, depth + 1), 0])
    cell = InternalStateCell()
    x = torch.randn(depth, 2, dtype=torch.float64, requires_grad=True)
    (h,) = propagate(cell, (x,), data)
    loss = h.sum()
    with _WrittenElements() as written:
        loss.backward()
    assert x.grad.abs().sum() > 0
    state_elements = depth * sum(InternalStateCell.state_channels)
    assert written.elements < 40 * state_elements, written.elements / state_elements


@pytest.mark.parametrize("direction", ["bottom_up", "top_down"])
@pytest.mark.parametrize("split_cost", [None, 1])
def test_a_level_is_marked_full_exactly_where_no_slot_of_it_is_empty(direction, split_cost):
    """The reductions skip masking on a level marked full: the mark must match the slots themselves."""
    from graphtree.engine.layout import level_slots
    from graphtree.schedule import Schedule

    rng = random.Random(3)
    graphs = []
    for _ in range(6):  # DAGs: nodes of several children and several parents, so that most levels mix widths
        n = rng.randint(3, 12)
        edges = {(i, rng.randrange(i)) for i in range(1, n)} | {(i, rng.randrange(i)) for i in range(2, n, 2)}
        graphs.append(torch.tensor(sorted(edges)).t())
    offset, edges = 0, []
    for edge_index in graphs:
        edges.append(edge_index + offset)
        offset += int(edge_index.max()) + 1
    schedule = Schedule(torch.cat(edges, dim=1), offset)
    plan = schedule.plan(direction, split_cost)
    marks = [(slots.every_slot_filled, bool(slots.mask.all())) for slots in
             level_slots(torch.nn.Module(), plan, schedule, torch.device("cpu"))]
    assert all(mark == filled for mark, filled in marks)
    if split_cost is None:  # one level a height: both kinds occur (split at every width, every level is full)
        assert {mark for mark, _ in marks} == {True, False}


def test_a_static_plan_never_marks_a_level_full():
    """A replayed step refills a static plan's slots for every batch: nothing read from them holds for the next."""
    from graphtree.engine.layout import level_slots
    from graphtree.replay import StaticSchedule, static_plan

    index = torch.tensor([[0, 1], [2, 3], [0, 1]])  # rows 0-1: the first level; row 2: a level of one node
    plan = static_plan([2, 1], 2, index, torch.zeros_like(index))
    slots = level_slots(torch.nn.Module(), plan, StaticSchedule(plan), torch.device("cpu"))
    assert not any(s.every_slot_filled for s in slots)


def test_the_reductions_of_a_full_level_equal_the_masked_ones():
    """Where every slot is filled, skipping the mask changes no value of any reduction."""
    torch.manual_seed(0)
    n, K, d = 5, 3, 4
    states = (torch.randn(n, K, d, dtype=torch.float64),)
    mask, position = torch.ones(n, K, dtype=torch.bool), torch.arange(K).repeat(n, 1)
    masked, full = Children(states, mask, position), Children(states, mask, position, (), True)
    value, scores = torch.randn(n, K, d, dtype=torch.float64), torch.randn(n, K, dtype=torch.float64)
    layer = torch.nn.Linear(d, 2, dtype=torch.float64)
    for reduce in (lambda c: c.sum(value), lambda c: c.mean(value), lambda c: c.max(value),
                   lambda c: c.attend(scores, value), lambda c: c.softmax_weights(scores), lambda c: c.map(layer),
                   lambda c: c.filled(value, 7.0)):
        assert torch.equal(reduce(masked), reduce(full))
