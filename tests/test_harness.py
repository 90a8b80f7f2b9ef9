"""lab.harness: the set-up every experiment script shares, on hand-worked cases and a toy
experiment run through :class:`Experiment` (the data's identity stored with the checkpoint, the run's trainer
built by ``SeedRun.trainer``)."""

from __future__ import annotations

import argparse
import json

import pytest
import torch
from lab.harness import (
    SPLITS,
    Experiment,
    check_training_flags,
    initial_vectors,
    load_vectors,
    sample_splits,
    split_sizes,
    vectors_name,
)
from lab.runs import QUICK_EPOCHS, ArgumentParser
from lab.seeds import Outcome, SeedRun

from graphtree.data import from_ptb
from graphtree.embeddings import WordVectors
from graphtree.models import NodeEmbedding, TreeClassifier
from graphtree.nn import NaryTreeLSTM
from graphtree.train import PRESETS, Trainer
from graphtree.vocab import Vocab

VOCAB = Vocab(["a", "film", "the", "man"])


def namespace(**flags) -> argparse.Namespace:
    defaults = dict(seeds=[1], epochs=None, quick=False, out="runs", threads=1, device="cpu", no_progress=True)
    return argparse.Namespace(**{**defaults, **flags})


def test_word_vector_names():
    assert load_vectors("random") is None
    assert [vectors_name(n) for n in ("random", "glove50", "/data/glove.840B.300d.txt")] == [
        "random", "glove50", "glove.840B.300d"]


def test_initial_vectors_are_drawn_from_the_seed_or_taken_from_the_pretrained_ones():
    uniform = initial_vectors(VOCAB, None, 3, seed=7, scale=0.05)
    assert uniform.shape == (len(VOCAB), 3) and uniform.abs().max() <= 0.05
    assert torch.equal(uniform, initial_vectors(VOCAB, None, 3, seed=7, scale=0.05))
    assert not torch.equal(uniform, initial_vectors(VOCAB, None, 3, seed=8, scale=0.05))
    generator = torch.Generator().manual_seed(7)
    assert torch.equal(initial_vectors(VOCAB, None, 3, seed=7, init="normal"),
                       torch.randn(len(VOCAB), 3, generator=generator))

    vectors = WordVectors(["a", "film"], torch.tensor([[1.0, 0.0], [3.0, 2.0]]))  # the rest get their mean
    pretrained = initial_vectors(VOCAB, vectors, 99, seed=7)
    assert pretrained[VOCAB["a"]].tolist() == [1.0, 0.0] and pretrained[VOCAB["film"]].tolist() == [3.0, 2.0]
    assert pretrained[VOCAB["man"]].tolist() == [2.0, 1.0]


def test_quick_samples_keep_corpus_order_and_full_runs_keep_the_data():
    splits = {s: list(range(k * 100, k * 100 + 10)) for k, s in enumerate(SPLITS)}
    assert sample_splits(splits, dict(train=3, dev=2, test=1), quick=False) == splits
    sampled = sample_splits(splits, dict(train=3, dev=2, test=1), quick=True)
    assert [len(sampled[s]) for s in SPLITS] == [3, 2, 1]
    for s in SPLITS:
        assert sampled[s] == sorted(sampled[s]) and set(sampled[s]) <= set(splits[s])
    assert sampled == sample_splits(splits, dict(train=3, dev=2, test=1), quick=True)  # a fixed sample
    assert split_sizes(sampled) == "3 / 2 / 1"


@pytest.mark.parametrize(("flags", "message"), [
    (dict(l2=-0.5), "--l2 must be non-negative, got -0.5"),
    (dict(lr=0.0), "--lr must be positive, got 0.0"),
    (dict(dropout=1.0), "--dropout must be in [0, 1), got 1.0"),
    (dict(dropout=-0.1, lr=-1.0), "--lr must be positive, got -1.0"),   # the first of two
])
def test_training_flags_out_of_range_are_one_line_errors(flags, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        check_training_flags(ArgumentParser(prog="x.py"), argparse.Namespace(**flags))
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == f"x.py: error: {message} (--help lists the flags)\n"


def test_training_flags_in_range_unset_or_absent_pass():
    parser = ArgumentParser(prog="x.py")
    check_training_flags(parser, argparse.Namespace(l2=0.0, lr=0.5, dropout=0.0))
    check_training_flags(parser, argparse.Namespace(l2=None, lr=None, dropout=None))
    check_training_flags(parser, argparse.Namespace())


def test_an_experiment_knows_its_epochs_names_and_data(tmp_path):
    exp = Experiment.start("toy", namespace(), [], tmp_path, 10)
    assert exp.device == torch.device("cpu") and torch.get_num_threads() == 1
    assert exp.epochs == 10 and exp.run_names("nary")(3) == "nary_s3"
    longer = Experiment.start("toy", namespace(epochs=4), [], tmp_path, 10)
    assert longer.epochs == 4 and longer.run_names("nary")(3) == "nary_ep4_s3"
    quick = Experiment.start("toy", namespace(quick=True), [], tmp_path, 10)
    assert quick.epochs == QUICK_EPOCHS and quick.run_names("nary")(3) == "nary_s3"
    splits = {"train": [0] * 5, "dev": [0] * 2, "test": [0] * 3}
    assert quick.sample(splits, dict(train=1, dev=1, test=1)) == {s: [0] for s in SPLITS}
    assert exp.data_identity(splits, VOCAB) == dict(train=5, dev=2, test=3, vocab=VOCAB.fingerprint, sample="all")
    assert quick.data_identity(splits, VOCAB)["sample"] == "random-0"


def test_an_experiment_trains_its_seeds_with_the_data_identity_in_the_checkpoint(tmp_path, capsys):
    data = [from_ptb("(1 (1 a) (1 film))", VOCAB), from_ptb("(0 (0 the) (1 man))", VOCAB)]
    splits = dict(train=data, dev=data, test=data)
    exp = Experiment.start("toy", namespace(seeds=[1, 2], out=str(tmp_path)), ["--seeds", "1", "2"], tmp_path, 2)
    built = []

    def build(run: SeedRun) -> Trainer:
        embedding = NodeEmbedding(len(VOCAB), 4)
        trainer = run.trainer(TreeClassifier(embedding, NaryTreeLSTM(4, 3), 2), embedding, PRESETS["tai"],
                              exp.epochs, config=dict(extra_setting=1), extra={"note": "kept"})
        built.append(trainer)
        return trainer

    def score(trainer: Trainer, fit) -> Outcome:
        test = trainer.test(splits["test"])
        return Outcome(fit.best_dev, test.as_dict(), f"test root {test.root:.2f}")

    identity = exp.data_identity(splits, VOCAB)
    written = exp.train_seeds({"model": "toy", "epochs": exp.epochs}, exp.run_names("toy"), build, score, splits,
                              identity)
    assert [p.name for p in written] == ["toy_s1.json", "toy_s2.json"]
    record = json.loads(written[0].read_text())
    assert record["experiment"] == "toy" and record["command"] == "python experiments/toy.py --seeds 1 2"
    assert len(record["history"]) == 2
    trainer = built[0]
    assert trainer.batch_size == PRESETS["tai"].batch_size and trainer.epochs == 2 and trainer.desc == "toy_s1"
    state = torch.load(tmp_path / "checkpoints" / "toy" / "toy_s1.pt", weights_only=False)
    assert state["config"] == {"model": "toy", "epochs": 2, "data": identity, "extra_setting": 1, "seed": 1}
    assert state["extra"] == {"note": "kept"}
    assert capsys.readouterr().out.splitlines()[0].startswith("toy_s1: best dev epoch ")
