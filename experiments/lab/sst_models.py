"""The models of ``experiments/sst.py``, built from a run's settings (those the script's tables and flags give,
and that a checkpoint stores for ``sst.py predict``).

* Tai et al.'s, Zhu et al.'s and Le & Zuidema's cells (``nary``, ``childsum``,
  ``slstm``, ``lstmrnn``): the cell under dropout and a softmax at every node
  (:class:`~graphtree.models.TreeClassifier`).
* Teng & Zhang's models (``contree``, ``contree_lex``, ``topdown``,
  ``bicontree``): :class:`~graphtree.models.BiTreeLSTM` with its output MLP and
  the dropout on the word vectors.
* ``bilstm``: a bidirectional LSTM over every span, its two directions sharing
  their weights (Tai et al.'s footnote 2).

With ``cfg["encoder"]`` (``sst.py --encoder``) the word vectors are a pretrained
transformer's word states (:class:`~graphtree.models.EncoderLeaves`), and
``encoder`` is that encoder alone, each phrase the mean of its words' states
(:class:`~graphtree.models.EncoderSpanClassifier`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from graphtree.models import BiTreeLSTM, EncoderSpanClassifier, NodeEmbedding, TreeClassifier
from graphtree.models.spans import SpanLSTMClassifier
from graphtree.nn import LSTMRNN, SLSTM, ChildSumTreeLSTM, NaryTreeLSTM
from graphtree.train import WordInputModel

from .encoder_runs import encoder_leaves
from .runs import fail

__all__ = ["TENG_VARIANTS", "sst_model"]

TENG_VARIANTS = {"contree": "contree", "contree_lex": "contree_lex", "topdown": "top_down", "bicontree": "bicontree"}
"""Teng & Zhang's models by their names in ``experiments/sst.py``, and the :class:`~graphtree.models.BiTreeLSTM`
variant of each."""


def sst_model(cfg: Mapping[str, Any], vocab_size: int, num_classes: int, pretrained: torch.Tensor | None, *,
              mlp_channels: int) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The model of the run settings ``cfg`` (``model(batch) -> logits`` on every node) and its word embedding:
    ``vocab_size`` words of ``cfg["dim"]`` dimensions (``pretrained``: their first vectors, else random),
    ``num_classes`` sentiment classes, and an output MLP of ``mlp_channels`` for Teng & Zhang's models.

    Raises:
        RunError: ``lstmrnn`` with a memory size other than the vector size.
        ValueError: a model ``experiments/sst.py`` does not have.
    """
    dim, hidden, dropout = cfg["dim"], cfg["hidden"], cfg["dropout"]
    model = cfg["model"]
    embedding: torch.nn.Module
    if cfg.get("encoder") is not None:
        embedding = encoder_leaves(cfg)
        if model == "encoder":
            return EncoderSpanClassifier(embedding, num_classes, dropout=dropout), embedding
        if model in ("bilstm", "lstmrnn"):
            fail(f"{model} does not run over an encoder")
    else:
        embedding = NodeEmbedding(vocab_size, dim, pretrained)
    if model in TENG_VARIANTS:
        net = BiTreeLSTM(dim, hidden, num_classes, mlp_channels=mlp_channels, variant=TENG_VARIANTS[model],
                         head=cfg["head"], dropout=dropout,
                         share_input_weights=cfg.get("share_input_weights", False))
        return WordInputModel(embedding, net), embedding
    if model == "bilstm":  # Tai's footnote 2: the two directions share their weights
        return SpanLSTMClassifier(embedding, hidden, num_classes, bidirectional=True, tied=True,
                                  dropout=dropout), embedding
    if model == "nary":
        cell = NaryTreeLSTM(dim, hidden)
    elif model == "childsum":
        cell = ChildSumTreeLSTM(dim, hidden)
    elif model == "slstm":  # Zhu's leaf: the word vector is h; with vectors of another size, a learned leaf unit
        cell = SLSTM(dim, hidden, leaf="embedding" if dim == hidden else "lstm")
    elif model == "lstmrnn":
        if dim != hidden:
            fail(f"lstmrnn: a leaf's output is its word vector, so the memory size is the vector size; these "
                 f"vectors have {dim} dimensions, the model {hidden}")
        cell = LSTMRNN(dim, hidden, activation=cfg["activation"])
    else:
        raise ValueError(f"not a model of experiments/sst.py: {model!r}")
    return TreeClassifier(embedding, cell, num_classes, dropout=dropout), embedding
