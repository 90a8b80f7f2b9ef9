"""What the experiment scripts (``experiments/*.py``) share, so that each script holds only its own settings,
data and choice of model.

* :mod:`~graphtree.experiments.seeds` — the per-seed loop: skip a finished seed,
  seed, build, train (resuming a killed run), test, write the results file.
* :mod:`~graphtree.experiments.harness` — the set-up around that loop
  (:class:`~graphtree.experiments.harness.Experiment`): threads and device, epochs,
  data mirror, word vectors, ``--quick`` samples, the data's identity, run names.
* :mod:`~graphtree.experiments.sst_options` — ``experiments/sst.py``'s flags,
  run settings and run names over the script's settings tables.
* :mod:`~graphtree.experiments.sst_models` — ``experiments/sst.py``'s models,
  built from a run's settings.
* :mod:`~graphtree.experiments.baselines` — the n-gram baselines (naive Bayes,
  linear SVM) with their value chosen on dev.
* :mod:`~graphtree.experiments.sst_predict` — ``experiments/sst.py predict``:
  classify every node of a parsed sentence with a checkpoint, print and draw it.
* :mod:`~graphtree.experiments.scripts` — an experiment or benchmark script
  imported by its path (its settings table, for a report script or a test).

The command-line conventions themselves (flags, output folders, one-line errors)
are :mod:`graphtree.train.runs`.
"""
