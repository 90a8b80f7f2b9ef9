"""Any DAG from networkx.

Edges point **child -> parent**: an edge ``u -> v`` says that ``u`` feeds ``v``,
so information flows along the edges in the bottom-up pass. A node may have
several parents (it then feeds all of them) and several children.
"""

from __future__ import annotations

import math
import numbers
import operator
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data

from ..errors import CycleError, InvalidTypeError, TreeFormatError
from ..levels import topological_levels
from .tree import NO_LABEL, NO_WORD

__all__ = ["from_networkx"]


def from_networkx(graph: Any, position: str = "position", names: bool = False) -> Data:
    """Convert a ``networkx.DiGraph`` (edges child -> parent) into a ``Data``.

    Node ``k`` of the result is the ``k``-th node of ``graph.nodes`` (so
    ``list(graph.nodes)`` maps results back to the graph). The result has the
    attributes of every converter (:mod:`graphtree.data`): without a ``y`` node
    attribute every node is unlabelled (``NO_LABEL``), ``word_pos`` is
    ``NO_WORD`` and ``tokens`` is empty, so the graph batches with trees from
    the other converters. Every node attribute that all nodes carry is carried
    over: numbers, (nested) lists or tuples of numbers, and tensors are stacked
    into a tensor (so ``x`` becomes node features and ``y`` labels), so every
    node's value must have the same shape; anything else (strings, say) is
    kept as a list. Graphs batch together when they carry the same node
    attributes.

    Args:
        graph: A directed acyclic ``networkx.DiGraph``.
        position: Edge attribute giving the child's position among its parent's
            children: a non-negative integer (Python or NumPy; a float only if it
            is a whole number). Without it, children are ordered as the parent's
            in-edges were inserted.
        names: Also keep the graph's node names in ``data.node_names`` (a list);
            such a graph batches only with others that have them.

    Raises:
        TypeError: if ``graph`` is not a directed simple graph.
        TreeFormatError: if some nodes lack an attribute that others carry, a
            numeric attribute has different shapes on different nodes (naming
            the node and its index, also the error's ``position``), edge
            positions are missing on some edges, are not non-negative integers,
            or repeat under one parent.
        CycleError: if the graph has a cycle (names the nodes on it).
    """
    import networkx as nx

    if not isinstance(graph, nx.DiGraph) or graph.is_multigraph():
        raise InvalidTypeError("from_networkx expects a networkx.DiGraph (edges child -> parent), "
                               f"got {type(graph).__name__}")
    loop = next(iter(nx.selfloop_edges(graph)), None)
    if loop is not None:
        raise CycleError([loop[0]], f"node {loop[0]!r} is its own parent (a self-loop)")
    node_names = list(graph.nodes)
    index = {name: k for k, name in enumerate(node_names)}
    num_nodes = len(node_names)

    src, dst, pos = [], [], []
    for parent in node_names:
        in_edges = list(graph.in_edges(parent, data=True))
        explicit = [attrs.get(position) for _, _, attrs in in_edges]
        if any(p is not None for p in explicit):
            if any(p is None for p in explicit):
                raise TreeFormatError(f"some edges into node {parent!r} have the attribute {position!r} and "
                                      "some do not")
            # Checked before the duplicate test: int() used to turn 0.5 into 0 and True into 1 silently.
            explicit = [_position(p, child, parent, position) for p, (child, _, _) in zip(explicit, in_edges)]
            if len(set(explicit)) != len(explicit):
                raise TreeFormatError(f"two children of node {parent!r} share {position!r}")
        for k, (child, _, _) in enumerate(in_edges):
            src.append(index[child])
            dst.append(index[parent])
            pos.append(explicit[k] if explicit[k] is not None else k)

    edge_index = torch.tensor([src, dst], dtype=torch.long).view(2, -1)
    try:
        height, depth = topological_levels(edge_index, num_nodes)
    except CycleError as err:
        raise CycleError([node_names[v] for v in err.nodes]) from None

    edge_pos = torch.tensor(pos, dtype=torch.long)
    # A node with several parents keeps its position under the first one; edge_pos has all of them.
    first_pos = [-1] * num_nodes
    for child, slot in zip(src, pos):
        if first_pos[child] < 0:
            first_pos[child] = slot
    child_pos = torch.tensor(first_pos, dtype=torch.long)

    # The attributes (and their order) of tree_data, so that a batch of DAGs and trees is what PyG expects.
    data = Data(edge_index=edge_index, edge_pos=edge_pos, num_nodes=num_nodes,
                y=torch.full((num_nodes,), NO_LABEL, dtype=torch.long),
                word_pos=torch.full((num_nodes,), NO_WORD, dtype=torch.long), child_pos=child_pos,
                height=height, depth=depth, is_root=depth == 0, is_leaf=height == 0, tokens=[])
    if names:
        data.node_names = node_names
    for key, values in _node_attributes(graph, node_names).items():
        data[key] = values
    return data


