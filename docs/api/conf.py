"""Sphinx configuration of graphtree's API reference: ``sphinx-build -W docs/api docs/api/_build``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's graphtree, installed or not

project = "graphtree"
author = "graphtree contributors"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.mathjax"]
exclude_patterns = ["_build"]
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_typehints = "none"  # the docstrings describe the arguments; signatures stay readable
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True  # "Attributes:" as fields of the class, not a second description of each attribute
html_theme = "alabaster"
