"""The replayed trainer (graphtree.train.replaying) equals the plain trainer, for every model and task.

``replay="on"`` on the CPU runs the padded step eagerly (the step a GPU replays as a CUDA graph) and evaluates
dev and test by the padded forward pass; ``replay="off"`` is the plain level loop with the paper's ordinary
optimizers (fused AdaGrad/Adam, sparse embedding gradients). Both train float64 copies of one model for two
epochs on the same minibatches, and must agree on every epoch's training loss, every dev metric, the test
metrics and every parameter.

Tolerance: relative 1e-9 (absolute 1e-11 on parameters). The two paths compute the same mathematics in another
order: the padded pass sums over replicas' zero rows, the weighted loss sums a per-row vector where the plain one
sums the labelled rows, the capturable optimizers run unfused (``foreach``) where the plain ones are fused, and
the embeddings take a dense gradient where the plain ones take a sparse one. Those are roundings of float64
(1e-16 relative), grown by a few dozen steps of AdaGrad or Adam to well under 1e-12; a padded batch that counted
a replica, or outputs put back in the wrong node order, differ by whole units of the loss or the metrics.
Dropout is 0: the two paths draw their masks over other rows (ReplayedStep's own test covers dropout).
"""

from __future__ import annotations

import copy
import random
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from lab.own_data import NodeInputs, Task, TaskTrainer, build_model, model_settings
from lab.own_data.models import Structure
from lab.sst_models import sst_model
from torch_geometric.data import Data
from trees import random_ptb

from graphtree.data import from_ptb
from graphtree.datasets.sick import make_pair, sick_target
from graphtree.models import NodeEmbedding
from graphtree.models.similarity import PairSimilarity, TreeEncoder, similarity_loss
from graphtree.nn import ChildSumTreeLSTM, NaryTreeLSTM
from graphtree.train import PRESETS, PaperOptimizer, Trainer
from graphtree.train.pairs import PairTrainer

VOCAB, DIM, HIDDEN = 40, 6, 5
RTOL = 1e-9
TOP_DOWN = ("topdown", "bicontree")  # their passes read host counts: they train eagerly, and say so


def _sentences(count: int, seed: int, max_arity: int = 2, graph_y: str | None = None) -> list[Data]:
    rng = random.Random(seed)
    generator = torch.Generator().manual_seed(seed)
    trees = []
    for _ in range(count):
        tree = from_ptb(random_ptb(rng.randint(1, 9), max_arity, rng))
        tree.word = torch.where(tree.word_pos >= 0, torch.randint(0, VOCAB, (tree.num_nodes,), generator=generator),
                                -1)
        if graph_y == "class":
            tree.graph_y = torch.randint(0, 3, (1,), generator=generator)
        elif graph_y == "regression":
            tree.graph_y = torch.rand(1, generator=generator, dtype=torch.float64) * 4
        trees.append(tree)
    return trees


def _train_both(make, spec, kind=Trainer, train=None, dev=None, epochs=2, batch_size=4, device="cpu", **options):
    """Fit one float64 model plainly and a copy of it replayed (on the CPU: the padded step, eagerly; on a GPU:
    captured graphs); both fits and trainers, and the replayed one's warnings."""
    torch.manual_seed(0)
    model, embedding = make()
    model.double().to(device)
    twin = copy.deepcopy(model)
    twin_embedding = next((m for m in twin.modules() if isinstance(m, NodeEmbedding)), None)
    out = []
    for replay, net, emb in (("off", model, embedding), ("on", twin, twin_embedding)):
        optimizer = PaperOptimizer.for_model(net, emb, replace(spec, batch_size=batch_size),
                                             capturable=replay == "on")
        trainer = kind(net, optimizer, epochs=epochs, batch_size=batch_size, seed=3, progress=False, verbose=False,
                       replay=replay, **options)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fit = trainer.fit(train, dev)
        out.append((trainer, fit, [str(w.message) for w in caught]))
    return out


def _close(a, b, what: str) -> None:
    if isinstance(a, float) and isinstance(b, float):
        assert a == pytest.approx(b, rel=RTOL, abs=1e-11, nan_ok=True), what
    else:
        assert a == b, what


def _same_fits(plain, replayed, columns) -> None:
    (_, fit_a, _), (_, fit_b, _) = plain, replayed
    assert fit_a.best_epoch == fit_b.best_epoch
    for row_a, row_b in zip(fit_a.history, fit_b.history, strict=True):
        for column in ("train_loss", *columns):
            _close(row_a[column], row_b[column], f"epoch {row_a['epoch']} {column}")
    for (name, p), q in zip(plain[0].model.named_parameters(), replayed[0].model.parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=RTOL, atol=1e-11, msg=name)


