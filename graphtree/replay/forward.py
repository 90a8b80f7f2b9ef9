"""The replayed evaluation pass: a forward-only pass on padded batches, captured per bucket shape on a GPU, its
outputs put back in the batch's node order for the metrics."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ..backend import native
from ..errors import HostValueError
from .buckets import Buckets
from .capture import Replayer, has_top_down_pass
from .static import Bucket

__all__ = ["ReplayedForward"]


class ReplayedForward:
    """A forward-only pass on padded batches, for dev and test: ``forward(model, padded) -> outputs`` per padded
    row (``node_level``: put back in the batch's node order) or per graph, captured per bucket shape as a CUDA
    graph on a GPU (under ``no_grad``, in the model's mode at capture: eval, as the trainer evaluates).

    A model whose padded pass asks the host for values (or that a graph cannot capture) runs plainly instead:
    ``plain(model, batch)`` on the batch moved to the device. Outputs come back on the CPU, where the metrics
    read them with the host batches.
    """

    def __init__(self, model: torch.nn.Module, forward: Callable[[torch.nn.Module, Any], Tensor],
                 plain: Callable[[torch.nn.Module, Any], Tensor], prepare: Callable[[Any], Any] = lambda b: b,
                 node_level: bool = True, buckets: Buckets | None = None, graphs: bool | None = None) -> None:
        self.model, self.forward, self.plain, self.prepare, self.node_level = model, forward, plain, prepare, node_level
        self.buckets = buckets if buckets is not None else Buckets()
        self.device = next(model.parameters()).device
        self.graphs = self.device.type == "cuda" if graphs is None else graphs
        self.replayable = True
        self.fallback: str | None = None
        # Its padded batches carry a top-down plan too where a module runs top-down.
        self.replayer = Replayer(self.buckets, self.device, has_top_down_pass(model), self.graphs)
        self.passes = dict(replayed=0, padded=0, eager=0)

    @property
    def captures(self) -> int:
        """Graphs captured so far."""
        return self.replayer.captures

    @property
    def capture_seconds(self) -> float:
        """Seconds spent capturing them."""
        return self.replayer.capture_seconds

    def record(self) -> dict[str, Any]:
        return {"path": "eager" if not self.replayable else "replayed" if self.graphs else "padded",
                "fallback": self.fallback, "passes": dict(self.passes), "captures": self.captures,
                "capture_seconds": self.capture_seconds}

    @torch.no_grad()
    def __call__(self, batch: Any) -> Tensor:
        if self.replayable:
            try:
                return self._padded(batch)
            except HostValueError as error:  # a pass that reads host values (a top-down pass, today)
                self.replayable, self.fallback = False, str(error)
                self.replayer.clear()
                warnings.warn(f"{type(self.model).__name__}'s evaluation is not replayed: {error}", stacklevel=2)
        self.passes["eager"] += 1
        on_device = batch if self.device.type == "cpu" else batch.to(self.device)
        return self.plain(self.model, on_device).detach().cpu()

    def _padded(self, batch: Any) -> Tensor:
        trees = self.prepare(batch)
        _, tensors, bucket = self.replayer.bucket(trees)
        if self.graphs and bucket.graph is None:
            self._capture(bucket)
        if bucket.graph is not None:
            out = bucket.replay()
            self.passes["replayed"] += 1
        else:
            bucket.forget_derived()  # the layouts derived from another batch's fixed tensors: made anew
            with native.use_native(False):
                out = self.forward(self.model, bucket.batch)
            self.passes["padded"] += 1
        out = out.detach().cpu()
        if not self.node_level:
            return out
        real = tensors["node_weight"] != 0
        rows = real.nonzero().view(-1)  # host tensors: no device synchronization
        plain = out.new_zeros((int(trees.num_nodes), *out.shape[1:]))
        return plain.index_copy_(0, tensors["source"][rows], out.index_select(0, rows))

    def _capture(self, bucket: Bucket) -> None:
        """Run the bucket's pass once eagerly (it warms up, and raises what a padded pass cannot do), then
        capture it; a pass a graph cannot hold leaves the bucket uncaptured (it runs eagerly)."""
        error = self.replayer.capture(bucket, lambda padded: self.forward(self.model, padded), warm_up=True)
        if error is not None:
            warnings.warn(f"{type(self.model).__name__}'s evaluation pass could not be captured, it runs "
                          f"eagerly on the padded batch: {error}", stacklevel=3)
            self.graphs = False
