"""graphtree: tree-structured LSTMs as PyTorch Geometric message passing, run level by level."""

# Importing graphtree, or running its layers, datasets and trainer, sets nothing process-wide: the garbage collector,
# the floating-point mode, malloc and the thread count are the choices of the program that runs them (the experiment
# scripts make theirs in graphtree.experiments.process).
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
