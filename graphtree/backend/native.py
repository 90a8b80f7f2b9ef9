"""Building and loading the compiled level kernels (a C++ extension built on first use).

A tree level has few rows, so between its matrix products the cost is not
arithmetic but the dozen small operators, each a separate call. The kernels in
``graphtree/csrc`` hold the paper cells' level math (each cell's forward and
derivatives, one pass over a level's rows) and the engine's level loop over it
(see :mod:`graphtree.backend.dispatch`). They are compiled with
:func:`torch.utils.cpp_extension.load` the first time one of these cells needs them (minutes on a small
machine, once per install; one line on stderr says so when it starts and when it ends) and used for float32
CPU tensors outside autograd. The build goes to a folder of its own under :func:`cache_root`, named by a
hash of everything it depends on (:func:`build_directory`): installs that differ in any of it never touch
each other's build, identical ones share it. Everything else, and every machine without a C++ compiler
and ninja, takes the pure-PyTorch path, which computes the same function. A cell with no compiled kernel
of its own never causes a build.

``GRAPHTREE_NATIVE`` chooses: ``auto`` (default: use the kernels if they build,
otherwise warn once and fall back), ``1`` (use them; a failed build is an
error) or ``0`` (never). :func:`use_native` overrides it in code; :func:`ensure_built` builds them up front,
and :func:`build_seconds` says how long this process spent on it (so that a run can leave it out of its
timings).
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import torch
from torch import Tensor

from .. import settings

__all__ = ["build_directory", "build_seconds", "cache_root", "cpu_description", "ensure_built", "kernels_loaded",
           "native_kernels", "native_kernels_if_loaded", "native_mode", "use_native"]

SOURCE_DIR = Path(__file__).resolve().parent.parent / "csrc"
SOURCES = ("bindings.cpp", "child_sum_level.cpp", "dropout.cpp", "engine_ops.cpp", "head_level.cpp",
           "lstm_rnn_level.cpp", "nary_level.cpp", "peephole_level.cpp")
STALE_LOCK_SECONDS = 600
# -fopenmp (Linux, whose PyTorch runs its pool on the GNU OpenMP it ships): the engine's side-by-side passes run
# on that pool, a pass a thread (at::parallel_for compiles to a serial loop without it), the products inside a
# pass on that one thread. The library is PyTorch's: the loader finds libgomp.so.1 loaded already. Elsewhere
# the passes run one after the other.
_OPENMP = ["-fopenmp"] if sys.platform.startswith("linux") else ["-fopenmp-simd"]
CFLAGS = ["-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", *_OPENMP]
LDFLAGS = _OPENMP if sys.platform.startswith("linux") else []
BUILD_MINUTES = 6  # the first build, measured on a 2-core machine busy with two training runs (said when it starts)
_LIBRARY_SUFFIX = ".pyd" if sys.platform == "win32" else ".so"  # what cpp_extension.load leaves in the folder

_kernels: ModuleType | None = None
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


def native_kernels(*tensors: Tensor) -> ModuleType | None:
    """The compiled kernels if they should be used for ``tensors``, else ``None`` (take the PyTorch path).

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


def native_kernels_if_loaded(*tensors: Tensor) -> ModuleType | None:
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


def cpu_description() -> list[str]:
    """The first processor's identifying lines in ``/proc/cpuinfo`` (its kind and flags: -march=native code runs
    only there); ``platform.processor()`` where there is no such file."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            first = handle.read().split("\n\n", 1)[0]
    except OSError:
        return [platform.processor()]
    keys = ("vendor_id", "cpu family", "model", "model name", "stepping", "flags")
    return [line for line in first.splitlines() if line.split(":", 1)[0].strip() in keys]


def _build_hash(*, executable: str, prefix: str, torch_version: str, torch_path: str, cpu: Sequence[str],
                flags: Sequence[str], sources: Mapping[str, str]) -> str:
    """The digest that names a build: equal inputs, equal name (identical installs share one build).

    The interpreter and its prefix are in it because build.ninja embeds the environment's include and
    library paths: two venvs sharing one folder rebuild each other's kernels in turn. -march=native code
    is only valid on the processor it was built for. ``sources`` maps each file name to its text.
    """
    identity = {"executable": executable, "prefix": prefix, "torch_version": torch_version,
                "torch_path": torch_path, "cpu": list(cpu), "flags": list(flags), "sources": dict(sources)}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def _build_name() -> str:
    """The extension's module name for this install (its build folder is :func:`build_directory`)."""
    # Every file of csrc (headers too) by content, and which of them are compiled.
    sources = {path.name: path.read_text() for path in sorted(SOURCE_DIR.glob("*.[ch]*"))}
    sources["compiled"] = "\n".join(SOURCES)
    digest = _build_hash(executable=str(Path(sys.executable).resolve()), prefix=sys.prefix,
                         torch_version=torch.__version__, torch_path=str(Path(torch.__file__).resolve().parent),
                         cpu=cpu_description(), flags=CFLAGS + LDFLAGS, sources=sources)
    return f"graphtree_native_{digest}"


