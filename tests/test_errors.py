"""One error hierarchy: every exception class graphtree defines for bad input or misuse is a GraphtreeError,
and still the built-in type it was before there was one (so existing ``except ValueError`` or
``except RuntimeError`` clauses keep catching it)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import graphtree
from graphtree.errors import GraphtreeError, HostValueError, SlotLeakError

# The built-in type each error is besides a GraphtreeError (a ValueError unless named here).
RUNTIME_ERRORS = {"SlotLeakError", "HostValueError", "ReplayError"}


def _package_exceptions() -> dict[str, type[BaseException]]:
    """Every public exception class defined in a module of graphtree (its import path: the class)."""
    found: dict[str, type[BaseException]] = {}
    for module_info in pkgutil.walk_packages(graphtree.__path__, prefix="graphtree."):
        try:
            module = importlib.import_module(module_info.name)
        except ImportError:  # an optional dependency (spaCy, matplotlib) that this environment lacks
            continue
        for name, value in vars(module).items():
            # Private classes (a parser's signal to its caller, caught inside the module) never reach a user.
            if (inspect.isclass(value) and issubclass(value, BaseException) and not name.startswith("_")
                    and value.__module__ == module.__name__):
                found[f"{module.__name__}.{name}"] = value
    return found


EXCEPTIONS = _package_exceptions()


def test_the_walk_finds_the_package_errors():
    names = {cls.__name__ for cls in EXCEPTIONS.values()}
    # Defined in graphtree.errors, in the engine's replay and in the datasets: the walk reaches every folder.
    assert {"GraphtreeError", "TreeFormatError", "SlotLeakError", "HostValueError", "ReplayError",
            "DatasetError"} <= names, names


@pytest.mark.parametrize("path", sorted(EXCEPTIONS))
def test_every_package_error_is_a_graphtree_error_and_its_builtin_type(path):
    cls = EXCEPTIONS[path]
    assert issubclass(cls, GraphtreeError), f"{path} is not a GraphtreeError"
    builtin = RuntimeError if cls.__name__ in RUNTIME_ERRORS else ValueError
    assert issubclass(cls, builtin), f"{path} is no longer a {builtin.__name__}"


@pytest.mark.parametrize("cls", [SlotLeakError, HostValueError])
def test_the_runtime_errors_are_caught_either_way(cls):
    for clause in (GraphtreeError, RuntimeError):
        with pytest.raises(clause):
            raise cls("a cell's update read its padding")
