"""The package's import layering: which of its parts imports which, read from the source, not from a running
import (where a function-local import or an import order can hide a cycle).

A *part* is a subpackage or a top-level module of ``graphtree`` (``graphtree.data``, ``graphtree.schedule``).
The ground floor (errors, settings, the collector, levels, schedules) imports nothing above it, the graph
converters (``graphtree.data``) import nothing of the engine or the cells, and no two parts import each other,
however indirectly.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "graphtree"
GROUND = {"errors", "settings", "collector", "levels", "schedule"}


def part_of(module: str) -> str:
    """``graphtree.data.loader`` -> ``data``; ``graphtree`` itself -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports(package: Path) -> dict[str, set[str]]:
    """For each part of ``package``, the other parts it imports anywhere in its source (top level or not)."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in sorted(package.rglob("*.py")):
        module = ".".join(path.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__")
        home = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = home.split(".")[:len(home.split(".")) - node.level + 1]
                # ``from .. import settings`` imports graphtree.settings, not the package's __init__
                targets = [".".join(base + [node.module])] if node.module else \
                    [".".join(base + [alias.name]) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                targets = [node.module or ""]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            for target in targets:
                if target.split(".")[0] == package.name and part_of(target) != part_of(module):
                    found[part_of(module)].add(part_of(target))
    return found


def cycles(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Every pair of parts that reach each other (the package's ``__init__``, which imports them all, aside)."""
    def reach(start: str) -> set[str]:
        seen, stack = set(), [start]
        while stack:
            for nxt in graph.get(stack.pop(), ()):
                if nxt != "__init__" and nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        return seen

    reached = {part: reach(part) for part in graph if part != "__init__"}
    return sorted({tuple(sorted((a, b))) for a in reached for b in reached[a] if a != b and a in reached.get(b, ())})


def test_no_two_parts_of_the_package_import_each_other():
    assert cycles(imports(PACKAGE)) == []


def test_the_ground_floor_imports_nothing_above_it():
    graph = imports(PACKAGE)
    upward = {part: sorted(graph[part] - GROUND) for part in GROUND if graph[part] - GROUND}
    assert upward == {}


def test_graph_converters_know_nothing_of_engine_cells_or_training():
    assert imports(PACKAGE)["data"] <= GROUND


def test_the_check_finds_a_cycle_hidden_in_a_function(tmp_path: Path):
    package = tmp_path / "pkg"
    (package / "low").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "low" / "__init__.py").write_text("def later():\n    from ..high import thing\n")
    (package / "high.py").write_text("from .low import later\nthing = 1\n")
    assert imports(package) == {"low": {"high"}, "high": {"low"}}
    assert cycles(imports(package)) == [("high", "low")]


def test_models_read_sentence_pairs_without_the_datasets():
    """A similarity model cuts a pair into its sides (graphtree.data.pairs) without importing the corpora."""
    assert "datasets" not in imports(PACKAGE)["models"]
