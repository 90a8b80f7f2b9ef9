"""Height-grouped minibatches (``Trainer(group_by_height=W)``, :func:`height_grouped_order`).

References independent of the code under test: hand-made sets of trees of known heights (chains), a plain
Python statement of the construction, and the plain order (:func:`epoch_order`), which must be unchanged when
the option is off.
"""

from __future__ import annotations

import random

import pytest
import torch
from torch_geometric.data import Data

from graphtree.data import from_ptb
from graphtree.models import NodeEmbedding, TreeClassifier
from graphtree.nn import ChildSumTreeLSTM
from graphtree.train import PRESETS, PaperOptimizer, Trainer
from graphtree.train.ordering import epoch_order, height_grouped_order, tree_levels


def chain_ptb(levels: int, label: int) -> str:
    """A tree of ``levels`` levels: a left-branching chain of binary nodes over ``levels`` words."""
    text = f"({label} w0)"
    for k in range(1, levels):
        text = f"({label} {text} ({label} w{k % 6}))"
    return text


VOCAB = {f"w{k}": k for k in range(6)}


def chains(levels: list[int]) -> list[Data]:
    return [from_ptb(chain_ptb(n, k % 3), VOCAB) for k, n in enumerate(levels)]


def batches_of(order: list[int], batch_size: int) -> list[list[int]]:
    return [order[k:k + batch_size] for k in range(0, len(order), batch_size)]


def reference_order(levels: list[int], batch_size: int, window: int, seed: int, epoch: int) -> list[int]:
    """The construction of the docstring in plain Python, on the same seeded draws (permutation, batch shuffle)."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    order = torch.randperm(len(levels), generator=generator).tolist()
    span = window * batch_size
    windows = [sorted(order[k:k + span], key=lambda i: levels[i]) for k in range(0, len(order), span)]
    short: list[int] = []
    if windows and len(windows[-1]) % batch_size:
        cut = len(windows[-1]) % batch_size
        short, windows[-1] = windows[-1][:cut], windows[-1][cut:]
    full = batches_of([i for w in windows for i in w], batch_size)
    shuffle = torch.randperm(len(full), generator=generator).tolist()
    return [i for k in shuffle for i in full[k]] + short


def test_tree_levels_of_known_heights() -> None:
    for n in (1, 2, 5):
        (tree,) = chains([n])
        assert tree_levels(tree) == n
        del tree.height  # computed from the edges instead
        assert tree_levels(tree) == n
    assert tree_levels(Data(edge_index=torch.zeros(2, 0, dtype=torch.long), num_nodes=0)) == 0


def test_hand_checked_case_every_minibatch_one_height() -> None:
    # 8 trees, heights 1 1 2 2 3 3 4 4 scattered; minibatches of 2 and one window over all of them: sorted, each
    # minibatch holds two trees of one height, so the epoch runs 1 + 2 + 3 + 4 = 10 levels.
    levels = [4, 1, 3, 2, 1, 4, 2, 3]
    for seed in range(5):
        order = height_grouped_order(levels, 2, 4, seed, 0).tolist()
        assert sorted(order) == list(range(8))
        heights = [sorted(levels[i] for i in b) for b in batches_of(order, 2)]
        assert all(a == b for a, b in heights)
        assert sorted(a for a, _ in heights) == [1, 2, 3, 4]
    # The plain order of seed 0 runs more: its cut mixes heights (fact of this seed, checked by hand once).
    plain = batches_of(epoch_order(8, 0, 0).tolist(), 2)
    assert sum(max(levels[i] for i in b) for b in plain) > 10


@pytest.mark.parametrize(("n", "batch_size", "window"), [(1, 4, 2), (7, 3, 1), (23, 5, 2), (40, 6, 3), (64, 8, 100)])
def test_each_epoch_is_a_permutation_cut_as_the_construction_says(n: int, batch_size: int, window: int) -> None:
    rng = random.Random(n)
    levels = [rng.randint(1, 12) for _ in range(n)]
    for seed, epoch in [(0, 0), (3, 1), (7, 5)]:
        order = height_grouped_order(levels, batch_size, window, seed, epoch).tolist()
        assert sorted(order) == list(range(n))
        assert order == reference_order(levels, batch_size, window, seed, epoch)


def test_the_same_windows_as_the_plain_order_and_never_more_levels() -> None:
    rng = random.Random(1)
    levels = [rng.randint(1, 25) for _ in range(203)]
    batch_size, window = 7, 4
    for seed in range(6):
        for epoch in range(3):
            plain = epoch_order(len(levels), seed, epoch).tolist()
            grouped = height_grouped_order(levels, batch_size, window, seed, epoch).tolist()
            span = window * batch_size
            grouped_batches = batches_of(grouped, batch_size)
            # Every plain window's trees are cut into minibatches of their own (the short one included).
            plain_windows = [frozenset(plain[k:k + span]) for k in range(0, len(plain), span)]
            for b in grouped_batches:
                assert sum(set(b) <= w for w in plain_windows) == 1
            plain_levels = sum(max(levels[i] for i in b) for b in batches_of(plain, batch_size))
            grouped_levels = sum(max(levels[i] for i in b) for b in grouped_batches)
            assert grouped_levels <= plain_levels
            spread = sum(max(levels[i] for i in b) - min(levels[i] for i in b) for b in grouped_batches)
            plain_spread = sum(max(levels[i] for i in b) - min(levels[i] for i in b)
                               for b in batches_of(plain, batch_size))
            assert spread < plain_spread / 2


def test_deterministic_per_seed_and_epoch() -> None:
    levels = list(range(1, 31)) * 2
    a = height_grouped_order(levels, 4, 3, 5, 2)
    assert torch.equal(a, height_grouped_order(levels, 4, 3, 5, 2))
    assert not torch.equal(a, height_grouped_order(levels, 4, 3, 6, 2))
    assert not torch.equal(a, height_grouped_order(levels, 4, 3, 5, 3))


def test_bad_windows_are_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        height_grouped_order([1, 2], 2, 0, 0, 0)
    model = torch.nn.Linear(1, 1)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="group_by_height"):
            Trainer(model, None, epochs=1, batch_size=2, seed=0, group_by_height=bad)  # type: ignore[arg-type]


def _trainer(group_by_height: int | None, epochs: int = 2, checkpoint=None) -> Trainer:
    torch.manual_seed(0)
    emb = NodeEmbedding(6, 4)
    model = TreeClassifier(emb, ChildSumTreeLSTM(4, 3), 3, dropout=0.5)
    return Trainer(model, PaperOptimizer.for_model(model, emb, PRESETS["tai"]), epochs=epochs, batch_size=4,
                   seed=3, progress=False, verbose=False, group_by_height=group_by_height, checkpoint=checkpoint)


def _recording(trainer: Trainer) -> list[list[int]]:
    """The orders ``trainer`` cuts its epochs' minibatches from, as it cuts them."""
    seen: list[list[int]] = []
    cut = trainer._minibatches

    def spy(train, order):
        seen.append(list(order))
        return cut(train, order)

    trainer._minibatches = spy
    return seen


