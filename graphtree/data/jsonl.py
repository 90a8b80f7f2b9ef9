"""JSON Lines files: one graph per line, a tree (``"parents"``) or a DAG (``"edges"``), with tokens, named token
fields, features and labels at the nodes and a label at the graph (``docs/data-formats.md``)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import torch
from torch_geometric.data import Data

from ..errors import CycleError, TreeFormatError
from .networkx import from_networkx
from .parents import _label, from_parents
from .records import FileRecord, attach_tokens, located_error
from .tree import NO_LABEL, Vocabulary

__all__ = ["GRAPH_KEYS", "NODE_KEYS", "jsonl_records"]

GRAPH_KEYS = ("nodes", "parents", "edges", "positions", "y")
"""The fields of a graph."""
NODE_KEYS = ("token", "fields", "x", "y")
"""The fields of a node."""


class _DuplicateKeyError(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    # json.loads keeps the last of two equal keys without a word; a repeated field is a mistake to report.
    out = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKeyError(key)
        out[key] = value
    return out


def jsonl_records(lines: list[str], path: str, vocab: Vocabulary | None = None,
                  first_line: int = 1) -> list[FileRecord]:
    """The graphs of JSON Lines ``lines`` (the first being line ``first_line`` of ``path``), one record each.

    Raises:
        TreeFormatError: a malformed record, naming file, line and field.
    """
    records = []
    for number, line in enumerate(lines, start=first_line):
        if not line.strip():
            continue
        try:
            obj = json.loads(line, object_pairs_hook=_no_duplicates)
        except json.JSONDecodeError as err:
            raise located_error(path, number, "JSON", f"not valid JSON: {err.msg} (column {err.colno})",
                          err.pos) from None
        except _DuplicateKeyError as err:
            raise located_error(path, number, str(err), f"field {str(err)!r} appears twice in one object") from None
        records.append(_json_graph(obj, path, number, vocab))
    return records


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # JSON true/false are bools, not 1/0


def _is_number(value: Any) -> bool:
    """A finite JSON number that fits a float (not a boolean)."""
    if _is_int(value):
        try:
            float(value)
        except OverflowError:
            return False
        return True
    return isinstance(value, float) and math.isfinite(value)


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null",
             int: "an integer", float: "a number"}
    return names.get(type(value), type(value).__name__)


def _json_graph(obj: Any, path: str, line: int, vocab: Vocabulary | None) -> FileRecord:
    def error(field: str, reason: str, cycle: list | None = None) -> TreeFormatError:
        return located_error(path, line, field, reason, cycle=cycle)

    if not isinstance(obj, dict):
        raise error("record", f"a line must hold one JSON object (a graph), got {_kind(obj)}")
    unknown = [key for key in obj if key not in GRAPH_KEYS]
    if unknown:
        raise error(unknown[0], f"unknown field {unknown[0]!r}; a graph has {', '.join(GRAPH_KEYS)}")
    if "nodes" not in obj:
        raise error("nodes", "missing field 'nodes' (a list of node objects)")
    nodes = obj["nodes"]
    if not isinstance(nodes, list) or not nodes:
        raise error("nodes", f"'nodes' must be a non-empty list of node objects, got {_kind(nodes)}"
                    + (" (empty)" if nodes == [] else ""))
    tokens, features, node_labels, node_fields = [], [], [], []
    for k, node in enumerate(nodes):
        field = f"nodes[{k}]"
        if not isinstance(node, dict):
            raise error(field, f"a node must be an object like {{\"token\": \"word\"}}, got {_kind(node)}")
        unknown = [key for key in node if key not in NODE_KEYS]
        if unknown:
            raise error(f"{field}.{unknown[0]}", f"unknown field {unknown[0]!r}; a node has "
                        f"{', '.join(NODE_KEYS)}")
        token = node.get("token")
        if token is not None and not isinstance(token, str):
            raise error(f"{field}.token", f"token must be a string, got {_kind(token)} {token!r}")
        tokens.append(token)
        node_fields.append(_node_fields(node.get("fields"), f"{field}.fields", error))
        features.append(_node_features(node, k, features, error))
        node_labels.append(_node_label(node.get("y"), f"{field}.y", error))

    if "parents" in obj and "edges" in obj:
        raise error("parents", "both 'parents' (a tree) and 'edges' (a DAG); give one")
    if "parents" in obj:
        if "positions" in obj:
            raise error("positions", "'positions' goes with 'edges'; under 'parents' children are ordered by "
                        "node index")
        data = _json_tree(obj["parents"], len(nodes), error)
    elif "edges" in obj:
        data = _json_dag(obj["edges"], obj.get("positions"), len(nodes), error)
    else:
        raise error("parents", "missing field 'parents' (a tree: parent index per node, -1 at the root) or "
                    "'edges' (a DAG: [child, parent] pairs)")

    data.y = torch.tensor(node_labels, dtype=torch.long)
    attach_tokens(data, tokens, vocab)
    if features[0] is not None:
        data.x = torch.tensor(features, dtype=torch.float)
    record = FileRecord(data, line, fields=node_fields)
    label = obj.get("y")
    if label is not None:
        if not _is_number(label):
            raise error("y", f"the graph label must be a number (an integer class or a regression target) or "
                        f"null, got {_kind(label)} {label!r}")
        record.label, record.label_is_int, record.label_at = label, _is_int(label), (path, line, "y")
    return record


def _node_fields(value: Any, field: str, error: Callable) -> dict[str, list[str]]:
    """A node's ``"fields"``: an object of named token lists (a string counts as a list of one)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise error(field, f"fields must be an object like {{\"subtokens\": [\"get\", \"value\"]}}, got {_kind(value)}")
    out = {}
    for name, tokens in value.items():
        tokens = [tokens] if isinstance(tokens, str) else tokens
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise error(f"{field}.{name}", f"a field is a string or a list of strings, got {_kind(tokens)}")
        out[name] = tokens
    return out




