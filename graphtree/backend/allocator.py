"""Keep freed memory in the process, so that a pass over a large graph reuses the last pass's pages.

glibc's ``malloc`` serves a block above its mmap threshold (which it raises as blocks are freed, up to 32 MiB on
64-bit Linux) with pages fresh from the kernel, and hands them back when the block is freed. A graph's state
buffers, gradients and saved gates are such blocks once the graph has a few hundred thousand nodes, so every
pass first-touches them again: a page fault per 4 KiB, paid in system time that a smaller graph, whose blocks
stay in the heap, does not pay. On the depth benchmark (``benchmarks/depth.py``) that is what made the time per
level grow with the graph while the work per level did not (docs/performance.md, "Deep graphs").

:func:`keep_freed_memory` tells ``malloc`` to serve every block from its heap and not to give the heap's free
top back to the kernel: a process's memory then stays at its peak rather than following each pass up and down,
which is what a training loop wants and a short-lived tool may not. It is a choice of the program that runs
the passes, made once, never a side effect of importing graphtree. Elsewhere than glibc (macOS, musl) it does
nothing and says so; an allocator such as jemalloc or tcmalloc (``LD_PRELOAD``) keeps pages its own way.

The other cost of glibc's ``malloc`` on large graphs is its search for a free block. The PyTorch path frees a
level's temporaries between the gates that autograd keeps, so after a pass the heap holds a free block between
every two saved ones, of as many sizes as the graph has level sizes; glibc serves a block of more than 1 KiB
with the smallest free one that fits, found by walking its bin, so each allocation costs more as the graph
grows. jemalloc has no such walk: with it, the time per node of the top-down cell's PyTorch path stayed flat
from 10^5 to 10^6 tree nodes, where glibc's grew (docs/performance.md, "Deep graphs"). :func:`malloc_in_use`
says which allocator a process runs.
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
_NEVER = -1  # as M_TRIM_THRESHOLD's value: never trim (mallopt(3))


def keep_freed_memory() -> bool:
    """Have ``malloc`` keep freed memory for reuse (glibc only). Returns whether it took effect.

    Affects every allocation of the process from then on, not only graphtree's. Equivalent to starting the
    process with ``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=-1``.
    """
    mallopt = _mallopt()
    if mallopt is None:
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
