"""The n-gram baselines of the experiments: naive Bayes or a linear SVM on binary n-gram features, one model per
value of a grid (NB smoothing alpha, SVM C), the best on dev accuracy tested.

They train in one process with scikit-learn, in seconds; their results file has
the layout of a trained run's, one "epoch" per grid value.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..train.checkpoint import atomic_write_text
from ..train.runs import RunPaths, recorded_command, run_record

__all__ = ["GridResult", "grid_search", "phrase_texts", "write_baseline"]

Predict = Callable[[Sequence[str]], np.ndarray]


@dataclass
class GridResult:
    """Every grid value's scores (what ``score`` returned), the 1-based index of the best on dev, the time."""

    values: list[float]
    scores: list[dict[str, Any]]
    best: int
    seconds: float


def grid_search(model: str, grid: Sequence[float], seed: int, texts: Sequence[str], labels: Sequence[int],
                score: Callable[[Predict], dict[str, Any]], dev_accuracy: Callable[[dict[str, Any]], float],
                ngrams: tuple[int, int] = (1, 1)) -> GridResult:
    """Fit ``model`` ("nb" or "svm") on lowercased binary word n-grams of ``texts`` for each value of ``grid``;
    ``score(predict)`` scores one fitted model, ``dev_accuracy`` picks the best of those scores (the first on
    ties)."""
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.naive_bayes import MultinomialNB
    from sklearn.svm import LinearSVC

    vectorizer = CountVectorizer(lowercase=True, token_pattern=r"\S+", ngram_range=ngrams, binary=True)
    features = vectorizer.fit_transform(texts)
    began = time.perf_counter()
    scores, best = [], 0
    for value in grid:
        classifier = MultinomialNB(alpha=value) if model == "nb" else LinearSVC(C=value, random_state=seed)
        classifier.fit(features, labels)
        scores.append(score(lambda batch, fitted=classifier: fitted.predict(vectorizer.transform(batch))))
        if best == 0 or dev_accuracy(scores[-1]) > dev_accuracy(scores[best - 1]):
            best = len(scores)
    return GridResult(list(grid), scores, best, time.perf_counter() - began)


def write_baseline(experiment: str, name: str, args: argparse.Namespace, argv: Sequence[str], config: dict,
                   result: GridResult, history: list[dict], dev: dict, test: dict) -> Path:
    """Write the baseline's results file under ``OUT/<experiment>/`` and return its path."""
    seconds, steps = result.seconds, len(history)
    record = {"experiment": experiment, "run": name, "seed": args.seeds[0], "config": config,
              "command": recorded_command(f"{experiment}.py", argv), "best_epoch": result.best,
              "dev": dev, "test": test, "history": history, "wall_time_s": seconds,
              "seconds_per_epoch": seconds / steps, "train_seconds_per_epoch": seconds / steps,
              **run_record(args.threads)}
    path = RunPaths.under(args.out, experiment, args.quick).results / f"{name}.json"
    atomic_write_text(json.dumps(record, indent=1) + "\n", path)
    return path


def phrase_texts(tree: Any) -> list[str]:
    """The words under every node of a tree, as one string per node (node order): every labelled phrase of a
    treebank is an example for the baselines, as in Socher et al. 2013."""
    parent = {c: p for c, p in zip(*tree.edge_index.tolist())}
    words: list[list[str]] = [[] for _ in range(tree.num_nodes)]
    for node, pos in enumerate(tree.word_pos.tolist()):
        if pos >= 0:
            up = node
            while up is not None:  # add the word to the node and every ancestor, left to right
                words[up].append(tree.tokens[pos])
                up = parent.get(up)
    return [" ".join(w) for w in words]
