"""The package's import layering: which of its parts imports which, read from the source, not from a running
import (where a function-local import or an import order can hide a cycle).

A *part* is a subpackage or a top-level module of ``graphtree`` (``graphtree.data``, ``graphtree.schedule``).
Parts stand in :data:`LAYERS`, from the ground floor (errors, settings, levels, schedules) up to the trainer; a
part imports only parts of its own layer or below, and no two parts import each other, however indirectly. The
lab (``experiments/lab``, the package ``lab``: what only the experiment, report and benchmark scripts use) lives
beside the experiments, outside the package: the library never imports it, so it reads, installs and runs
without it, and ``pip install .`` installs the library alone.

``python tests/test_layering.py`` prints the graph's size: modules, import edges between them, and the lines of
the library, of its narrow core (cells, engine, schedules, graph data, backend) and of the lab.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "graphtree"
LAB_PACKAGE = REPO / "experiments" / "lab"
LAYERS = (
    {"errors", "settings", "version", "levels", "schedule"},  # the ground floor
    {"data", "backend"},  # graphs as PyG data; the compiled kernels
    {"engine", "parse", "vocab"},
    {"nn", "datasets", "testing"},  # the cells; the corpora
    {"models", "embeddings", "encoders"},  # models; word vectors and pretrained encoders
    {"replay"},  # training steps replayed as CUDA graphs
    {"train"},  # the trainer library
)
GROUND = LAYERS[0]
NARROW_CORE = {"nn", "engine", "schedule", "levels", "data", "backend"}  # cells, engine, schedules, data, kernels


def part_of(module: str) -> str:
    """``graphtree.data.loader`` -> ``data``; ``graphtree`` itself -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def modules(package: Path) -> dict[str, Path]:
    """Every module of ``package`` by its dotted name (a package by its own name, for its ``__init__.py``)."""
    return {".".join(path.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__"): path
            for path in sorted(package.rglob("*.py"))}


def module_imports(package: Path) -> dict[str, set[str]]:
    """For each module of ``package``, the modules of ``package`` it imports anywhere in its source (top level or
    in a function). ``from graphtree.x import y`` imports ``graphtree.x.y`` where that is a module, else
    ``graphtree.x``."""
    known = modules(package)
    found: dict[str, set[str]] = defaultdict(set)
    for module, path in known.items():
        home = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = ".".join(home.split(".")[:len(home.split(".")) - node.level + 1])
                    source = f"{base}.{node.module}" if node.module else base
                else:
                    source = node.module or ""
                targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source
                           for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            for target in targets:
                while target and target not in known:  # ``import graphtree.x.y.z`` of a name inside a module
                    target = target.rpartition(".")[0]
                if target.split(".")[0] == package.name and target != module:
                    found[module].add(target)
        found.setdefault(module, set())
    return found


def imports(package: Path) -> dict[str, set[str]]:
    """For each part of ``package``, the other parts it imports anywhere in its source (top level or not)."""
    found: dict[str, set[str]] = defaultdict(set)
    for module, targets in module_imports(package).items():
        for target in targets:
            if part_of(target) != part_of(module):
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


def layer_of(part: str) -> int:
    return next(k for k, layer in enumerate(LAYERS) if part in layer)


def upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Every import of a part from a higher layer than its own (``__init__`` aside: it imports the library)."""
    return sorted((part, target) for part, targets in graph.items() if part != "__init__"
                  for target in targets if layer_of(target) > layer_of(part))


def summary(package: Path = PACKAGE, lab: Path = LAB_PACKAGE) -> dict[str, float]:
    """The graph's size: modules, edges between them, lines (the library's, its narrow core's share, the lab's)."""
    graph = module_imports(package)
    lines = {module: len(path.read_text().splitlines()) for module, path in modules(package).items()}
    total = sum(lines.values())
    core = sum(n for module, n in lines.items() if part_of(module) in NARROW_CORE)
    return {"modules": len(graph), "edges": sum(len(targets) for targets in graph.values()), "lines": total,
            "narrow_core_share": core / total, "lab_modules": len(modules(lab)),
            "lab_lines": sum(len(path.read_text().splitlines()) for path in modules(lab).values()),
            "longest": max((n, module) for module, n in lines.items())}


def lab_imports(package: Path) -> list[str]:
    """Each import of the lab (``lab``, ``experiments``) anywhere in ``package``'s modules, as ``module: line``."""
    found = []
    for module, path in modules(package).items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            found += [f"{module}:{node.lineno}" for name in names if name.split(".")[0] in ("lab", "experiments")]
    return found


def test_every_part_has_a_layer():
    assert {part for part in imports(PACKAGE) if part != "__init__"} <= set().union(*LAYERS)
    assert {part_of(module) for module in modules(PACKAGE)} - {"__init__"} <= set().union(*LAYERS)


def test_no_two_parts_of_the_package_import_each_other():
    assert cycles(imports(PACKAGE)) == []


def test_no_part_imports_a_layer_above_its_own():
    assert upward(imports(PACKAGE)) == []


def test_the_library_never_imports_the_lab():
    assert lab_imports(PACKAGE) == []


def test_the_lab_lives_outside_the_package():
    assert not (PACKAGE / "experiments").exists()
    assert (LAB_PACKAGE / "__init__.py").is_file()


def test_the_ground_floor_imports_nothing_above_it():
    graph = imports(PACKAGE)
    upward_ = {part: sorted(graph[part] - GROUND) for part in GROUND if graph[part] - GROUND}
    assert upward_ == {}


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


def test_the_check_finds_a_library_module_reaching_into_the_lab(tmp_path: Path):
    """A core module's import of the lab, hidden in a function and written three ways, is found."""
    package = tmp_path / "graphtree"
    (package / "nn").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "nn" / "__init__.py").write_text("")
    (package / "nn" / "a.py").write_text("def f():\n    from lab import report\n")
    (package / "nn" / "b.py").write_text("import lab.report\n")
    (package / "nn" / "c.py").write_text("from lab.report import x\nfrom .a import f\n")
    assert lab_imports(package) == ["graphtree.nn.a:2", "graphtree.nn.b:1", "graphtree.nn.c:1"]


def test_models_read_sentence_pairs_without_the_datasets():
    """A similarity model cuts a pair into its sides (graphtree.data.pairs) without importing the corpora."""
    assert "datasets" not in imports(PACKAGE)["models"]


if __name__ == "__main__":
    size = summary()
    graph = imports(PACKAGE)
    print(f"the package: {size['modules']} modules, {size['edges']} import edges between them, "
          f"{len(LAYERS)} layers, {len(upward(graph))} upward imports, {len(cycles(graph))} cycles; "
          f"{size['lines']} lines, the narrow core ({', '.join(sorted(NARROW_CORE))}) "
          f"{size['narrow_core_share']:.0%}; longest module {size['longest'][1]} ({size['longest'][0]} lines). "
          f"The lab (experiments/lab, not installed): {size['lab_modules']} modules, {size['lab_lines']} lines")
