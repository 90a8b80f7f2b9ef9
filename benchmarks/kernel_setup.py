"""Set-up of a compiled pass: each paper cell's kernel maker (its ``level_kernel``), and the weight transposes it
makes.

    python benchmarks/kernel_setup.py [--threads 2] [--reps 500]

Before every pass the engine asks the cell's ``level_kernel`` (``graphtree.backend.dispatch``) for its kernel,
which copies the cell's weights (its ``compiled_weights()``) transposed (the optimizer changes them between passes).
For each cell at the SST script's sizes this times the maker and, for the same weights, PyTorch's strided
copy ``w.t().contiguous()`` against the kernels' tiled one (``kernels.transposed``), checking that the two
copies are equal. Microseconds a call, the median of five rounds of ``--reps`` calls after a warm-up.
"""

from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace

import torch

from graphtree.backend import native
from graphtree.nn import (
    LSTMRNN,
    SLSTM,
    ChildSumTreeLSTM,
    LexicalizedTreeLSTM,
    NaryTreeLSTM,
    TopDownTreeLSTM,
)

ROUNDS = 5
# experiments/sst.py's sizes (word vectors, hidden) for each model's cell, and the weights its kernel transposes
CELLS = {
    "nary": (lambda: NaryTreeLSTM(300, 150), ["U"]),
    "child_sum": (lambda: ChildSumTreeLSTM(300, 168), ["U_iou.weight", "U_f.weight"]),
    "slstm": (lambda: SLSTM(100, 100, leaf="embedding"), ["W_h", "W_c", "W_co"]),
    "lstm_rnn": (lambda: LSTMRNN(50, 50), ["W_leaf", "W_inner", "W_cell"]),
    "contree_lex": (lambda: LexicalizedTreeLSTM(300, 150), ["W_h", "W_c", "W_co", "W_x"]),
    "top_down": (lambda: TopDownTreeLSTM(300, 150), ["W_x", "W_h", "W_c", "W_co"]),
}
TREE_PLAN = SimpleNamespace(widths=[0, 1])  # a plan's widths, all a maker reads of it: one parent at most


def microseconds(call, reps: int) -> float:
    for _ in range(max(reps // 10, 1)):
        call()
    times = []
    for _ in range(ROUNDS):
        began = time.perf_counter()
        for _ in range(reps):
            call()
        times.append((time.perf_counter() - began) / reps * 1e6)
    return statistics.median(times)


def matrices(cell: torch.nn.Module, names: list[str]) -> list[torch.Tensor]:
    """The named weights of ``cell`` as its kernel transposes them: a matrix, or a stack one matrix at a time."""
    weights = [cell.get_parameter(name).detach() for name in names]
    return [m for w in weights for m in (w if w.dim() == 3 else [w])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    parser.add_argument("--reps", type=int, default=500, help="calls per timed round")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    kernels = native.native_kernels(torch.zeros(1))
    if kernels is None:
        raise SystemExit("kernel_setup: the compiled kernels are not available here")
    print(f"torch {torch.__version__}, {args.threads} thread(s); µs a call, median of {ROUNDS} x {args.reps}\n")
    print("| cell | weights | w.t().contiguous() | kernels.transposed | equal | maker |")
    print("|---|---|---|---|---|---|")
    for name, (make_cell, names) in CELLS.items():
        print(row(name, make_cell(), names, kernels, args.reps))


def row(name: str, cell: torch.nn.Module, names: list[str], kernels, reps: int) -> str:
    """The table's row for ``cell``: its transposes both ways, whether they agree, and its maker."""
    weights = matrices(cell, names)
    equal = all(torch.equal(kernels.transposed(w), w.t().contiguous()) for w in weights)
    strided = microseconds(lambda: [w.t().contiguous() for w in weights], reps)
    tiled = microseconds(lambda: [kernels.transposed(w) for w in weights], reps)
    made = microseconds(lambda: cell.level_kernel(kernels, TREE_PLAN, [w.detach() for w in cell.compiled_weights()]),
                        reps)
    shapes = ", ".join("x".join(map(str, w.shape)) for w in weights)
    return f"| {name} | {shapes} | {strided:.1f} | {tiled:.1f} | {'yes' if equal else 'NO'} | {made:.1f} |"

if __name__ == "__main__":
    main()
