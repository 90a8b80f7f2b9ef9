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
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["keep_freed_memory"]

# mallopt's parameters, from glibc's <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_NEVER = -1  # as M_TRIM_THRESHOLD's value: never trim (mallopt(3))


def keep_freed_memory() -> bool:
    """Have ``malloc`` keep freed memory for reuse (glibc only). Returns whether it took effect.

    Affects every allocation of the process from then on, not only graphtree's. Equivalent to starting the
    process with ``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=-1``.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, _NEVER))
