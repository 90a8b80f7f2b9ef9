"""Checks for a cell of one's own, the checks graphtree's tests make of the paper cells.

:func:`check_cell` asks three questions of a cell, in float64, on small
graphs made here (a tree with nodes of one, two and three children, a wider
tree, a DAG whose nodes have several children and several parents):

1. **Does a node's result depend on its batch?** Every pass runs under
   :func:`~graphtree.engine.detect_slot_leaks`, which widens each level by
   empty slots and compares; and each graph's states alone must equal its
   states inside a batch with the others, where its levels have more slots.
2. **Is its backward right?** ``torch.autograd.gradcheck`` of the states
   with respect to the node features and every parameter of the cell.
3. (Implicitly) does it run at all on leaves, one-node levels, several
   parents, without an error?

Example::

    from graphtree.testing import check_cell

    check_cell(MyCell(4, 8), in_channels=4)  # raises with what is wrong, else returns None
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Batch, Data

from .engine import detect_slot_leaks

__all__ = ["check_cell", "check_graphs"]

Forward = Callable[[torch.nn.Module, Tensor, Any], Tensor | Sequence[Tensor]]


def _graph(edges: list[tuple[int, int]], num_nodes: int) -> Data:
    """A graph of ``num_nodes`` nodes and these child -> parent edges (each child's position: its edge order)."""
    edge_index = torch.tensor(edges, dtype=torch.long).t().reshape(2, -1)
    return Data(edge_index=edge_index, num_nodes=num_nodes)


def check_graphs(max_children: int | None = None) -> list[Data]:
    """The graphs :func:`check_cell` runs a cell on, none with more than ``max_children`` children a node:
    a tree whose levels mix nodes of one, two and (arity allowing) three children; a wider tree (a node of
    as many children as allowed, up to six, beside a chain); and a DAG, a node of which has three parents and
    another three children."""
    wide = 6 if max_children is None else max_children
    most = 3 if max_children is None else min(3, max_children)
    # Tree: 0 <- 1, 2, (3); 1 <- 4; 2 <- 5, 6; 4 <- 7 (levels of nodes with different numbers of children).
    tree = [(1, 0), (2, 0), (4, 1), (5, 2), (6, 2), (7, 4)] + ([(3, 0)] if most >= 3 else [])
    wider = [(k, 0) for k in range(1, wide + 1)] + [(wide + 1, 1), (wide + 2, wide + 1)]
    # DAG: node 3 has parents 4, 5 and 6; node 6 has children 0, 1 and 3 (arity allowing).
    dag = [(0, 3), (1, 3), (3, 4), (3, 5), (2, 6), (3, 6)] + ([(0, 6)] if most >= 3 else [])
    graphs = [(tree, 8), (wider, wide + 3), (dag, 7)]
    return [_graph(_at_most(edges, max_children), num_nodes) for edges, num_nodes in graphs]


def _at_most(edges: list[tuple[int, int]], max_children: int | None) -> list[tuple[int, int]]:
    """``edges`` without each parent's children past its first ``max_children`` (those become roots)."""
    if max_children is None:
        return edges
    seen: dict[int, int] = {}
    kept = []
    for child, parent in edges:
        seen[parent] = seen.get(parent, 0) + 1
        if seen[parent] <= max_children:
            kept.append((child, parent))
    return kept


def _states(out: Tensor | Sequence[Tensor]) -> list[Tensor]:
    return [out] if isinstance(out, Tensor) else list(out)


def _call(forward: Forward, cell: torch.nn.Module, x: Tensor, graph: Any) -> list[Tensor]:
    return _states(forward(cell, x, graph))


def check_cell(cell: torch.nn.Module, in_channels: int, *, forward: Forward | None = None, seed: int = 0,
               gradcheck: bool = True) -> None:
    """Check ``cell`` as graphtree's tests check the paper cells; raise with what is wrong, else return ``None``.

    The cell is copied and run in float64 (the copy's parameters are the cell's): each pass under
    :func:`~graphtree.engine.detect_slot_leaks`, each graph of :func:`check_graphs` alone against the same
    graph inside one batch with the others (to 1e-10), and ``torch.autograd.gradcheck`` of the first graph's
    states with respect to its node features and every parameter.

    Args:
        cell: A :class:`~graphtree.nn.TreeCell` (or any module the engine runs).
        in_channels: The width of the node features ``x``.
        forward: ``forward(cell, x, graph) -> states`` (a tensor or a sequence of them); by default
            ``cell(x, graph)``, as PyG layers are called.
        seed: Seeds the node features.
        gradcheck: Also check the gradients (the slowest part; off for a quick check).

    Raises:
        graphtree.errors.SlotLeakError: ``update`` lets empty slots into its result (it names the node).
        AssertionError: A graph's states change inside a batch, or a gradient is wrong.
    """
    forward = forward or (lambda module, x, graph: module(x, graph))
    cell = copy.deepcopy(cell).double()
    graphs = check_graphs(getattr(cell, "max_children", None))
    generator = torch.Generator().manual_seed(seed)
    features = [torch.randn(g.num_nodes, in_channels, dtype=torch.float64, generator=generator) for g in graphs]
    name = type(cell).__name__
    with detect_slot_leaks():
        alone = [_call(forward, cell, x, g) for x, g in zip(features, graphs)]
        batch = Batch.from_data_list(graphs)
        together = _call(forward, cell, torch.cat(features), batch)
    kinds = ["tree", "wider tree", "DAG"]
    for k, (states, graph) in enumerate(zip(alone, graphs)):
        rows = slice(int(batch.ptr[k]), int(batch.ptr[k + 1]))
        for s, (own, batched) in enumerate(zip(states, together)):
            if not torch.allclose(own, batched[rows], rtol=1e-10, atol=1e-10):
                difference = float((own - batched[rows]).detach().abs().max())
                raise AssertionError(f"{name}: state {s} of the {kinds[k]} alone differs by {difference:.3g} from "
                                     f"its states inside a batch with the other graphs ({graph.num_nodes} nodes): "
                                     "a node's result must not depend on the other graphs of its batch")
    if not gradcheck:
        return
    wrapped = _Forward(cell, forward)
    names = [f"cell.{key}" for key, _ in cell.named_parameters()]
    params = [value.detach().clone().requires_grad_() for _, value in cell.named_parameters()]
    x = features[0].clone().requires_grad_()

    def states_of(x: Tensor, *values: Tensor) -> tuple[Tensor, ...]:
        return tuple(torch.func.functional_call(wrapped, dict(zip(names, values)), (x, graphs[0])))

    try:
        torch.autograd.gradcheck(states_of, (x, *params), eps=1e-6, atol=1e-6, rtol=1e-4, fast_mode=True)
    except RuntimeError as error:  # gradcheck's GradcheckError
        raise AssertionError(f"{name}: gradcheck failed on the tree: {error}") from None


class _Forward(torch.nn.Module):
    """``forward(cell, x, graph)`` as a module holding the cell, so that ``functional_call`` can swap its
    parameters for gradcheck's."""

    def __init__(self, cell: torch.nn.Module, forward: Forward) -> None:
        super().__init__()
        self.cell, self._forward = cell, forward

    def forward(self, x: Tensor, graph: Any) -> list[Tensor]:
        return _states(self._forward(self.cell, x, graph))
