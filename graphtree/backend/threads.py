"""A setting on every thread of PyTorch's intra-op pool, not only on the thread that asks.

:func:`torch.set_flush_denormal` switches the floating-point mode of the calling
thread alone. PyTorch splits a large product or elementwise operation across
its intra-op threads, and the operation finishes when its slowest part does: a
worker left on the processor's slow path for subnormal floats costs as much as
all of them. The workers are OpenMP threads (PyTorch's Linux builds run their
intra-op pool on the GNU OpenMP runtime they ship), and a thread's
floating-point mode can only be set from the thread itself, so
:func:`flush_denormal_on_pool` runs one small OpenMP parallel region, of the
pool's size, in which every thread sets its own mode: the same threads that
PyTorch's next parallel operation uses, which keep the setting.

Where PyTorch's pool is not GNU OpenMP (macOS, Windows, a build with its native
pool) nothing is switched and the call says so: the calling thread's setting
(:func:`torch.set_flush_denormal`) is then all there is.
"""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path

import torch

__all__ = ["flush_denormal_on_pool"]

_REGION = ctypes.CFUNCTYPE(None, ctypes.c_void_p)  # void (*)(void *): the body of a GOMP parallel region


@cache
def _gomp_parallel():
    """libgomp's ``GOMP_parallel`` of the runtime PyTorch's pool runs on, or ``None`` where there is none."""
    if "OpenMP" not in torch.__config__.parallel_info():
        return None
    torch_lib = Path(torch.__file__).resolve().parent / "lib"
    try:
        with open("/proc/self/maps") as maps:
            loaded = {line.split()[-1] for line in maps if "libgomp" in line and line.rstrip().endswith(".so.1")}
    except OSError:
        return None
    # The copy PyTorch ships and loaded (a second libgomp in the process would have a pool of its own).
    ours = sorted(path for path in loaded if Path(path).parent.resolve() == torch_lib) or sorted(loaded)
    if not ours:
        return None
    try:
        parallel = ctypes.CDLL(ours[0]).GOMP_parallel  # the library already loaded: the same runtime
    except (OSError, AttributeError):
        return None
    parallel.argtypes = [_REGION, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
    parallel.restype = None
    return parallel


def flush_denormal_on_pool(on: bool) -> int:
    """Subnormal floats read and written as zero (x86 FTZ/DAZ) on every thread of PyTorch's intra-op pool,
    the calling thread included, or the processor's default again (``on=False``).

    Returns how many threads switched: ``torch.get_num_threads()`` where it worked, 0 where the pool is not
    GNU OpenMP or the processor has no such mode. Threads the pool adds later (a larger
    ``torch.set_num_threads``) start with the mode of the thread that creates them.
    """
    parallel = _gomp_parallel()
    if parallel is None:
        return 0
    switched = []

    def each_thread(_: int | None) -> None:  # runs on every thread of the region; ctypes takes the GIL for it
        switched.append(torch.set_flush_denormal(on))

    parallel(_REGION(each_thread), None, torch.get_num_threads(), 0)
    return sum(switched)
