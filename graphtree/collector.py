"""Python's cyclic garbage collector around work whose objects all outlive it.

The collector makes a full pass over every tracked object each time their
number has grown by about a quarter. A command's imports (PyTorch, PyG) and the
cutting of a corpus into graphs make hundreds of thousands of objects that live
as long as the process, so each of those passes walks the whole heap and frees
nothing. A dataset pauses the collector while it cuts a corpus
(:func:`collection_paused`); a command leaves what its imports made out of the
collections of its run (:func:`startup_frozen`) and collects nothing at exit
(:func:`exit_without_collecting`), both in
:func:`graphtree.experiments.runs.main_guard`. Importing graphtree changes nothing:
each of these is the choice of the code that runs them.
"""

from __future__ import annotations

import atexit
import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collection_paused", "exit_without_collecting", "startup_frozen"]

_freeze_at_exit = False  # exit_without_collecting registered its handler


@contextmanager
def collection_paused() -> Iterator[None]:
    """No automatic collection for the duration; the collector is left as it was (enabled or not) after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


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

