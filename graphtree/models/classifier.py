"""Node classification with any cell: embedding -> cell -> dropout -> linear, on every node."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Embedding, Linear

from ..data.tree import NO_LABEL, NO_WORD
from ..errors import InvalidArgumentError
from ..nn.cell import TreeCell, first_state
from ..nn.functional import dropout

__all__ = ["NodeEmbedding", "TreeClassifier", "node_loss"]


class NodeEmbedding(torch.nn.Module):
    """Word vectors of the nodes of a batch; nodes without a word (``word == NO_WORD``) get zeros.

    Args:
        num_embeddings (int): Vocabulary size.
        embedding_dim (int): Vector size.
        pretrained (Tensor, optional): ``[num_embeddings, embedding_dim]`` initial vectors.
        freeze (bool): Keep the vectors fixed (Tai et al. do for SICK).
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, pretrained: Tensor | None = None,
                 freeze: bool = False) -> None:
        super().__init__()
        self.embedding = Embedding(num_embeddings, embedding_dim)
        if pretrained is not None:
            if tuple(pretrained.shape) != (num_embeddings, embedding_dim):
                raise InvalidArgumentError(f"pretrained vectors have shape {tuple(pretrained.shape)}, "
                                           f"expected ({num_embeddings}, {embedding_dim})")
            with torch.no_grad():
                self.embedding.weight.copy_(pretrained)
        self.embedding.weight.requires_grad_(not freeze)

    @property
    def embedding_dim(self) -> int:
        return self.embedding.embedding_dim

    def forward(self, word: Tensor) -> Tensor:
        """``[N, embedding_dim]`` vectors for ``[N]`` word ids."""
        has_word = word != NO_WORD
        return self.embedding(word.clamp(min=0)) * has_word.unsqueeze(-1).to(self.embedding.weight.dtype)

    def node_inputs(self, batch: Any) -> Tensor:
        """The vectors of ``batch.word``: what a model asks its input module for (an
        :class:`~graphtree.models.EncoderLeaves` reads the batch's words instead)."""
        if getattr(batch, "word", None) is None:
            raise InvalidArgumentError("the batch has no word ids: build the trees with a vocabulary "
                                       "(e.g. graphtree.datasets.SST or from_ptb(line, vocab=...))")
        return self(batch.word)


class TreeClassifier(torch.nn.Module):
    r"""A softmax classifier on every node of a tree (Tai et al. 2015, §4.1):

    .. math::
        \hat{p}_\theta(y \mid \{x\}_j) = \mathrm{softmax}\left(W^{(s)} h_j + b^{(s)}\right)

    with :math:`h_j` from any graphtree cell, run on word vectors looked up from
    ``batch.word``. Dropout is applied to :math:`h_j` before the classifier (and
    optionally to the word vectors).

    Args:
        embedding (NodeEmbedding): Word vectors, or any input module with ``node_inputs(batch)`` (such as
            :class:`~graphtree.models.EncoderLeaves`, a pretrained transformer's word states).
        cell (TreeCell): Any cell returning ``(h, c, ...)``.
        num_classes (int): Number of labels.
        dropout (float): Dropout on :math:`h_j` (Tai: 0.5).
        input_dropout (float): Dropout on the word vectors (default 0).

    Shapes:
        - **input:** a ``Batch`` with ``word`` ids (:math:`|\mathcal{V}|`).
        - **output:** logits :math:`(|\mathcal{V}|, C)` for every node.
    """

    def __init__(self, embedding: NodeEmbedding, cell: TreeCell, num_classes: int, dropout: float = 0.5,
                 input_dropout: float = 0.0) -> None:
        super().__init__()
        hidden = cell.state_channels[0]
        self.embedding, self.cell = embedding, cell
        self.dropout, self.input_dropout = dropout, input_dropout
        self.classifier = Linear(hidden, num_classes)  # W^(s), b^(s)

    def reset_parameters(self) -> None:
        self.cell.reset_parameters()
        self.classifier.reset_parameters()

    def forward(self, batch: Any) -> Tensor:
        x = dropout(self.embedding.node_inputs(batch), self.input_dropout, self.training)
        h = first_state(self.cell(x, batch))
        return self.classifier(dropout(h, self.dropout, self.training))

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(embedding={self.embedding.embedding_dim}, cell={self.cell}, "
                f"num_classes={self.classifier.out_features})")


def node_loss(logits: Tensor, y: Tensor) -> Tensor:
    """Negative log-likelihood summed over the labelled nodes (``y != NO_LABEL``)."""
    labelled = y != NO_LABEL
    return F.cross_entropy(logits[labelled], y[labelled], reduction="sum")
