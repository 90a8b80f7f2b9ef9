"""The nodes' inputs: word ids from a vocabulary (:func:`attach_words`) and numeric features ``x``, turned
into node vectors by :class:`NodeInputs`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ...data.tree import lookup_words
from ...embeddings import embedding_matrix
from ...models import NodeEmbedding
from ...vocab import Vocab
from ..runs import fail
from .splits import SPLITS, GraphSplits

__all__ = ["NodeInputs", "attach_words", "feature_channels", "word_embedding"]

def attach_words(splits: GraphSplits, vectors: Any = None) -> Vocab | None:
    """Give every node with a token its word id (``word``); the vocabulary, or ``None`` where no node has a token.

    Without ``vectors`` the vocabulary is the training tokens; with pretrained
    ``vectors`` (e.g. :func:`~graphtree.embeddings.load_glove`), the tokens of
    every split that have a vector (Teng & Zhang's rule, as the experiments).
    """
    if not any(len(g.tokens) for s in SPLITS for g in splits.graphs[s]):
        return None
    if vectors is None:
        vocab = Vocab.build(splits.graphs["train"])
    else:
        vocab = Vocab.build([g for s in SPLITS for g in splits.graphs[s]], pretrained=vectors)
    for split in SPLITS:
        if getattr(splits.graphs[split], "reads_from_disk", False):  # looked up as each graph is read
            splits.graphs[split].transform = WordIds(vocab)
            continue
        for graph in splits.graphs[split]:
            graph.word = lookup_words(graph.tokens, graph.word_pos.tolist(), vocab)
    return vocab


class WordIds:
    """A transform giving a graph read from disk its word ids (``word``) in ``vocab``; picklable, for the
    loader's worker processes."""

    def __init__(self, vocab: Vocab) -> None:
        self.vocab = vocab

    def __call__(self, graph: Any) -> Any:
        graph.word = lookup_words(graph.tokens, graph.word_pos.tolist(), self.vocab)
        return graph


def word_embedding(vocab: Vocab | None, vectors: Any, dim: int) -> NodeEmbedding | None:
    """Word vectors of size ``dim`` for ``vocab``'s words: ``vectors``' (of that size; their mean for a word
    without one), else random ones; ``None`` without a vocabulary (no node has a token)."""
    if vocab is None:
        return None
    pretrained = embedding_matrix(vocab, vectors, missing="mean") if vectors is not None else None
    return NodeEmbedding(len(vocab), dim, pretrained)


def feature_channels(splits: GraphSplits) -> int:
    """The width of the node features ``x`` (0 where the graphs have none); every split must agree."""
    widths = {}
    for split in SPLITS:
        for graph in splits.graphs[split]:
            x = getattr(graph, "x", None)
            widths.setdefault(0 if x is None else x.size(1), (split, graph))
    if len(widths) > 1:
        (a, (sa, ga)), (b, (sb, gb)) = sorted(widths.items())[:2]
        fail(f"{splits.where(sb, gb)}: x: nodes have {b} features here but {a} in {splits.where(sa, ga)}; every "
             "split needs the same node features")
    return next(iter(widths), 0)


class NodeInputs(torch.nn.Module):
    """The input vector of every node: its word vector, its features ``x``, or both side by side.

    Args:
        embedding: Word vectors of ``batch.word`` (nodes without a word get zeros), or ``None``.
        feature_channels: Width of ``batch.x`` (0: no features).
    """

    def __init__(self, embedding: NodeEmbedding | None, feature_channels: int = 0) -> None:
        super().__init__()
        if embedding is None and feature_channels == 0:
            raise ValueError("NodeInputs needs word vectors, node features, or both")
        self.embedding, self.feature_channels = embedding, feature_channels

    @property
    def out_channels(self) -> int:
        return (self.embedding.embedding_dim if self.embedding is not None else 0) + self.feature_channels

    def forward(self, batch: Any) -> Tensor:
        parts = [self.embedding(batch.word)] if self.embedding is not None else []
        if self.feature_channels:
            parts.append(batch.x)
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)


