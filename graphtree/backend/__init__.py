"""Where graphtree's speed lives, below the cells and beside the engine.

* :mod:`graphtree.backend.compiled`: the paper cells' level math compiled (one
  kernel per cell, in ``graphtree/csrc``), the one fast path beside each cell's
  readable ``update``, and the one place that decides when it runs;
* :mod:`graphtree.backend.native`: building and loading those kernels
  (``GRAPHTREE_NATIVE``, :func:`~graphtree.backend.native.ensure_built`);
* :mod:`graphtree.backend.threads`: a floating-point setting on every thread of
  PyTorch's intra-op pool (subnormals flushed during training);
* :mod:`graphtree.backend.thread_budget`: :class:`~graphtree.backend.thread_budget.ThreadBudget`, fewer
  intra-op threads while other processes keep the processors busy (what a training script opts into);
* :mod:`graphtree.backend.allocator`: :func:`~graphtree.backend.allocator.keep_freed_memory`, so that
  passes over large graphs reuse memory instead of page-faulting it afresh.
"""

from . import allocator, compiled, native, threads

__all__ = ["allocator", "compiled", "native", "threads"]