def build_directory() -> Path:
    """Where this install's kernels are built: its own folder under :func:`cache_root` (safe to delete)."""
    return cache_root() / _build_name()


def _say(message: str) -> None:
    # tqdm.write clears any bar drawn on stderr (the trainer's), writes the line and redraws the bar, so the
    # message stands on a line of its own instead of being overwritten or hidden behind a frozen bar.
    from tqdm import tqdm
    tqdm.write(message, file=sys.stderr)
    sys.stderr.flush()


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{seconds:.1f} s"


@contextmanager
def _build_lock(folder: Path, name: str) -> Iterator[None]:
    """Hold ``folder``'s build to this process; clear a lock file that a killed build left behind."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # no flock (Windows): PyTorch's lock file alone, taken as stale once no build could last
        lock = folder / "lock"
        if lock.exists() and time.time() - lock.stat().st_mtime > STALE_LOCK_SECONDS:
            lock.unlink(missing_ok=True)
        yield
        return
    # An advisory lock the operating system drops when its holder dies, however it dies: PyTorch's own lock
    # file survives a killed build, and every later build would wait on it forever.
    with open(folder / "graphtree.lock", "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not (folder / f"{name}{_LIBRARY_SUFFIX}").exists():  # not merely loading a finished build
                _say(f"graphtree: waiting for another process's build of the same kernels in {folder}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        # Every graphtree build of this folder holds the flock first: a PyTorch lock file seen now is stale.
        (folder / "lock").unlink(missing_ok=True)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _source_copies(folder: Path) -> list[Path]:
    """The compiled sources, copied (with the headers they include) into ``folder/src``; the compiled ones.

    A copy is written only where its text differs, so an unchanged file keeps the time stamp ninja compares.
    """
    copies = folder / "src"
    copies.mkdir(parents=True, exist_ok=True)
    for path in sorted(SOURCE_DIR.glob("*.[ch]*")):
        text, copy = path.read_bytes(), copies / path.name
        if not copy.is_file() or copy.read_bytes() != text:
            copy.write_bytes(text)
    return [copies / name for name in SOURCES]


def _load(strict: bool) -> ModuleType | None:
    global _kernels, _failed, _build_seconds
    if _kernels is not None:
        return _kernels
    if _failed is not None and not strict:
        return None
    start = time.perf_counter()
    try:
        from torch.utils import cpp_extension

        sources = [SOURCE_DIR / s for s in SOURCES]
        missing = [path.name for path in sources if not path.is_file()]
        if missing:  # an install without graphtree/csrc: nothing to announce, no folder to leave behind
            raise FileNotFoundError(f"the kernels' sources are missing from {SOURCE_DIR}: {', '.join(missing)}")
        name = _build_name()
        folder = build_directory()
        with _build_lock(folder, name):
            compiling = not (folder / f"{name}{_LIBRARY_SUFFIX}").exists()
            if compiling:
                _say(f"graphtree: compiling the C++ kernels into {folder} (first use of this install; about "
                     f"{BUILD_MINUTES} minutes on 2 cores; GRAPHTREE_NATIVE=0 skips them)")
            # build_directory: PyTorch's shared extension cache would hold one build for every venv and checkout.
            # The sources are compiled from copies inside the folder: build.ninja names the files it compiles,
            # so two checkouts with the same sources would otherwise rebuild each other's kernels in turn.
            _kernels = cpp_extension.load(name=name, sources=[str(path) for path in _source_copies(folder)],
                                          extra_cflags=CFLAGS, extra_ldflags=LDFLAGS, build_directory=str(folder),
                                          verbose=False)
        if compiling:
            _say(f"graphtree: compiled the C++ kernels in {_duration(time.perf_counter() - start)}")
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
    finally:
        _build_seconds += time.perf_counter() - start
