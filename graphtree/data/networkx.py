"""Any DAG from networkx.

Edges point **child -> parent**: an edge ``u -> v`` says that ``u`` feeds ``v``,
so information flows along the edges in the bottom-up pass. A node may have
several parents (it then feeds all of them) and several children.
"""

from __future__ import annotations

from typing import Any

import torch
from torch_geometric.data import Data

from ..errors import CycleError, TreeFormatError
from .levels import topological_levels

__all__ = ["from_networkx"]


def from_networkx(graph: Any, position: str = "position") -> Data:
    """Convert a ``networkx.DiGraph`` (edges child -> parent) into a ``Data``.

    Node ``k`` of the result is the ``k``-th node of ``graph.nodes``; the
    original node names are kept in ``data.node_names``. Every node attribute
    that all nodes carry is carried over: numbers and tensors are stacked into a
    tensor (so ``x`` becomes node features and ``y`` labels), anything else is
    kept as a list.

    Args:
        graph: A directed acyclic ``networkx.DiGraph``.
        position: Edge attribute giving the child's position among its parent's
            children. Without it, children are ordered as the parent's in-edges
            were inserted.

    Raises:
        TypeError: if ``graph`` is not a directed simple graph.
        TreeFormatError: if some nodes lack an attribute that others carry, or
            edge positions are missing on some edges or repeat under one parent.
        CycleError: if the graph has a cycle (names the nodes on it).
    """
    import networkx as nx

    if not isinstance(graph, nx.DiGraph) or graph.is_multigraph():
        raise TypeError("from_networkx expects a networkx.DiGraph (edges child -> parent), "
                        f"got {type(graph).__name__}")
    loop = next(iter(nx.selfloop_edges(graph)), None)
    if loop is not None:
        raise CycleError([loop[0]], f"node {loop[0]!r} is its own parent (a self-loop)")
    names = list(graph.nodes)
    index = {name: k for k, name in enumerate(names)}
    num_nodes = len(names)

    src, dst, pos = [], [], []
    for parent in names:
        in_edges = list(graph.in_edges(parent, data=True))
        explicit = [attrs.get(position) for _, _, attrs in in_edges]
        if any(p is not None for p in explicit):
            if any(p is None for p in explicit):
                raise TreeFormatError(f"some edges into node {parent!r} have the attribute {position!r} and "
                                      "some do not")
            if len(set(explicit)) != len(explicit):
                raise TreeFormatError(f"two children of node {parent!r} share {position!r}")
        for k, (child, _, _) in enumerate(in_edges):
            src.append(index[child])
            dst.append(index[parent])
            pos.append(int(explicit[k]) if explicit[k] is not None else k)

    edge_index = torch.tensor([src, dst], dtype=torch.long).view(2, -1)
    try:
        height, depth = topological_levels(edge_index, num_nodes)
    except CycleError as err:
        raise CycleError([names[v] for v in err.nodes]) from None

    edge_pos = torch.tensor(pos, dtype=torch.long)
    # A node with several parents keeps its position under the first one; edge_pos has all of them.
    first_pos = [-1] * num_nodes
    for child, slot in zip(src, pos):
        if first_pos[child] < 0:
            first_pos[child] = slot
    child_pos = torch.tensor(first_pos, dtype=torch.long)

    data = Data(edge_index=edge_index, edge_pos=edge_pos, num_nodes=num_nodes, child_pos=child_pos,
                height=height, depth=depth, is_root=depth == 0, is_leaf=height == 0)
    data.node_names = names
    for key, values in _node_attributes(graph, names).items():
        data[key] = values
    return data


def _node_attributes(graph: Any, names: list) -> dict[str, Any]:
    keys: set[str] = set()
    for name in names:
        keys.update(graph.nodes[name])
    out = {}
    for key in sorted(keys):
        missing = [name for name in names if key not in graph.nodes[name]]
        if missing:
            raise TreeFormatError(f"node {missing[0]!r} lacks the attribute {key!r} that other nodes carry")
        values = [graph.nodes[name][key] for name in names]
        try:
            if all(isinstance(v, torch.Tensor) for v in values):
                out[key] = torch.stack(values)
            elif all(isinstance(v, (int, float, bool, list, tuple)) for v in values):
                out[key] = torch.tensor(values)
            else:
                out[key] = values
        except (TypeError, ValueError, RuntimeError):
            out[key] = values
    return out
