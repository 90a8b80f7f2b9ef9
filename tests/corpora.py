"""Where the tests find the real corpora: ``$GRAPHTREE_MIRROR`` (a local folder), else ``../shared/data``.

Read once at import, before any test fixture clears the variable. Tests that
need the corpora are marked :data:`needs_corpora` and skipped, with one message
saying how to supply them, where neither exists.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from graphtree.datasets import MIRROR_ENV


def _find() -> Path | None:
    value = os.environ.get(MIRROR_ENV, "")
    if value and "://" not in value:
        return Path(value) if Path(value).is_dir() else None
    shared = Path(__file__).resolve().parents[2] / "shared" / "data"
    return shared if shared.is_dir() else None


CORPORA = _find()
"""The folder holding ``sst/``, ``sick/`` and ``trec/`` as their official downloads, or ``None``."""

HOW_TO_SUPPLY = (f"real corpora not found: set {MIRROR_ENV} to a folder laid out like the data folder "
                 "(sst/, sick/, trec/; see datasets/README.md), or place it at ../shared/data beside the repository")

needs_corpora = pytest.mark.skipif(CORPORA is None, reason=HOW_TO_SUPPLY)


def corpus_file(*parts: str) -> Path:
    """A file of the corpora (the test is skipped where the corpora are absent)."""
    if CORPORA is None:
        pytest.skip(HOW_TO_SUPPLY)
    return CORPORA.joinpath(*parts)