def _path_taken(trainer, model_name: str) -> dict:
    record = trainer.replay_path.record()
    if model_name in TOP_DOWN and record["path"] == "eager":
        assert "top_down" in record["fallback"] or "top-down" in record["fallback"], record
        assert record["steps"]["eager"] > 0
    else:
        assert record["path"] == "padded" and record["fallback"] is None, record
        assert record["steps"]["padded"] > 0 and record["steps"]["eager"] == 0, record
        assert record["evaluation"]["path"] == "padded" and record["evaluation"]["passes"]["padded"] > 0, record
    return record


# -- SST: node labels, every model ---------------------------------------------------------------------------------

SST_MODELS = ("nary", "childsum", "slstm", "lstmrnn", "contree", "contree_lex", "topdown", "bicontree")


@pytest.mark.parametrize("name", SST_MODELS)
def test_replayed_sst_training_equals_the_plain_one(name):
    teng = name in ("contree", "contree_lex", "topdown", "bicontree")
    cfg = dict(model=name, dim=DIM, hidden=DIM if name == "lstmrnn" else HIDDEN, dropout=0.0, head="gated",
               activation="tanh")
    spec = PRESETS["teng" if teng else "zhu" if name == "slstm" else "le_zuidema" if name == "lstmrnn" else "tai"]
    train, dev = _sentences(18, seed=1), _sentences(7, seed=2)
    plain, replayed = _train_both(lambda: sst_model(cfg, VOCAB, 5, None, mlp_channels=4), spec, train=train,
                                  dev=dev)
    _same_fits(plain, replayed, ("dev_root", "dev_phrase"))
    test = _sentences(9, seed=4)
    want, got = plain[0].test(test).as_dict(), replayed[0].test(test).as_dict()
    assert got == want
    record = _path_taken(replayed[0], name)
    assert plain[0].replay_path.record()["path"] == "eager" and plain[0].replay_path.fallback is None
    if record["path"] == "padded":
        assert all("capture_seconds" in row for row in replayed[1].history)


# -- TREC: a label at the root only, a per-node output layer over root states ------------------------------------

@pytest.mark.parametrize("name", ["childsum", "contree", "bicontree"])
def test_replayed_trec_training_equals_the_plain_one(name, monkeypatch):
    from lab.scripts import load_script

    from graphtree.train import restrict_supervision

    trec = load_script(Path(__file__).resolve().parent.parent / "experiments" / "trec.py")
    monkeypatch.setattr(trec, "DROPOUT", 0.0)
    train = [restrict_supervision(t, "root") for t in _sentences(16, seed=5)]
    dev = _sentences(6, seed=6)
    for tree in train + dev:
        tree.y = torch.where(tree.is_root, tree.y % 3, torch.full_like(tree.y, -1))
    plain, replayed = _train_both(lambda: trec.build_model(name, VOCAB, DIM, 3, None), PRESETS["teng"],
                                  train=train, dev=dev)
    _same_fits(plain, replayed, ("dev_root",))
    _path_taken(replayed[0], name)


# -- SICK: pairs, both sides in one padded batch, a rating distribution per pair -------------------------------

def _pairs(count: int, seed: int) -> list[Data]:
    trees = _sentences(2 * count, seed, max_arity=3)
    rng = random.Random(seed)
    pairs = []
    for k in range(count):
        score = torch.tensor([1 + 4 * rng.random()])
        pairs.append(make_pair(trees[2 * k], trees[2 * k + 1], score=score, target=sick_target(score),
                               pair_id=torch.tensor([k])))
    return pairs


@pytest.mark.parametrize("cell", ["childsum", "nary"])
def test_replayed_pair_training_equals_the_plain_one(cell):
    def make():
        embedding = NodeEmbedding(VOCAB, DIM)
        tree_cell = ChildSumTreeLSTM(DIM, HIDDEN) if cell == "childsum" else NaryTreeLSTM(DIM, HIDDEN, n_ary=3)
        return PairSimilarity(TreeEncoder(embedding, tree_cell), 4, 5), embedding

    plain, replayed = _train_both(make, PRESETS["tai"], kind=PairTrainer, train=_pairs(14, 7), dev=_pairs(6, 8),
                                  loss_fn=similarity_loss)
    _same_fits(plain, replayed, ("dev_pearson", "dev_spearman", "dev_mse"))
    test = _pairs(7, 9)
    want, got = plain[0].evaluate(test), replayed[0].evaluate(test)
    for key in ("pearson", "spearman", "mse"):
        _close(got[0][key], want[0][key], key)
    torch.testing.assert_close(torch.tensor(got[1]), torch.tensor(want[1]), rtol=RTOL, atol=1e-12)
    _path_taken(replayed[0], cell)


# -- train.py: graph classes, graph numbers, node classes ---------------------------------------------------------

