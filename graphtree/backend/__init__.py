"""Where graphtree's speed lives, below the cells and beside the engine.

* :mod:`graphtree.backend.dispatch`: which compiled kernel (``graphtree/csrc``)
  serves a cell's pass, and when: the one place that ties a cell to its kernel,
  the paper cells' fast path beside each cell's readable ``update``;
* :mod:`graphtree.backend.native`: loading those kernels (``GRAPHTREE_NATIVE``,
  :func:`~graphtree.backend.native.ensure_built`): the ones ``pip install`` built, else built at first use;
* :mod:`graphtree.backend.kernel_build`: how they are built, the one definition both of those run;
* :mod:`graphtree.backend.threads`: a floating-point setting on every thread of
  PyTorch's intra-op pool (subnormals flushed to zero, where a program asks for it);
* :mod:`graphtree.backend.thread_budget`: :class:`~graphtree.backend.thread_budget.ThreadBudget`, fewer
  intra-op threads while other processes keep the processors busy (what a training script opts into);
* :mod:`graphtree.backend.allocator`: :func:`~graphtree.backend.allocator.keep_freed_memory`, so that
  passes over large graphs reuse memory instead of page-faulting it afresh.
"""

from . import allocator, dispatch, native, threads

__all__ = ["allocator", "dispatch", "native", "threads"]
