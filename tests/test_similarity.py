"""The SICK similarity model (Tai et al. 2015, eq 15), its KL loss and the relatedness metrics, against hand values."""

from __future__ import annotations

import math

import pytest
import torch
from torch_geometric.data import Batch

from graphtree.data import from_heads
from graphtree.data.spacy import binarize
from graphtree.datasets import sick_target
from graphtree.datasets.sick import make_pair
from graphtree.models import NodeEmbedding
from graphtree.models.similarity import (
    MeanEncoder,
    PairSimilarity,
    SequenceEncoder,
    SimilarityHead,
    TreeEncoder,
    padded_words,
    similarity_loss,
)
from graphtree.nn import ChildSumTreeLSTM, NaryTreeLSTM
from graphtree.train import PRESETS, PaperOptimizer, Trainer
from graphtree.train.pairs import PairTrainer, pearson, predict_pairs, relatedness, spearman

VOCAB = {"a": 1, "man": 2, "is": 3, "walking": 4, "dog": 5, "runs": 6}


def _head() -> SimilarityHead:
    head = SimilarityHead(in_channels=2, hidden_channels=1, num_classes=3)
    with torch.no_grad():
        head.W_times.weight.copy_(torch.tensor([[1.0, 0.0]]))
        head.W_times.bias.copy_(torch.tensor([-1.0]))
        head.W_plus.weight.copy_(torch.tensor([[0.0, 2.0]]))
        head.W_p.weight.copy_(torch.tensor([[1.0], [0.0], [-1.0]]))
        head.W_p.bias.copy_(torch.tensor([0.0, 0.5, 0.0]))
    return head


def test_head_matches_hand_computation() -> None:
    h_l, h_r = torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0, 1.0]])
    # h_x = [3, 2], h_+ = [2, 1]; pre-activation 1*3 + 0*2 - 1 + 0*2 + 2*1 = 4.
    s = 1 / (1 + math.exp(-4.0))
    logits = [s, 0.5, -s]
    z = sum(math.exp(v) for v in logits)
    p = [math.exp(v) / z for v in logits]
    head = _head()
    log_probs = head(h_l, h_r)
    assert torch.allclose(log_probs.exp(), torch.tensor([p]), atol=1e-6)
    assert head.score(log_probs).item() == pytest.approx(1 * p[0] + 2 * p[1] + 3 * p[2], abs=1e-6)


def test_head_is_symmetric_in_the_two_sentences() -> None:
    head = SimilarityHead(4)
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    assert torch.allclose(head(a, b), head(b, a))


def test_kl_loss_matches_hand_value() -> None:
    target = torch.tensor([[0.0, 0.8, 0.2]])
    pred = torch.tensor([[0.1, 0.6, 0.3]])
    # 0 * log(0 / 0.1) counts as 0; 0.8 ln(0.8/0.6) + 0.2 ln(0.2/0.3) = 0.230146 - 0.081093.
    assert similarity_loss(pred.log(), target).item() == pytest.approx(0.149053, abs=1e-5)
    assert similarity_loss(target.clamp(min=1e-30).log(), target).item() == pytest.approx(0.0, abs=1e-6)


def test_sparse_target_has_the_gold_expectation() -> None:
    p = sick_target(torch.tensor([3.6, 1.0]))
    assert torch.allclose(p @ torch.arange(1.0, 6.0), torch.tensor([3.6, 1.0]))


def _pair(binary: bool = False):
    a = from_heads([2, 3, 0, 3], ["a", "man", "is", "walking"], vocab=VOCAB)
    b = from_heads([2, 3, 0], ["a", "dog", "runs"], vocab=VOCAB)
    if binary:
        a, b = binarize(a, VOCAB), binarize(b, VOCAB)
    return make_pair(a, b, score=torch.tensor([3.6]), target=sick_target(3.6).unsqueeze(0),
                     pair_id=torch.tensor([1]))


def _encoders(embedding: NodeEmbedding) -> dict[str, torch.nn.Module]:
    return {"childsum": TreeEncoder(embedding, ChildSumTreeLSTM(4, 5)),
            "lstm": SequenceEncoder(embedding, 5),
            "bilstm": SequenceEncoder(embedding, 5, bidirectional=True),
            "bilstm_untied": SequenceEncoder(embedding, 5, bidirectional=True, tied=False),
            "mean": MeanEncoder(embedding)}


@pytest.mark.parametrize("kind", ["childsum", "lstm", "bilstm", "bilstm_untied", "mean", "nary"])
def test_pair_model_trains_and_predicts_in_range(kind: str) -> None:
    torch.manual_seed(0)
    embedding = NodeEmbedding(len(VOCAB) + 1, 4)
    encoder = TreeEncoder(embedding, NaryTreeLSTM(4, 5)) if kind == "nary" else _encoders(embedding)[kind]
    model = PairSimilarity(encoder)
    batch = Batch.from_data_list([_pair(kind == "nary"), _pair(kind == "nary")])
    log_probs = model(batch)
    assert log_probs.shape == (2, 5)
    loss = similarity_loss(log_probs, batch.target)
    loss.backward()
    assert model.head.W_p.weight.grad is not None and model.head.W_p.weight.grad.abs().sum() > 0
    assert embedding.embedding.weight.grad.abs().sum() > 0
    y = model.predict(batch)
    assert ((y >= 1) & (y <= 5)).all()
    assert torch.allclose(y[0], y[1])  # the same pair twice gives the same rating