TASKS = {"graph-class": Task("graph", "class", 3), "graph-regression": Task("graph", "regression"),
         "node-class": Task("node", "class", 5)}


# Every task on Child-Sum and N-ary; the binary cells (and top-down ones) on graph classes.
TASK_CASES = [(t, m) for t in TASKS for m in ("childsum", "nary")] + [
    ("graph-class", m) for m in ("slstm", "lstmrnn", "contree", "topdown", "bicontree")]


@pytest.mark.parametrize(("task_name", "model"), TASK_CASES, ids=[f"{t}-{m}" for t, m in TASK_CASES])
def test_replayed_task_training_equals_the_plain_one(task_name, model):
    task = TASKS[task_name]
    graph_y = task.kind if task.level == "graph" else None
    train, dev = _sentences(17, seed=10, graph_y=graph_y), _sentences(6, seed=11, graph_y=graph_y)
    if task.level == "graph":  # a graph without a label: the loss and the metrics must skip it
        train[3].graph_y = torch.tensor([-1]) if task.kind == "class" else torch.tensor([float("nan")],
                                                                                          dtype=torch.float64)
    settings = model_settings(model, Structure(2, None, None, None), DIM, HIDDEN)

    def make():
        embedding = NodeEmbedding(VOCAB, DIM)
        return build_model(settings, task, NodeInputs(embedding, 0), 0.0), embedding

    plain, replayed = _train_both(make, PRESETS["teng"], kind=TaskTrainer, train=train, dev=dev, task=task)
    columns = ("dev_accuracy",) if task.kind == "class" else ("dev_mse", "dev_pearson")
    _same_fits(plain, replayed, columns)
    test = _sentences(8, seed=12, graph_y=graph_y)
    (want, _), (got, _) = plain[0].evaluate(test), replayed[0].evaluate(test)
    for key, value in want.items():
        _close(got[key], value, key)
    _path_taken(replayed[0], model)


# -- a resumed replayed run ----------------------------------------------------------------------------------------

def test_a_resumed_replayed_run_ends_as_an_uninterrupted_one(tmp_path):
    """The capturable update's state (CapturableAdagrad's sums, SGD's embeddings) comes back from the checkpoint."""
    cfg = dict(model="nary", dim=DIM, hidden=HIDDEN, dropout=0.0)
    train, dev = _sentences(14, seed=20), _sentences(5, seed=21)
    finals = []
    for stops in ([3], [1, 3]):  # one fit of 3 epochs; a fit of 1, then the same run resumed to 3
        torch.manual_seed(0)
        model, embedding = sst_model(cfg, VOCAB, 5, None, mlp_channels=4)
        model.double()
        for epochs in stops:
            optimizer = PaperOptimizer.for_model(model, embedding, replace(PRESETS["tai"], batch_size=4),
                                                 capturable=True)
            trainer = Trainer(model, optimizer, epochs=epochs, batch_size=4, seed=3, progress=False, verbose=False,
                              replay="on", checkpoint=tmp_path / f"run{len(stops)}.pt", config={"run": "resume"})
            fit = trainer.fit(train, dev)
        assert trainer.replay_path.record()["path"] == "padded"
        finals.append(([h["train_loss"] for h in fit.history], {k: v.clone() for k, v in model.state_dict().items()}))
    (losses, weights), (resumed_losses, resumed_weights) = finals
    assert losses == resumed_losses
    for name, value in weights.items():
        assert torch.equal(resumed_weights[name], value), name


# -- what falls back, and says so ---------------------------------------------------------------------------------

def test_what_cannot_replay_trains_plainly_and_says_why():
    from graphtree.models.spans import SpanLSTMClassifier
    from graphtree.train.replaying import replay_requested

    assert replay_requested("auto", "cpu") is False and replay_requested("on", "cpu") is True
    assert replay_requested("auto", "cuda") is True and replay_requested("off", "cuda") is False
    with pytest.raises(ValueError, match="auto, on, off"):
        Trainer(torch.nn.Linear(1, 1), None, epochs=1, batch_size=1, seed=0, replay="always")
    data = _sentences(6, seed=13)
    for model, why, spec, capturable in (
            (SpanLSTMClassifier(NodeEmbedding(VOCAB, DIM), HIDDEN, 5), "sequence LSTM", PRESETS["tai"], True),
            (sst_model(dict(model="nary", dim=DIM, hidden=HIDDEN, dropout=0.0), VOCAB, 5, None, mlp_channels=4)[0],
             "not built capturable", PRESETS["tai"], False),
            (sst_model(dict(model="contree", dim=DIM, hidden=HIDDEN, dropout=0.0, head="gated"), VOCAB, 5, None,
                       mlp_channels=4)[0], "lazy Adam", PRESETS["teng_code"], False)):
        emb = next(m for m in model.modules() if isinstance(m, NodeEmbedding))
        optimizer = PaperOptimizer.for_model(model, emb, spec, capturable=capturable)
        trainer = Trainer(model, optimizer, epochs=1, batch_size=3, seed=0, progress=False, verbose=False,
                          replay="on")
        trainer.fit(data, data)
        record = trainer.replay_path.record()
        assert record["path"] == "eager" and why in record["fallback"], record
    with pytest.raises(ValueError, match="sparse_adam"):
        PaperOptimizer.for_model(model, emb, PRESETS["teng_code"], capturable=True)


