"""graphtree: tree-structured LSTMs as PyTorch Geometric message passing, run level by level."""

from .collector import collection_paused

# PyG's import (most of this one) makes many objects that live as long as the process: collecting while they are
# made only walks them again and again (graphtree.collector; tests/test_collector.py checks that none starts).
with collection_paused():
    from . import data, datasets, models, nn
    from .embeddings import load_glove
    from .engine import Children, propagate, schedule_of
    from .errors import CycleError, GraphtreeError, ScheduleError, TreeFormatError
    from .parse import parse
    from .schedule import LevelPlan, Schedule
    from .vocab import Vocab

__version__ = "0.1.0"

__all__ = [
    "Children",
    "CycleError",
    "GraphtreeError",
    "LevelPlan",
    "Schedule",
    "ScheduleError",
    "TreeFormatError",
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
