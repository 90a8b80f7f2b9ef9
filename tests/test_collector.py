"""The garbage collector around start-up work: paused while long-lived objects are made, their objects left out of
the collections of a command's run, and the collector as it was afterwards."""

from __future__ import annotations

import gc
import importlib
import subprocess
import sys

import pytest

import graphtree
from graphtree.collector import collection_paused, startup_frozen
from graphtree.errors import GraphtreeError
from graphtree.train.runs import main_guard


@pytest.fixture
def collector_state():
    """Each test starts with the collector enabled and nothing frozen, and leaves it so."""
    was_enabled = gc.isenabled()
    gc.enable()
    assert gc.get_freeze_count() == 0
    yield
    gc.unfreeze()
    if was_enabled:
        gc.enable()
    else:
        gc.disable()


@pytest.mark.parametrize("enabled", [True, False])
def test_paused_then_as_before(collector_state, enabled):
    (gc.enable if enabled else gc.disable)()
    with collection_paused():
        assert not gc.isenabled()
    assert gc.isenabled() is enabled
    with pytest.raises(ValueError), collection_paused():
        raise ValueError("an error inside")
    assert gc.isenabled() is enabled


@pytest.mark.parametrize("enabled", [True, False])
def test_importing_graphtree_leaves_the_collector_as_it_was(collector_state, enabled):
    (gc.enable if enabled else gc.disable)()
    importlib.reload(graphtree)  # the package's __init__ again (its imports are cached)
    assert gc.isenabled() is enabled


def test_a_fresh_import_pauses_collection_and_restores_it():
    """In a new interpreter: no collection starts while graphtree's imports (PyG's among them) run, and the
    collector is on afterwards. (PyTorch, imported first, may collect; so may the collector once it is back on.)"""
    script = (
        "import gc, sys, torch\n"
        "during = []\n"
        "def seen(phase, info):\n"
        "    if phase == 'start' and 'graphtree.vocab' not in sys.modules:\n"
        "        during.append(info['generation'])\n"
        "gc.callbacks.append(seen)\n"
        "import graphtree\n"
        "print(len(during), gc.isenabled())\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["0", "True"]


def test_startup_objects_left_out_of_collections_for_the_run(collector_state):
    before = [[]]  # a container the collector tracks
    with startup_frozen():
        assert gc.get_freeze_count() > 0
        assert not any(o is before for o in gc.get_objects())  # frozen: no generation holds it
        during = [[]]
        assert any(o is during for o in gc.get_objects())  # what the run makes is collected as usual
    assert gc.get_freeze_count() == 0
    assert any(o is before for o in gc.get_objects())


def test_objects_frozen_by_the_caller_stay_frozen(collector_state):
    gc.freeze()
    frozen = gc.get_freeze_count()
    with startup_frozen():
        assert gc.get_freeze_count() == frozen
    assert gc.get_freeze_count() == frozen  # not unfrozen: they were the caller's


def test_a_command_runs_with_its_startup_frozen(collector_state):
    seen = []
    assert main_guard(lambda: seen.append(gc.get_freeze_count()) or "done", "script.py") == "done"
    assert seen[0] > 0 and gc.get_freeze_count() == 0

    def failing():
        raise GraphtreeError("bad input")

    with pytest.raises(SystemExit):
        main_guard(failing, "script.py")
    assert gc.get_freeze_count() == 0  # a user error ends the run with the collector as it was


def test_the_exit_collects_nothing_once_asked():
    """In a new interpreter: asked twice, one exit handler, and at exit every object alive is frozen (so the
    interpreter's last collections walk none of them)."""
    script = (
        "import atexit, gc\n"
        "from unittest import mock\n"
        "from graphtree.collector import exit_without_collecting\n"
        "atexit.register(lambda: print('frozen at exit:', gc.get_freeze_count() > 0))  # runs after the freeze\n"
        "with mock.patch.object(atexit, 'register', wraps=atexit.register) as register:\n"
        "    exit_without_collecting(); exit_without_collecting()\n"
        "print('handlers added:', register.call_count, 'frozen now:', gc.get_freeze_count() > 0)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["handlers added: 1 frozen now: False", "frozen at exit: True"]
