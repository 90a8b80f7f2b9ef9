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

graphtree never switches the mode by itself: :func:`denormals_flushed` is for code that chooses to, around its
own work (the experiment scripts do, for their whole run: ``experiments/lab/process.py``).
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

import torch

__all__ = ["denormals_flushed", "flush_denormal_on_pool", "flushing_denormals"]

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


def flushing_denormals() -> bool:
    """Whether this thread reads and writes subnormal floats as zero: a subnormal times one comes out zero."""
    return torch.tensor([1e-39]).mul(1.0).item() == 0.0


@contextmanager
def denormals_flushed() -> Iterator[None]:
    """Subnormal floats read and written as zero in CPU arithmetic (x86 FTZ/DAZ) for the duration, on this
    thread (``torch.set_flush_denormal``) and on PyTorch's intra-op worker threads
    (:func:`flush_denormal_on_pool`), then as before; nothing where the processor cannot, or where this thread
    flushes them already.

    Why: a weight that never receives a gradient but is decayed by L2 shrinks into the subnormal range
    (below 1.2e-38) within an epoch, and every product with it then takes the processor's slow path. On SST,
    Child-Sum's input weights of its forget gates are such (the words sit at leaves, which have no children to
    forget; inner nodes have no input), and so is a block of LSTM-RNN's leaf maps: Child-Sum's epoch ran 2.3
    times as long as with them flushed (Intel Xeon, AVX-512). The worker threads matter as much: with two
    threads and only the calling one flushed, the same epoch took 9.9-10.7 s against 5.5-5.7 s with both.
    Such weights never reach a loss, so a run's numbers stay the same: bit for bit in every epoch of the runs
    compared with and without flushing (Child-Sum, N-ary and LSTM-RNN on SST, Child-Sum on SICK;
    ``tests/test_train.py`` checks a small case). Where PyTorch's pool is not GNU OpenMP (its Linux builds'),
    only the calling thread is switched. Wrap a training loop in it::

        with denormals_flushed():
            trainer.fit(train, dev)
    """
    if flushing_denormals():
        yield
        return
    switched = torch.set_flush_denormal(True)
    if switched:
        flush_denormal_on_pool(True)
    try:
        yield
    finally:
        if switched:
            flush_denormal_on_pool(False)
            torch.set_flush_denormal(False)
