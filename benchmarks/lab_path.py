"""The experiments' lab on the import path of a benchmark run as a script.

The benchmarks record where and on what code they ran, and write their tables into the docs, with the lab beside
the experiments (``experiments/lab``, imported as ``lab``), which is not installed with graphtree.
``python experiments/sst.py`` finds it beside the script; a benchmark imports this module first. The folder goes
after the standard library on the path, so that ``experiments/code.py`` never hides the standard ``code`` module.
Under pytest the project's settings put the folder on the path already.
"""

import sys
from pathlib import Path

EXPERIMENTS = str(Path(__file__).resolve().parent.parent / "experiments")
if EXPERIMENTS not in sys.path:
    sys.path.append(EXPERIMENTS)
