"""The package's import layering: which of its parts imports which, read from the source, not from a running
import (where a function-local import or an import order can hide a cycle).

A *part* is a subpackage or a top-level module of ``graphtree`` (``graphtree.data``, ``graphtree.schedule``).
Parts stand in :data:`LAYERS`, from the ground floor (errors, settings, levels, schedules) up to the lab
(``graphtree.experiments``, what only the experiment and report scripts use); a part imports only parts of its
own layer or below, and no two parts import each other, however indirectly. The library (every layer below the
lab) never imports the lab, so it reads, installs and runs without it.

``python tests/test_layering.py`` prints the graph's size: modules, import edges between them, and the lines of
the library and of its narrow core (cells, engine, schedules, graph data, backend).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "graphtree"
LAB = "experiments"
LAYERS = (
    {"errors", "settings", "version", "levels", "schedule"},  # the ground floor
    {"data", "backend"},  # graphs as PyG data; the compiled kernels
    {"engine", "parse", "vocab"},
    {"nn", "datasets", "testing"},  # the cells; the corpora
    {"models", "embeddings", "encoders"},  # models; word vectors and pretrained encoders
    {"replay"},  # training steps replayed as CUDA graphs
    {"train"},  # the trainer library
    {LAB},  # the lab: the experiment scripts' set-up, run files, reports
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


def summary(package: Path = PACKAGE) -> dict[str, float]:
    """The graph's size: modules, edges between them, lines (all, the library's, the narrow core's)."""
    graph = module_imports(package)
    lines = {module: len(path.read_text().splitlines()) for module, path in modules(package).items()}
    total = sum(lines.values())
    library = sum(n for module, n in lines.items() if part_of(module) != LAB)
    core = sum(n for module, n in lines.items() if part_of(module) in NARROW_CORE)
    return {"modules": len(graph), "edges": sum(len(targets) for targets in graph.values()),
            "lab_modules": sum(part_of(module) == LAB for module in graph), "lines": total,
            "library_share": library / total, "narrow_core_share": core / total}


def test_every_part_has_a_layer():
    assert {part for part in imports(PACKAGE) if part != "__init__"} <= set().union(*LAYERS)
    assert {part_of(module) for module in modules(PACKAGE)} - {"__init__"} <= set().union(*LAYERS)


def test_no_two_parts_of_the_package_import_each_other():
    assert cycles(imports(PACKAGE)) == []


def test_no_part_imports_a_layer_above_its_own():
    assert upward(imports(PACKAGE)) == []


def test_the_library_never_imports_the_lab():
    offenders = sorted(f"{module} imports {target}" for module, targets in module_imports(PACKAGE).items()
                       if part_of(module) != LAB for target in targets if part_of(target) == LAB)
    assert offenders == []


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
    """A core module's import of the lab, hidden in a function and written three ways, is an upward arrow."""
    package = tmp_path / "graphtree"
    for folder in ("nn", LAB):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / LAB / "report.py").write_text("x = 1\n")
    (package / "nn" / "a.py").write_text("def f():\n    from ..experiments import report\n")
    (package / "nn" / "b.py").write_text("import graphtree.experiments.report\n")
    (package / "nn" / "c.py").write_text("from graphtree.experiments.report import x\n")
    graph = module_imports(package)
    assert {module for module in graph if f"graphtree.{LAB}.report" in graph[module]} == {
        "graphtree.nn.a", "graphtree.nn.b", "graphtree.nn.c"}
    assert upward(imports(package)) == [("nn", LAB)]


def test_models_read_sentence_pairs_without_the_datasets():
    """A similarity model cuts a pair into its sides (graphtree.data.pairs) without importing the corpora."""
    assert "datasets" not in imports(PACKAGE)["models"]


if __name__ == "__main__":
    size = summary()
    print(f"{size['modules']} modules ({size['lab_modules']} in graphtree.{LAB}), {size['edges']} import edges "
          f"between them; {size['lines']} lines, the library (all but graphtree.{LAB}) "
          f"{size['library_share']:.0%}, the narrow core ({', '.join(sorted(NARROW_CORE))}) "
          f"{size['narrow_core_share']:.0%}")