def _position(value: Any, child: Any, parent: Any, attribute: str) -> int:
    """The child position ``value`` of edge ``child -> parent`` as an ``int``, or a located error."""
    number = None
    if isinstance(value, (float, np.floating)):
        if math.isfinite(value) and float(value).is_integer():
            number = int(value)
    elif not isinstance(value, (bool, np.bool_, str)):  # int(True) is 1; a string is text, not a position
        try:
            number = operator.index(value)  # Python and NumPy integers
        except TypeError:
            number = None
    if number is None or number < 0:
        raise TreeFormatError(f"edge {child!r} -> {parent!r} has {attribute!r} {value!r}, which is not a "
                              "non-negative integer (the child's position among its parent's children, 0 = first)")
    return number


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
        if all(isinstance(v, torch.Tensor) for v in values):
            # A ragged attribute used to come back as a plain list (the stack failed and was caught), so node
            # features went missing without a word; now the first node that differs is named.
            _check_shapes(key, names, [tuple(v.shape) for v in values])
            out[key] = torch.stack(values)
        elif all(isinstance(v, (int, float, bool, list, tuple)) for v in values):
            shapes = [_numeric_shape(v) for v in values]
            if all(shape is not None for shape in shapes):  # numbers all the way down: must stack
                for k, shape in enumerate(shapes):
                    if shape is _RAGGED:
                        raise TreeFormatError(f"node {names[k]!r} (index {k}) has a ragged {key!r}: its nested "
                                              "lists differ in length, so it cannot become a tensor", position=k)
                _check_shapes(key, names, shapes)
                out[key] = torch.tensor(values)
            else:  # lists holding strings or other objects: a tensor if torch takes them, else a list, as before
                try:
                    out[key] = torch.tensor(values)
                except (TypeError, ValueError, RuntimeError):
                    out[key] = values
        else:
            out[key] = values
    return out


_RAGGED = (-1,)  # _numeric_shape's answer for nested lists of unequal lengths


def _numeric_shape(value: Any) -> tuple[int, ...] | None:
    """Shape of a number or nested list/tuple of numbers; ``_RAGGED`` if the nesting is uneven, ``None`` if
    something other than a number (a string, a tensor) is inside."""
    if isinstance(value, numbers.Number):  # Python and NumPy scalars alike
        return ()
    if not isinstance(value, (list, tuple)):
        return None
    inner = [_numeric_shape(v) for v in value]
    if any(shape is None for shape in inner):
        return None
    if any(shape is _RAGGED or shape != inner[0] for shape in inner):
        return _RAGGED
    return (len(value), *(inner[0] if inner else ()))


def _check_shapes(key: str, names: list, shapes: list[tuple[int, ...]]) -> None:
    """Every node's value of ``key`` must have the first node's shape, to stack into one tensor."""
    for k, shape in enumerate(shapes):
        if shape != shapes[0]:
            raise TreeFormatError(f"node {names[k]!r} (index {k}) has {key!r} of shape {shape}, but node "
                                  f"{names[0]!r} (index 0) has shape {shapes[0]}; every node's {key!r} needs the "
                                  "same shape to become one tensor", position=k)
