"""Where graphtree's speed lives, below the cells and beside the engine.

* :mod:`graphtree.backend.compiled`: the paper cells' level math compiled (one
  kernel per cell, in ``graphtree/csrc``), the one fast path beside each cell's
  readable ``update``, and the one place that decides when it runs;
* :mod:`graphtree.backend.native`: building and loading those kernels
  (``GRAPHTREE_NATIVE``, :func:`~graphtree.backend.native.ensure_built`);
* :mod:`graphtree.backend.threads`: a floating-point setting on every thread of
  PyTorch's intra-op pool (subnormals flushed during training).
"""

from . import compiled, native, threads

__all__ = ["compiled", "native", "threads"]
