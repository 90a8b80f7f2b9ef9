"""Glue between word ids and models that take node inputs."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..errors import InvalidArgumentError

__all__ = ["WordInputModel"]


class WordInputModel(torch.nn.Module):
    """``net(embedding(batch.word), batch)``: runs a node-input model (e.g. :class:`~graphtree.models.BiTreeLSTM`)
    on a batch of word ids.

    Args:
        embedding: Maps ``batch.word`` to node vectors (e.g. :class:`~graphtree.models.NodeEmbedding`).
        net: Any module called as ``net(x, batch)``.
    """

    def __init__(self, embedding: torch.nn.Module, net: torch.nn.Module) -> None:
        super().__init__()
        self.embedding, self.net = embedding, net

    def forward(self, batch: Any) -> Tensor:
        if hasattr(self.embedding, "node_inputs"):  # NodeEmbedding, EncoderLeaves
            return self.net(self.embedding.node_inputs(batch), batch)
        if getattr(batch, "word", None) is None:
            raise InvalidArgumentError("the batch has no word ids: build the trees with a vocabulary")
        return self.net(self.embedding(batch.word), batch)
