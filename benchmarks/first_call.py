"""The time of README's first layer call in a fresh process: how long a new user waits for the kernels.

Runs README's first example (``NaryTreeLSTM`` on two SST trees) twice and prints the import time, both calls'
times, whether the compiled kernels were loaded and how long building or loading them took (included in the
first call). Run it in a fresh environment with an empty ``GRAPHTREE_CACHE`` to see what a new install costs:
``GRAPHTREE_CACHE=$(mktemp -d) python benchmarks/first_call.py`` (docs/performance.md, "Building the kernels").
"""

import time

began = time.perf_counter()
import torch  # noqa: E402  (the imports are part of what is timed)
from torch_geometric.data import Batch  # noqa: E402

import graphtree  # noqa: E402
from graphtree.backend import native  # noqa: E402
from graphtree.data import from_ptb  # noqa: E402
from graphtree.nn import NaryTreeLSTM  # noqa: E402

imported = time.perf_counter() - began
batch = Batch.from_data_list([from_ptb("(3 (2 The) (3 (2 Rock) (4 rocks)))"),
                              from_ptb("(1 (2 (2 a) (1 dull)) (2 film))")])
x = torch.randn(batch.num_nodes, 50)
cell = NaryTreeLSTM(50, 64)
began = time.perf_counter()
cell(x, batch)
first = time.perf_counter() - began
began = time.perf_counter()
cell(x, batch)
second = time.perf_counter() - began
print(f"import {imported:.2f} s  first call {first:.3f} s  second call {second:.4f} s  "
      f"kernels loaded {native.kernels_loaded()}  build/load {native.build_seconds():.3f} s  "
      f"graphtree {graphtree.__file__}")
