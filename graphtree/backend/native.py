"""Loading the compiled level kernels (a library of PyTorch operators built at install, or else on first use).

A tree level has few rows, so between its matrix products the cost is not
arithmetic but the dozen small operators, each a separate call. The kernels in
``graphtree/csrc`` hold the paper cells' level math (each cell's forward and
derivatives, one pass over a level's rows) and the engine's level loop over it
(see :mod:`graphtree.backend.dispatch`). They are used for float32 CPU tensors outside autograd. Loaded,
they are PyTorch operators, ``torch.ops.graphtree`` (registered with ``TORCH_LIBRARY`` in
``csrc/bindings.cpp``), which :func:`native_kernels` returns.

``pip install`` compiles them (:mod:`graphtree.backend.kernel_build`, the one build definition) and ships the
library inside the package, beside this file; it is loaded from there when its name matches this install: a
hash of the sources, the interpreter and its prefix, the PyTorch build and the processor (:func:`build_name`).
Where it does not (no compiler at install, a source edited since, torch upgraded or installed after
graphtree), the first cell that needs them compiles them with :func:`torch.utils.cpp_extension.load` (about a
minute on a small machine, once per install; a line per compiled source and one every half minute say how far
it is), into a folder of its own under :func:`cache_root` named by the same hash (:func:`build_directory`):
installs that differ in any of it never touch each other's build, identical ones share it. Everything else,
and every machine without a C++ compiler and ninja, takes the pure-PyTorch path, which computes the same
function. A cell with no compiled kernel of its own never causes a build.

``GRAPHTREE_NATIVE`` chooses: ``auto`` (default: use the kernels if they build,
otherwise warn once and fall back), ``1`` (use them; a failed build is an
error) or ``0`` (never). :func:`use_native` overrides it in code; :func:`ensure_built` builds them up front,
and :func:`build_seconds` says how long this process spent on it (so that a run can leave it out of its
timings).
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .. import settings
from ..errors import KernelBuildError, MissingFileError
from . import kernel_build
from .kernel_build import cpu_description

__all__ = ["build_directory", "build_name", "build_seconds", "cache_root", "cpu_description", "ensure_built",
           "installed_library", "kernels_loaded", "native_kernels", "native_kernels_if_loaded", "native_mode",
           "use_native"]

INSTALLED_DIR = Path(__file__).resolve().parent  # where pip install puts the library it built
# What the first build takes (said when it starts): 95 s of processor time, its longest source 14 s, so about a minute
# on 2 free cores (docs/performance.md, "Building the kernels"); several minutes on a machine busy with other work.
BUILD_TIME = "about a minute on 2 free cores"

_kernels: Any | None = None
_failed: str | None = None
_build_seconds = 0.0


def native_mode() -> str:
    """``"auto"``, ``"1"`` or ``"0"``: the ``native`` setting (:mod:`graphtree.settings`, ``GRAPHTREE_NATIVE``)."""
    return settings.current().native


@contextmanager
def use_native(enabled: bool) -> Iterator[None]:
    """Force the compiled kernels on (a failed build raises) or off inside the ``with`` block:
    ``settings.overridden(native="1" or "0")``."""
    with settings.overridden(native="1" if enabled else "0"):
        yield


def native_kernels(*tensors: Tensor) -> Any | None:
    """The compiled kernels' operators (``torch.ops.graphtree``) if they should be used for ``tensors``, else
    ``None`` (take the PyTorch path).

    Builds them on first use: only code that has a compiled kernel of its own calls this. Generic code
    (the engine's backward for any cell) calls :func:`native_kernels_if_loaded`.
    """
    mode = settings.current().native
    if mode == "0":
        return None
    grad = torch.is_grad_enabled()
    for t in tensors:
        if not t.is_cpu or t.dtype != torch.float32 or (grad and t.requires_grad):
            # Other devices and dtypes take PyTorch; so does autograd, as the kernels have no derivative
            # formula (the engine's fused backward calls them itself).
            return None
    return _kernels if _kernels is not None else _load(strict=mode == "1")


def native_kernels_if_loaded(*tensors: Tensor) -> Any | None:
    """:func:`native_kernels` where this process has loaded them already, else ``None``; never a build.

    For helpers that serve every cell, such as the engine's scatter-add of children's gradients: a cell
    written in PyTorch alone must not wait minutes for a compiler on its first backward pass.
    """
    return native_kernels(*tensors) if _kernels is not None else None


def ensure_built() -> bool:
    """Build (or load) the kernels now, where the mode allows; whether they are available.

    For scripts and warm-ups that would rather pay the first build up front than inside a timed loop.
    With ``GRAPHTREE_NATIVE=1`` a failed build raises; with ``auto`` it warns and returns ``False``.
    """
    mode = native_mode()
    if mode == "0":
        return False
    return _load(strict=mode == "1") is not None


def kernels_loaded() -> bool:
    """Whether this process has loaded the compiled kernels (so float32 CPU work of the cells ran on them)."""
    return _kernels is not None


def build_seconds() -> float:
    """Seconds this process has spent building, waiting for or loading the kernels (failed attempts too)."""
    return _build_seconds


def cache_root() -> Path:
    """graphtree's cache folder: the ``cache`` setting (:mod:`graphtree.settings`, ``GRAPHTREE_CACHE``, else
    ``$XDG_CACHE_HOME/graphtree`` or ``~/.cache/graphtree``)."""
    return settings.current().cache


def build_name() -> str:
    """The kernels' module name for this install: a hash of the sources, the interpreter and its prefix, the
    PyTorch build, the processor and the flags (:func:`graphtree.backend.kernel_build.build_name`)."""
    return kernel_build.build_name()


def installed_library() -> Path:
    """Where ``pip install`` leaves the kernels built for this install (the file exists only if it did)."""
    return INSTALLED_DIR / f"{build_name()}{kernel_build.LIBRARY_SUFFIX}"


def build_directory() -> Path:
    """Where this install's kernels are built: its own folder under :func:`cache_root` (safe to delete)."""
    return cache_root() / build_name()


