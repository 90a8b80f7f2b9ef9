"""Train a tiny tree classifier with graphtree.train.Trainer; tests/test_train.py kills and restarts it.

usage: python tests/train_resume_helper.py OUT_DIR [--sleep SECONDS]

Prints ``step N`` after every optimizer step (so the test knows how far it got)
and, when training ends, writes ``OUT_DIR/result.json`` with the final metrics
and the exact bytes of every parameter.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import time
from pathlib import Path

import torch
from trees import random_ptb

from graphtree.data import from_ptb
from graphtree.models import NodeEmbedding, TreeClassifier
from graphtree.nn import NaryTreeLSTM
from graphtree.train import PRESETS, PaperOptimizer, Trainer, seed_everything

EPOCHS, BATCH = 5, 4


def dataset(count: int, seed: int) -> list:
    rng = random.Random(seed)
    vocab = {f"w{k}": k for k in range(40)}
    return [from_ptb(random_ptb(rng.randint(2, 9), 2, rng, num_labels=3), vocab) for _ in range(count)]


def run(out: Path, sleep: float = 0.0) -> dict:
    """Train (or resume) in ``out``; return the final metrics and a digest of the parameters."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train, dev = dataset(40, 1), dataset(12, 2)
        seed_everything(7)
        embedding = NodeEmbedding(40, 6)
        model = TreeClassifier(embedding, NaryTreeLSTM(6, 5), 3, dropout=0.5)  # dropout: RNG state matters

        def on_step(step: int) -> None:
            print(f"step {step}", flush=True)
            time.sleep(sleep)

        trainer = Trainer(model, PaperOptimizer.for_model(model, embedding, PRESETS["tai"]), epochs=EPOCHS,
                          batch_size=BATCH, seed=7, checkpoint=out / "run.pt", metrics_csv=out / "run.csv",
                          config={"what": "resume test"}, progress=False, on_step=on_step)
        fit = trainer.fit(train, dev)
        test = trainer.test(dev)
    finally:
        torch.set_num_threads(threads)
    digest = hashlib.sha256()
    for name, value in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(value.numpy().tobytes())
    return {"best_epoch": fit.best_epoch,
            "history": [{k: v for k, v in h.items() if "seconds" not in k and k != "phases"}  # times
                        for h in fit.history],
            "test": test.as_dict(), "params": digest.hexdigest(), "resumed_at": fit.resumed_at}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--sleep", type=float, default=0.0)
    args = parser.parse_args()
    out = Path(args.out)
    result = run(out, args.sleep)
    (out / "result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
