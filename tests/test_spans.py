"""Span LSTM baseline (Tai et al. 2015, sequential models on phrases) against per-node references."""

import random

import pytest
import torch
from torch_geometric.data import Batch
from trees import random_ptb

from graphtree.data import from_ptb
from graphtree.models import NodeEmbedding
from graphtree.models.spans import SpanLSTMClassifier, word_spans
from graphtree.vocab import Vocab


def test_word_spans_of_a_hand_drawn_tree_and_a_batch():
    # (3 (2 a) (4 (1 b) (0 c))): node ids in pre-order are not assumed; spans are read by label.
    first = from_ptb("(3 (2 a) (4 (1 b) (0 c)))")
    second = from_ptb("(1 (2 x) (3 y))")
    start, end = word_spans(Batch.from_data_list([first, second]))
    spans = {}
    for node, label in enumerate(torch.cat([first.y, second.y]).tolist()):
        spans.setdefault(label, []).append((int(start[node]), int(end[node])))
    assert sorted(spans[3]) == [(0, 3), (1, 2)]  # first's root; second's "y"
    assert sorted(spans[4]) == [(1, 3)]
    assert sorted(spans[2]) == [(0, 1), (0, 1)]  # "a" and "x"
    assert spans[1] == [(1, 2), (0, 2)]  # "b", second's root
    assert spans[0] == [(2, 3)]


def test_published_parameter_count():
    model = SpanLSTMClassifier(NodeEmbedding(10, 300), 168, 5)
    assert sum(p.numel() for p in model.lstm.parameters()) == 315_840  # Tai et al. Table 1, BiLSTM d = 168


@pytest.mark.parametrize("bidirectional, tied", [(False, True), (True, True), (True, False)])
def test_every_node_is_its_span_run_alone(bidirectional, tied):
    torch.manual_seed(0)
    rng = random.Random(3)
    lines = [random_ptb(rng.randint(1, 9), 3, rng) for _ in range(6)]
    vocab = Vocab(f"w{k}" for k in range(9))
    trees = [from_ptb(line, vocab=vocab) for line in lines]
    embedding = NodeEmbedding(len(vocab), 6)
    model = SpanLSTMClassifier(embedding, 5, 4, bidirectional=bidirectional, tied=tied).double().eval()
    logits = model(Batch.from_data_list(trees))

    expected = []
    for tree in trees:
        words = {int(p): int(w) for p, w in zip(tree.word_pos, tree.word) if p >= 0}
        start, end = word_spans(tree)
        for node in range(tree.num_nodes):
            x = embedding(torch.tensor([words[p] for p in range(int(start[node]), int(end[node]))])).double()
            h = model.lstm(x.unsqueeze(0))[1][0][-1, 0]
            if bidirectional:
                reverse = model.lstm_reverse if model.lstm_reverse is not None else model.lstm
                h = torch.cat([h, reverse(x.flip(0).unsqueeze(0))[1][0][-1, 0]])
            expected.append(model.classifier(h))
    torch.testing.assert_close(logits, torch.stack(expected), atol=1e-10, rtol=0)


def test_a_node_without_words_is_an_error():
    tree = from_ptb("(1 (2 a) (3 b))")
    tree.word_pos = torch.full_like(tree.word_pos, -1)
    with pytest.raises(ValueError, match="covers no word"):
        word_spans(tree)
