"""Compiling the C++ kernels of ``graphtree/csrc``: the one build definition, run at install and at first use.

Two callers run :func:`compile_kernels`. ``pip install`` (``setup.py``, through :func:`main`) builds the
kernels in the source tree's ``build/`` folder and ships the library inside the package, beside this file;
:mod:`graphtree.backend.native` loads that first. Where the install did not build them (no compiler, a
source changed since, PyTorch upgraded, torch installed after graphtree), the first cell that needs them
builds them into graphtree's cache instead. Both name a build by a hash of everything it depends on
(:func:`build_name`) and load a library only under its own name: kernels built for other sources, another
PyTorch, interpreter or processor are never loaded.

This module imports nothing of graphtree, only the standard library and (when building) PyTorch: setup.py
runs it as a script, before graphtree's dependencies are installed.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["CFLAGS", "LDFLAGS", "LIBRARY_SUFFIX", "SOURCES", "SOURCE_DIR", "build_hash", "build_name",
           "compile_kernels", "cpu_description", "import_library", "install", "operators"]

SOURCE_DIR = Path(__file__).resolve().parent.parent / "csrc"
SOURCES = ("bindings.cpp", "child_sum_level.cpp", "dropout.cpp", "engine_ops.cpp", "head_level.cpp",
           "lstm_rnn_level.cpp", "nary_level.cpp", "peephole_level.cpp")
# -fopenmp (Linux, whose PyTorch runs its pool on the GNU OpenMP it ships): the engine's side-by-side passes run
# on that pool, a pass a thread (at::parallel_for compiles to a serial loop without it), the products inside a
# pass on that one thread. The library is PyTorch's: the loader finds libgomp.so.1 loaded already. Elsewhere
# the passes run one after the other.
_OPENMP = ["-fopenmp"] if sys.platform.startswith("linux") else ["-fopenmp-simd"]
# GCC (Linux's compiler, whose OpenMP PyTorch ships) limits inlining by the growth of the translation unit: a
# source that includes only the few headers it needs (csrc/common.h) is small, and the default budget left the
# peephole kernels' row loops out of line, about a tenth slower (S-LSTM and top-down steps, paired in one process)
# than when every source included torch/extension.h; with this budget they are inlined again (docs/performance.md).
_INLINING = ["--param", "inline-unit-growth=1000"] if sys.platform.startswith("linux") else []
CFLAGS = ["-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", *_INLINING, *_OPENMP]
LDFLAGS = _OPENMP if sys.platform.startswith("linux") else []
LIBRARY_SUFFIX = ".pyd" if sys.platform == "win32" else ".so"  # what cpp_extension.load leaves in the folder
# The operators' namespace (TORCH_LIBRARY in csrc/bindings.cpp): the loaded kernels are torch.ops.graphtree.
NAMESPACE = "graphtree"
LIBRARY_PREFIX = "graphtree_native_"
STALE_LOCK_SECONDS = 600
PROGRESS_SECONDS = 30  # a line at least this often while a first-use build runs


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def duration(seconds: float) -> str:
    """``"2 min 5 s"``, or ``"4.2 s"`` under a minute."""
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{seconds:.1f} s"


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


def build_hash(*, executable: str, prefix: str, torch_version: str, torch_path: str, cpu: Sequence[str],
               flags: Sequence[str], sources: Mapping[str, str]) -> str:
    """The digest that names a build: equal inputs, equal name (identical installs share one build).

    The interpreter and its prefix are in it because build.ninja embeds the environment's include and
    library paths: two venvs sharing one folder rebuild each other's kernels in turn. -march=native code
    is only valid on the processor it was built for. ``sources`` maps each file name to its text.
    """
    identity = {"executable": executable, "prefix": prefix, "torch_version": torch_version,
                "torch_path": torch_path, "cpu": list(cpu), "flags": list(flags), "sources": dict(sources)}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def build_name() -> str:
    """The extension's module name for this interpreter, PyTorch, processor and the sources in :data:`SOURCE_DIR`."""
    import torch

    # Every file of csrc (headers too) by content, and which of them are compiled.
    sources = {path.name: path.read_text() for path in sorted(SOURCE_DIR.glob("*.[ch]*"))}
    sources["compiled"] = "\n".join(SOURCES)
    digest = build_hash(executable=str(Path(sys.executable).resolve()), prefix=sys.prefix,
                        torch_version=torch.__version__, torch_path=str(Path(torch.__file__).resolve().parent),
                        cpu=cpu_description(), flags=CFLAGS + LDFLAGS, sources=sources)
    return f"{LIBRARY_PREFIX}{digest}"


def missing_sources() -> list[str]:
    """The compiled sources absent from :data:`SOURCE_DIR` (an install without ``graphtree/csrc``)."""
    return [name for name in SOURCES if not (SOURCE_DIR / name).is_file()]


