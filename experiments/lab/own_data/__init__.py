"""Training on trees and DAGs of your own (CoNLL-U, PTB, JSON Lines): what ``experiments/train.py`` is made of,
one module per role.

* :func:`load_graph_splits` reads train, dev and test with
  :class:`~graphtree.datasets.GraphFiles`: one file split by a seeded shuffle,
  or a folder holding ``train.*``, ``dev.*`` and ``test.*``.
* :func:`find_task` decides what is learnt from the labels there are
  (:class:`Task`): a class or a number per graph, or a class per node.
* :func:`attach_words` gives the nodes word ids, :func:`word_embedding`
  their vectors; :class:`NodeInputs` turns them (and numeric features ``x``)
  into node vectors.
* :func:`model_settings` checks that a cell fits the data (children per node,
  where the inputs are) and :func:`build_model` builds it under an output
  layer (:class:`GraphModel`).
* :class:`TaskTrainer` is :class:`~graphtree.train.Trainer` with the task's
  loss and dev selection (accuracy, or mean squared error);
  :func:`write_predictions` writes one line per test graph.

A problem with the data or the settings is a :class:`~lab.runs.RunError`
(or the :class:`~graphtree.errors.TreeFormatError` of the malformed record)
naming the file, the line and what to change.
"""

import importlib
from typing import TYPE_CHECKING, Any

# Imported when first used (PEP 562): experiments/train.py reads MODELS (.names, no torch) for its flags before
# it imports the rest.
_LAZY = {
    "NodeInputs": ".inputs", "attach_fields": ".inputs", "node_fields": ".inputs",
    "attach_words": ".inputs", "feature_channels": ".inputs", "word_embedding": ".inputs",
    "MODELS": ".names", "GraphModel": ".models", "Structure": ".models", "build_model": ".models",
    "describe_structure": ".models", "model_settings": ".models", "write_predictions": ".predictions",
    "tfidf_runs": ".tfidf",
    "SPLITS": ".splits", "GraphSplits": ".splits", "load_graph_splits": ".splits", "Task": ".task",
    "find_task": ".task", "Prediction": ".training", "TaskTrainer": ".training",
}

if TYPE_CHECKING:
    from .inputs import NodeInputs, attach_fields, attach_words, feature_channels, node_fields, word_embedding
    from .models import GraphModel, Structure, build_model, describe_structure, model_settings
    from .names import MODELS
    from .predictions import write_predictions
    from .splits import SPLITS, GraphSplits, load_graph_splits
    from .task import Task, find_task
    from .tfidf import tfidf_runs
    from .training import Prediction, TaskTrainer


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'lab.own_data' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = ["MODELS", "SPLITS", "GraphModel", "GraphSplits", "NodeInputs", "Prediction", "Structure", "Task",
           "TaskTrainer", "attach_fields", "attach_words", "build_model", "describe_structure", "feature_channels",
           "find_task", "load_graph_splits", "model_settings", "node_fields", "tfidf_runs", "word_embedding",
           "write_predictions"]
