"""The spaCy pipeline the datasets parse with, and its name in processed file names.

Importing this (or :mod:`graphtree.parse`) does not import spaCy, an optional
dependency: it is loaded when a corpus is first parsed.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

from ..parse import DEFAULT_MODEL, load_parser, parser_signature

__all__ = ["model_tag", "parser_for"]


def parser_for(nlp: Any) -> Any:
    """``nlp`` itself, or the default pipeline when it is ``None``."""
    return nlp if nlp is not None else load_parser(DEFAULT_MODEL)


def model_tag(nlp: Any) -> str:
    """Name and version of the parser, so a cache parsed by another model is not reused.

    For the default model the installed package version is read without loading
    spaCy, so an existing cache opens quickly.
    """
    if nlp is not None:
        return parser_signature(nlp)
    try:
        version = importlib.metadata.version(DEFAULT_MODEL)
    except importlib.metadata.PackageNotFoundError:
        version = "missing"
    return f"{DEFAULT_MODEL}-{version}"
