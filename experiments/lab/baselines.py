"""The n-gram baselines of the experiments: naive Bayes or a linear SVM on binary n-gram features, one model per
value of a grid (NB smoothing alpha, SVM C), the best on dev accuracy tested.

* :func:`sst_phrase_baseline` — SST (``experiments/sst.py --model nb|svm``):
  every labelled phrase an example, word unigrams, as Socher et al. 2013.
* :func:`trec_question_baseline` — TREC (``experiments/trec.py --model svm``):
  a linear SVM on a question's word uni- and bigrams.

They train in one process with scikit-learn, in seconds; their results file has
the layout of a trained run's, one "epoch" per grid value. The scripts load the
data; the rest is here.
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
import torch

from graphtree.train import distributed
from graphtree.train.checkpoint import atomic_write_text

from .runs import RunPaths, fail, recorded_command, run_record

__all__ = ["GridResult", "grid_search", "phrase_texts", "single_process", "sst_phrase_baseline",
           "trec_question_baseline", "write_baseline"]

Predict = Callable[[Sequence[str]], np.ndarray]


def single_process(model: str) -> None:
    """A user error under ``torchrun``: a baseline trains in one process."""
    if distributed.launched():
        fail(f"--model {model} trains in one process (scikit-learn); run it without torchrun")


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


def sst_phrase_baseline(args: argparse.Namespace, argv: Sequence[str], splits: dict[str, Sequence[Any]],
                        grid: Sequence[float]) -> Path:
    """Naive Bayes or linear SVM (``args.model``) on binary bag-of-words features of every labelled phrase of the
    SST ``splits`` (trees with ``y`` and ``is_root``); the value of ``grid`` best on dev root accuracy is tested.
    Writes the results file and prints the run's line; returns the file's path."""
    config = dict(model=args.model, embeddings=None, fine_grained=args.fine_grained, supervision="all",
                  structure="gold", head=None, activation=None, paper="socher", epochs=None, quick=args.quick,
                  ngrams="unigrams", grid=list(grid))
    phrases = {}
    for split, trees in splits.items():
        texts = [t for tree in trees for t in phrase_texts(tree)]
        labels, is_root = torch.cat([tree.y for tree in trees]), torch.cat([tree.is_root for tree in trees])
        keep = labels >= 0  # unlabelled nodes are no examples
        phrases[split] = ([t for t, k in zip(texts, keep.tolist()) if k], labels[keep], is_root[keep])

    def accuracy(predict: Predict) -> dict[str, dict]:
        scores = {}
        for split in ("dev", "test"):
            texts, gold, roots = phrases[split]
            hit = torch.from_numpy(predict(texts)) == gold
            scores[split] = dict(root=100.0 * float(hit[roots].float().mean()),
                                 phrase=100.0 * float(hit.float().mean()), root_total=int(roots.sum()),
                                 phrase_total=len(gold))
        return scores

    result = grid_search(args.model, grid, args.seeds[0], phrases["train"][0], phrases["train"][1].numpy(),
                         accuracy, lambda scores: scores["dev"]["root"])
    history = [{"epoch": k + 1, "value": value, "dev_root": s["dev"]["root"], "dev_phrase": s["dev"]["phrase"]}
               for k, (value, s) in enumerate(zip(result.values, result.scores))]
    best = result.scores[result.best - 1]
    name = f"{args.model}_unigrams_{'fine' if args.fine_grained else 'binary'}_s{args.seeds[0]}"
    path = write_baseline("sst", name, args, argv, config, result, history, best["dev"], best["test"])
    print(f"{name}: best {'alpha' if args.model == 'nb' else 'C'} {grid[result.best - 1]}, dev root "
          f"{best['dev']['root']:.2f}, test root {best['test']['root']:.2f}, test phrase "
          f"{best['test']['phrase']:.2f}, {result.seconds:.0f} s")
    return path


def trec_question_baseline(args: argparse.Namespace, argv: Sequence[str], splits: dict[str, Sequence[Any]],
                           grid: Sequence[float]) -> Path:
    """A linear SVM on binary word uni- and bigram features of the TREC questions of ``splits`` (graphs with
    ``tokens`` and ``coarse``); the C of ``grid`` best on dev accuracy is tested. Writes the results file and
    prints the run's line; returns the file's path."""
    texts = {s: [" ".join(d.tokens) for d in data] for s, data in splits.items()}
    labels = {s: [int(d.coarse) for d in data] for s, data in splits.items()}

    def accuracy(predict: Predict) -> dict[str, float]:
        return {s: 100.0 * float((predict(texts[s]) == labels[s]).mean()) for s in ("dev", "test")}

    result = grid_search("svm", grid, args.seeds[0], texts["train"], labels["train"], accuracy,
                         lambda scores: scores["dev"], ngrams=(1, 2))
    history = [{"epoch": k + 1, "C": c, "dev_root": scores["dev"]} for k, (c, scores) in
               enumerate(zip(result.values, result.scores))]
    best = result.scores[result.best - 1]
    name = f"svm_ngrams_s{args.seeds[0]}"
    config = dict(model="svm", features="binary word 1-2-grams, lowercased", grid=list(grid), quick=args.quick)
    path = write_baseline("trec", name, args, argv, config, result, history, {"accuracy": best["dev"]},
                          {"accuracy": best["test"]})
    print(f"{name}: best C {grid[result.best - 1]}, dev {best['dev']:.2f}, test {best['test']:.2f}, "
          f"{result.seconds:.1f} s")
    return path