TRAIN = chains([1, 6, 2, 5, 3, 1, 6, 2, 4, 4, 3, 5, 2, 6, 1, 3, 5, 2, 4])  # 19: a short last minibatch of 3


def test_off_the_trainer_visits_the_plain_order_exactly() -> None:
    trainer = _trainer(None)
    seen = _recording(trainer)
    trainer.fit(TRAIN, TRAIN[:4])
    assert seen == [epoch_order(len(TRAIN), 3, e).tolist() for e in range(2)]


def test_on_the_trainer_visits_the_grouped_order() -> None:
    trainer = _trainer(2)
    seen = _recording(trainer)
    trainer.fit(TRAIN, TRAIN[:4])
    levels = [tree_levels(t) for t in TRAIN]
    assert seen == [reference_order(levels, 4, 2, 3, e) for e in range(2)]


def test_resumed_run_cuts_the_same_remaining_minibatches_and_ends_the_same(tmp_path) -> None:
    whole = _trainer(2, epochs=3)
    seen = _recording(whole)
    whole.fit(TRAIN, TRAIN[:4])
    first = _trainer(2, epochs=1, checkpoint=tmp_path / "run.pt")  # stops after epoch 1, as a killed run would
    first.fit(TRAIN, TRAIN[:4])
    resumed = _trainer(2, epochs=3, checkpoint=tmp_path / "run.pt")
    seen_resumed = _recording(resumed)
    fit = resumed.fit(TRAIN, TRAIN[:4])
    assert fit.resumed_at == 1 and seen_resumed == seen[1:]
    # Mid-epoch: a fresh trainer's epoch, from any step on, is the rest of the uninterrupted one.
    assert resumed.epoch_indices(TRAIN, 1)[2 * 4:] == seen[1][2 * 4:]
    for name, value in whole.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[name], value), name


def test_runs_with_grouping_are_named_and_recorded_apart() -> None:
    from lab.seeds import SeedRun, grouped_name

    assert grouped_name("childsum_random_fine_s3", 3, None) == "childsum_random_fine_s3"
    assert grouped_name("childsum_random_fine_s3", 3, 16) == "childsum_random_fine_hg16_s3"
    assert grouped_name("odd", 3, 4) == "odd_hg4"
    plain = SeedRun(1, "r", None, None, {}, False, torch.device("cpu"))
    assert "group_by_height" not in plain.trainer_options()  # the plain run's trainer, exactly as before
    assert SeedRun(1, "r", None, None, {}, False, torch.device("cpu"), "auto", 16).trainer_options()[
        "group_by_height"] == 16


@pytest.mark.slow
def test_the_sst_script_trains_on_grouped_minibatches_and_records_it(tmp_path) -> None:
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "experiments/sst.py", "--model", "childsum", "--quick", "--epochs", "1",
                    "--threads", "1", "--no-progress", "--group-by-height", "16", "--out", str(tmp_path)],
                   cwd=repo, check=True, timeout=900, env={**os.environ, "OMP_NUM_THREADS": "1"},
                   stdout=subprocess.DEVNULL)
    (result,) = (tmp_path / "quick" / "sst").glob("*.json")
    assert result.name == "childsum_random_fine_hg16_s1.json"
    assert json.loads(result.read_text())["config"]["group_by_height"] == 16
