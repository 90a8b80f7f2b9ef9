"""Train a tiny tree classifier with graphtree.train.Trainer, in one process or under torchrun.

usage: [torchrun --nproc_per_node N] tests/distributed_helper.py OUT_DIR [--preset P] [--dropout D]
                                                                [--kill-at-step S] [--epochs E] [--replay R] [--on-disk]
                                                                [--group-by-height W]

tests/test_distributed.py runs it with 1 and 2 processes and compares. Every
rank writes ``OUT_DIR/rank<r>.json`` with a digest of its parameters after
every step; rank 0 writes ``OUT_DIR/result.json`` with the final metrics.
``--kill-at-step S`` makes the last rank kill itself (SIGKILL) after step S,
which takes the job down as a crash would. ``--on-disk`` trains on the same graphs written to graph stores
(:class:`graphtree.datasets.store.GraphStore`), read by two loader workers per rank; every process that reads
the training store appends the store positions it read to ``OUT_DIR/reads-<rank>-<pid>.txt``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
from pathlib import Path

import torch
from trees import random_ptb

from graphtree.data import from_ptb
from graphtree.datasets.store import GraphStore, encode_graph, write_store
from graphtree.models import NodeEmbedding, TreeClassifier
from graphtree.nn import NaryTreeLSTM
from graphtree.train import PRESETS, PaperOptimizer, Trainer, atomic_write_text, distributed, seed_everything

BATCH = 6


def dataset(count: int, seed: int) -> list:
    rng = random.Random(seed)
    vocab = {f"w{k}": k for k in range(40)}
    return [from_ptb(random_ptb(rng.randint(2, 9), 2, rng, num_labels=3), vocab) for _ in range(count)]


class LoggedStore(GraphStore):
    """A store that notes the positions each process reads (loader workers are processes of their own)."""

    log_dir: Path | None = None

    def _rows(self, indices: list[int]) -> list:
        if self.log_dir is not None:
            name = f"reads-{os.environ.get('RANK', '0')}-{os.getpid()}.txt"
            with open(self.log_dir / name, "a") as handle:
                handle.write("".join(f"{i}\n" for i in indices))
        return super()._rows(indices)


def on_disk(graphs: list, path: Path, log_dir: Path | None) -> LoggedStore:
    with distributed.main_first():  # rank 0 writes the store, the others then open it
        if distributed.is_main():
            write_store(path, [[encode_graph(g) for g in graphs]], {"fingerprint": path.stem})
    store = LoggedStore(path, expect={"fingerprint": path.stem})
    store.log_dir = log_dir
    return store


def digest(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, value in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(value.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--preset", default="tai", choices=sorted(PRESETS))
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--kill-at-step", type=int, default=None)
    parser.add_argument("--replay", default="off", choices=["auto", "on", "off"])
    parser.add_argument("--on-disk", action="store_true")
    parser.add_argument("--group-by-height", type=int, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    distributed.setup("cpu")
    rank, ranks = distributed.rank(), distributed.world_size()
    torch.set_default_dtype(torch.float64)  # float sums in another order must still agree closely
    # 43 examples: the last minibatch of 6 has one, so one of two ranks has none there.
    train, dev = dataset(43, 1), dataset(13, 2)
    if args.on_disk:
        args.out.mkdir(parents=True, exist_ok=True)
        train, dev = on_disk(train, args.out / "train.sqlite", args.out), on_disk(dev, args.out / "dev.sqlite", None)
    seed_everything(7)
    embedding = NodeEmbedding(40, 6)
    model = TreeClassifier(embedding, NaryTreeLSTM(6, 5), 3, dropout=args.dropout)
    steps: list[str] = []

    def on_step(step: int) -> None:
        steps.append(digest(model))
        if args.kill_at_step is not None and step == args.kill_at_step and rank == ranks - 1:
            os.kill(os.getpid(), signal.SIGKILL)

    spec = PRESETS[args.preset]
    optimizer = PaperOptimizer.for_model(model, embedding, spec, capturable=args.replay == "on")
    trainer = Trainer(model, optimizer, epochs=args.epochs, batch_size=BATCH, replay=args.replay,
                      seed=7, checkpoint=args.out / "run.pt", metrics_csv=args.out / "run.csv",
                      config={"what": "distributed test", "preset": args.preset, "dropout": args.dropout},
                      progress=False, on_step=on_step, verbose=False, group_by_height=args.group_by_height)
    fit = trainer.fit(train, dev)
    test = trainer.test(dev)
    orders = [trainer.epoch_indices(train, epoch) for epoch in range(args.epochs)]
    atomic_write_text(json.dumps({"steps": steps, "final": digest(model), "orders": orders}),
                      args.out / f"rank{rank}.json")
    if distributed.is_main():
        result = {"best_epoch": fit.best_epoch, "best_dev": fit.best_dev, "test": test.as_dict(),
                  "history": [{k: h[k] for k in ("epoch", "train_loss", "dev_root", "dev_phrase")}
                              for h in fit.history], "processes": ranks,
                  "sparse_embedding": bool(embedding.embedding.sparse), "replay": trainer.replay_path.record()}
        atomic_write_text(json.dumps(result), args.out / "result.json")


if __name__ == "__main__":
    main()
