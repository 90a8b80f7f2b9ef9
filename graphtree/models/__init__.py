"""Complete models built from graphtree's cells."""

from .bicontree import BiTreeLSTM
from .classifier import NodeEmbedding, TreeClassifier, node_loss
from .contextual import EncoderLeaves, EncoderSpanClassifier
from .fields import NodeFields
from .readout import READOUTS, Readout
from .similarity import MeanEncoder, PairSimilarity, SequenceEncoder, SimilarityHead, TreeEncoder, similarity_loss

__all__ = [
    "READOUTS",
    "BiTreeLSTM",
    "EncoderLeaves",
    "EncoderSpanClassifier",
    "MeanEncoder",
    "NodeEmbedding",
    "NodeFields",
    "PairSimilarity",
    "Readout",
    "SequenceEncoder",
    "SimilarityHead",
    "TreeClassifier",
    "TreeEncoder",
    "node_loss",
    "similarity_loss",
]
