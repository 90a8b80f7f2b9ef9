"""The C library's part in passes over large graphs: keep freed memory in the process, and say which ``malloc``
serves it.

Two costs of a pass over a large graph belong to ``malloc``, not to graphtree, and both grow with the graph
(docs/performance.md, "Deep graphs"):

* **Pages handed back and faulted in again.** glibc's ``malloc`` serves a block above its mmap threshold
  (raised as blocks are freed, up to 32 MiB on 64-bit Linux) with pages fresh from the kernel, and hands them
  back when the block is freed; jemalloc, as it starts, hands freed pages back after a few seconds. A large
  graph's state buffers, gradients and saved gates are such blocks, so each pass first-touches them again: a
  page fault per 4 KiB, paid in system time that a smaller graph, whose blocks stay in the heap, does not pay.
  :func:`keep_freed_memory` stops that, for glibc and for a preloaded jemalloc.
* **The search for a free block.** The PyTorch path frees a level's temporaries between the gates that
  autograd keeps, so the heap holds a free block between every two saved ones, of as many sizes as the graph
  has level sizes. glibc serves a block of more than 1 KiB with the smallest free one that fits, found by
  walking its bin, so each allocation costs more as the graph grows. jemalloc has no such walk. Only another
  allocator removes this one: start the program with jemalloc preloaded (``LD_PRELOAD=libjemalloc.so.2``).

Keeping freed memory is a choice of the program that runs the passes, made once, never a side effect of
importing graphtree: the process's memory then stays at its peak rather than following each pass up and down,
which is what a training loop wants and a short-lived tool may not. :func:`malloc_in_use` says which
allocator a process runs.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

__all__ = ["keep_freed_memory", "malloc_in_use"]

# Allocators that replace malloc when preloaded, by the name of their library.
_PRELOADED = ("jemalloc", "tcmalloc", "mimalloc")

# mallopt's parameters, from glibc's <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_NEVER = -1  # as M_TRIM_THRESHOLD's value (mallopt(3)) and as a jemalloc decay time: never


def keep_freed_memory() -> bool:
    """Have ``malloc`` keep freed memory for reuse: glibc's, or a preloaded jemalloc. Returns whether it took
    effect (``False`` under any other allocator).

    Affects every allocation of the process from then on, not only graphtree's. Under glibc it is
    ``mallopt(M_MMAP_MAX, 0)`` and ``mallopt(M_TRIM_THRESHOLD, -1)``, as if the process had started with
    ``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=-1``; under jemalloc, decay times of -1 for every arena, as
    if it had started with ``MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1``.
    """
    allocator = malloc_in_use()
    if allocator == "jemalloc":
        return _jemalloc_never_decay()
    mallopt = _mallopt()
    if allocator != "glibc" or mallopt is None:
        return False
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, _NEVER))


def malloc_in_use() -> str:
    """The allocator serving this process's ``malloc``: ``"jemalloc"``, ``"tcmalloc"`` or ``"mimalloc"`` where
    its library is loaded (by ``LD_PRELOAD``, say), else ``"glibc"`` on Linux and ``"system"`` elsewhere."""
    maps = Path("/proc/self/maps")
    if maps.exists():
        libraries = {line.rsplit("/", 1)[-1] for line in maps.read_text().splitlines() if "/" in line}
        for name in _PRELOADED:
            if any(library.startswith(f"lib{name}") for library in libraries):
                return name
    return "glibc" if _mallopt() is not None else "system"


def _mallopt():
    """glibc's mallopt, or None (not Linux, or a C library without it, such as musl)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt


def _jemalloc_never_decay() -> bool:
    """Decay times of -1 (never hand freed pages back) for jemalloc's arenas: the default of arenas made from
    now on, and each existing one's."""
    try:
        mallctl = ctypes.CDLL(None).mallctl
    except (OSError, AttributeError):  # a jemalloc built with a prefix (je_mallctl) is not one LD_PRELOAD serves
        return False
    mallctl.argtypes = (ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
    mallctl.restype = ctypes.c_int
    never = ctypes.c_ssize_t(_NEVER)

    def write(name: str) -> bool:
        return mallctl(name.encode(), None, None, ctypes.byref(never), ctypes.sizeof(never)) == 0

    arenas = ctypes.c_uint(0)
    size = ctypes.c_size_t(ctypes.sizeof(arenas))
    if mallctl(b"arenas.narenas", ctypes.byref(arenas), ctypes.byref(size), None, 0) != 0:
        return False
    names = [f"arenas.{kind}_decay_ms" for kind in ("dirty", "muzzy")]
    names += [f"arena.{k}.{kind}_decay_ms" for k in range(arenas.value) for kind in ("dirty", "muzzy")]
    # An arena index that no thread has used yet has no arena to set (EFAULT): the default above covers it.
    return all([write(name) for name in names[:2]]) and any([write(name) for name in names[2:]])
