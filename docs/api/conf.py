"""Sphinx configuration of graphtree's API reference: ``python -m sphinx -W -b html docs/api docs/api/_build``.

One page per public module (``index.rst`` lists them), each showing what the module's ``__all__`` names and, of
its classes, the members without ``:meta private:`` in their docstring or a base class's (the internal hooks,
such as a cell's ``compiled_weights``). Equations are MathML written at build time (``_ext/mathml.py``), so the
pages need no network to show them.
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the checkout's graphtree, installed or not
sys.path.insert(0, str(HERE / "_ext"))

project = "graphtree"
author = "graphtree contributors"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "mathml"]
html_math_renderer = "mathml"
exclude_patterns = ["_build"]
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_typehints = "none"  # the docstrings describe the arguments; signatures stay readable
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True  # "Attributes:" as fields of the class, not a second description of each attribute
html_theme = "alabaster"


def _owner(obj):
    """The class that defines the function or property ``obj``, from its qualified name; ``None`` if none."""
    function = getattr(obj, "fget", obj)
    path = getattr(function, "__qualname__", "").split(".")[:-1]
    owner = sys.modules.get(getattr(function, "__module__", None) or "")
    for part in path:
        owner = getattr(owner, part, None)
    return owner if isinstance(owner, type) and path else None


def _private_in_a_base(app, what, name, obj, skip, options):
    """Skip a member that overrides one marked ``:meta private:`` in a base class: the override has a docstring
    of its own, so autodoc's own check of the marker does not see it."""
    owner = _owner(obj)
    if skip or owner is None:
        return None
    for base in owner.__mro__[1:]:
        if ":meta private:" in (getattr(base.__dict__.get(name), "__doc__", None) or ""):
            return True
    return None


def setup(app):
    app.connect("autodoc-skip-member", _private_in_a_base)
