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

A problem with the data or the settings is a :class:`~graphtree.experiments.runs.RunError`
(or the :class:`~graphtree.errors.TreeFormatError` of the malformed record)
naming the file, the line and what to change.
"""

from .inputs import NodeInputs, attach_words, feature_channels, word_embedding
from .models import MODELS, GraphModel, Structure, build_model, describe_structure, model_settings
from .predictions import write_predictions
from .splits import SPLITS, GraphSplits, load_graph_splits
from .task import Task, find_task
from .training import Prediction, TaskTrainer

__all__ = ["MODELS", "SPLITS", "GraphModel", "GraphSplits", "NodeInputs", "Prediction", "Structure", "Task",
           "TaskTrainer", "attach_words", "build_model", "describe_structure", "feature_channels", "find_task",
           "load_graph_splits", "model_settings", "word_embedding", "write_predictions"]