@contextmanager
def build_lock(folder: Path, name: str, say: Callable[[str], None] = _to_stderr) -> Iterator[None]:
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
            if not (folder / f"{name}{LIBRARY_SUFFIX}").exists():  # not merely loading a finished build
                say(f"graphtree: waiting for another process's build of the same kernels in {folder}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        # Every graphtree build of this folder holds the flock first: a PyTorch lock file seen now is stale.
        (folder / "lock").unlink(missing_ok=True)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def source_copies(folder: Path) -> list[Path]:
    """The compiled sources, copied (with the headers they include) into ``folder/src``; the compiled ones.

    build.ninja names the files it compiles: compiling copies inside the folder keeps two checkouts with the
    same sources from rebuilding each other's kernels in turn. A copy is written only where its text differs,
    so an unchanged file keeps the time stamp ninja compares.
    """
    copies = folder / "src"
    copies.mkdir(parents=True, exist_ok=True)
    for path in sorted(SOURCE_DIR.glob("*.[ch]*")):
        text, copy = path.read_bytes(), copies / path.name
        if not copy.is_file() or copy.read_bytes() != text:
            copy.write_bytes(text)
    return [copies / name for name in SOURCES]


def _compiling_now(source_folder: Path) -> list[str]:
    """The sources of ``source_folder`` that a compiler process is working on now (Linux: from /proc), sorted."""
    prefix = str(source_folder).encode() + os.sep.encode()
    names = set()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            arguments = cmdline.read_bytes().split(b"\0")
        except OSError:  # the process ended meanwhile
            continue
        names.update(Path(a.decode(errors="replace")).name for a in arguments
                     if a.startswith(prefix) and a.endswith(b".cpp"))
    return sorted(names)


class _Progress(threading.Thread):
    """Lines on a running build: each source as its object file is written, and every :data:`PROGRESS_SECONDS`
    which sources the compiler is on (Linux: from /proc) and the time so far. ninja's own output is held back
    until the build ends (PyTorch shows it only on failure), so this watches the folder instead."""

    def __init__(self, folder: Path, sources: Sequence[Path], say: Callable[[str], None]) -> None:
        super().__init__(name="graphtree-build-progress", daemon=True)
        self.folder, self.sources, self.say = folder, list(sources), say
        self.finished = threading.Event()
        self.start_time = time.perf_counter()
        self.start_stamp = time.time()
        self.done: set[str] = set()

    def _compiled_now(self, source: Path) -> bool:
        # ninja names each object after its source (cpp_extension's rule); one written since the build began is
        # this build's. Objects from before may or may not be redone (ninja also redoes a changed command).
        try:
            return (self.folder / f"{source.stem}.o").stat().st_mtime >= self.start_stamp
        except OSError:
            return False

    def run(self) -> None:
        last_line = self.start_time
        while not self.finished.wait(1.0):
            now = time.perf_counter()
            for source in self.sources:
                if source.name not in self.done and self._compiled_now(source):
                    self.done.add(source.name)
                    self.say(f"graphtree: compiled {source.name} ({len(self.done)} of {len(self.sources)} sources; "
                             f"{duration(now - self.start_time)})")
                    last_line = now
            if now - last_line >= PROGRESS_SECONDS:
                working = _compiling_now(self.folder / "src")
                doing = (f"compiling {', '.join(working)}" if working
                         else "linking" if Path("/proc/self").exists() else "compiling")
                self.say(f"graphtree: {doing} ({len(self.done)} of {len(self.sources)} sources compiled; "
                         f"{duration(now - self.start_time)})")
                last_line = now

    def stop(self) -> None:
        self.finished.set()
        self.join()


def compile_kernels(folder: Path, name: str, *, reason: str, verbose: bool = False,
                    say: Callable[[str], None] = _to_stderr) -> Any:
    """Compile the kernels in ``folder`` (or bring a build there up to date) as the library ``name`` and load it;
    its operators (``torch.ops.graphtree``).

    ninja runs the compiles in parallel (``MAX_JOBS`` caps them; its default is the processors plus two).
    A line says when compiling starts (with ``reason``) and how long it took. ``verbose``: ninja's and the
    compiler's own output as it goes (what ``pip install -v`` shows); otherwise a line per compiled source and
    one at least every :data:`PROGRESS_SECONDS` saying which sources the compiler is on.
    """
    from torch.utils import cpp_extension

    start = time.perf_counter()
    with build_lock(folder, name, say):
        compiling = not (folder / f"{name}{LIBRARY_SUFFIX}").exists()
        copies = source_copies(folder)
        progress = None
        if compiling:
            jobs = os.environ.get("MAX_JOBS") or f"ninja's default for {os.cpu_count()} processors"
            say(f"graphtree: compiling the C++ kernels into {folder} ({reason}; {len(copies)} sources, "
                f"parallel jobs: {jobs})")
            if not verbose:
                progress = _Progress(folder, copies, say)
                progress.start()
        try:
            # build_directory: PyTorch's shared extension cache would hold one build for every venv and checkout.
            # is_python_module=False: a plain shared library, loaded with torch.ops.load_library (its operators
            # register themselves), not imported as a Python module: no pybind11 to compile.
            cpp_extension.load(name=name, sources=[str(path) for path in copies], extra_cflags=CFLAGS,
                               extra_ldflags=LDFLAGS, build_directory=str(folder), verbose=verbose,
                               is_python_module=False)
        finally:
            if progress is not None:
                progress.stop()
    if compiling:
        say(f"graphtree: compiled the C++ kernels in {duration(time.perf_counter() - start)}")
    return operators()


def operators() -> Any:
    """The loaded kernels' operators, ``torch.ops.graphtree`` (``torch.ops.graphtree.ChildSumLevels`` makes
    a kernel, ``run_levels_forward`` runs the engine's loop over it, ...)."""
    import torch

    return getattr(torch.ops, NAMESPACE)


def import_library(path: Path) -> Any:
    """Load a built kernels library from its file (``torch.ops.load_library``); its operators.

    A file that is not such a library (damaged, or built for another PyTorch) raises :class:`ImportError`."""
    import torch

    try:
        torch.ops.load_library(str(path))
    except OSError as error:  # what the dynamic loader says of a file it cannot load
        raise ImportError(f"not a kernels library: {path} ({error})") from error
    return operators()


def install(package_folder: Path, build_root: Path, *, verbose: bool = True,
            say: Callable[[str], None] = _to_stderr) -> Path:
    """Build the kernels under ``build_root`` and copy the library into ``package_folder`` (where
    :mod:`graphtree.backend.native` looks first), removing libraries of other builds there; its path."""
    name = build_name()
    folder = build_root / name
    compile_kernels(folder, name, reason="pip install", verbose=verbose, say=say)
    package_folder.mkdir(parents=True, exist_ok=True)
    for stale in package_folder.glob(f"{LIBRARY_PREFIX}*{LIBRARY_SUFFIX}"):
        if stale.name != f"{name}{LIBRARY_SUFFIX}":
            stale.unlink()
    shipped = package_folder / f"{name}{LIBRARY_SUFFIX}"
    shutil.copy2(folder / f"{name}{LIBRARY_SUFFIX}", shipped)
    return shipped


# setup.py runs main() in a child process of the interpreter being installed into, and reads its exit status.
NO_TORCH = 3  # torch cannot be imported: nothing built, the first use will build


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build graphtree's C++ kernels and ship them inside the package "
                                                 "(what pip install runs).")
    parser.add_argument("--package-folder", type=Path, required=True,
                        help="where the library goes: the installed graphtree/backend")
    parser.add_argument("--build-root", type=Path, required=True, help="the folder to compile in (kept for reuse)")
    parser.add_argument("--quiet", action="store_true", help="progress lines instead of the compiler's output")
    args = parser.parse_args(argv)
    try:
        import torch  # noqa: F401
    except ImportError as error:
        _to_stderr(f"graphtree: torch cannot be imported here ({error})")
        return NO_TORCH
    # cpp_extension.load loaded the library it built, so the shipped copy of it loads in this interpreter.
    shipped = install(args.package_folder, args.build_root, verbose=not args.quiet)
    _to_stderr(f"graphtree: the C++ kernels are in {shipped}")
    return 0


