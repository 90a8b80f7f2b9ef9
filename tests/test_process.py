"""A library that leaves the process alone, and the one module where the experiment scripts opt into what they set
for their run (lab.process): the garbage collector, subnormal floats flushed to zero, threads, and
the record of it in a results file."""

from __future__ import annotations

import gc
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from lab import process
from lab.process import opted_in, startup_frozen
from lab.runs import main_guard, run_record

import graphtree
from graphtree import settings
from graphtree.backend import threads as pool
from graphtree.errors import GraphtreeError

HELPER = Path(__file__).with_name("process_state_helper.py")
REPO = Path(__file__).resolve().parent.parent


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
def test_importing_graphtree_leaves_the_collector_as_it_was(collector_state, enabled):
    (gc.enable if enabled else gc.disable)()
    importlib.reload(graphtree)  # the package's __init__ again (its imports are cached)
    assert gc.isenabled() is enabled


def test_importing_and_running_the_library_leaves_the_process_alone(tmp_path):
    """In a new interpreter with two threads: importing graphtree, then every layer forward and backward (the
    compiled kernels and PyTorch's operators), a Trainer's fit and test, and a corpus of one's own read and cut,
    leave the collector (never paused, frozen or retuned), the floating-point mode (subnormals survive a product on
    every thread of the pool, during training too), malloc's options (a 64 MiB block is still mmapped), the thread
    counts, the environment, the warning filters and PyTorch's global switches and seed as they were."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "experiments"),
                                                        os.environ.get("PYTHONPATH", "")]), "OMP_NUM_THREADS": "2"}
    out = subprocess.run([sys.executable, str(HELPER), str(tmp_path)], capture_output=True, text=True, env=env,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen["calls"] == []
    assert {"childsum", "nary", "slstm", "lstmrnn", "head", "bicontree", "trainer"} <= set(seen["ran"])
    assert seen["nodes_read"] > 0
    before = seen["before"]
    assert before["gc_enabled"] and before["gc_frozen"] == 0 and before["subnormals_kept_on_pool"]
    if before["threads"] < 2:
        pytest.skip("one intra-op thread only")
    for stage in ("imported", "training", "after"):
        assert seen[stage] == before, stage


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
        "from lab.process import exit_without_collecting\n"
        "atexit.register(lambda: print('frozen at exit:', gc.get_freeze_count() > 0))  # runs after the freeze\n"
        "with mock.patch.object(atexit, 'register', wraps=atexit.register) as register:\n"
        "    exit_without_collecting(); exit_without_collecting()\n"
        "print('handlers added:', register.call_count, 'frozen now:', gc.get_freeze_count() > 0)\n"
    )
    # A new interpreter finds the lab where the scripts do, beside them (pytest's pythonpath is this process's).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "experiments"), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         env=env).stdout
    assert out.splitlines() == ["handlers added: 1 frozen now: False", "frozen at exit: True"]


TINY = torch.full((1 << 20,), 1e-39)  # subnormal; 32 times ATen's grain, so a product splits over the pool


def kept() -> int:
    """How many subnormals survive a product split over the pool (all: nothing flushed; 0: every thread flushes)."""
    return int((TINY * 1.0).count_nonzero())


@pytest.fixture
def two_threads():
    """Two intra-op threads on GNU OpenMP (where the whole pool can be switched), and the count as before after."""
    if not torch.set_flush_denormal(False):  # (and so leaves the mode as it is: off)
        pytest.skip("this processor has no flush-to-zero mode")
    if pool._gomp_parallel() is None:
        pytest.skip("PyTorch's intra-op pool is not GNU OpenMP here")
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    if torch.get_num_threads() < 2:
        pytest.skip("one intra-op thread only")
    yield
    torch.set_num_threads(before)


def test_a_command_opts_in_for_its_run_and_puts_everything_back(collector_state, two_threads):
    assert kept() == TINY.numel()
    seen = {}

    def run():
        seen.update(process.record(), kept=kept(), here=pool.flushing_denormals())
        return "done"

    assert main_guard(run, "script.py") == "done"
    assert seen == {"garbage_collector": "frozen", "flush_denormals": True, "threads": 2,
                    "malloc": seen["malloc"], "kept": 0, "here": True}
    assert seen["malloc"] in ("glibc", "jemalloc", "tcmalloc", "mimalloc", "system")
    assert gc.get_freeze_count() == 0 and torch.get_num_threads() == 2
    assert kept() == TINY.numel() and not pool.flushing_denormals()


def test_the_threads_a_run_sets_flush_too_and_are_put_back(collector_state, two_threads):
    torch.set_num_threads(1)
    with opted_in():
        process.set_threads(2)  # a larger pool than the run started with
        assert torch.get_num_threads() == 2 and kept() == 0
    assert torch.get_num_threads() == 1
    torch.set_num_threads(2)
    assert kept() == TINY.numel()  # the thread the run added is back to the processor's mode too


def test_a_run_inside_a_run_changes_nothing_more(collector_state, two_threads):
    # Frozen objects that die leave the frozen generation, so its count may fall while a run goes on: the inner run
    # neither unfroze (the count would be 0) nor froze again (it would have grown by what was made since).
    with opted_in():
        frozen = gc.get_freeze_count()
        with opted_in():
            assert kept() == 0 and 0 < gc.get_freeze_count() <= frozen
        assert kept() == 0 and 0 < gc.get_freeze_count() <= frozen  # the inner run's end left the outer's settings
    assert kept() == TINY.numel() and gc.get_freeze_count() == 0


def test_flushing_can_be_turned_off(collector_state, two_threads):
    with settings.overridden(flush_denormals=False), opted_in():
        assert kept() == TINY.numel() and process.record()["flush_denormals"] is False
        assert gc.get_freeze_count() > 0  # the collector's part stays


def test_a_results_file_records_what_the_run_set(collector_state):
    with opted_in():
        record = run_record(threads=1)
    assert record["process"]["garbage_collector"] == "frozen"
    assert set(record["process"]) == {"garbage_collector", "flush_denormals", "threads", "malloc"}
    assert run_record(threads=1)["process"]["garbage_collector"] == "on"  # outside a run: as the process is
