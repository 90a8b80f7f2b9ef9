"""Builds graphtree's C++ kernels as part of ``pip install`` (the rest of the metadata is in pyproject.toml).

The build is graphtree/backend/kernel_build.py, the same definition the package runs at first use where the
install did not build them. It runs in a child process of the interpreter being installed into, against that
environment's torch, and compiles in ``build/`` beside this file (kept, so a reinstall recompiles only what
changed). ``pip install .`` puts the library into the wheel; ``pip install -e .`` beside the sources. A build
that cannot run (no torch yet, no compiler) leaves the install as it was: the kernels then compile at first
use. ``GRAPHTREE_NATIVE=0 pip install ...`` skips the build; ``GRAPHTREE_NATIVE=1`` makes its failure an error.
"""

import importlib.util
import os
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def _kernel_build():
    # Loaded from its file: importing the graphtree package would import its dependencies, not installed yet.
    spec = importlib.util.spec_from_file_location("graphtree_kernel_build", ROOT / "graphtree" / "backend" /
                                                  "kernel_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithKernels(build_py):
    """``build_py``, then the kernels into the package being built (the source tree's, for an editable install)."""

    def run(self) -> None:
        super().run()
        package = ROOT if self.editable_mode else Path(self.build_lib)
        _kernel_build().build_for_install(package / "graphtree" / "backend", ROOT / "build" / "kernels",
                                          os.environ.get("GRAPHTREE_NATIVE", "auto").strip().lower(),
                                          say=lambda line: print(line, flush=True))


class PlatformDistribution(Distribution):
    """A wheel that holds a compiled library is tagged for its platform and Python, not as pure Python."""

    def has_ext_modules(self) -> bool:
        return True


setup(cmdclass={"build_py": BuildPyWithKernels}, distclass=PlatformDistribution)