# -- the scripts: --replay, and the results file says which path ran -----------------------------------------

@pytest.mark.parametrize(("data", "model", "seed"), [("example.jsonl", "childsum", "0"), ("example.ptb", "nary", "1")],
                         ids=["graph-classes", "node-classes"])
def test_a_script_replays_with_replay_on_and_records_the_path(data, model, seed, tmp_path, capsys):
    import json

    from lab.runs import main_guard
    from lab.scripts import load_script

    repo = Path(__file__).resolve().parent.parent
    train = load_script(repo / "experiments" / "train.py")
    records = {}
    for replay in ("off", "on"):
        out = tmp_path / replay
        argv = ["--data", str(repo / "tests" / "data" / data), "--model", model, "--split", "0.6", "0.2", "0.2",
                "--split-seed", seed, "--epochs", "2", "--dim", "8", "--hidden", "8", "--no-progress",
                "--replay", replay, "--out", str(out), "--data-root", str(out / "data")]
        main_guard(lambda argv=argv: train.main(argv), "train.py")
        capsys.readouterr()
        (path,) = (out / "train").glob("*.json")
        records[replay] = json.loads(path.read_text())
    off, on = records["off"], records["on"]
    assert off["replay"] == {"mode": "off", "path": "eager", "fallback": None}
    assert on["replay"]["mode"] == "on" and on["replay"]["path"] == "padded", on["replay"]
    assert on["replay"]["evaluation"]["path"] == "padded"
    assert all("capture_seconds" in row for row in on["history"])
    assert on["config"] == off["config"]  # the same run: a finished one is not trained again under the other path
    # float32, in another order: the same predictions, losses to rounding.
    assert on["test"] == off["test"] and on["dev"] == off["dev"]
    for a, b in zip(on["history"], off["history"], strict=True):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5)


# -- on a GPU: captured graphs ------------------------------------------------------------------------------------

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")


@cuda
@pytest.mark.parametrize("case", ["sst-nary", "sst-childsum", "graph-class", "pairs"])
def test_the_replayed_trainer_equals_the_plain_one_on_a_gpu(case):
    """Steps and evaluation passes replayed from captured graphs (float64 on the GPU both; scatter sums in
    another order are the only other difference: the same tolerance)."""
    if case.startswith("sst"):
        cfg = dict(model=case[4:], dim=DIM, hidden=HIDDEN, dropout=0.0)
        plain, replayed = _train_both(lambda: sst_model(cfg, VOCAB, 5, None, mlp_channels=4), PRESETS["tai"],
                                      train=_sentences(30, seed=1), dev=_sentences(9, seed=2), device="cuda")
        _same_fits(plain, replayed, ("dev_root", "dev_phrase"))
    elif case == "graph-class":
        task = TASKS["graph-class"]
        settings = model_settings("childsum", Structure(2, None, None, None), DIM, HIDDEN)

        def make():
            embedding = NodeEmbedding(VOCAB, DIM)
            return build_model(settings, task, NodeInputs(embedding, 0), 0.0), embedding

        plain, replayed = _train_both(make, PRESETS["teng"], kind=TaskTrainer, device="cuda", task=task,
                                      train=_sentences(30, 10, graph_y="class"), dev=_sentences(9, 11, graph_y="class"))
        _same_fits(plain, replayed, ("dev_accuracy",))
    else:
        def make():
            embedding = NodeEmbedding(VOCAB, DIM)
            return PairSimilarity(TreeEncoder(embedding, ChildSumTreeLSTM(DIM, HIDDEN)), 4, 5), embedding

        plain, replayed = _train_both(make, PRESETS["tai"], kind=PairTrainer, train=_pairs(24, 7), dev=_pairs(8, 8),
                                      device="cuda", loss_fn=similarity_loss)
        _same_fits(plain, replayed, ("dev_pearson", "dev_spearman", "dev_mse"))
    record = replayed[0].replay_path.record()
    assert record["path"] == "replayed" and record["steps"]["replayed"] > 0 and record["captures"] > 0, record
    assert record["evaluation"]["path"] == "replayed" and record["evaluation"]["passes"]["replayed"] > 0, record
    assert sum(row["capture_seconds"] for row in replayed[1].history) > 0