def _say(message: str) -> None:
    # tqdm.write clears any bar drawn on stderr (the trainer's), writes the line and redraws the bar, so the
    # message stands on a line of its own instead of being overwritten or hidden behind a frozen bar.
    from tqdm import tqdm
    tqdm.write(message, file=sys.stderr)
    sys.stderr.flush()


def _load(strict: bool) -> Any | None:
    global _kernels, _failed, _build_seconds
    if _kernels is not None:
        return _kernels
    if _failed is not None and not strict:
        return None
    start = time.perf_counter()
    try:
        if missing := kernel_build.missing_sources():  # an install without csrc: nothing to announce, no folder
            raise MissingFileError(f"the kernels' sources are missing from {kernel_build.SOURCE_DIR}: "
                                   f"{', '.join(missing)}")
        name = build_name()
        shipped = INSTALLED_DIR / f"{name}{kernel_build.LIBRARY_SUFFIX}"
        if shipped.is_file():
            try:
                _kernels = kernel_build.import_library(shipped)
                return _kernels
            except ImportError as error:  # a damaged copy: the cache's build is the fallback
                _say(f"graphtree: the C++ kernels built at install do not load ({error}); compiling them again")
        _kernels = kernel_build.compile_kernels(
            build_directory(), name, say=_say,
            reason=f"first use of this install, which did not build them; {BUILD_TIME}; "
                   f"GRAPHTREE_NATIVE=0 skips them")
        return _kernels
    except Exception as error:  # no compiler, no ninja, a failed build: all mean "use PyTorch"
        if strict:
            raise KernelBuildError(f"graphtree's native kernels could not be built: {error}") from error
        if _failed is None:
            warnings.warn(f"graphtree's native kernels could not be built ({type(error).__name__}: "
                          f"{str(error)[:200]}); using the pure-PyTorch path. GRAPHTREE_NATIVE=0 silences this.",
                          RuntimeWarning, stacklevel=3)
        _failed = str(error)
        return None
    finally:
        _build_seconds += time.perf_counter() - start
