"""Time of one optimizer step on each cell's parameters: PyTorch's per-parameter loop, ``foreach`` and ``fused``.

    python benchmarks/optimizer_step.py [--threads 1]

The parameters are those of the speed benchmark's models (hidden 150, word
vectors 300, frozen); gradients are random. Each setting steps the optimizer
``STEPS`` times; medians of timed repetitions after a warm-up. The papers'
updates are AdaGrad (Tai, Zhu, Le & Zuidema) and Adam (Teng & Zhang);
``graphtree.train.PaperOptimizer`` uses the fused implementation where PyTorch
has one for the parameters' device.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from graphtree.models import BiTreeLSTM
from graphtree.nn import LSTMRNN, SLSTM, ChildSumTreeLSTM, NaryTreeLSTM

E, D, CLASSES, STEPS, REPS = 300, 150, 5, 50, 5
IMPLEMENTATIONS = {"loop": dict(foreach=False), "foreach": dict(foreach=True), "fused": dict(fused=True)}
OPTIMIZERS = {"adagrad": (torch.optim.Adagrad, dict(lr=0.05)), "adam": (torch.optim.Adam, dict(lr=1e-3))}


def models() -> dict[str, nn.Module]:
    classifier = nn.Linear(D, CLASSES)
    return {
        "nary": nn.ModuleList([NaryTreeLSTM(E, D), classifier]),
        "child_sum": nn.ModuleList([ChildSumTreeLSTM(E, D), classifier]),
        "slstm": nn.ModuleList([SLSTM(E, D, leaf="lstm"), classifier]),
        "lstm_rnn": nn.ModuleList([nn.Linear(E, D), LSTMRNN(D, D), classifier]),
        "bicontree": BiTreeLSTM(E, D, CLASSES, mlp_channels=128, variant="bicontree"),
    }


def step_ms(params: list[nn.Parameter], optimizer: str, implementation: str) -> float:
    make, settings = OPTIMIZERS[optimizer]
    generator = torch.Generator().manual_seed(0)
    for p in params:
        p.grad = torch.randn(p.shape, generator=generator) * 1e-2
    step = make(params, **settings, **IMPLEMENTATIONS[implementation]).step
    for _ in range(3):
        step()
    times = []
    for _ in range(REPS):
        began = time.perf_counter()
        for _ in range(STEPS):
            step()
        times.append((time.perf_counter() - began) / STEPS * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1, as the experiments)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s); ms per step, median of {REPS} x {STEPS} steps\n")
    print("| cell | parameters | optimizer | loop | foreach | fused | loop / fused |")
    print("|---|---|---|---|---|---|---|")
    for cell, model in models().items():
        params = [p for p in model.parameters() if p.requires_grad]
        count = sum(p.numel() for p in params)
        for optimizer in OPTIMIZERS:
            ms = {name: step_ms(params, optimizer, name) for name in IMPLEMENTATIONS}
            print(f"| {cell} | {len(params)} tensors, {count:,} | {optimizer} | {ms['loop']:.3f} | "
                  f"{ms['foreach']:.3f} | {ms['fused']:.3f} | {ms['loop'] / ms['fused']:.1f} |")


if __name__ == "__main__":
    main()
