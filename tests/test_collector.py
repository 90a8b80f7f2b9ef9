"""The garbage collector around start-up work: paused while long-lived objects are made, their objects left out of
the collections of a command's run, and the collector as it was afterwards; importing graphtree does none of it."""

from __future__ import annotations

import gc
import importlib
import subprocess
import sys

import pytest

import graphtree
from graphtree.collector import collection_paused, startup_frozen
from graphtree.errors import GraphtreeError
from graphtree.experiments.runs import main_guard


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


def test_a_fresh_import_leaves_the_collector_and_the_float_mode_alone():
    """In a new interpreter: importing graphtree (after PyTorch and PyG, whose own imports are not graphtree's)
    neither pauses, freezes nor retunes the collector, and leaves subnormal floats as they were: those are the
    commands' and the trainer's choices (main_guard, the datasets' cut, the trainer's denormals_flushed)."""
    script = (
        "import gc, torch, torch_geometric\n"
        "calls = []\n"
        "def watch(name):\n"
        "    real = getattr(gc, name)\n"
        "    setattr(gc, name, lambda *args: calls.append(name) or real(*args))\n"
        "for name in ('disable', 'enable', 'freeze', 'unfreeze', 'set_threshold'):\n"
        "    watch(name)\n"
        "threshold = gc.get_threshold()\n"
        "import graphtree\n"
        "tiny = torch.tensor([1e-40]) * 1.0  # subnormal: zero where flushed\n"
        "print(calls, gc.isenabled(), gc.get_freeze_count(), gc.get_threshold() == threshold, bool(tiny.ne(0).all()))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["[]", "True", "0", "True", "True"]


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