def build_for_install(package_folder: Path, build_root: Path, mode: str, say: Callable[[str], None]) -> None:
    """setup.py's step: run :func:`main` in a child process of the interpreter pip installs into.

    Under pip's build isolation the build sees only the build requirements, not the environment's torch (and
    asking for torch there would download another one, of several GB): the child is started without the
    variables that isolate it, so it imports the environment's own torch, the one the kernels must match.
    ``mode`` is ``GRAPHTREE_NATIVE``: ``0`` skips the build, ``1`` fails the install when it fails, anything
    else lets the install go on (the first use builds them).
    """
    if mode == "0":
        say("graphtree: GRAPHTREE_NATIVE=0: the C++ kernels are not built")
        return
    command = [sys.executable, str(Path(__file__).resolve()), "--package-folder", str(package_folder),
               "--build-root", str(build_root)]
    environment = dict(os.environ)
    if importlib.util.find_spec("torch") is None:  # isolated from the environment (pip's default)
        for variable in ("PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONHOME"):
            environment.pop(variable, None)
    if missing := missing_sources():
        failure = f"the kernels' sources are missing: {', '.join(missing)}"
    else:
        status = subprocess.run(command, env=environment, check=False).returncode
        if status == 0:
            return
        failure = ("torch is not installed yet" if status == NO_TORCH
                   else f"the build failed (exit status {status}; the compiler's output is above, `pip install -v` "
                        f"shows it)")
    if mode == "1":
        raise RuntimeError(f"graphtree: GRAPHTREE_NATIVE=1 and the C++ kernels were not built: {failure}")
    say(f"graphtree: the C++ kernels were not built at install ({failure}); the first cell that needs them "
        f"compiles them, or GRAPHTREE_NATIVE=0 runs the PyTorch path")


if __name__ == "__main__":
    sys.exit(main())
