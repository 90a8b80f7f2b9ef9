"""Where graphtree's speed lives, below the cells and beside the engine.

* :mod:`graphtree.backend.compiled`: the paper cells' level math compiled (one
  kernel per cell, in ``graphtree/csrc``), the one fast path beside each cell's
  readable ``update``, and the one place that decides when it runs;
* :mod:`graphtree.backend.native`: loading those kernels (``GRAPHTREE_NATIVE``,
  :func:`~graphtree.backend.native.ensure_built`): the ones ``pip install`` built, else built at first use;
* :mod:`graphtree.backend.kernel_build`: how they are built, the one definition both of those run;
* :mod:`graphtree.backend.threads`: a floating-point setting on every thread of
  PyTorch's intra-op pool (subnormals flushed during training);
* :mod:`graphtree.backend.allocator`: :func:`~graphtree.backend.allocator.keep_freed_memory`, so that
  passes over large graphs reuse memory instead of page-faulting it afresh.
"""

from . import allocator, compiled, native, threads

__all__ = ["allocator", "compiled", "native", "threads"]
