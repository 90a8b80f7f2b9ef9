"""What the experiment scripts (``experiments/*.py``) share, so that each script holds only its own settings,
data and choice of model.

* :mod:`~graphtree.experiments.seeds` — the per-seed loop: skip a finished seed,
  seed, build, train (resuming a killed run), test, write the results file.
* :mod:`~graphtree.experiments.baselines` — the n-gram baselines (naive Bayes,
  linear SVM) with their value chosen on dev.
* :mod:`~graphtree.experiments.sst_predict` — ``experiments/sst.py predict``:
  classify every node of a parsed sentence with a checkpoint, print and draw it.
* :mod:`~graphtree.experiments.scripts` — an experiment script imported by its
  path (its settings table, for a report script or a test).

The command-line conventions themselves (flags, output folders, one-line errors)
are :mod:`graphtree.train.runs`.
"""
