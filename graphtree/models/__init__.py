"""Complete models built from graphtree's cells."""

from .bicontree import BiTreeLSTM
from .classifier import NodeEmbedding, TreeClassifier, node_loss

__all__ = ["BiTreeLSTM", "NodeEmbedding", "TreeClassifier", "node_loss"]
