"""What the experiment scripts (``experiments/*.py``) share, so that each script holds only its own settings,
data and choice of model.

* :mod:`~lab.seeds` — the per-seed loop: skip a finished seed,
  seed, build, train (resuming a killed run), test, write the results file.
* :mod:`~lab.harness` — the set-up around that loop
  (:class:`~lab.harness.Experiment`): threads and device, epochs,
  data mirror, word vectors, ``--quick`` samples, the data's identity, run names.
* :mod:`~lab.sst_options` — ``experiments/sst.py``'s flags,
  run settings and run names over the script's settings tables.
* :mod:`~lab.sst_models` — ``experiments/sst.py``'s models,
  built from a run's settings.
* :mod:`~lab.baselines` — the n-gram baselines (naive Bayes,
  linear SVM) with their value chosen on dev.
* :mod:`~lab.sst_predict` — ``experiments/sst.py predict``:
  classify every node of a parsed sentence with a checkpoint, print and draw it.
* :mod:`~lab.scripts` — an experiment or benchmark script
  imported by its path (its settings table, for a report script or a test).
* :mod:`~lab.runs` — the command-line conventions (flags,
  output folders, one-line errors) of every script.
* :mod:`~lab.provenance` — what a results file records about
  the code and machine that made it, and the numerics version.
* :mod:`~lab.report` — the statistics, tables and pages the
  report scripts (``experiments/report_*.py``) share.
* :mod:`~lab.own_data` — training on files of one's own
  (``experiments/train.py``): splits, the task the labels give, models, a
  :class:`~graphtree.train.Trainer` for graph or node labels, predictions.
* :mod:`~lab.structure` — the structure benchmarks'
  (``experiments/structure.py``) sequence baselines and breakdowns.

This is the lab beside the library: it imports the library (cells, engine,
schedules, data, datasets, backend, models, the trainer), never the other way
round (``tests/test_layering.py``), so the library reads and runs without it.
"""
