"""Complete models built from graphtree's cells."""

from .bicontree import BiTreeLSTM
from .classifier import NodeEmbedding, TreeClassifier, node_loss
from .contextual import EncoderLeaves, EncoderSpanClassifier
from .fields import NodeFields
from .similarity import MeanEncoder, PairSimilarity, SequenceEncoder, SimilarityHead, TreeEncoder, similarity_loss

__all__ = [
    "BiTreeLSTM",
    "EncoderLeaves",
    "EncoderSpanClassifier",
    "MeanEncoder",
    "NodeEmbedding",
    "NodeFields",
    "PairSimilarity",
    "SequenceEncoder",
    "SimilarityHead",
    "TreeClassifier",
    "TreeEncoder",
    "node_loss",
    "similarity_loss",
]
