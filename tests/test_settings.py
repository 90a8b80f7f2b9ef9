"""graphtree's settings: read in one place, once, from the environment; overridable in code; and nothing in the
library that behaves otherwise under pytest. Dataset caches are named by the code that made them."""

from __future__ import annotations

import re
import types
from pathlib import Path

import pytest

import graphtree
from graphtree import settings
from graphtree.backend import native
from graphtree.datasets.base import code_fingerprint

PACKAGE = Path(graphtree.__file__).parent


def test_the_environment_gives_the_settings():
    got = settings.Settings.from_environment({"GRAPHTREE_NATIVE": " 0 ", "GRAPHTREE_CACHE": "/c/g",
                                              "GRAPHTREE_MIRROR": "http://m/", "GRAPHTREE_FLUSH_DENORMALS": "0",
                                              "GRAPHTREE_SLOT_CHECK": "Always"})
    assert got == settings.Settings(native="0", cache=Path("/c/g"), mirror="http://m/", flush_denormals=False,
                                    slot_check="always")
    defaults = settings.Settings.from_environment({"XDG_CACHE_HOME": "/x"})
    assert defaults == settings.Settings(native="auto", cache=Path("/x/graphtree"), mirror="", flush_denormals=True,
                                         slot_check="first")


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("GRAPHTREE_NATIVE", "yes", r"native \(\$GRAPHTREE_NATIVE\) must be 0, 1 or auto, got 'yes'"),
    ("GRAPHTREE_FLUSH_DENORMALS", "no", r"\$GRAPHTREE_FLUSH_DENORMALS must be 0 or 1, got 'no'"),
    ("GRAPHTREE_SLOT_CHECK", "yes",
     r"slot_check \(\$GRAPHTREE_SLOT_CHECK\) must be one of first, always, off, got 'yes'"),
])
def test_a_bad_value_names_its_variable(variable, value, message):
    with pytest.raises(ValueError, match=message):
        settings.Settings.from_environment({variable: value})


def test_the_environment_is_read_once(monkeypatch):
    before = settings.current()
    monkeypatch.setenv("GRAPHTREE_MIRROR", "http://elsewhere/")
    assert settings.current() is before  # a change of the environment after the first read is not seen ...
    assert settings.reload().mirror == "http://elsewhere/"  # ... until the environment is read again


def test_code_overrides_for_a_block_or_for_good():
    start = settings.current()
    with settings.overridden(native="0", mirror="/m") as inside:
        assert settings.current() is inside and inside.native == "0" and inside.mirror == "/m"
        assert native.native_mode() == "0"
    assert settings.current() == start
    settings.configure(native="1")  # the test's fixture puts the settings back afterwards
    assert native.native_mode() == "1" and settings.current().mirror == start.mirror
    with pytest.raises(ValueError, match="must be 0, 1 or auto"):
        settings.configure(native="fast")


def test_the_environment_is_read_in_one_module_and_nothing_looks_for_pytest():
    reads = re.compile(r"(environ|getenv).*(GRAPHTREE_|_ENV\b|ENVIRONMENT\[)")
    readers = sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
                     if any(reads.search(line) for line in path.read_text().splitlines()))
    assert readers == ["settings.py"], readers
    assert not [path for path in PACKAGE.rglob("*.py") if "PYTEST" in path.read_text()]


def test_a_cache_name_follows_the_code_that_made_it(tmp_path):
    source = tmp_path / "reader.py"
    source.write_text("def read(): return 1\n")
    module = types.ModuleType("reader")
    module.__file__ = str(source)
    first = code_fingerprint(module)
    assert code_fingerprint(module) == first
    source.write_text("def read(): return 2\n")
    assert code_fingerprint(module) != first