def test_mean_encoder_is_the_word_average() -> None:
    embedding = NodeEmbedding(len(VOCAB) + 1, 2, torch.arange(14.0).view(7, 2))
    tree = from_heads([2, 3, 0], ["a", "dog", "runs"], vocab=VOCAB)  # ids 1, 5, 6: rows [2,3], [10,11], [12,13]
    assert torch.allclose(MeanEncoder(embedding)(Batch.from_data_list([tree])), torch.tensor([[8.0, 9.0]]))


def test_padded_words_puts_words_in_sentence_order_and_reverses() -> None:
    # Heads: "is" is the root (node order follows the tree, not the sentence).
    tree = Batch.from_data_list([from_heads([2, 3, 0, 3], ["a", "man", "is", "walking"], vocab=VOCAB),
                                 from_heads([0], ["dog"], vocab=VOCAB)])
    x = tree.word.float().unsqueeze(-1)
    seq, lengths = padded_words(x, tree)
    assert lengths.tolist() == [4, 1]
    assert seq[..., 0].tolist() == [[1, 2, 3, 4], [5, 0, 0, 0]]
    rev, _ = padded_words(x, tree, reverse=True)
    assert rev[..., 0].tolist() == [[4, 3, 2, 1], [5, 0, 0, 0]]


def test_bidirectional_tied_lstm_reads_the_reversed_sentence_with_the_same_weights() -> None:
    torch.manual_seed(1)
    embedding = NodeEmbedding(len(VOCAB) + 1, 4)
    bi = SequenceEncoder(embedding, 3, bidirectional=True)
    forward = from_heads([2, 0], ["a", "dog"], vocab=VOCAB)
    backward = from_heads([0, 1], ["dog", "a"], vocab=VOCAB)
    out_f, out_b = bi(Batch.from_data_list([forward])), bi(Batch.from_data_list([backward]))
    assert torch.allclose(out_f[:, 3:], out_b[:, :3], atol=1e-6)


def test_metrics_match_hand_values() -> None:
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    # Ranks with the tie averaged: x -> [1, 2.5, 2.5, 4], y -> [1, 3, 2, 4]; r = 4.5 / sqrt(4.5 * 5) = sqrt(0.9).
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(math.sqrt(0.9))
    m = relatedness([1.0, 2.0, 4.0], [1.0, 3.0, 3.0])
    assert m["mse"] == pytest.approx(2 / 3)
    assert m["n"] == 3
    assert math.isnan(pearson([1, 1, 1], [1, 2, 3]))


def _rated_pairs(scores: list[float]) -> list:
    sentences = [([2, 3, 0, 3], ["a", "man", "is", "walking"]), ([2, 3, 0], ["a", "dog", "runs"]),
                 ([2, 0, 2], ["a", "dog", "is"]), ([0, 1], ["man", "runs"])]
    pairs = []
    for k, score in enumerate(scores):
        (pa, wa), (pb, wb) = sentences[k % 4], sentences[(k + 1 + k // 4) % 4]
        pairs.append(make_pair(from_heads(pa, wa, vocab=VOCAB), from_heads(pb, wb, vocab=VOCAB),
                               score=torch.tensor([score]), target=sick_target(score).unsqueeze(0),
                               pair_id=torch.tensor([k])))
    return pairs


def _fit_pairs(epochs: int, checkpoint, train, dev):
    torch.manual_seed(0)
    embedding = NodeEmbedding(len(VOCAB) + 1, 4)
    model = PairSimilarity(TreeEncoder(embedding, ChildSumTreeLSTM(4, 5)))
    optimizer = PaperOptimizer.for_model(model, embedding, PRESETS["tai"])
    trainer = PairTrainer(model, optimizer, epochs=epochs, batch_size=3, seed=7, loss_fn=similarity_loss,
                          checkpoint=checkpoint, config={"run": "resume-test"}, progress=False)
    return model, trainer.fit(train, dev)


def test_pair_trainer_resumes_to_the_uninterrupted_run_and_keeps_the_best_dev_pearson(tmp_path) -> None:
    train = _rated_pairs([1.0, 4.6, 2.2, 3.9, 3.0, 4.1, 1.7, 2.8])
    dev = _rated_pairs([1.2, 4.8, 3.3, 2.0, 4.4])
    model_full, full = _fit_pairs(4, tmp_path / "full.pt", train, dev)
    _fit_pairs(2, tmp_path / "part.pt", train, dev)
    model_resumed, resumed = _fit_pairs(4, tmp_path / "part.pt", train, dev)

    assert resumed.resumed_at == 2 and full.resumed_at == 0
    assert [h["dev_pearson"] for h in resumed.history] == [h["dev_pearson"] for h in full.history]
    for key, value in model_full.state_dict().items():
        assert torch.equal(value, model_resumed.state_dict()[key]), key
    # The epoch kept is the first with the highest dev r, recomputed here from the history.
    rs = [h["dev_pearson"] for h in full.history]
    assert full.best_epoch == rs.index(max(r for r in rs if not math.isnan(r))) + 1
    dev_pred, dev_gold = predict_pairs(model_full, [Batch.from_data_list(dev)])
    assert pearson(dev_pred, dev_gold) == pytest.approx(full.best_dev["pearson"], abs=1e-6)


def test_node_trainer_refuses_a_pair_checkpoint(tmp_path) -> None:
    train = _rated_pairs([1.0, 4.6, 2.2])
    model, _ = _fit_pairs(1, tmp_path / "pair.pt", train, train)
    optimizer = PaperOptimizer.for_model(model, model.encoder.embedding, PRESETS["tai"])
    trainer = Trainer(model, optimizer, epochs=1, batch_size=3, seed=7, checkpoint=tmp_path / "pair.pt",
                      config={"run": "resume-test"}, progress=False)
    with pytest.raises(ValueError, match="not a checkpoint of Trainer"):
        trainer.fit(train, train)
