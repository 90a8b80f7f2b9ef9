"""Optional compiled kernels for the cells' elementwise work (a C++ extension built on first use).

A tree level has few rows, so between its matrix products the cost is not
arithmetic but the dozen small elementwise operators, each a separate call. The
kernels in ``graphtree/csrc`` do that work in one pass over the level's rows
(every cell: Child-Sum and N-ary, the LSTM-RNN, and the peephole cells, the S-LSTM and
Teng & Zhang's lexicalized and top-down cells), and the propagation engine's
level loop itself, for the cells whose whole level math is compiled (the
N-ary, Child-Sum, S-LSTM and LSTM-RNN cells; see :mod:`graphtree.engine`). They are compiled with
:func:`torch.utils.cpp_extension.load` the first time they are needed (about a
minute, once per machine and PyTorch build; the result is kept in PyTorch's
extension cache) and used for float32 CPU tensors outside autograd. Everything
else, and every machine without a C++ compiler and ninja, takes the
pure-PyTorch path, which computes the same function.

``GRAPHTREE_NATIVE`` chooses: ``auto`` (default: use the kernels if they build,
otherwise warn once and fall back), ``1`` (use them; a failed build is an
error) or ``0`` (never). :func:`use_native` overrides it in code.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import torch
from torch import Tensor

__all__ = ["native_kernels", "native_mode", "use_native"]

SOURCE_DIR = Path(__file__).resolve().parent.parent / "csrc"
SOURCES = ("bindings.cpp", "child_sum_level.cpp", "engine_ops.cpp", "head_level.cpp", "lstm_rnn_level.cpp",
           "nary_level.cpp", "peephole_level.cpp")
STALE_LOCK_SECONDS = 600
CFLAGS = ["-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", "-fopenmp-simd"]

_kernels: ModuleType | None = None
_failed: str | None = None
_override: bool | None = None
_env_mode: str | None = None  # GRAPHTREE_NATIVE, read on first use


def native_mode() -> str:
    """``"auto"``, ``"1"`` or ``"0"``: ``GRAPHTREE_NATIVE``, or what :func:`use_native` set."""
    if _override is not None:
        return "1" if _override else "0"
    mode = os.environ.get("GRAPHTREE_NATIVE", "auto").strip().lower()
    if mode not in ("0", "1", "auto"):
        raise ValueError(f"GRAPHTREE_NATIVE must be 0, 1 or auto, got {mode!r}")
    return mode


@contextmanager
def use_native(enabled: bool) -> Iterator[None]:
    """Force the compiled kernels on (a failed build raises) or off inside the ``with`` block."""
    global _override
    previous, _override = _override, enabled
    try:
        yield
    finally:
        _override = previous


def native_kernels(*tensors: Tensor) -> ModuleType | None:
    """The compiled kernels if they should be used for ``tensors``, else ``None`` (take the PyTorch path)."""
    # Called once or twice per level: kept to plain attribute reads (the variable is read once per process).
    global _env_mode
    if _override is not None:
        mode = "1" if _override else "0"
    else:
        if _env_mode is None:
            _env_mode = native_mode()
        mode = _env_mode
    if mode == "0":
        return None
    grad = torch.is_grad_enabled()
    for t in tensors:
        if not t.is_cpu or t.dtype != torch.float32 or (grad and t.requires_grad):
            # Other devices and dtypes take PyTorch; so does autograd, as the kernels have no derivative
            # formula (the engine's fused backward calls them itself).
            return None
    return _kernels if _kernels is not None else _load(strict=mode == "1")


def _build_name() -> str:
    # -march=native code is only valid on the processor it was built for: the name (and so the cache
    # folder) depends on the processor, the PyTorch build and the sources.
    from .functional import _cpu_description
    identity = "\n".join([torch.__version__, *_cpu_description(), *CFLAGS,
                          *(path.read_text() for path in sorted(SOURCE_DIR.glob("*.[ch]*")))])
    return f"graphtree_native_{hashlib.sha256(identity.encode()).hexdigest()[:12]}"


def _load(strict: bool) -> ModuleType | None:
    global _kernels, _failed
    if _kernels is not None:
        return _kernels
    if _failed is not None and not strict:
        return None
    try:
        from torch.utils import cpp_extension

        name = _build_name()
        build_dir = Path(cpp_extension._get_build_directory(name, verbose=False))
        lock = build_dir / "lock"
        if lock.exists() and time.time() - lock.stat().st_mtime > STALE_LOCK_SECONDS:
            # PyTorch's build lock, left by a process killed while compiling: every later build would wait on it
            # forever. No build takes this long, so nobody holds it.
            lock.unlink(missing_ok=True)
        if not any(build_dir.glob(f"{name}*.so")):
            print(f"graphtree: compiling the native kernels into {build_dir} (once, about a minute; "
                  "GRAPHTREE_NATIVE=0 skips them)", file=sys.stderr, flush=True)
        _kernels = cpp_extension.load(name=name, sources=[str(SOURCE_DIR / s) for s in SOURCES],
                                      extra_cflags=CFLAGS, verbose=False)
        return _kernels
    except Exception as error:  # no compiler, no ninja, a failed build: all mean "use PyTorch"
        if strict:
            raise RuntimeError(f"graphtree's native kernels could not be built: {error}") from error
        if _failed is None:
            warnings.warn(f"graphtree's native kernels could not be built ({type(error).__name__}: "
                          f"{str(error)[:200]}); using the pure-PyTorch path. GRAPHTREE_NATIVE=0 silences this.",
                          RuntimeWarning, stacklevel=3)
        _failed = str(error)
        return None
