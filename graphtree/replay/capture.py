"""The capture loop that a replayed training step and a replayed evaluation pass share: a batch padded into its
bucket (made at its shape's first batch), the bucket's pass captured once as a CUDA graph, then replayed.

What differs between the two is when they capture and what they do instead (:class:`~graphtree.replay.step.
ReplayedStep` trains its first batch eagerly and checks its loss; :class:`~graphtree.replay.forward.
ReplayedForward` warms each new bucket up and captures it at once); the buckets, their keys, the memory pool,
the capture itself and its bookkeeping live here, once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import Tensor

from ..backend import native
from .batch import PaddedBatch, num_graphs
from .buckets import Buckets, BucketShape
from .padding import padded_batch
from .static import Bucket

__all__ = ["Replayer", "bucket_key", "has_top_down_pass", "on_side_stream"]

T = TypeVar("T")


def has_top_down_pass(model: torch.nn.Module) -> bool:
    """Whether a module of ``model`` runs top-down (a :class:`~graphtree.nn.TreeCell` with ``direction``
    ``"top_down"``): its padded batches then carry a top-down plan."""
    return any(getattr(module, "direction", None) == "top_down" for module in model.modules())


def bucket_key(shape: BucketShape, tensors: dict[str, Tensor], num_graphs: int) -> tuple:
    """What a bucket's graph holds fixed: the shape, the number of graphs (``num_graphs`` is a host number a
    captured step keeps), and every tensor's name, type and shape (a graph attribute's shape follows the graphs,
    and a later batch with an attribute more or less must not leave a stale one in the graph)."""
    layout = sorted((key, str(value.dtype), tuple(value.shape)) for key, value in tensors.items())
    return shape, num_graphs, tuple(layout)


def on_side_stream(device: torch.device, run: Callable[[], T]) -> T:
    """``run()`` on a side stream of ``device``, ordered after the work before it and before the work after:
    warm-up work off the capture's stream, as PyTorch advises."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        out = run()
    torch.cuda.current_stream(device).wait_stream(side)
    return out


class Replayer:
    """The buckets of one replayed pass, by key (:func:`bucket_key`), their fixed tensors on ``device``, and
    their CUDA graphs in one memory pool (made where ``graphs``).

    Args:
        buckets: The padding grid.
        device: Where the fixed tensors live (the model's device).
        top_down: Pad a top-down plan too (a model with a top-down pass: :func:`has_top_down_pass`).
        graphs: Whether graphs are captured (a memory pool is made for them).
    """

    def __init__(self, buckets: Buckets, device: torch.device, top_down: bool, graphs: bool) -> None:
        self.buckets, self.device, self.top_down = buckets, device, top_down
        self.pool = torch.cuda.graph_pool_handle() if graphs else None
        self.captures, self.capture_seconds = 0, 0.0
        self._by_key: dict[tuple, Bucket] = {}

    def __len__(self) -> int:
        """The buckets made so far."""
        return len(self._by_key)

    def clear(self) -> None:
        """Forget every bucket (a pass that falls back to eager needs none)."""
        self._by_key.clear()

    def bucket(self, batch: Any) -> tuple[BucketShape, dict[str, Tensor], Bucket]:
        """``batch`` padded (its shape and host tensors) and copied into its bucket, which is made at its first
        batch."""
        shape, tensors = padded_batch(batch, self.buckets, top_down=self.top_down)
        graphs = num_graphs(batch)
        key = bucket_key(shape, tensors, graphs)
        bucket = self._by_key.get(key)
        if bucket is None:
            bucket = self._by_key[key] = Bucket.make(shape, tensors, self.device, graphs)
        bucket.fill(tensors)
        return shape, tensors, bucket

    def capture(self, bucket: Bucket, run: Callable[[PaddedBatch], Tensor], warm_up: bool = False
                ) -> RuntimeError | None:
        """Capture ``run(bucket.batch)`` as the bucket's graph (its result the bucket's ``output``), under the
        definition pass (a padded plan has no compiled kernels); with ``warm_up``, run it once eagerly first, on a
        side stream (what that raises is raised). Everything derived from the fixed tensors is made anew inside
        the graph. Returns the error of a pass a graph cannot hold (e.g. an operation that waits on the GPU),
        and then nothing is captured."""
        start = time.perf_counter()
        with native.use_native(False):
            bucket.forget_derived()
            if warm_up:
                on_side_stream(self.device, lambda: run(bucket.batch))
                bucket.forget_derived()
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(graph, pool=self.pool):
                    output = run(bucket.batch)
            except RuntimeError as error:
                return error
            finally:
                bucket.forget_derived()
        bucket.graph, bucket.output = graph, output.detach()
        self.captures += 1
        self.capture_seconds += time.perf_counter() - start
        return None
