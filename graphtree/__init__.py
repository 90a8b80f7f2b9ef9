"""graphtree: tree-structured LSTMs as PyTorch Geometric message passing, run level by level."""

# Importing graphtree, or running its layers, datasets and trainer, sets nothing process-wide: the garbage collector,
# the floating-point mode, malloc and the thread count are the choices of the program that runs them (the experiment
# scripts make theirs in experiments/lab/process.py, which is not part of the package).
import importlib
from typing import TYPE_CHECKING, Any

# Names are imported when first used (PEP 562), so that a script's --help, or a user of one layer, does not wait
# for torch, PyG and every model to load: ``graphtree.nn`` or ``from graphtree import Vocab`` imports what it needs.
_LAZY = {
    "data": ".data", "datasets": ".datasets", "models": ".models", "nn": ".nn",
    "load_glove": ".embeddings", "Children": ".engine", "propagate": ".engine", "schedule_of": ".engine",
    "CycleError": ".errors", "GraphtreeError": ".errors", "HostValueError": ".errors",
    "InvalidArgumentError": ".errors", "InvalidTypeError": ".errors", "KernelBuildError": ".errors",
    "MissingDependencyError": ".errors", "MissingFileError": ".errors", "OutOfRangeError": ".errors",
    "ScheduleError": ".errors", "SlotLeakError": ".errors", "TreeFormatError": ".errors", "UsageError": ".errors",
    "parse": ".parse", "LevelPlan": ".schedule", "Schedule": ".schedule", "Vocab": ".vocab",
}

if TYPE_CHECKING:
    from . import data, datasets, models, nn
    from .embeddings import load_glove
    from .engine import Children, propagate, schedule_of
    from .errors import (
        CycleError,
        GraphtreeError,
        HostValueError,
        InvalidArgumentError,
        InvalidTypeError,
        KernelBuildError,
        MissingDependencyError,
        MissingFileError,
        OutOfRangeError,
        ScheduleError,
        SlotLeakError,
        TreeFormatError,
        UsageError,
    )
    from .parse import parse
    from .schedule import LevelPlan, Schedule
    from .vocab import Vocab


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'graphtree' has no attribute {name!r}")
    module = importlib.import_module(_LAZY[name], __name__)
    value = module if _LAZY[name] == f".{name}" else getattr(module, name)
    globals()[name] = value  # once: later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


from .version import __version__ as __version__  # noqa: E402  (after the lazy names above)

__all__ = [
    "Children",
    "CycleError",
    "GraphtreeError",
    "HostValueError",
    "InvalidArgumentError",
    "InvalidTypeError",
    "KernelBuildError",
    "LevelPlan",
    "MissingDependencyError",
    "MissingFileError",
    "OutOfRangeError",
    "Schedule",
    "ScheduleError",
    "SlotLeakError",
    "TreeFormatError",
    "UsageError",
    "Vocab",
    "data",
    "datasets",
    "load_glove",
    "models",
    "nn",
    "parse",
    "propagate",
    "schedule_of",
]
