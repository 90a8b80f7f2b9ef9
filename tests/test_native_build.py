"""Where and when the compiled kernels (graphtree.backend.native, kernel_build) are built and loaded: at install
into the package, else at first use into the cache. None of these tests compiles anything.

A real build takes minutes, so every test here replaces ``torch.utils.cpp_extension.load``: in this process
with a stub, in the subprocesses with a spy that records the call and fails it (the package then falls back
to PyTorch, as on a machine without a compiler).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import ModuleType

import pytest
import torch
from tqdm import tqdm

import graphtree.backend.kernel_build as kernel_build
import graphtree.backend.native as native
from graphtree import settings

# Run in a fresh interpreter: a forward and backward pass of one cell, with every build attempt recorded.
_SCRIPT = textwrap.dedent("""
    import sys

    import torch
    from torch.utils import cpp_extension

    def refuse(*args, **kwargs):
        print("SPY: cpp_extension.load was called", file=sys.stderr, flush=True)
        raise RuntimeError("no builds in this test")

    cpp_extension.load = refuse

    from torch_geometric.data import Batch

    import graphtree.backend.native as native
    from graphtree.data import from_ptb

    native.INSTALLED_DIR = native.INSTALLED_DIR / "no-such-folder"  # as if pip install had not built them
    from graphtree.nn import ChildSumTreeLSTM, TreeCell

    class SumCell(TreeCell):
        '''A cell of a user's own, in PyTorch operators only: h = tanh(W x + sum of the children's h).'''

        def __init__(self, channels: int) -> None:
            super().__init__(state_channels=(channels,))
            self.lin = torch.nn.Linear(channels, channels)

        def update(self, children, x):
            (h,) = children.states
            return (torch.tanh(self.lin(x) + h.sum(1)),)

        def forward(self, x, batch):
            return self.propagate(batch, x=x)[0]

    torch.manual_seed(0)
    batch = Batch.from_data_list([from_ptb("(3 (2 The) (3 (2 Rock) (4 rocks)))"),
                                  from_ptb("(1 (2 (2 a) (1 dull)) (2 film))")])
    cell = SumCell(8) if sys.argv[1] == "custom" else ChildSumTreeLSTM(8, 8)
    x = torch.randn(batch.num_nodes, 8, requires_grad=True)
    out = cell(x, batch)
    out = out[0] if isinstance(out, tuple) else out
    out.sum().backward()
    assert x.grad is not None and all(p.grad is not None for p in cell.parameters())
    print("kernels loaded:", native._kernels is not None)
