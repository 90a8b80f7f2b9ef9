"""Tree-structured recurrent cells, all run by the shared level engine."""

from .cell import TreeCell
from .child_sum import ChildSumTreeLSTM
from .nary import NaryTreeLSTM

__all__ = ["TreeCell", "ChildSumTreeLSTM", "NaryTreeLSTM"]
