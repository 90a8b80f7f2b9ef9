"""Time of dropout on the tensors an SST minibatch drops: ``F.dropout`` against ``graphtree.nn.functional.dropout``.

    python benchmarks/dropout_mask.py [--threads 2] [--batch-size 25]

The tensors are the hidden states of the first SST training minibatches in
file order (every node, ``--hidden`` wide; the papers' classifiers drop them
at rate 0.5) and the word vectors of their nodes (``--embedding`` wide).
Both functions draw the same masks from the same generator state; the table
checks that they returned the same tensors and left the generator alike.
Medians of timed repetitions after a warm-up, in milliseconds per call.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import lab_path  # noqa: F401  (the lab, not installed)
import torch
import torch.nn.functional as F
from lab.runs import corpus_file

from graphtree.backend.native import ensure_built
from graphtree.datasets import SST
from graphtree.nn.functional import dropout

REPO = Path(__file__).resolve().parent.parent

REPS, CALLS = 7, 20


def node_counts(batch_size: int, batches: int, sst: Path) -> list[int]:
    """Nodes of each of the first ``batches`` minibatches of SST's training trees (random sizes without it)."""
    if sst.is_file():
        import zipfile

        with zipfile.ZipFile(sst) as archive:
            name = next(n for n in archive.namelist() if n.endswith("train.txt"))
            lines = archive.read(name).decode("utf-8").splitlines()
        nodes = [line.count("(") for line in lines[:batch_size * batches]]
    else:
        generator = torch.Generator().manual_seed(0)
        nodes = (2 * torch.randint(5, 30, (batch_size * batches,), generator=generator) - 1).tolist()
    return [sum(nodes[k:k + batch_size]) for k in range(0, len(nodes), batch_size)]


def per_call_ms(function, tensors: list[torch.Tensor], p: float) -> float:
    for x in tensors[:3]:
        function(x, p, True)
    times = []
    for _ in range(REPS):
        began = time.perf_counter()
        for _ in range(CALLS):
            for x in tensors:
                function(x, p, True)
        times.append((time.perf_counter() - began) / (CALLS * len(tensors)) * 1e3)
    return statistics.median(times)


def same_draws(tensors: list[torch.Tensor], p: float) -> bool:
    torch.manual_seed(0)
    ours = [dropout(x, p, True) for x in tensors]
    state = torch.get_rng_state()
    torch.manual_seed(0)
    theirs = [F.dropout(x, p, True) for x in tensors]
    return all(torch.equal(a, b) for a, b in zip(ours, theirs)) and torch.equal(state, torch.get_rng_state())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    parser.add_argument("--batch-size", type=int, default=25, help="trees per minibatch (default 25, Tai's)")
    parser.add_argument("--batches", type=int, default=10, help="minibatches timed (default 10)")
    parser.add_argument("--hidden", type=int, default=150, help="width of the hidden states (default 150)")
    parser.add_argument("--embedding", type=int, default=300, help="width of the word vectors (default 300)")
    parser.add_argument("--p", type=float, default=0.5, help="dropout rate (default 0.5)")
    parser.add_argument("--sst", type=Path, default=None,
                        help="SST's trainDevTestTrees_PTB.zip (default: where the experiments read SST, "
                             "$GRAPHTREE_MIRROR or ../shared/data beside the repository)")
    args = parser.parse_args()
    if args.sst is None:
        args.sst = corpus_file(SST.ARCHIVE, REPO) or Path("")  # no file: random tree sizes
    torch.set_num_threads(args.threads)
    if not ensure_built():
        raise SystemExit("the compiled kernels are not available here: graphtree's dropout would be F.dropout")
    counts = node_counts(args.batch_size, args.batches, args.sst)
    source = "SST training trees" if args.sst.is_file() else "random tree sizes (no SST archive found)"
    print(f"torch {torch.__version__}, {args.threads} thread(s), p = {args.p}; minibatches of {args.batch_size} "
          f"{source}, {min(counts)}-{max(counts)} nodes; ms per call, median of {REPS} x {CALLS} passes\n")
    print("| tensor | F.dropout | graphtree | F.dropout / graphtree | same masks and generator state |")
    print("|---|---|---|---|---|")
    for name, width in (("hidden states", args.hidden), ("word vectors", args.embedding)):
        tensors = [torch.randn(n, width) for n in counts]
        theirs, ours = per_call_ms(F.dropout, tensors, args.p), per_call_ms(dropout, tensors, args.p)
        print(f"| {name} [nodes, {width}] | {theirs:.3f} | {ours:.3f} | {theirs / ours:.1f} | "
              f"{'yes' if same_draws(tensors, args.p) else 'NO'} |")


if __name__ == "__main__":
    main()