""")


def _run_cell(kind: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    cache, torch_cache = tmp_path / "graphtree-cache", tmp_path / "torch-extensions"
    cache.mkdir()
    torch_cache.mkdir()
    # PyTorch's extension cache is pointed at an empty folder too, so that a build sent there would also show.
    env = {**os.environ, "GRAPHTREE_CACHE": str(cache), "GRAPHTREE_NATIVE": "auto",
           "TORCH_EXTENSIONS_DIR": str(torch_cache), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", _SCRIPT, kind], env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    return result, cache, torch_cache


def test_a_cell_without_compiled_kernels_never_builds_them(tmp_path):
    # The engine's backward for any cell scatter-adds the children's gradients, with a compiled kernel where
    # one is at hand: it must not compile one (minutes) for a cell that has none of its own.
    result, cache, torch_cache = _run_cell("custom", tmp_path)
    assert "compiling" not in result.stderr
    assert "SPY" not in result.stderr
    assert "kernels loaded: False" in result.stdout
    assert list(cache.iterdir()) == []
    assert list(torch_cache.iterdir()) == []


def test_a_compiled_kernel_cell_builds_in_the_graphtree_cache(tmp_path):
    # The control for the test above (the spy does see builds), and the build's place: a folder of its own under
    # GRAPHTREE_CACHE, never PyTorch's shared extension cache.
    result, cache, torch_cache = _run_cell("child_sum", tmp_path)
    assert "SPY: cpp_extension.load was called" in result.stderr
    assert f"graphtree: compiling the C++ kernels into {cache}{os.sep}graphtree_native_" in result.stderr
    assert "GRAPHTREE_NATIVE=0 skips them" in result.stderr
    assert "using the pure-PyTorch path" in result.stderr  # the fallback warning of a failed build
    assert "kernels loaded: False" in result.stdout
    assert [path.name.startswith("graphtree_native_") for path in cache.iterdir()] == [True]
    assert list(torch_cache.iterdir()) == []


_IDENTITY = dict(executable="/usr/bin/python3.11", prefix="/home/u/venv-a", torch_version="2.13.0+cpu",
                 torch_path="/home/u/venv-a/lib/python3.11/site-packages/torch", cpu=["model name : X"],
                 flags=["-O3"], sources={"bindings.cpp": "int main;", "compiled": "bindings.cpp"})


def test_the_build_name_depends_on_the_interpreter_and_nothing_else_varies_it():
    name = kernel_build.build_hash(**_IDENTITY)
    assert name == kernel_build.build_hash(**{**_IDENTITY, "cpu": list(_IDENTITY["cpu"])})  # equal inputs share
    for key, other in [("prefix", "/home/u/venv-b"), ("executable", "/opt/python3.11"),
                       ("torch_version", "2.12.0+cpu"), ("torch_path", "/elsewhere/torch"),
                       ("cpu", ["model name : Y"]), ("flags", ["-O2"]),
                       ("sources", {"bindings.cpp": "int main ;", "compiled": "bindings.cpp"})]:
        assert kernel_build.build_hash(**{**_IDENTITY, key: other}) != name, key


def test_the_build_folder_follows_sys_prefix_and_the_cache_root(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHTREE_CACHE", str(tmp_path))
    settings.reload()
    here = native.build_directory()
    assert here.parent == tmp_path and here.name == native.build_name()
    assert native.build_directory() == here
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "another-venv"))
    assert native.build_directory() != here


def test_the_cache_root(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHTREE_CACHE", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert settings.reload() and native.cache_root() == tmp_path / "mine"
    monkeypatch.delenv("GRAPHTREE_CACHE")
    assert settings.reload() and native.cache_root() == tmp_path / "xdg" / "graphtree"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert settings.reload() and native.cache_root() == tmp_path / "home" / ".cache" / "graphtree"
    with settings.overridden(cache=tmp_path / "in-code"):  # and in code, for a block
        assert native.cache_root() == tmp_path / "in-code"
    assert native.cache_root() == tmp_path / "home" / ".cache" / "graphtree"


@pytest.fixture
def stub_build(tmp_path, monkeypatch):
    """A fresh, unloaded native module whose builds sleep 0.2 s in a private cache; yields the calls' folders."""
    from torch.utils import cpp_extension

    monkeypatch.setenv("GRAPHTREE_CACHE", str(tmp_path))
    monkeypatch.delenv("GRAPHTREE_NATIVE", raising=False)
    settings.reload()
    for name, value in [("_kernels", None), ("_failed", None), ("INSTALLED_DIR", tmp_path / "installed")]:
        monkeypatch.setattr(native, name, value)
    folders: list[Path] = []

    def load(name: str, sources: list[str], extra_cflags: list[str], extra_ldflags: list[str], build_directory: str,
             verbose: bool, is_python_module: bool) -> None:
        assert not is_python_module  # a library of PyTorch operators (TORCH_LIBRARY), loaded as such
        folder = Path(build_directory)
        assert all(Path(source).parent == folder / "src" for source in sources)
        assert not (folder / "lock").exists()  # a lock left behind would make PyTorch wait on it forever
        folders.append(folder)
        time.sleep(0.2)
        (folder / f"{name}{kernel_build.LIBRARY_SUFFIX}").write_bytes(b"")

    monkeypatch.setattr(cpp_extension, "load", load)
    return folders


def test_build_seconds_counts_a_build_and_its_lines_say_so(stub_build, capsys):
    before = native.build_seconds()
    assert native.native_kernels_if_loaded(torch.zeros(2)) is None  # nothing loaded: no build either
    assert stub_build == []
    with native.use_native(True):
        assert native.ensure_built()
    assert native.build_seconds() - before >= 0.2
    assert stub_build == [native.build_directory()]
    err = capsys.readouterr().err
    assert f"graphtree: compiling the C++ kernels into {native.build_directory()} (first use" in err
    assert "graphtree: compiled the C++ kernels in 0." in err
    with native.use_native(True):
        assert native.native_kernels_if_loaded(torch.zeros(2)) is native._kernels
        assert native.ensure_built()  # loaded already: nothing more to do, nothing counted
    assert stub_build == [native.build_directory()]
    with native.use_native(False):
        assert not native.ensure_built()
        assert native.native_kernels_if_loaded(torch.zeros(2)) is None


def test_a_finished_build_is_loaded_without_a_compiling_line(stub_build, capsys, monkeypatch):
    with native.use_native(True):
        native.ensure_built()
    capsys.readouterr()
    monkeypatch.setattr(native, "_kernels", None)  # a later process, in effect
    with native.use_native(True):
        assert native.ensure_built()
    assert "graphtree:" not in capsys.readouterr().err
    assert len(stub_build) == 2


