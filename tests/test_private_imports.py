"""No module of ``graphtree`` imports another folder's private names: ``from X import _name``, where ``X`` is a
graphtree module in another package than the importer's, reaches past what ``X`` offers, so that a change
inside ``X`` breaks a caller it cannot see. Within one folder (a package's own modules) it may.

Read from the source with ``ast``, as tests/test_layering.py reads the imports (function-local ones too).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "graphtree"

# file (relative to graphtree/) and imported name -> why it is allowed for now. Empty: there are none.
ALLOWED: dict[tuple[str, str], str] = {}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(package: Path) -> list[tuple[str, int, str, str]]:
    """Every ``from X import _name`` in ``package`` where ``X`` is one of its modules in another folder than the
    importer: (file relative to the package, line, ``X``, ``_name``)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        folder = ".".join(parts[:-1])  # the importer's package: graphtree.replay for graphtree/replay/step.py
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = folder.split(".")[:len(folder.split(".")) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            if source.split(".")[0] != package.name:
                continue
            # X's folder: X itself where X is a package (its __init__), else the package X's module sits in.
            target = package.parent.joinpath(*source.split("."))
            source_folder = source if target.is_dir() else source.rpartition(".")[0]
            if source_folder == folder:
                continue
            for alias in node.names:
                if _is_private(alias.name):
                    found.append((path.relative_to(package).as_posix(), node.lineno, source, alias.name))
    return found


def test_no_module_imports_a_private_name_of_another_folder():
    offenders = [f"graphtree/{file}:{line}: from {source} import {name}"
                 for file, line, source, name in private_imports(PACKAGE) if (file, name) not in ALLOWED]
    assert offenders == []


def test_the_allow_list_holds_only_imports_that_are_still_there():
    present = {(file, name) for file, _, _, name in private_imports(PACKAGE)}
    assert set(ALLOWED) <= present


def test_the_check_finds_a_private_import_across_folders(tmp_path: Path):
    """Relative and absolute, at top level and in a function; not within one folder, not a dunder."""
    package = tmp_path / "graphtree"
    for folder in ("low", "high"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("from .version import __version__\n")
    (package / "version.py").write_text("__version__ = '1'\n")
    (package / "low" / "core.py").write_text("_secret = 1\n")
    (package / "low" / "near.py").write_text("from .core import _secret\n")  # one folder: allowed
    (package / "high" / "a.py").write_text("def f():\n    from ..low.core import _secret\n")
    (package / "high" / "b.py").write_text("from graphtree.low.core import _secret, public\n")
    (package / "high" / "c.py").write_text("from ..low import _hidden\n")
    (package / "top.py").write_text("from .low.core import _secret\n")
    assert private_imports(package) == [
        ("high/a.py", 2, "graphtree.low.core", "_secret"),
        ("high/b.py", 1, "graphtree.low.core", "_secret"),
        ("high/c.py", 1, "graphtree.low", "_hidden"),
        ("top.py", 1, "graphtree.low.core", "_secret"),
    ]
