"""The same layers on a GPU: equal to the CPU run, and no host synchronization inside the level loop.

Skipped on machines without CUDA. The CPU run is the reference (itself checked
against per-node recursive implementations elsewhere); float64 on both sides.
"""

from __future__ import annotations

import copy
import random

import pytest
import torch
from torch_geometric.data import Batch
from trees import random_ptb

from graphtree.data import from_ptb, with_schedule
from graphtree.models import BiTreeLSTM, NodeEmbedding, TreeClassifier, node_loss
from graphtree.nn import (
    LSTMRNN,
    SLSTM,
    ChildSumTreeLSTM,
    HeadLexicalization,
    LexicalizedTreeLSTM,
    NaryTreeLSTM,
    TopDownTreeLSTM,
)
from graphtree.train import OptimizerSpec, PaperOptimizer, Trainer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")

CHANNELS = 6

LAYERS = {
    "child_sum": lambda: ChildSumTreeLSTM(CHANNELS, CHANNELS),
    "nary": lambda: NaryTreeLSTM(CHANNELS, CHANNELS),
    "slstm": lambda: SLSTM(CHANNELS, CHANNELS),
    "lstm_rnn": lambda: LSTMRNN(CHANNELS, CHANNELS),
    "heads": lambda: HeadLexicalization(CHANNELS, "gated"),
    "lexicalized": lambda: LexicalizedTreeLSTM(CHANNELS, CHANNELS),
    "top_down": lambda: TopDownTreeLSTM(CHANNELS, CHANNELS),
}


def mixed_batch(max_arity: int = 2, count: int = 12, seed: int = 0) -> Batch:
    """Trees of different sizes and shapes (unary nodes and one-word trees included) as one batch."""
    rng = random.Random(seed)
    lines = ["(1 a)", "(2 (3 b))"] + [random_ptb(rng.randrange(2, 12), max_arity, rng) for _ in range(count)]
    return Batch.from_data_list([from_ptb(line) for line in lines])


def run_layer(layer: torch.nn.Module, x: torch.Tensor, batch: Batch) -> tuple[tuple[torch.Tensor, ...], dict]:
    """Outputs of ``layer`` and the gradients of a fixed function of them w.r.t. ``x`` and every parameter."""
    x = x.detach().requires_grad_()
    layer.zero_grad()
    out = layer(x, batch)
    out = out if isinstance(out, tuple) else (out,)
    weights = [torch.linspace(-1, 1, o.numel(), dtype=o.dtype, device=o.device).view_as(o) for o in out]
    sum((w * o).sum() for w, o in zip(weights, out)).backward()
    grads = {"x": x.grad, **{name: p.grad for name, p in layer.named_parameters()}}
    return tuple(o.detach() for o in out), {k: g.detach().clone() for k, g in grads.items()}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_on_cuda_equals_cpu(name):
    torch.manual_seed(0)
    layer = LAYERS[name]().double()
    batch = mixed_batch()
    x = torch.randn(batch.num_nodes, CHANNELS, dtype=torch.float64)
    want_out, want_grads = run_layer(layer, x, batch)

    got_out, got_grads = run_layer(copy.deepcopy(layer).to("cuda"), x.cuda(), batch.to("cuda"))
    for got, want in zip(got_out, want_out):
        assert got.device.type == "cuda"
        torch.testing.assert_close(got.cpu(), want, rtol=1e-9, atol=1e-9)
    assert set(got_grads) == set(want_grads)
    for key, want in want_grads.items():
        torch.testing.assert_close(got_grads[key].cpu(), want, rtol=1e-9, atol=1e-9, msg=key)


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_level_loop_never_synchronizes(name):
    """After a first pass (which moves the schedule to the GPU), forward and backward run without syncs."""
    torch.manual_seed(0)
    layer = LAYERS[name]().cuda()
    batch = mixed_batch(seed=1)
    with_schedule(batch)  # as the Trainer does: the schedule is built on the host, before the batch moves
    batch = batch.to("cuda")
    x = torch.randn(batch.num_nodes, CHANNELS, device="cuda")
    run_layer(layer, x, batch)
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        x = x.detach().requires_grad_()
        out = layer(x, batch)
        out = out if isinstance(out, tuple) else (out,)
        torch.autograd.backward(list(out), [torch.ones_like(o) for o in out])
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    torch.cuda.synchronize()
    assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("variant", ["contree", "contree_lex", "top_down", "bicontree"])
def test_bitree_model_on_cuda_equals_cpu(variant):
    torch.manual_seed(0)
    model = BiTreeLSTM(CHANNELS, CHANNELS, 5, mlp_channels=8, variant=variant, dropout=0.0).double()
    batch = mixed_batch(seed=2)
    x = torch.randn(batch.num_nodes, CHANNELS, dtype=torch.float64)
    want_out, want_grads = run_layer(model, x, batch)
    got_out, got_grads = run_layer(copy.deepcopy(model).to("cuda"), x.cuda(), batch.to("cuda"))
    torch.testing.assert_close(got_out[0].cpu(), want_out[0], rtol=1e-9, atol=1e-9)
    for key, want in want_grads.items():
        torch.testing.assert_close(got_grads[key].cpu(), want, rtol=1e-9, atol=1e-9, msg=key)


def test_trainer_on_cuda_follows_the_cpu_run():
    """Two epochs of the Trainer on the GPU give the CPU run's losses and weights (no dropout, float64)."""
    trees = [from_ptb(random_ptb(random.Random(k).randrange(2, 10), 2, random.Random(k), num_labels=5))
             for k in range(40)]
    for k, tree in enumerate(trees):
        tree.word = torch.tensor([(k * 7 + j) % 30 if p >= 0 else 0 for j, p in enumerate(tree.word_pos.tolist())])

    def train(device: str) -> tuple[list[float], dict]:
        torch.manual_seed(3)
        model = TreeClassifier(NodeEmbedding(30, CHANNELS), NaryTreeLSTM(CHANNELS, CHANNELS), 5, dropout=0.0)
        model = model.double().to(device)
        spec = OptimizerSpec(name="adagrad", lr=0.05, embedding="adagrad", embedding_lr=0.1, l2=1e-4, batch_size=8)
        trainer = Trainer(model, PaperOptimizer.for_model(model, model.embedding, spec), epochs=2, batch_size=8,
                          seed=1, progress=False, loss_fn=node_loss, device=device)
        fit = trainer.fit(trees[:30], trees[30:])
        return [h["train_loss"] for h in fit.history], {k: v.cpu() for k, v in model.state_dict().items()}

    cpu_losses, cpu_state = train("cpu")
    gpu_losses, gpu_state = train("cuda")
    assert gpu_losses == pytest.approx(cpu_losses, rel=1e-9)
    for key, value in cpu_state.items():
        torch.testing.assert_close(gpu_state[key], value, rtol=1e-8, atol=1e-10, msg=key)
