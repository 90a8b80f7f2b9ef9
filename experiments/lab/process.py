"""What the experiment scripts set for their whole process, in one place; graphtree itself sets none of it.

Importing graphtree, building and running its layers, loading its datasets and
training with its :class:`~graphtree.train.Trainer` leave the process as they
found it: the garbage collector, the processor's floating-point mode, ``malloc``
and the thread count (``tests/test_process.py`` checks each in a fresh
interpreter). A command that trains for minutes gains from setting some of them,
so the experiment scripts opt in here, for the duration of their run
(:func:`opted_in`, entered by :func:`lab.runs.main_guard`;
:func:`set_threads`, by :func:`~lab.runs.start_process`), and
every results file records what was set (:func:`record`, its ``process`` block):

* **The garbage collector.** A command's imports (PyTorch, PyG) and the cutting
  of a corpus into graphs make hundreds of thousands of objects that live as long
  as the process; each full collection walks them all and frees nothing. What
  the imports made is left out of the collections of the run (``gc.freeze``,
  put back after), and the interpreter's exit collects nothing
  (:func:`exit_without_collecting`).
* **Subnormal floats read and written as zero** (x86 FTZ/DAZ), on the calling
  thread and on every thread of PyTorch's intra-op pool
  (:func:`graphtree.backend.threads.denormals_flushed`, which says why: a weight
  that never receives a gradient but is decayed by L2 turns subnormal, and every
  product with it takes the processor's slow path). The committed runs were made
  with it, and their numbers are the same without it. ``GRAPHTREE_FLUSH_DENORMALS=0``
  leaves the processor's mode alone.
* **Threads**: ``--threads`` (:func:`set_threads`), the flushing carried to the
  threads a larger pool adds.
* **malloc** is left as the process started: the run records which allocator
  served it (:func:`graphtree.backend.allocator.malloc_in_use`);
  :func:`~graphtree.backend.allocator.keep_freed_memory` is for programs that run
  passes over large graphs, not for the experiments' sentence batches.
"""

from __future__ import annotations

import atexit
import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from graphtree import settings
from graphtree.backend import allocator, threads

__all__ = ["exit_without_collecting", "opted_in", "record", "set_threads", "startup_frozen"]

_freeze_at_exit = False  # exit_without_collecting registered its handler
_flushing = False  # opted_in switched subnormals to zero, for this process's pool


@contextmanager
def startup_frozen() -> Iterator[None]:
    """Every object alive on entry is left out of all collections for the duration (``gc.freeze``), and put
    back on exit (``gc.unfreeze``). For a command's run, after its imports: they live as long as it does.
    Where objects are frozen already (the caller manages the collector itself), nothing changes."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def exit_without_collecting() -> None:
    """Leave every object alive at the interpreter's exit out of the collections it makes while shutting down
    (``gc.freeze`` in an exit handler): the process frees all its memory anyway, and those collections
    walked everything a command had made (PyTorch, PyG, the corpus). Objects in reference
    cycles are then not finalized at exit, which graphtree's commands do not rely on (they close and write their
    files themselves). Registered once however often called."""
    global _freeze_at_exit
    if not _freeze_at_exit:
        atexit.register(gc.freeze)
        _freeze_at_exit = True


@contextmanager
def opted_in() -> Iterator[None]:
    """A command's run: its start-up objects frozen out of the collections (:func:`startup_frozen`), no
    collection at exit (:func:`exit_without_collecting`) and, unless ``GRAPHTREE_FLUSH_DENORMALS=0``, subnormal
    floats flushed to zero on every thread of the pool; the thread count and the floating-point mode as before
    afterwards. Inside a run that opted in already (a script run by another), nothing more."""
    global _flushing
    exit_without_collecting()
    with startup_frozen():
        if _flushing or not settings.current().flush_denormals:
            yield
            return
        before = torch.get_num_threads()
        _flushing = True
        try:
            with threads.denormals_flushed():
                try:
                    yield
                finally:  # back to the mode of before on every thread the run used, however many it asked for
                    torch.set_num_threads(max(before, torch.get_num_threads()))
        finally:
            _flushing = False
            torch.set_num_threads(before)


def set_threads(count: int) -> None:
    """PyTorch's intra-op threads for the run (``--threads``); where the run flushes subnormals, the threads a
    larger pool adds flush them too."""
    torch.set_num_threads(count)
    if _flushing:
        threads.flush_denormal_on_pool(True)


def record() -> dict[str, Any]:
    """What this process runs with, for a results file: the collector (``frozen``: start-up objects left out of
    the collections), whether subnormals are flushed to zero, the intra-op threads and the ``malloc`` serving it
    (with its options as the process started)."""
    return {"garbage_collector": "frozen" if gc.get_freeze_count() else ("on" if gc.isenabled() else "off"),
            "flush_denormals": threads.flushing_denormals(), "threads": torch.get_num_threads(),
            "malloc": allocator.malloc_in_use()}