def test_a_lock_left_by_a_killed_build_does_not_hang_the_next_one(stub_build):
    folder = native.build_directory()
    folder.mkdir(parents=True)
    (folder / "lock").write_text("")  # PyTorch's lock file, as a build killed mid-way leaves it
    with native.use_native(True):
        assert native.ensure_built()  # the stub asserts that the lock is gone
    assert not (folder / "lock").exists()


def test_another_process_building_the_same_kernels_is_waited_for_with_one_line(stub_build, capsys):
    fcntl = pytest.importorskip("fcntl")
    folder = native.build_directory()
    folder.mkdir(parents=True)
    # Another open file description of the lock file conflicts as another process would.
    holder = open(folder / "graphtree.lock", "a")
    fcntl.flock(holder, fcntl.LOCK_EX)
    release = threading.Timer(0.3, holder.close)
    release.start()
    try:
        with native.use_native(True):
            assert native.ensure_built()
    finally:
        release.join()
    err = capsys.readouterr().err
    assert f"graphtree: waiting for another process's build of the same kernels in {folder}\n" in err
    assert native.build_seconds() >= 0.3


def test_the_lines_stand_outside_a_progress_bar(monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    with tqdm(total=40, file=stream, ascii=True) as bar:
        bar.update(1)
        native._say("graphtree: compiling")
        bar.update(1)
    # The bar is cleared before the line is written and redrawn after it: the line is whole, on its own.
    assert any(line.split("\r")[-1] == "graphtree: compiling" for line in stream.getvalue().split("\n"))


def test_checkouts_with_the_same_sources_compile_the_same_files(stub_build, tmp_path, monkeypatch):
    # build.ninja names the files it compiles: were they each checkout's own, two checkouts of the same sources
    # would share a folder yet rebuild each other's kernels in turn.
    from torch.utils import cpp_extension

    compiled: list[list[str]] = []
    stub = cpp_extension.load
    monkeypatch.setattr(cpp_extension, "load", lambda **kw: compiled.append(kw["sources"]) or stub(**kw))
    for checkout in ("one", "two"):
        copy = tmp_path / checkout / "csrc"
        copy.mkdir(parents=True)
        for path in kernel_build.SOURCE_DIR.glob("*.[ch]*"):
            (copy / path.name).write_bytes(path.read_bytes())
        monkeypatch.setattr(kernel_build, "SOURCE_DIR", copy)
        monkeypatch.setattr(native, "_kernels", None)  # another process, in effect
        with native.use_native(True):
            assert native.ensure_built()
    assert compiled[0] == compiled[1]
    assert all(Path(source).is_relative_to(native.build_directory()) for source in compiled[0])
    stamps = [p.stat().st_mtime_ns for p in sorted((native.build_directory() / "src").iterdir())]
    with native.use_native(True):  # a third load rewrites no copy: ninja sees nothing new
        monkeypatch.setattr(native, "_kernels", None)
        native.ensure_built()
    assert [p.stat().st_mtime_ns for p in sorted((native.build_directory() / "src").iterdir())] == stamps


def _library(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}{kernel_build.LIBRARY_SUFFIX}"
    path.write_bytes(b"")
    return path


@pytest.fixture
def imports(monkeypatch):
    """kernel_build.import_library replaced: returns a module named after the file; yields the paths imported."""
    imported: list[Path] = []

    def import_library(path: Path) -> ModuleType:
        imported.append(path)
        return ModuleType(path.stem)

    monkeypatch.setattr(kernel_build, "import_library", import_library)
    return imported


def test_the_library_pip_install_built_is_loaded_first_without_a_build(stub_build, imports, capsys):
    shipped = _library(native.INSTALLED_DIR, native.build_name())
    assert native.installed_library() == shipped
    with native.use_native(True):
        assert native.ensure_built()
    assert imports == [shipped] and stub_build == []
    assert native._kernels.__name__ == native.build_name()
    assert "graphtree:" not in capsys.readouterr().err  # nothing to say: nothing was compiled


def test_a_library_built_for_another_install_is_never_loaded(stub_build, imports):
    # Another source, torch, interpreter or processor has another name: the cache's build is made instead.
    _library(native.INSTALLED_DIR, f"{kernel_build.LIBRARY_PREFIX}0123456789abcdef")
    with native.use_native(True):
        assert native.ensure_built()
    assert imports == [] and stub_build == [native.build_directory()]


def test_a_library_that_does_not_load_falls_back_to_the_first_use_build(stub_build, monkeypatch, capsys):
    _library(native.INSTALLED_DIR, native.build_name())  # empty: not a library

    with native.use_native(True):
        assert native.ensure_built()
    assert stub_build == [native.build_directory()]
    err = capsys.readouterr().err
    assert "graphtree: the C++ kernels built at install do not load" in err
    assert f"graphtree: compiling the C++ kernels into {native.build_directory()} (first use" in err


def test_install_ships_the_library_and_removes_other_builds(stub_build, tmp_path, capsys):
    package = tmp_path / "site-packages" / "graphtree" / "backend"
    stale = _library(package, f"{kernel_build.LIBRARY_PREFIX}0123456789abcdef")
    shipped = kernel_build.install(package, tmp_path / "build", verbose=True)
    assert shipped == package / f"{native.build_name()}{kernel_build.LIBRARY_SUFFIX}" and shipped.is_file()
    assert not stale.exists()
    assert stub_build == [tmp_path / "build" / native.build_name()]  # compiled outside the package and the cache
    assert f"graphtree: compiling the C++ kernels into {stub_build[0]} (pip install;" in capsys.readouterr().err


class _Run:
    """subprocess.run replaced: records the command and environment, exits with ``status``."""

    def __init__(self, status: int) -> None:
        self.status, self.calls = status, []

    def __call__(self, command, env, check):
        self.calls.append((command, env))
        return subprocess.CompletedProcess(command, self.status)


def test_the_install_step_builds_against_the_environments_torch_outside_pips_isolation(tmp_path, monkeypatch):
    run = _Run(0)
    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setenv("PYTHONPATH", "/pip-build-env/site")  # how pip isolates a build from the environment
    monkeypatch.setenv("PYTHONNOUSERSITE", "1")
    lines: list[str] = []
    kernel_build.build_for_install(tmp_path / "pkg", tmp_path / "build", "auto", lines.append)
    (command, env), = run.calls
    assert command[:2] == [sys.executable, str(Path(kernel_build.__file__).resolve())]
    assert env["PYTHONPATH"] == "/pip-build-env/site"  # torch is importable here: nothing to undo
    monkeypatch.setattr(kernel_build.importlib.util, "find_spec", lambda name: None)  # isolated: no torch
    kernel_build.build_for_install(tmp_path / "pkg", tmp_path / "build", "auto", lines.append)
    assert "PYTHONPATH" not in run.calls[1][1] and "PYTHONNOUSERSITE" not in run.calls[1][1]
    assert lines == []


@pytest.mark.parametrize(("status", "expected"), [(kernel_build.NO_TORCH, "torch is not installed yet"),
                                                  (1, "the build failed (exit status 1")])
def test_an_install_whose_build_cannot_run_goes_on_unless_told_otherwise(tmp_path, monkeypatch, status, expected):
    monkeypatch.setattr(subprocess, "run", _Run(status))
    lines: list[str] = []
    kernel_build.build_for_install(tmp_path / "pkg", tmp_path / "build", "auto", lines.append)
    assert len(lines) == 1 and expected in lines[0] and "the first cell that needs them compiles them" in lines[0]
    with pytest.raises(RuntimeError, match="GRAPHTREE_NATIVE=1"):
        kernel_build.build_for_install(tmp_path / "pkg", tmp_path / "build", "1", lines.append)
    run = _Run(0)
    monkeypatch.setattr(subprocess, "run", run)
    kernel_build.build_for_install(tmp_path / "pkg", tmp_path / "build", "0", lines.append)
    assert run.calls == [] and "GRAPHTREE_NATIVE=0" in lines[-1]


def test_a_first_use_build_says_which_source_is_done_and_how_far_it_is(tmp_path, monkeypatch):
    monkeypatch.setattr(kernel_build, "PROGRESS_SECONDS", 0.5)
    sources = [tmp_path / "src" / name for name in ("a.cpp", "b.cpp", "c.cpp")]
    sources[0].parent.mkdir()
    for source in sources:
        source.write_text("")
    (tmp_path / "a.o").write_text("")
    old = time.time() - 60
    os.utime(tmp_path / "a.o", (old, old))  # compiled by an earlier, interrupted build: not this build's work
    # A compiler at work on c.cpp, as /proc shows it (its command line names the source's copy).
    compiler = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "-c",
                                 str(tmp_path / "src" / "c.cpp")])
    lines: list[str] = []
    progress = kernel_build._Progress(tmp_path, sources, lines.append)
    progress.start()
    try:
        time.sleep(0.1)
        (tmp_path / "b.o").write_text("")
        deadline = time.monotonic() + 10
        while not any("compiling" in line for line in lines) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        progress.stop()
        compiler.kill()
        compiler.wait()
    assert lines[0].startswith("graphtree: compiled b.cpp (1 of 3 sources; ")
    heartbeat = [line for line in lines[1:] if line.startswith("graphtree: compiling")]
    assert heartbeat and "(1 of 3 sources compiled; " in heartbeat[0]
    if Path("/proc/self/cmdline").exists():
        assert heartbeat[0].startswith("graphtree: compiling c.cpp (")
