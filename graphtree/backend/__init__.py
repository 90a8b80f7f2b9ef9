"""Where graphtree's speed lives, below the cells and beside the engine.

* :mod:`graphtree.backend.native`: the C++ extension that holds the compiled
  kernels (``graphtree/csrc``): building it, loading it, and whether to use it
  (``GRAPHTREE_NATIVE``, :func:`~graphtree.backend.native.ensure_built`);
* :mod:`graphtree.backend.dispatch`: which kernel of that extension serves a
  cell's pass, and when (the one place that ties a cell to its kernel, the
  paper cells' fast path beside each cell's readable ``update``);
* :mod:`graphtree.backend.threads`: a floating-point setting on every thread of
  PyTorch's intra-op pool (subnormals flushed to zero, where a program asks for it);
* :mod:`graphtree.backend.allocator`: :func:`~graphtree.backend.allocator.keep_freed_memory`, so that
  passes over large graphs reuse memory instead of page-faulting it afresh.
"""

from . import allocator, dispatch, native, threads

__all__ = ["allocator", "dispatch", "native", "threads"]
