"""The nodes' inputs: word ids from a vocabulary (:func:`attach_words`) and numeric features ``x``, turned
into node vectors by :class:`NodeInputs`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from graphtree.data.tree import lookup_words
from graphtree.embeddings import embedding_matrix
from graphtree.models import NodeEmbedding, NodeFields
from graphtree.vocab import Vocab

from ..runs import fail
from .splits import SPLITS, GraphSplits

__all__ = ["FIELD_MIN_COUNT", "NodeInputs", "attach_fields", "attach_words", "feature_channels", "field_names",
           "node_fields", "word_embedding"]

FIELD_MIN_COUNT = 2
"""Field tokens seen fewer times in training read ``<unk>`` (``experiments/code.py``'s rule for sub-tokens)."""

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
    """A transform giving a graph read from disk its word ids (``word``) in ``vocab`` and, with ``fields``, its
    field ids (:class:`FieldIds`); picklable, for the loader's worker processes."""

    def __init__(self, vocab: Vocab | None, fields: FieldIds | None = None) -> None:
        self.vocab, self.fields = vocab, fields

    def __call__(self, graph: Any) -> Any:
        if self.vocab is not None:
            graph.word = lookup_words(graph.tokens, graph.word_pos.tolist(), self.vocab)
        return self.fields(graph) if self.fields is not None else graph


def field_names(graph: Any) -> list[str]:
    """The token fields a graph of :class:`~graphtree.datasets.GraphFiles` carries (``<name>_tokens`` with
    ``<name>_index``), sorted."""
    return sorted(key[:-len("_tokens")] for key in graph.keys()
                  if key.endswith("_tokens") and f"{key[:-len('_tokens')]}_index" in graph)


class FieldIds:
    """A transform giving a graph the ids of its field tokens, every field in one bag per node: ``field_word``
    ``[T]`` (ids in ``vocab``, whose entries are ``<field>:<token>``) and ``field_index`` ``[T]`` (the node of each;
    PyG's batching offsets it). Picklable."""

    def __init__(self, names: list[str], vocab: Vocab) -> None:
        self.names, self.vocab = names, vocab

    @staticmethod
    def entries(graph: Any, names: list[str]) -> tuple[list[str], list[int]]:
        words, nodes = [], []
        for name in names:
            words += [f"{name}:{t}" for t in getattr(graph, f"{name}_tokens")]
            nodes += getattr(graph, f"{name}_index").tolist()
        return words, nodes

    def __call__(self, graph: Any) -> Any:
        words, nodes = self.entries(graph, self.names)
        graph.field_word = torch.tensor([self.vocab[w] for w in words], dtype=torch.long)
        graph.field_index = torch.tensor(nodes, dtype=torch.long)
        return graph


def attach_fields(splits: GraphSplits, min_count: int = FIELD_MIN_COUNT) -> Vocab | None:
    """Give every graph the ids of its field tokens (:class:`FieldIds`: ``field_word``, ``field_index``), from a
    vocabulary of the training graphs' field tokens seen ``min_count`` times or more; that vocabulary, or ``None``
    where the graphs have no fields."""
    train = splits.graphs["train"]
    names = field_names(train[0]) if len(train) else []
    if not names:
        return None
    vocab = Vocab.build([FieldIds.entries(g, names)[0] for g in train], min_count=min_count)
    ids = FieldIds(names, vocab)
    for split in SPLITS:
        graphs = splits.graphs[split]
        if getattr(graphs, "reads_from_disk", False):
            previous = getattr(graphs, "transform", None)
            graphs.transform = WordIds(previous.vocab if isinstance(previous, WordIds) else None, ids)
            continue
        for graph in graphs:
            ids(graph)
    return vocab


def node_fields(vocab: Vocab | None, fields: Vocab, vectors: Any, dim: int) -> NodeFields:
    """A :class:`~graphtree.models.NodeFields` of the nodes' words as types (id 0: no word; ``vectors``' where
    given, as :func:`word_embedding`) and the field tokens as the bag."""
    words = 1 + (len(vocab) if vocab is not None else 0)
    embedding = NodeFields(words, len(fields), dim)
    if vocab is not None and vectors is not None:
        with torch.no_grad():
            embedding.types.weight[1:] = embedding_matrix(vocab, vectors, missing="mean")
    return embedding


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
    """The input vector of every node: its word vector (or, with token fields, its word and field tokens embedded
    together by :class:`~graphtree.models.NodeFields`), its features ``x``, or both side by side.

    Args:
        embedding: Word vectors of ``batch.word`` (nodes without a word get zeros), a pretrained encoder's
            (:class:`~graphtree.models.EncoderLeaves`), or ``None``.
        feature_channels: Width of ``batch.x`` (0: no features).
        fields: In place of ``embedding``: the word as the type (``batch.word + 1``, 0 for none) and the field
            tokens ``batch.field_word`` at ``batch.field_index`` as the bag.
    """

    def __init__(self, embedding: NodeEmbedding | None, feature_channels: int = 0,
                 fields: NodeFields | None = None) -> None:
        super().__init__()
        if embedding is not None and fields is not None:
            raise ValueError("NodeInputs embeds the words either alone (embedding) or with the fields (fields)")
        if embedding is None and fields is None and feature_channels == 0:
            raise ValueError("NodeInputs needs word vectors, node features, or both")
        self.embedding, self.feature_channels, self.fields = embedding, feature_channels, fields

    @property
    def out_channels(self) -> int:
        words = (self.embedding.embedding_dim if self.embedding is not None else
                 self.fields.out_channels if self.fields is not None else 0)
        return words + self.feature_channels

    def forward(self, batch: Any) -> Tensor:
        if self.fields is not None:
            word = getattr(batch, "word", None)
            types = (word + 1 if word is not None else
                     torch.zeros(batch.num_nodes, dtype=torch.long, device=batch.field_index.device))
            parts = [self.fields(types, batch.field_word, batch.field_index)]
        else:
            parts = [self.embedding.node_inputs(batch)] if self.embedding is not None else []
        if self.feature_channels:
            parts.append(batch.x)
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)