def _node_features(node: dict, k: int, previous: list, error: Callable) -> list[float] | None:
    has = "x" in node
    if previous and (previous[0] is not None) != has:
        missing = k if not has else 0
        raise error(f"nodes[{missing}].x", f"node {missing} has no 'x' but node {k if missing == 0 else 0} has; "
                    "give every node features, or none")
    if not has:
        return None
    x = node["x"]
    if not isinstance(x, list) or not x or not all(_is_number(v) for v in x):
        raise error(f"nodes[{k}].x", f"'x' must be a non-empty list of finite numbers, got {x!r}")
    if previous and len(x) != len(previous[0]):
        raise error(f"nodes[{k}].x", f"node {k} has {len(x)} features but node 0 has {len(previous[0])}; every "
                    "node needs the same number")
    return x


def _node_label(value: Any, field: str, error: Callable) -> int:
    if value is None:
        return NO_LABEL
    try:
        # The converters' own label check (integers >= -1; whole floats, not bools or strings); the message is
        # ours because it names the JSON field rather than a 1-based token.
        return _label(value, 0)
    except TreeFormatError:
        raise error(field, f"node label {value!r} is not a class (an integer >= 0; null or -1 for "
                    "unlabelled)") from None


def _json_tree(parents: Any, num_nodes: int, error: Callable) -> Data:
    if not isinstance(parents, list):
        raise error("parents", f"'parents' must be a list (one parent index per node), got {_kind(parents)}")
    if len(parents) != num_nodes:
        raise error("parents", f"{len(parents)} parents for {num_nodes} nodes; give one per node (-1 at the root)")
    # Checked here rather than left to from_parents, whose messages name nodes but not the JSON field.
    for k, parent in enumerate(parents):
        if not _is_int(parent):
            raise error(f"parents[{k}]", f"parent of node {k} must be an integer node index, got {_kind(parent)} "
                        f"{parent!r}")
        if not -1 <= parent < num_nodes:
            raise error(f"parents[{k}]", f"parent {parent} of node {k} is outside -1..{num_nodes - 1}")
    roots = [k for k, parent in enumerate(parents) if parent == -1]
    if len(roots) != 1:
        raise error("parents", "no node has parent -1 (the root)" if not roots else
                    f"nodes {roots[0]} and {roots[1]} both have parent -1: a tree has one root (use 'edges' "
                    "for a DAG or forest)")
    try:
        return from_parents(parents)
    except CycleError as err:
        raise error("parents", "parents form a cycle through nodes " + " -> ".join(map(str, err.nodes)),
                    cycle=list(err.nodes)) from None


def _json_dag(edges: Any, positions: Any, num_nodes: int, error: Callable) -> Data:
    import networkx as nx

    if not isinstance(edges, list):
        raise error("edges", f"'edges' must be a list of [child, parent] pairs, got {_kind(edges)}")
    if positions is not None and (not isinstance(positions, list) or len(positions) != len(edges)):
        raise error("positions", f"'positions' must be a list with one entry per edge ({len(edges)}), got "
                    f"{_kind(positions)}" + (f" of {len(positions)}" if isinstance(positions, list) else ""))
    graph = nx.DiGraph()
    graph.add_nodes_from(range(num_nodes))  # node k of the Data is nodes[k]
    for k, edge in enumerate(edges):
        # Checked here: networkx would add a node for an index out of range, and merge a repeated edge.
        if not isinstance(edge, list) or len(edge) != 2 or not all(_is_int(v) for v in edge):
            raise error(f"edges[{k}]", f"an edge is a pair [child, parent] of node indices, got {edge!r}")
        if not all(0 <= v < num_nodes for v in edge):
            raise error(f"edges[{k}]", f"edge {edge} names a node outside 0..{num_nodes - 1}")
        if graph.has_edge(*edge):
            raise error(f"edges[{k}]", f"edge {edge} is listed twice")
        attrs = {} if positions is None or positions[k] is None else {"position": positions[k]}
        graph.add_edge(*edge, **attrs)
    try:
        data = from_networkx(graph)
    except CycleError as err:
        raise error("edges", err.reason, cycle=err.nodes) from None
    except TreeFormatError as err:  # only positions can be wrong now: no node attributes were given
        raise error("positions", err.reason) from None
    return data

