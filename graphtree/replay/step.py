"""The replayed training step: forward, loss, backward and optimizer step captured as one CUDA graph per bucket
shape, and replayed with one launch.

Its first batch runs eagerly on the padded plan (it trains, and warms the libraries up), after the loss check
(:func:`~graphtree.replay.check.check_loss`); then each bucket's step is captured (:mod:`graphtree.replay.capture`).
On the CPU, and with ``graphs=False``, every batch runs the padded step eagerly.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ..backend import native
from ..errors import HostValueError, InvalidArgumentError
from .batch import PaddedBatch, model_node_loss
from .buckets import Buckets
from .capture import Replayer, has_top_down_pass, on_side_stream
from .check import check_loss, plain_batch
from .static import Bucket

__all__ = ["ReplayStats", "ReplayedStep"]


@dataclass
class ReplayStats:
    """What a :class:`ReplayedStep` did: steps by kind, graphs captured and the time that took, and the padding
    (nodes of the batches against rows run)."""

    eager: int = 0
    padded_eager: int = 0
    replayed: int = 0
    captures: int = 0
    capture_seconds: float = 0.0
    nodes: int = 0
    padded_nodes: int = 0
    shapes: set = field(default_factory=set)

    @property
    def padding(self) -> float:
        """Rows run over nodes of the batches (1.0: no padding)."""
        return self.padded_nodes / self.nodes if self.nodes else float("nan")


class ReplayedStep:
    """A training step (forward, loss, backward, optimizer step) that replays as a CUDA graph per bucket shape.

    The first batch runs eagerly on the padded plan (it trains, and warms the step up); then its step is
    captured. A batch of a shape seen before is copied into that graph's fixed tensors and replayed; one of a new
    shape is captured first, then replayed. A bucket is a shape, a number of graphs and the batch's tensor
    attributes (names, types, and the graph attributes' shapes): the last, smaller batch of an epoch gets its
    own graph.
    Each call returns the batch's loss as a device tensor (no synchronization).

    Before its first step, once, the step checks the loss: the loss of the padded batch must be the loss of the
    batch itself (to a relative ``1e-5``), both computed without gradients or an update. A loss that counts the
    replicas (a mean over all rows, a pooling that keeps the replicas' row) raises :class:`ReplayError`, naming
    the padded attributes it read; one that fails on the padded batch raises it with the failure.

    Args:
        model: Maps a batch to per-node logits (e.g. :class:`~graphtree.models.TreeClassifier`); in a replayed
            step it gets a :class:`PaddedBatch`.
        optimizer: Its optimizer, one that runs without host values, on every device (a step that runs on the
            CPU must replay on a GPU): :func:`graphtree.train.make_optimizer` with ``capturable=True``,
            :class:`~graphtree.train.CapturableAdagrad`, ``torch.optim.SGD``, or a PyTorch optimizer made with
            ``capturable=True`` (Adam's runs on a GPU only). Others raise ``ValueError``.
        loss: ``loss(model, batch) -> scalar``; by default :func:`weighted_node_loss` of ``model(batch)``. It must
            weigh replicas 0 (``batch.node_weight``) and drop the replicas' row of a pooling per graph (see
            :class:`PaddedBatch`). The check also runs it on the plain batch, with ``node_weight`` all ones
            where the batch has none.
        buckets: The padding grid.
        graphs: Capture CUDA graphs (default: where the model is on a GPU). Without, the padded step runs eagerly.
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 loss: Callable[[torch.nn.Module, Any], Tensor] = model_node_loss,
                 buckets: Buckets = Buckets(),  # noqa: B008 (a frozen dataclass: one default is safe to share)
                 graphs: bool | None = None) -> None:
        self.model, self.optimizer, self.loss, self.buckets = model, optimizer, loss, buckets
        self.device = next(model.parameters()).device
        self.graphs = self.device.type == "cuda" if graphs is None else graphs
        if self.graphs and self.device.type != "cuda":
            raise InvalidArgumentError(f"CUDA graphs need a model on a GPU, this one is on {self.device}")
        refuse_uncapturable(optimizer)
        self.stats = ReplayStats()
        self.replayable = True
        # Padded top-down plans only for a model with a top-down pass: their shapes would split the buckets of
        # one without.
        self.replayer = Replayer(buckets, self.device, has_top_down_pass(model), self.graphs)
        self.reason: str | None = None  # why the step runs eagerly, once it does
        self._warm = False
        self._checked = False

    def __call__(self, batch: Any) -> Tensor:
        if not self.replayable:
            return self._eager(batch)
        shape, _, bucket = self.replayer.bucket(batch)
        if bucket.graph is None and self.graphs and self._warm:
            self._capture(bucket)  # warm already: captured at once, and this batch's step is its first replay
            if bucket.graph is None:
                return self._eager(batch)
        if bucket.graph is not None:
            loss = bucket.replay()
            self.stats.replayed += 1
        else:
            # The first batch (and on the CPU every batch) runs eagerly on the padded plan: it trains, makes the
            # optimizer's state and warms the libraries up before any capture. Before that, once, the loss is
            # checked (a loss that differs raises here, before any update).
            unreplayable = None if self._checked else check_loss(self.model, self.loss, batch, bucket, self.device)
            self._checked = unreplayable is None
            if unreplayable is None:
                try:
                    loss = self._padded_step(bucket)
                except HostValueError as error:  # a pass that asks for host values (a ReplayError among them)
                    unreplayable = error
            if unreplayable is not None:
                warnings.warn(f"{type(self.model).__name__}'s step is not replayed: {unreplayable}", stacklevel=2)
                self.replayable, self.reason = False, str(unreplayable)
                self.replayer.clear()
                return self._eager(batch)
            self.stats.padded_eager += 1
            self._warm = True
            if self.graphs:
                self._capture(bucket)
        self.stats.nodes += int(batch.num_nodes)
        self.stats.padded_nodes += shape.num_nodes
        self.stats.shapes.add(shape)
        return loss

    def _step(self, batch: Any) -> Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        loss = self._graph_step(batch)
        return loss.detach()

    def _graph_step(self, batch: PaddedBatch) -> Tensor:
        """What a captured graph holds: the loss, its backward, the optimizer's step."""
        loss = self.loss(self.model, batch)
        loss.backward()
        self.optimizer.step()
        return loss

    def _eager(self, batch: Any) -> Tensor:
        self.stats.eager += 1
        # The batch as the check gets it: on the model's device (a caller keeps batches on the host for padding).
        return self._step(plain_batch(batch, self.device))

    def _padded_step(self, bucket: Bucket) -> Tensor:
        # The padded plan's slot layouts are derived from its fixed tensors on first use: made anew here, never
        # kept from another batch. The compiled CPU kernels read host tables a padded plan lacks: off.
        bucket.forget_derived()
        with native.use_native(False):
            if not self.graphs:
                return self._step(bucket.batch)
            return on_side_stream(self.device, lambda: self._step(bucket.batch))

    def _capture(self, bucket: Bucket) -> None:
        self.optimizer.zero_grad(set_to_none=True)  # the graph's backward makes its own gradients
        error = self.replayer.capture(bucket, self._graph_step)
        if error is not None:  # e.g. an operation that waits on the GPU: nothing ran, the step stays eager
            warnings.warn(f"{type(self.model).__name__}'s step could not be captured, it runs eagerly: {error}",
                          stacklevel=3)
            self.optimizer.zero_grad(set_to_none=True)
            self.replayable, self.reason = False, f"the step could not be captured: {error}"
            self.replayer.clear()
            return
        self.optimizer.zero_grad(set_to_none=True)
        self.stats.captures = self.replayer.captures
        self.stats.capture_seconds = self.replayer.capture_seconds


def refuse_uncapturable(optimizer: torch.optim.Optimizer) -> None:
    """Raise ``ValueError`` for an optimizer whose step a CUDA graph cannot hold, on every device.

    A PyTorch optimizer with a ``capturable`` setting is capturable where it is on in every param group (one
    that reads its step count on the host otherwise); one without is capturable where it keeps no host state:
    ``torch.optim.SGD`` (its learning rate and momentum are Python floats, fixed in a graph as in a step), and
    graphtree's :class:`~graphtree.train.CapturableAdagrad`. Anything else (PyTorch's Adagrad, which reads its
    step count on the host, SparseAdam, LBFGS, an optimizer of one's own) is refused: an optimizer that asks the
    host for nothing says so with ``capturable=True`` in its param groups, or ``host_free_step = True`` on its
    class (as CapturableAdagrad does).
    """
    flags = [group.get("capturable") for group in optimizer.param_groups]
    if any(flag is not None for flag in flags):
        if all(flags):
            return
        reason = "its param_groups have capturable=False"
        if any(p.device.type == "cpu" for group in optimizer.param_groups for p in group["params"]):
            reason += (" (PyTorch's capturable forms run on a GPU only: on the CPU, use CapturableAdagrad or "
                       "SGD; make_optimizer('adam', ..., capturable=True) gives a capturable Adam where the "
                       "parameters are on a GPU when it is called)")
    elif isinstance(optimizer, torch.optim.SGD) or getattr(type(optimizer), "host_free_step", False) is True:
        return  # CapturableAdagrad says so on its class (this module sits below the training code: no import)
    else:
        reason = "it has no capturable setting, and graphtree does not know it for one that asks the host for nothing"
    raise InvalidArgumentError(f"a replayed step needs an optimizer whose step a CUDA graph can hold; "
                     f"{type(optimizer).__name__} is not one: {reason}. Use graphtree.train.make_optimizer(..., "
                     f"capturable=True), graphtree.train.CapturableAdagrad, torch.optim.SGD, or "
                     f"torch.optim.Adam(..., capturable=True) on a GPU")
