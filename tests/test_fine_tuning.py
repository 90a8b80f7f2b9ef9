"""The fine-tuning recipe's parts in graphtree.train: AdamW with a warm-up and a linear decay (against the formula
by hand), and checkpoints inside an epoch, from which a stopped run ends exactly as an uninterrupted one."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from graphtree.data import from_ptb
from graphtree.models import NodeEmbedding, TreeClassifier
from graphtree.nn import NaryTreeLSTM
from graphtree.train import OptimizerSpec, PaperOptimizer, Trainer
from graphtree.vocab import Vocab

RECIPE = OptimizerSpec("adamw", 1e-2, "adamw", 1e-3, 0.0, 4, weight_decay=0.01, warmup=0.25, schedule="linear")


def test_the_learning_rate_rises_then_falls_linearly() -> None:
    total = 8  # 2 warm-up updates, then 6 down to 0
    by_hand = [1 / 2, 2 / 2, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6, 0.0]
    assert [RECIPE.lr_factor(k, total) for k in range(1, total + 1)] == pytest.approx(by_hand)
    constant = OptimizerSpec("adamw", 1e-2, "adamw", 1e-3, 0.0, 4, warmup=0.5)
    assert [constant.lr_factor(k, 4) for k in range(1, 5)] == pytest.approx([0.5, 1.0, 1.0, 1.0])


def test_adamw_steps_with_the_scheduled_rates_and_decays_matrices_only() -> None:
    torch.manual_seed(0)
    emb = NodeEmbedding(5, 3)
    model = TreeClassifier(emb, NaryTreeLSTM(3, 2), 2)
    opt = PaperOptimizer.for_model(model, emb, RECIPE)
    opt.plan_updates(8)
    reference = {n: p.detach().clone() for n, p in model.named_parameters()}
    state = {n: (torch.zeros_like(p), torch.zeros_like(p)) for n, p in reference.items()}
    for step in range(1, 4):
        for p in model.parameters():
            p.grad = torch.full_like(p, 0.1 * step)
        opt.step()
        factor = RECIPE.lr_factor(step, 8)
        for name, p in reference.items():  # AdamW by hand (Loshchilov & Hutter 2019, Algorithm 2)
            lr = (RECIPE.embedding_lr if name.startswith("embedding.") else RECIPE.lr) * factor
            decay = RECIPE.weight_decay if p.ndim >= 2 else 0.0
            g = torch.full_like(p, 0.1 * step)
            m, v = state[name]
            m.mul_(0.9).add_(g, alpha=0.1)
            v.mul_(0.999).addcmul_(g, g, value=0.001)
            p.mul_(1 - lr * decay)
            p.sub_(lr * (m / (1 - 0.9 ** step)) / ((v / (1 - 0.999 ** step)).sqrt() + 1e-8))
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.detach(), reference[name], rtol=1e-6, atol=1e-7, msg=name)


def test_a_schedule_without_the_runs_length_is_an_error() -> None:
    emb = NodeEmbedding(5, 3)
    model = TreeClassifier(emb, NaryTreeLSTM(3, 2), 2)
    opt = PaperOptimizer.for_model(model, emb, RECIPE)
    with pytest.raises(ValueError, match="plan_updates"):
        opt.step()
    with pytest.raises(ValueError, match="weight_decay is AdamW's"):
        OptimizerSpec("adam", 1e-3, "adam", 1e-3, 0.0, 4, weight_decay=0.1)


def test_old_records_keep_their_settings() -> None:
    """The fine-tuning fields appear in a run's record only where they are set, so a run recorded before them
    resumes and reports as before."""
    assert set(OptimizerSpec("adam", 1e-3, "adam", 1e-3, 0.0, 25).as_dict()) == {
        "name", "lr", "embedding", "embedding_lr", "l2", "batch_size", "decay"}
    assert RECIPE.as_dict()["schedule"] == "linear" and OptimizerSpec(**RECIPE.as_dict()) == RECIPE


# -- checkpoints inside an epoch ----------------------------------------------------------------------------------

WORDS = ["a", "b", "c", "d", "e", "f"]


def random_trees(count: int, seed: int) -> list:
    rng = random.Random(seed)

    def tree(depth: int) -> str:
        if depth == 0 or rng.random() < 0.3:
            return f"({rng.randrange(3)} {rng.choice(WORDS)})"
        return f"({rng.randrange(3)} {tree(depth - 1)} {tree(depth - 1)})"

    return [tree(4) for _ in range(count)]


class StopError(Exception):
    pass


def make_trainer(checkpoint: Path, stop_at: int | None = None) -> Trainer:
    torch.manual_seed(1)
    vocab = Vocab.build([WORDS])
    emb = NodeEmbedding(len(vocab), 6)
    model = TreeClassifier(emb, NaryTreeLSTM(6, 5), 3, dropout=0.3)  # dropout: the random state must resume too

    def on_step(step: int) -> None:
        if step == stop_at:
            raise StopError

    return Trainer(model, PaperOptimizer.for_model(model, emb, RECIPE), epochs=2, batch_size=4, seed=3,
                   checkpoint=checkpoint, progress=False, verbose=False, checkpoint_every=1e-9, on_step=on_step)


def test_a_run_stopped_inside_an_epoch_resumes_where_it_stopped(tmp_path: Path) -> None:
    vocab = Vocab.build([WORDS])
    train = [from_ptb(t, vocab) for t in random_trees(22, 0)]  # 6 minibatches an epoch, the last one short
    dev = [from_ptb(t, vocab) for t in random_trees(6, 1)]
    whole = make_trainer(tmp_path / "whole.pt")
    uninterrupted = whole.fit(train, dev)

    for stop in (3, 8):  # inside the first epoch, then inside the second after resuming
        with pytest.raises(StopError):
            make_trainer(tmp_path / "stopped.pt", stop_at=stop).fit(train, dev)
        state = torch.load(tmp_path / "stopped.pt", weights_only=False)
        assert state["in_epoch"]["minibatches"] == (stop - 1) % 6 + 1 and not state["finished"]
    resumed_trainer = make_trainer(tmp_path / "stopped.pt")
    resumed = resumed_trainer.fit(train, dev)

    assert resumed.resumed_at == 1
    for mine, theirs in zip(resumed.history, uninterrupted.history):
        assert mine["train_loss"] == pytest.approx(theirs["train_loss"], rel=1e-12)
        assert (mine["dev_root"], mine["dev_phrase"]) == (theirs["dev_root"], theirs["dev_phrase"])
    for (name, mine), theirs in zip(resumed_trainer.model.state_dict().items(), whole.model.state_dict().values()):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=0, msg=name)
    assert torch.load(tmp_path / "stopped.pt", weights_only=False)["in_epoch"] is None  # the epoch's end replaced it


def test_checkpoint_every_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="checkpoint_every"):
        emb = NodeEmbedding(3, 2)
        model = TreeClassifier(emb, NaryTreeLSTM(2, 2), 2)
        Trainer(model, PaperOptimizer.for_model(model, emb, RECIPE), epochs=1, batch_size=2, seed=0,
                checkpoint_every=0)
