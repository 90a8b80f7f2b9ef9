"""An experiment script imported by its path, for the report scripts and tests that read its settings table
(and a benchmark script, for the benchmarks and tests that use its set-up).

The scripts are programs, not a package: ``python experiments/sst.py`` puts their
folder first on ``sys.path``, an installed graphtree does not. Importing one by
its file keeps ``sys.path`` as it is, and the module is cached under a name of its
own so that every importer shares one copy (and one set of monkeypatches in tests).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["load_script"]


def load_script(path: str | os.PathLike) -> ModuleType:
    """The module of the script at ``path`` (e.g. ``experiments/sst.py``), imported once."""
    path = Path(path).resolve()
    name = f"graphtree_script_{path.stem}"
    module = sys.modules.get(name)
    if module is not None and Path(module.__file__ or "") == path:
        return module
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} is not a Python script")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before running it: dataclasses and pickling look the module up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
