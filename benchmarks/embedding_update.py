"""Time of one embedding update, dense against sparse gradients, at SST's vocabulary sizes.

    python benchmarks/embedding_update.py

Each setting looks up the words of one minibatch (about 20 words a sentence),
backpropagates a sum and steps the paper's embedding optimizer; medians of
timed repetitions after a warm-up, on one thread.
"""

from __future__ import annotations

import statistics
import time

import torch

# (vocabulary, vector size, sentences per minibatch, optimizer, learning rate): Le & Zuidema, Zhu, Tai on SST
SETTINGS = [(17_774, 50, 5, "adagrad", 0.05), (18_281, 100, 10, "adagrad", 0.1), (18_281, 300, 25, "sgd", 0.1)]
WORDS_PER_SENTENCE, STEPS, REPS = 20, 50, 5


def step_ms(vocab: int, dim: int, sentences: int, name: str, lr: float, sparse: bool) -> float:
    embedding = torch.nn.Embedding(vocab, dim, sparse=sparse)
    optimizer = (torch.optim.Adagrad if name == "adagrad" else torch.optim.SGD)(embedding.parameters(), lr=lr)
    words = torch.randint(0, vocab, (STEPS, sentences * WORDS_PER_SENTENCE), generator=torch.Generator().manual_seed(0))

    def run() -> None:
        for ids in words:
            optimizer.zero_grad()
            embedding(ids).sum().backward()
            optimizer.step()

    run()
    times = []
    for _ in range(REPS):
        began = time.perf_counter()
        run()
        times.append((time.perf_counter() - began) / STEPS * 1e3)
    return statistics.median(times)


def main() -> None:
    torch.set_num_threads(1)
    print("| vocabulary | dim | minibatch | optimizer | dense ms/step | sparse ms/step | dense / sparse |")
    print("|---|---|---|---|---|---|---|")
    for setting in SETTINGS:
        dense, sparse = step_ms(*setting, sparse=False), step_ms(*setting, sparse=True)
        vocab, dim, sentences, name, _ = setting
        print(f"| {vocab} | {dim} | {sentences} | {name} | {dense:.2f} | {sparse:.2f} | {dense / sparse:.1f} |")


if __name__ == "__main__":
    main()
