"""Seconds per training minibatch of a Tree-LSTM over a pretrained encoder, by how much of the encoder is tuned.

    python benchmarks/encoder_step.py [--encoder minilm] [--minibatches 8] [--rounds 3] [--threads 1] [--out FILE]

The model is ``sst.py --model nary --encoder ...``'s (N-ary Tree-LSTM of 150 over the encoder's word states, a
classifier on every node) on SST training minibatches of 16 sentences, trained as the script trains it
(AdamW, the recipe of ``lab.encoder_runs``): forward, backward and update. Settings:
every layer fine-tuned; the top ``K`` only over the kept output of the frozen ones below
(``--trainable-layers K``); the encoder frozen, its states computed once. Each round times the same
minibatches under every setting in turn (interleaved, so that the machine's load falls on all alike), after
the frozen parts have been computed once and one warm-up minibatch. The table gives the median over rounds
and the minutes an SST epoch (534 minibatches) takes at that rate. ``--out`` writes the numbers as JSON.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import lab_path  # noqa: F401  (the lab, not installed)

REPO = Path(__file__).resolve().parent.parent
EPOCH_MINIBATCHES = 534  # SST's 8,544 training trees in minibatches of 16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encoder", default="minilm", help="minilm, mpnet or a folder (default minilm)")
    parser.add_argument("--top", type=int, nargs="+", default=[2], help="the K of the top-K settings (default 2)")
    parser.add_argument("--minibatches", type=int, default=8, help="timed minibatches per setting and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="a JSON file for the numbers")
    args = parser.parse_args()

    import torch
    from lab.encoder_runs import ENCODER_DEFAULTS, encoder_leaves
    from lab.runs import default_mirror
    from torch_geometric.data import Batch

    from graphtree.datasets import SST
    from graphtree.models import TreeClassifier, node_loss
    from graphtree.nn import NaryTreeLSTM
    from graphtree.train import OptimizerSpec, PaperOptimizer
    from graphtree.vocab import Vocab

    torch.set_num_threads(args.threads)
    train = SST(REPO / "datasets", "train", mirror=default_mirror(REPO), log=False)
    vocab = Vocab.build(train.tokens)
    train = SST(REPO / "datasets", "train", vocab=vocab, mirror=default_mirror(REPO), log=False)
    generator = torch.Generator().manual_seed(0)
    order = torch.randperm(len(train), generator=generator).tolist()
    size = ENCODER_DEFAULTS["batch_size"]
    batches = [Batch.from_data_list([train[i] for i in order[k * size:(k + 1) * size]])
               for k in range(args.minibatches + 1)]
    spec = OptimizerSpec("adamw", ENCODER_DEFAULTS["lr"], "adamw", ENCODER_DEFAULTS["encoder_lr"], 0.0, size,
                         weight_decay=ENCODER_DEFAULTS["weight_decay"], warmup=0.0)

    settings = {"all layers": None, **{f"top {k}": k for k in args.top}, "frozen": 0}
    runs = {}
    for name, top in settings.items():
        torch.manual_seed(0)
        leaves = encoder_leaves({"encoder": args.encoder, "trainable_layers": top})
        model = TreeClassifier(leaves, NaryTreeLSTM(leaves.out_channels, 150), 5, dropout=0.1).train()
        optimizer = PaperOptimizer.for_model(model, leaves, spec)
        leaves.precompute([list(t) for b in batches for t in b.tokens], progress=False)  # the once-only part
        runs[name] = (model, optimizer)

    def step(model, optimizer, batch) -> None:
        optimizer.zero_grad()
        (node_loss(model(batch), batch.y) / batch.num_graphs).backward()
        optimizer.step()

    for model, optimizer in runs.values():
        step(model, optimizer, batches[0])  # warm-up
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, (model, optimizer) in runs.items():
            began = time.perf_counter()
            for batch in batches[1:]:
                step(model, optimizer, batch)
            seconds[name].append((time.perf_counter() - began) / args.minibatches)

    print(f"| {args.encoder}: fine-tuned | s / minibatch of {size} | minutes per SST epoch | vs all layers |")
    print("|---|---|---|---|")
    base = statistics.median(seconds["all layers"])
    rows = {}
    for name, times in seconds.items():
        median = statistics.median(times)
        rows[name] = {"seconds_per_minibatch": median, "rounds": times,
                      "minutes_per_epoch": median * EPOCH_MINIBATCHES / 60}
        print(f"| {name} | {median:.2f} | {median * EPOCH_MINIBATCHES / 60:.0f} | {base / median:.1f}× |")
    if args.out:
        record = {"encoder": args.encoder, "threads": args.threads, "minibatches": args.minibatches,
                  "rounds": args.rounds, "batch_size": size, "processor": platform.processor() or platform.machine(),
                  "torch": torch.__version__, "settings": rows}
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
