"""``experiments/train.py --model tfidf``: the bag-of-n-grams baseline on the same split and in the same output
files as the tree models (:func:`tfidf_runs`), so that one sees at once whether structure helps on one's data.

A graph is the sequence of its nodes' tokens in file order, each node's field
tokens after its own (``<field>:<token>``, as the tree models embed them); its
TF-IDF uni- and bigrams (sublinear tf, l2 rows, n-grams of at least two
training graphs) go into a multinomial logistic regression (graph classes) or
a ridge regression (graph numbers), scikit-learn's, with the regularization
chosen on dev from :data:`STRENGTHS`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from graphtree.train.checkpoint import atomic_write_text
from graphtree.train.pairs import relatedness

from ..runs import RunPaths, fail, finished_run, note, recorded_command, run_record
from .inputs import field_names
from .predictions import write_predictions
from .splits import SPLITS, GraphSplits
from .task import Task
from .training import Prediction

__all__ = ["STRENGTHS", "graph_words", "tfidf_runs"]

STRENGTHS = (0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0)
"""The inverse regularization strengths tried (``C`` of the logistic regression, ``1 / alpha`` of the ridge)."""


def graph_words(graph: Any, fields: Sequence[str]) -> list[str]:
    """A graph's words in node order: each node's token (where it has one), then its field tokens."""
    words: list[list[str]] = [[] for _ in range(int(graph.num_nodes))]
    for node, pos in enumerate(graph.word_pos.tolist()):
        if pos >= 0:
            words[node].append(graph.tokens[pos])
    for name in fields:
        for token, node in zip(getattr(graph, f"{name}_tokens"), getattr(graph, f"{name}_index").tolist()):
            words[node].append(f"{name}:{token}")
    return [w for node in words for w in node]


def _identity(words: list[str]) -> list[str]:
    return words


def tfidf_runs(splits: GraphSplits, task: Task, seeds: Sequence[int], results: RunPaths, run_name: Callable[[int], str],
               config: dict[str, Any], argv: Sequence[str], threads: int) -> None:
    """Fit, select on dev and test the TF-IDF baseline once per seed (the seed is the solver's; with lbfgs the
    seeds agree), writing ``<run>.json`` and ``<run>.predictions.tsv`` as the tree models' runs do."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression, Ridge

    if task.level != "graph":
        fail("--model tfidf learns graph labels; this data has node labels only (use a tree model, or give "
             "graph labels)")
    began = time.perf_counter()
    graphs = {s: list(splits.graphs[s]) for s in SPLITS}
    fields = field_names(graphs["train"][0]) if graphs["train"] else []
    words = {s: [graph_words(g, fields) for g in gs] for s, gs in graphs.items()}
    gold = {s: torch.cat([task.gold(g).view(-1) for g in gs]) for s, gs in graphs.items()}
    keep = {s: task.labelled(gold[s]) for s in SPLITS}
    vectorizer = TfidfVectorizer(analyzer="word", tokenizer=_identity, preprocessor=_identity, token_pattern=None,
                                 lowercase=False, ngram_range=(1, 2), min_df=2, sublinear_tf=True)
    train_rows = [w for w, k in zip(words["train"], keep["train"].tolist()) if k]
    vectorizer.fit(train_rows)
    features = {s: vectorizer.transform(words[s]) for s in SPLITS}
    config = {**config, "num_features": len(vectorizer.vocabulary_), "strengths": list(STRENGTHS)}
    note(f"tfidf: {len(vectorizer.vocabulary_)} uni- and bigrams from {len(train_rows)} training graphs "
         f"({time.perf_counter() - began:.0f} s)")
    y_train = gold["train"][keep["train"]].numpy()
    x_train = features["train"][keep["train"].numpy()]

    def scores(model: Any, split: str) -> tuple[dict[str, Any], torch.Tensor]:
        predicted = torch.as_tensor(model.predict(features[split]))
        labelled = keep[split]
        if task.kind == "class":
            predicted = predicted.long()
            correct = int((predicted.eq(gold[split]) & labelled).sum())
            total = int(labelled.sum())
            return {"accuracy": 100.0 * correct / total if total else None, "correct": correct,
                    "total": total}, predicted
        predicted = predicted.float()
        if not labelled.any():
            return {"mse": None, "pearson": None, "spearman": None, "n": 0}, predicted
        return relatedness(predicted[labelled].tolist(), gold[split][labelled].tolist()), predicted

    metric = task.metric
    for seed in seeds:
        name = run_name(seed)
        if finished_run(results.results, name, config) is not None:
            note(f"{name}: finished earlier, skipped")
            continue
        tic = time.perf_counter()
        history, best, best_model = [], None, None
        for strength in STRENGTHS:
            step = time.perf_counter()
            model = (LogisticRegression(C=strength, max_iter=2000, random_state=seed) if task.kind == "class"
                     else Ridge(alpha=1.0 / strength, random_state=seed))
            model.fit(x_train, y_train)
            dev, _ = scores(model, "dev")
            history.append({"strength": strength, f"dev_{metric}": dev[metric],
                            "train_seconds": time.perf_counter() - step})
            note(f"{name}: strength {strength:g}, dev {metric} {dev[metric]:.4g}")
            better = best is None or (dev[metric] > best[1][metric] if task.kind == "class"
                                      else dev[metric] < best[1][metric])
            if better:
                best, best_model = (strength, dev), model
        test, predicted = scores(best_model, "test")
        seconds = time.perf_counter() - tic
        predictions_file = f"{name}.predictions.tsv"
        write_predictions(results.results / predictions_file, task, splits, "test",
                          [Prediction(p.view(1), g.view(1), None) for p, g in zip(predicted, gold["test"])])
        record = {"experiment": "train", "run": name, "seed": seed, "config": config,
                  "command": recorded_command("train.py", argv), "best_epoch": None, "best_strength": best[0],
                  "dev": best[1], "test": test, "history": history, "wall_time_s": seconds,
                  "seconds_per_epoch": seconds / len(history),
                  "train_seconds_per_epoch": sum(h["train_seconds"] for h in history) / len(history),
                  "predictions": predictions_file, "num_parameters": int(best_model.coef_.size),
                  **run_record(threads)}
        results.results.mkdir(parents=True, exist_ok=True)
        atomic_write_text(json.dumps(record, indent=1) + "\n", results.results / f"{name}.json")
        print(f"{name}: best dev strength {best[0]:g}, {task.scores(test)}; predictions in {predictions_file}, "
              f"{seconds:.0f} s", flush=True)
