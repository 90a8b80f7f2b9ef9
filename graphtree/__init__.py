"""graphtree: tree-structured LSTMs as PyTorch Geometric message passing, run level by level."""

from . import data, nn
from .engine import Children, propagate, schedule_of
from .errors import CycleError, GraphtreeError, ScheduleError, TreeFormatError
from .schedule import LevelPlan, Schedule

__version__ = "0.1.0"

__all__ = [
    "Children",
    "CycleError",
    "GraphtreeError",
    "LevelPlan",
    "Schedule",
    "ScheduleError",
    "TreeFormatError",
    "data",
    "nn",
    "propagate",
    "schedule_of",
]
