"""What ``pip install .`` installs: the library alone (``graphtree``), never the lab beside the experiments
(``experiments/lab``) or the scripts, tests and benchmarks. The wheel is built from a copy of the sources that a
build reads, with the kernels' compile skipped (``GRAPHTREE_NATIVE=0``: they would take minutes, and what they add
is ``graphtree/backend``'s compiled library, inside the package either way)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    pytest.importorskip("setuptools")
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, source / name)
    for folder in ("graphtree", "experiments", "benchmarks", "tests"):
        shutil.copytree(REPO / folder, source / folder,
                        ignore=shutil.ignore_patterns("__pycache__", "*.so", "results", "*.egg-info"))
    out = tmp_path_factory.mktemp("wheel")
    env = {**os.environ, "GRAPHTREE_NATIVE": "0", "PIP_NO_INDEX": "1"}
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(out), str(source)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = out.glob("graphtree-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def test_the_wheel_holds_the_library_alone(wheel_names: list[str]):
    tops = {name.split("/")[0] for name in wheel_names}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"graphtree"}
    assert not any(name.startswith(("graphtree/experiments/", "lab/")) or "/lab/" in name for name in wheel_names)


def test_the_wheel_holds_every_module_of_the_package(wheel_names: list[str]):
    modules = {path.relative_to(REPO).as_posix() for path in (REPO / "graphtree").rglob("*.py")}
    assert modules <= set(wheel_names)
    # The kernels' sources travel with the package, so that a first use can compile them where the install did not.
    assert {f"graphtree/csrc/{p.name}" for p in (REPO / "graphtree" / "csrc").glob("*.cpp")} <= set(wheel_names)
