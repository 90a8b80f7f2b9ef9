"""graphtree.train: metrics, the papers' optimizer updates, label/structure variants, and kill -9 resume."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import Tensor
from torch_geometric.data import Batch

from graphtree.data import NO_LABEL, from_ptb
from graphtree.train import (
    PRESETS,
    OptimizerSpec,
    PaperOptimizer,
    Tally,
    Trainer,
    atomic_save,
    recursive_tree,
    restrict_supervision,
)
from graphtree.train.metrics import span_lengths
from graphtree.train.ordering import epoch_order

HERE = Path(__file__).resolve().parent
VOCAB = {w: k for k, w in enumerate("a b c d e f".split())}


def _logits_for(pred: list[int], classes: int = 5) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(pred), classes).float()


# -- metrics -------------------------------------------------------------------------------------------------------

def test_tally_counts_by_hand() -> None:
    # Tree 1 (pre-order): 0 root(3) -> [1 (2 a), 2 (4 -> [3 (1 b), 4 (2 c)])]; 3 words.
    # Tree 2: 0 root(1) -> [1 (1 d), 2 (0 e)]; 2 words, and node 2 unlabelled (as a binary-task neutral).
    t1 = from_ptb("(3 (2 a) (4 (1 b) (2 c)))", VOCAB)
    t2 = from_ptb("(1 (1 d) (0 e))", VOCAB)
    t2.y[2] = NO_LABEL
    batch = Batch.from_data_list([t1, t2])
    # Predictions: tree 1 gets root right, (2 a) wrong, (4 ..) right, (1 b) right, (2 c) wrong;
    # tree 2 gets root wrong, (1 d) right, the unlabelled node "wrong" (must not count).
    logits = _logits_for([3, 0, 4, 1, 0, 0, 1, 3])
    tally = Tally()
    tally.add(logits, batch, breakdown=True)
    assert (tally.root_correct, tally.root_total) == (1, 2)
    assert (tally.phrase_correct, tally.phrase_total) == (4, 7)
    assert tally.root == 50.0 and math.isclose(tally.phrase, 400 / 7)
    # Sentence lengths 3 (right) and 2 (wrong).
    assert dict(tally.by_length) == {3: [1, 1], 2: [0, 1]}
    # Heights: leaves 0 -> a x, b ok, c x, d ok (e unlabelled); (4 b c) height 1 ok;
    # roots: t1 height 2 ok, t2 height 1 x.
    assert dict(tally.by_height) == {0: [2, 4], 1: [1, 2], 2: [1, 1]}
    # Spans: one-word nodes as above; (4 b c) and t2's root span 2; t1's root spans 3.
    assert dict(tally.by_span) == {1: [2, 4], 2: [1, 2], 3: [1, 1]}
    out = tally.as_dict()
    assert out["by_length"] == {"2": [0, 1], "3": [1, 1]}


def test_span_lengths_on_a_deep_tree() -> None:
    data = from_ptb("(0 (0 (0 (0 a) (0 b)) (0 c)) (0 (0 d) (0 (0 e) (0 f))))")
    # pre-order: 0 root(6), 1 (a b c)=3, 2 (a b)=2, 3 a, 4 b, 5 c, 6 (d e f)=3, 7 d, 8 (e f)=2, 9 e, 10 f
    assert span_lengths(data).tolist() == [6, 3, 2, 1, 1, 1, 3, 1, 2, 1, 1]


# -- supervision and structure -------------------------------------------------------------------------------------

def test_restrict_supervision() -> None:
    data = from_ptb("(3 (2 a) (4 (1 b) (2 c)))", VOCAB)
    assert restrict_supervision(data, "all").y.tolist() == [3, 2, 4, 1, 2]
    assert restrict_supervision(data, "root").y.tolist() == [3, -1, -1, -1, -1]
    assert restrict_supervision(data, "root+leaf").y.tolist() == [3, 2, -1, 1, 2]
    assert data.y.tolist() == [3, 2, 4, 1, 2]  # the input is left alone
    with pytest.raises(ValueError, match="supervision"):
        restrict_supervision(data, "leaves")


def _shape(data, node: int = 0) -> str:
    """The tree as nested brackets of words, built from the edges alone."""
    child, parent = data.edge_index
    kids = sorted(child[parent == node].tolist(), key=lambda c: int(data.child_pos[c]))
    if not kids:
        return data.tokens[int(data.word_pos[node])]
    return "(" + " ".join(_shape(data, c) for c in kids) + ")"


@pytest.mark.parametrize(("direction", "shape", "labels"), [
    ("left", "(((a b) c) d)", {"a": 2, "b": 1, "c": 2, "d": 0}),
    ("right", "(a (b (c d)))", {"a": 2, "b": 1, "c": 2, "d": 0}),
])
def test_recursive_tree(direction: str, shape: str, labels: dict) -> None:
    data = from_ptb("(3 (2 a) (4 (4 (1 b) (2 c)) (0 d)))", VOCAB)
    out = recursive_tree(data, direction, VOCAB)
    assert _shape(out) == shape
    assert out.tokens == ["a", "b", "c", "d"]
    assert out.word.tolist() == [VOCAB[out.tokens[p]] if p >= 0 else -1 for p in out.word_pos.tolist()]
    for node in range(out.num_nodes):
        if bool(out.is_root[node]):
            assert int(out.y[node]) == 3
        elif int(out.word_pos[node]) >= 0:
            assert int(out.y[node]) == labels[out.tokens[int(out.word_pos[node])]]
        else:
            assert int(out.y[node]) == NO_LABEL
    assert int(out.height.max()) == 3


# -- optimizers ----------------------------------------------------------------------------------------------------

def test_tai_update_by_hand() -> None:
    # Two AdaGrad steps on w with per-minibatch L2, and plain SGD (lr 0.1, no L2) on the embedding.
    w = torch.nn.Parameter(torch.tensor([0.5, -2.0]))
    e = torch.nn.Parameter(torch.tensor([1.0, 3.0]))
    opt = PaperOptimizer([w], [e], PRESETS["tai"])
    if torch.torch_version.TorchVersion(torch.__version__) >= "2.4":  # older PyTorch has no fused AdaGrad
        assert opt.model_optimizer.defaults["fused"]  # the by-hand values below check the fused update
    lr, lam, acc = 0.05, 1e-4, [0.0, 0.0]
    w_ref, e_ref = [0.5, -2.0], [1.0, 3.0]
    for step, (gw, ge) in enumerate([([1.0, 0.25], [0.5, -1.0]), ([-0.5, 2.0], [2.0, 0.0])]):
        opt.zero_grad()
        w.grad, e.grad = torch.tensor(gw), torch.tensor(ge)
        opt.step()
        for k in range(2):
            g = gw[k] + lam * w_ref[k]
            acc[k] += g * g
            w_ref[k] -= lr * g / (math.sqrt(acc[k]) + 1e-10)
            e_ref[k] -= 0.1 * ge[k]
        assert torch.allclose(w.detach(), torch.tensor(w_ref), atol=1e-7, rtol=0), step
        assert torch.allclose(e.detach(), torch.tensor(e_ref), atol=1e-7, rtol=0), step


def test_teng_update_is_adam_with_dynet_defaults() -> None:
    w = torch.nn.Parameter(torch.tensor([0.3]))
    opt = PaperOptimizer([w], [], PRESETS["teng"])
    m = v = 0.0
    ref = 0.3
    for t, g in enumerate([0.2, -0.7, 1.5], start=1):
        opt.zero_grad()
        w.grad = torch.tensor([g])
        opt.step()
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        ref -= 1e-3 * (m / (1 - 0.9 ** t)) / (math.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
        assert math.isclose(float(w.detach()), ref, abs_tol=1e-7)


def test_teng_code_update_by_hand() -> None:
    """Teng & Zhang's released code: w decays by 1e-6 and takes an Adam step; the embedding rows take lazy Adam
    steps (a row's moments move only when it has a gradient; the step count is global)."""
    from graphtree.models import NodeEmbedding

    torch.manual_seed(0)
    embedding = NodeEmbedding(4, 2)
    weight = embedding.embedding.weight
    start = weight.detach().clone()
    w = torch.nn.Parameter(torch.tensor([300.0, -1000.0]))  # large enough for a 1e-6 decay to show in float32
    model = torch.nn.ModuleDict(dict(embedding=embedding))
    model.register_parameter("w", w)
    opt = PaperOptimizer.for_model(model, embedding, PRESETS["teng_code"])
    assert isinstance(opt.embedding_optimizer, torch.optim.SparseAdam)

    def adam(m: float, v: float, g: float, t: int) -> tuple[float, float, float]:
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        return m, v, 1e-3 * (m / (1 - 0.9 ** t)) / (math.sqrt(v / (1 - 0.999 ** t)) + 1e-8)

    w_ref, w_mv = [300.0, -1000.0], [(0.0, 0.0), (0.0, 0.0)]
    rows_ref = {r: start[r].tolist() for r in range(4)}
    row_mv = {(r, k): (0.0, 0.0) for r in range(4) for k in range(2)}
    # words per step; the loss is sum(w) * sum of the looked-up vectors, so each word's row gradient is sum(w)
    for t, words in enumerate([[1, 2], [2], [1, 1, 3]], start=1):
        opt.zero_grad()
        (w.sum() * embedding(torch.tensor(words)).sum()).backward()
        assert weight.grad.is_sparse
        with torch.no_grad():
            grad_w = [float(embedding(torch.tensor(words)).sum())] * 2
        row_grads = {r: words.count(r) * sum(w_ref) for r in set(words)}
        opt.step()
        for k in range(2):
            m, v, delta = adam(*w_mv[k], grad_w[k], t)
            w_mv[k] = (m, v)
            w_ref[k] = w_ref[k] * (1 - 1e-6) - delta
        for r, g in row_grads.items():
            for k in range(2):
                m, v, delta = adam(*row_mv[r, k], g, t)
                row_mv[r, k] = (m, v)
                rows_ref[r][k] -= delta
        # a few float32 steps at 1000 (6e-5 apart); the decay moves w by 1e-3 per step
        torch.testing.assert_close(w.detach(), torch.tensor(w_ref), rtol=0, atol=3e-4)
        torch.testing.assert_close(weight.detach(), torch.tensor([rows_ref[r] for r in range(4)]), rtol=0,
                                   atol=1e-6)
    torch.testing.assert_close(weight.detach()[0], start[0], rtol=0, atol=0)  # never looked up: never moved


def test_optimizer_state_saved_before_the_decay_field_loads() -> None:
    w = torch.nn.Parameter(torch.ones(3))
    opt = PaperOptimizer([w], [], PRESETS["teng"])
    w.grad = torch.ones(3)
    opt.step()
    state = opt.state_dict()
    del state["spec"]["decay"]
    PaperOptimizer([w], [], PRESETS["teng"]).load_state_dict(state)
    with pytest.raises(ValueError, match="saved with"):
        PaperOptimizer([w], [], PRESETS["teng_code"]).load_state_dict(state)
    with pytest.raises(ValueError):
        OptimizerSpec("adam", 1e-3, "adam", 1e-3, 0.0, 1, decay=1.0)
    with pytest.raises(ValueError, match=r"OptimizerSpec\.name"):
        OptimizerSpec("sparse_adam", 1e-3, "adam", 1e-3, 0.0, 1)


SPARSE_STEP = """
import warnings
import torch
from graphtree.models import NodeEmbedding
from graphtree.train import PRESETS, PaperOptimizer
embedding = NodeEmbedding(10, 4)
model = torch.nn.Sequential(embedding, torch.nn.Linear(4, 2))
opt = PaperOptimizer.for_model(model, embedding, PRESETS["le_zuidema"], sparse_embeddings=True)
assert isinstance(opt.embedding_optimizer, torch.optim.Adagrad)
model(torch.tensor([1, 2, 2])).sum().backward()
assert embedding.embedding.weight.grad.is_sparse
warnings.simplefilter("error")
opt.step()
"""


def test_sparse_embedding_step_is_silent() -> None:
    """AdaGrad's sparse update makes PyTorch warn once per process about invariant checks unless told; a fresh
    process shows it."""
    run = subprocess.run([sys.executable, "-c", SPARSE_STEP], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]


@pytest.mark.parametrize("preset", ["tai", "zhu", "le_zuidema", "teng"])
def test_sparse_embedding_updates_equal_the_dense_ones(preset: str) -> None:
    """Three steps of a model whose minibatches repeat some words and miss most: the same weights either way."""
    from graphtree.models import NodeEmbedding, TreeClassifier
    from graphtree.nn import NaryTreeLSTM

    trees = [from_ptb(line, vocab=VOCAB) for line in ("(1 (2 a) (3 (4 a) (0 b)))", "(3 (1 c) (2 a))", "(0 d)")]
    batches = [Batch.from_data_list(trees[:2]), Batch.from_data_list(trees[1:]), Batch.from_data_list(trees)]

    def train(sparse: bool) -> tuple[dict, bool]:
        torch.manual_seed(0)
        embedding = NodeEmbedding(len(VOCAB), 4)
        model = TreeClassifier(embedding, NaryTreeLSTM(4, 3), 5, dropout=0.0).double()
        opt = PaperOptimizer.for_model(model, embedding, PRESETS[preset], sparse_embeddings=sparse)
        for batch in batches:
            opt.zero_grad()
            logits = model(batch)
            torch.nn.functional.cross_entropy(logits, batch.y, reduction="sum").backward()
            was_sparse = embedding.embedding.weight.grad.is_sparse
            opt.step()
        return {k: v.detach().clone() for k, v in model.state_dict().items()}, was_sparse

    dense, dense_grad_sparse = train(False)
    sparse, sparse_grad_sparse = train(True)
    assert not dense_grad_sparse
    assert sparse_grad_sparse == (PRESETS[preset].embedding != "adam")  # Adam moves every row: stays dense
    assert not torch.equal(dense["embedding.embedding.weight"][:4], torch.zeros(4, 4))
    for key, value in dense.items():
        torch.testing.assert_close(sparse[key], value, rtol=1e-12, atol=1e-14, msg=key)
    # words e and f are in no batch: they did not move under either update
    torch.manual_seed(0)
    initial = NodeEmbedding(len(VOCAB), 4).embedding.weight.double()
    if PRESETS[preset].embedding != "adam":
        torch.testing.assert_close(sparse["embedding.embedding.weight"][4:], initial[4:].detach())


@pytest.mark.parametrize("settings", [dict(lr=0.05), dict(lr=0.1, lr_decay=0.01, eps=1e-6),
                                      dict(lr=0.05, initial_accumulator_value=0.1)])
def test_row_adagrad_is_pytorchs_adagrad_bit_for_bit(settings: dict) -> None:
    """The row update against ``torch.optim.Adagrad`` itself: every weight and accumulator equal after each of
    60 steps of an embedding whose minibatches repeat words, in float32 (rounding shows there) and float64; a
    dense gradient and a checkpoint go through Adagrad unchanged."""
    from graphtree.train.optim import RowAdagrad

    for dtype in (torch.float32, torch.float64):
        words = torch.randint(0, 300, (60, 40), generator=torch.Generator().manual_seed(1))
        embeddings, optimizers = [], []
        for make in (torch.optim.Adagrad, RowAdagrad):
            torch.manual_seed(0)
            embedding = torch.nn.Embedding(300, 8, sparse=True).to(dtype)
            embeddings.append(embedding)
            optimizers.append(make(embedding.parameters(), **settings))
        with torch.sparse.check_sparse_tensor_invariants(enable=False):
            for ids in words:
                for embedding, optimizer in zip(embeddings, optimizers):
                    optimizer.zero_grad()
                    embedding(ids).pow(2).sum().backward()  # repeated words: duplicate rows to sum
                    optimizer.step()
                (theirs, mine), (their_state, my_state) = embeddings, [o.state_dict()["state"][0] for o in optimizers]
                assert torch.equal(mine.weight, theirs.weight)
                assert torch.equal(my_state["sum"], their_state["sum"]) and my_state["step"] == their_state["step"]
    moved = torch.nn.Parameter(torch.ones(3))
    optimizer = RowAdagrad([moved], lr=0.5)
    moved.grad = torch.tensor([1.0, 0.0, 2.0])  # dense: Adagrad's own step
    optimizer.step()
    assert torch.allclose(moved.detach(), torch.tensor([0.5, 1.0, 0.5]))
    reference = torch.optim.Adagrad([torch.nn.Parameter(torch.ones(3))], lr=0.5)
    reference.load_state_dict(optimizer.state_dict())  # the same checkpoint format
    assert torch.equal(reference.state_dict()["state"][0]["sum"], torch.tensor([1.0, 0.0, 4.0]))


def test_optimizer_state_round_trip_and_checks() -> None:
    w = torch.nn.Parameter(torch.ones(3))
    opt = PaperOptimizer([w], [], PRESETS["zhu"])
    w.grad = torch.ones(3)
    opt.step()
    other = PaperOptimizer([w], [], PRESETS["le_zuidema"])
    with pytest.raises(ValueError, match="saved with"):
        other.load_state_dict(opt.state_dict())
    with pytest.raises(ValueError):
        OptimizerSpec("rmsprop", 0.1, "sgd", 0.1, 0.0, 5)
    with pytest.raises(ValueError, match="both"):
        PaperOptimizer([w], [w], PRESETS["tai"])


# -- checkpoints and resume ----------------------------------------------------------------------------------------

def test_atomic_save_keeps_the_old_file_when_writing_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ckpt.pt"
    atomic_save({"epoch": 1}, path)

    def broken_save(obj, handle):
        handle.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        atomic_save({"epoch": 2}, path)
    monkeypatch.undo()
    assert torch.load(path) == {"epoch": 1}
    assert os.listdir(tmp_path) == ["ckpt.pt"]  # no temporary file left behind


def test_epoch_order_is_a_function_of_seed_and_epoch() -> None:
    assert torch.equal(epoch_order(50, 3, 4), epoch_order(50, 3, 4))
    assert not torch.equal(epoch_order(50, 3, 4), epoch_order(50, 3, 5))
    assert sorted(epoch_order(50, 3, 4).tolist()) == list(range(50))


def test_resume_refuses_a_checkpoint_of_another_run(tmp_path: Path) -> None:
    data = [from_ptb("(1 (0 a) (1 b))", VOCAB), from_ptb("(0 (0 c) (1 d))", VOCAB)]
    from graphtree.models import NodeEmbedding, TreeClassifier
    from graphtree.nn import NaryTreeLSTM

    def trainer(config: dict) -> Trainer:
        emb = NodeEmbedding(6, 4)
        model = TreeClassifier(emb, NaryTreeLSTM(4, 3), 2)
        return Trainer(model, PaperOptimizer.for_model(model, emb, PRESETS["tai"]), epochs=1, batch_size=2,
                       seed=0, checkpoint=tmp_path / "c.pt", config=config, progress=False)

    first = trainer({"lr": 1}).fit(data, data)
    again = trainer({"lr": 1}).fit(data, data)  # finished: returns at once with the same record
    assert again.resumed_at == 1 and again.history == first.history
    with pytest.raises(ValueError, match="differing: lr"):
        trainer({"lr": 2}).fit(data, data)


def test_each_epoch_splits_its_time_into_the_trainers_phases() -> None:
    from graphtree.models import NodeEmbedding, TreeClassifier
    from graphtree.nn import NaryTreeLSTM
    from graphtree.train.trainer import PHASES

    data = [from_ptb("(1 (0 a) (1 b))", VOCAB), from_ptb("(0 (0 c) (1 d))", VOCAB)] * 4
    emb = NodeEmbedding(6, 4)
    model = TreeClassifier(emb, NaryTreeLSTM(4, 3), 2)
    optimizer = PaperOptimizer.for_model(model, emb, PRESETS["tai"])
    step_embeddings = optimizer.step_embeddings

    def slow_embedding_update() -> None:  # a phase made long on purpose: its time must land in its column
        time.sleep(0.15)  # well above the other phases' first-use costs (the first batches' ops) on a busy machine
        step_embeddings()

    optimizer.step_embeddings = slow_embedding_update
    fit = Trainer(model, optimizer, epochs=1, batch_size=2, seed=0, progress=False, verbose=False).fit(data, data)
    (epoch,) = fit.history
    phases = epoch["phases"]
    assert list(phases) == [*PHASES, "dev"]
    assert phases["embeddings"] >= 4 * 0.15  # 4 minibatches
    assert all(0 <= phases[p] < phases["embeddings"] / 2 for p in PHASES if p != "embeddings"), phases
    assert sum(phases[p] for p in PHASES) <= epoch["train_seconds"], (phases, epoch)
    assert phases["dev"] == pytest.approx(epoch["seconds"] - epoch["train_seconds"])


def test_minibatches_cut_from_the_concatenated_graphs_train_exactly_as_ones_built_graph_by_graph(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import random

    from trees import random_ptb

    from graphtree.data import batching
    from graphtree.models import NodeEmbedding, TreeClassifier
    from graphtree.nn import ChildSumTreeLSTM

    rng = random.Random(5)
    data = [from_ptb(random_ptb(rng.randint(1, 7), 3, rng), lambda w: 1 + hash(w) % 5) for _ in range(23)]

    def train() -> tuple[list[dict], dict[str, Tensor]]:
        torch.manual_seed(0)
        emb = NodeEmbedding(6, 4)
        model = TreeClassifier(emb, ChildSumTreeLSTM(4, 3), 5, dropout=0.5)
        fit = Trainer(model, PaperOptimizer.for_model(model, emb, PRESETS["tai"]), epochs=3, batch_size=5, seed=1,
                      progress=False, verbose=False).fit(data, data[:6])
        return [{k: h[k] for k in ("train_loss", "dev_root", "dev_phrase")} for h in fit.history], model.state_dict()

    cuts = []
    real_batches = batching.BatchCutter.batches

    def counted(self, order, batch_size):  # the trainer must take the cutter's path in the first run
        cuts.append(len(order))
        return real_batches(self, order, batch_size)

    monkeypatch.setattr(batching.BatchCutter, "batches", counted)
    history, weights = train()
    assert cuts == [23, 23, 23]
    monkeypatch.setattr(batching.BatchCutter, "of", classmethod(lambda cls, graphs: None))  # graph by graph
    reference_history, reference_weights = train()
    assert history == reference_history
    for name, value in reference_weights.items():
        assert torch.equal(weights[name], value), name


def test_kill_9_mid_training_then_resume_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    import train_resume_helper as helper  # beside this file, where pytest imports the tests from

    # Every run in a process of its own. The compiled level kernels stay off: with a cold extension cache each
    # subprocess would spend its time limit compiling them (their agreement with PyTorch is
    # tests/test_native.py's business).
    env = {**os.environ, "GRAPHTREE_NATIVE": "0"}
    helper_script = str(HERE / "train_resume_helper.py")
    subprocess.run([sys.executable, helper_script, str(tmp_path / "reference")], check=True,
                   stdout=subprocess.DEVNULL, timeout=120, env=env)
    reference = json.loads((tmp_path / "reference" / "result.json").read_text())
    steps_per_epoch = math.ceil(40 / helper.BATCH)
    kill_at = 2 * steps_per_epoch + steps_per_epoch // 2  # mid-epoch 3: two checkpoints written
    run_dir = tmp_path / "killed"
    command = [sys.executable, helper_script, str(run_dir), "--sleep", "0.02"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    try:
        for line in proc.stdout:
            if line.startswith("step") and int(line.split()[1]) >= kill_at:
                proc.send_signal(signal.SIGKILL)
                break
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (run_dir / "result.json").exists()
    assert torch.load(run_dir / "run.pt", weights_only=False)["epoch"] == 2

    subprocess.run(command[:-2], check=True, stdout=subprocess.DEVNULL, timeout=120, env=env)
    resumed = json.loads((run_dir / "result.json").read_text())
    assert resumed.pop("resumed_at") == 2
    assert reference.pop("resumed_at") == 0
    assert resumed == reference  # exact floats, same best epoch, identical parameter bytes
    rows = (run_dir / "run.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["1", "2", "3", "4", "5"]



def test_flushing_reaches_the_intra_op_worker_threads() -> None:
    """With two threads, an elementwise product over a large tensor is split across PyTorch's pool: inside
    ``denormals_flushed`` every part of it reads subnormals as zero (the calling thread and the worker), and
    afterwards every part as before (where PyTorch's pool is GNU OpenMP, as in its Linux builds)."""
    from graphtree.backend import threads as pool
    from graphtree.backend.threads import denormals_flushed

    if pool._gomp_parallel() is None:
        pytest.skip("PyTorch's intra-op pool is not GNU OpenMP here")
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        if torch.get_num_threads() < 2:
            pytest.skip("one intra-op thread only")
        tiny = torch.full((1 << 20,), 1e-39)  # 32 times ATen's grain: split across both threads

        def surviving() -> int:  # subnormals that come out of a product unflushed
            return int((tiny * 1.0).count_nonzero())

        assert surviving() == tiny.numel()
        with denormals_flushed():
            assert surviving() == 0
        assert surviving() == tiny.numel()
    finally:
        torch.set_num_threads(threads)


def test_fit_leaves_the_float_mode_alone_and_flushing_reports_the_same_numbers() -> None:
    """A weight block that gets no gradient (Child-Sum's forget-gate input weights when words sit at leaves
    only) decays under L2 into the subnormal range; fit itself keeps such values (it leaves the processor's mode
    alone), and a fit inside ``denormals_flushed`` (as the experiment scripts run) reads them as zero and
    reports the same losses, bit for bit; afterwards the thread is as before."""
    from graphtree.backend.threads import denormals_flushed, flushing_denormals
    from graphtree.models import NodeEmbedding, TreeClassifier
    from graphtree.nn import ChildSumTreeLSTM

    assert not flushing_denormals()
    with denormals_flushed():
        assert flushing_denormals()  # (x86: FTZ/DAZ)
        with denormals_flushed():
            assert flushing_denormals()
        assert flushing_denormals()  # an inner use leaves an outer one's setting
    assert not flushing_denormals()

    data = [from_ptb(line, VOCAB) for line in ("(1 (0 a) (1 b))", "(0 (0 c) (1 (1 d) (0 e)))")] * 3

    def fit(flush: bool) -> tuple[list[float], Tensor]:  # the losses and the input weights after fit
        torch.manual_seed(0)
        emb = NodeEmbedding(6, 4)
        cell = ChildSumTreeLSTM(4, 3)
        with torch.no_grad():  # the forget gates' input block: start it a few halvings above the subnormal range
            cell.W.weight[9:12].fill_(4e-38)
        model = TreeClassifier(emb, cell, 2)
        # Plain SGD with L2 shrinks a weight that gets no gradient at every step.
        optimizer = PaperOptimizer.for_model(model, emb, OptimizerSpec("sgd", 0.1, "sgd", 0.1, 5.0, 2))
        modes: list[bool] = []
        trainer = Trainer(model, optimizer, epochs=3, batch_size=2, seed=0, progress=False, verbose=False,
                          on_step=lambda step: modes.append(flushing_denormals()))
        with denormals_flushed() if flush else contextlib.nullcontext():
            history = trainer.fit(data, data).history
        assert set(modes) == {flush}  # fit switched nothing itself
        return [e["train_loss"] for e in history], cell.W.weight.detach().clone()

    kept_losses, kept = fit(flush=False)
    flushed_losses, _ = fit(flush=True)
    tiny = torch.finfo(torch.float32).tiny
    assert ((kept[9:12] != 0) & (kept[9:12].abs() < tiny)).all()  # decayed into the subnormal range
    assert flushed_losses == kept_losses
    with denormals_flushed():  # products read the decayed block as zero: no slow path
        assert torch.equal(kept[9:12] * 1.0, torch.zeros(3, 4))
    assert not flushing_denormals()
