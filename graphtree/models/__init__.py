"""Complete models built from graphtree's cells."""

from .bicontree import BiTreeLSTM

__all__ = ["BiTreeLSTM"]
