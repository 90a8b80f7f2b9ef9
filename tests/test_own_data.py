"""lab.own_data's pieces that ``experiments/train.py`` uses for a run's line and its word vectors."""

from __future__ import annotations

import torch
from lab.own_data import Task, word_embedding

from graphtree.embeddings import WordVectors
from graphtree.models import NodeEmbedding
from graphtree.vocab import Vocab


def test_a_runs_line_says_its_task_metric():
    assert Task("graph", "class", 3).scores({"accuracy": 87.5}) == "test accuracy 87.50"
    assert Task("node", "class", 3).scores({"accuracy": None}) == "no test labels"
    assert Task("graph", "regression").scores({"mse": 0.012345, "pearson": 0.91234}) == "test MSE 0.01235, r 0.9123"
    assert Task("graph", "regression").scores({"mse": None, "pearson": None}) == "no test labels"


def test_word_embedding_takes_pretrained_vectors_or_draws_random_ones():
    vocab = Vocab(["a", "film", "man"])
    assert word_embedding(None, None, 8) is None
    random = word_embedding(vocab, None, 8)
    assert isinstance(random, NodeEmbedding) and random.embedding.weight.shape == (len(vocab), 8)
    vectors = WordVectors(["a", "film"], torch.tensor([[1.0, 0.0], [3.0, 2.0]]))
    weight = word_embedding(vocab, vectors, 2).embedding.weight   # a word without a vector gets their mean
    assert weight[vocab["film"]].tolist() == [3.0, 2.0] and weight[vocab["man"]].tolist() == [2.0, 1.0]
