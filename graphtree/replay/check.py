"""The loss check a replayed step makes once, on its first batch: the loss of the padded batch must be the loss of
the batch itself.

A loss that counts replicas anyway (a mean over all rows, a pooling that keeps the replicas' row) would train on
other numbers than the batch's, silently. So both losses are computed, without gradients or an update, and a
difference raises :class:`~graphtree.replay.ReplayError`, naming the padded attributes the loss read.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data

from ..backend import native
from ..errors import HostValueError
from .batch import PaddedBatch, graph_keys, reading
from .buckets import ReplayError
from .static import Bucket

__all__ = ["check_loss", "plain_batch"]


def check_loss(model: torch.nn.Module, loss: Callable[[torch.nn.Module, Any], Tensor], batch: Any, bucket: Bucket,
               device: torch.device) -> HostValueError | None:
    """Raise :class:`~graphtree.replay.ReplayError` if the loss of the padded batch (``bucket``'s, filled from
    ``batch``) is not the loss of ``batch`` itself; return the :class:`~graphtree.errors.HostValueError` of a
    model that cannot run padded at all (a top-down pass: it runs eagerly). Neither the parameters, the buffers,
    the modules' modes nor the random stream are changed: the training is the same with the check as without."""
    name = type(model).__name__
    plain = plain_batch(batch, device)
    modes = [(module, module.training) for module in model.modules()]
    buffers = [(buffer, buffer.detach().clone()) for buffer in model.buffers()]
    devices = []
    if device.type == "cuda":
        devices.append(device.index if device.index is not None else torch.cuda.current_device())
    evaluated = False
    bucket.forget_derived()
    try:
        # Both losses under the same definition pass (no compiled kernels: the padded plan has none), from the
        # same random state, forked so that the training's stream is where it was.
        with torch.no_grad(), torch.random.fork_rng(devices=devices), native.use_native(False):
            state = _rng_state(device)
            try:
                want = loss(model, plain)
                # Dropout draws masks per row, and the padded rows are more and in another order: the two
                # losses differ whatever the loss does. Where the model drew random numbers, both are taken
                # in eval mode instead (deterministic), at the cost of missing what only training mode does
                # to the rows (a batch norm's statistics over rows, replicas included).
                training = any(mode for _, mode in modes)
                if training and not _same_rng_state(state, _rng_state(device)):
                    model.eval()
                    evaluated = True
                    want = loss(model, plain)
            except Exception as error:  # the model's own error, as it is: the padding is not its cause
                error.add_note(f"(raised by ReplayedStep's check of {name}'s loss on the batch itself, unpadded, "
                               "with node_weight all ones)")
                raise
            with reading(bucket.batch) as reads:
                try:
                    got = loss(model, bucket.batch)
                except HostValueError as error:  # e.g. a top-down pass: not a wrong loss, a model run eagerly
                    return error
                except Exception as error:
                    raise ReplayError(f"{name}'s loss fails on the padded batch, not on the batch itself "
                                      f"({type(error).__name__}: {error}). "
                                      f"{_padding_advice(batch, bucket.batch, reads)}") from error
    finally:
        for module, mode in modes:
            module.training = mode
        with torch.no_grad():
            for buffer, value in buffers:
                buffer.copy_(value)
        bucket.forget_derived()
    if _losses_differ(want, got):
        mode = " (in eval mode: the model draws random numbers in training mode)" if evaluated else ""
        raise ReplayError(f"{name}'s loss on the padded batch is {_shown(got)}, on the batch itself "
                          f"{_shown(want)}{mode}: the padding changed it. "
                          f"{_padding_advice(batch, bucket.batch, reads)}")
    return None


def plain_batch(batch: Any, device: torch.device) -> Any:
    """``batch`` on ``device`` for the check, with ``node_weight`` all ones where it has none (a loss written
    for padded batches reads it); a copy, so that the caller's batch stays as it was."""
    plain = copy.copy(batch)
    if isinstance(plain, Data):
        plain = plain.to(device)
        if "node_weight" not in plain:
            plain.node_weight = torch.ones(plain.num_nodes, dtype=torch.get_default_dtype(), device=device)
    return plain


def _rng_state(device: torch.device) -> list[Tensor]:
    """The random state that a step on ``device`` draws from."""
    states = [torch.get_rng_state()]
    if device.type == "cuda":
        states.append(torch.cuda.get_rng_state(device))
    return states


def _same_rng_state(a: list[Tensor], b: list[Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def _losses_differ(want: Tensor, got: Tensor) -> bool:
    """Whether two losses differ beyond rounding: by more than ``1e-5`` of the larger's magnitude (more for a
    type coarser than float32)."""
    want, got = torch.as_tensor(want).detach(), torch.as_tensor(got).detach()
    if want.shape != got.shape:
        return True
    rtol = max(1e-5, 16 * torch.finfo(want.dtype).eps) if want.is_floating_point() else 0.0
    want, got = want.double().cpu(), got.double().cpu()
    both = torch.cat([want.reshape(-1), got.reshape(-1)]).abs().nan_to_num(0.0, posinf=0.0, neginf=0.0)
    scale = float(both.max()) if both.numel() else 0.0
    return not torch.allclose(got, want, rtol=0.0, atol=rtol * scale, equal_nan=True)


def _shown(loss: Tensor) -> str:
    loss = torch.as_tensor(loss).detach()
    return f"{float(loss):.8g}" if loss.numel() == 1 else f"a tensor of shape {tuple(loss.shape)}"


def _padding_advice(batch: Any, padded: PaddedBatch, reads: set[str]) -> str:
    """What the loss read of the padded batch that padding makes differ, and how a loss reads a padded batch."""
    graph = set(graph_keys(batch)) if isinstance(batch, Data) else set()
    stored = set(padded.keys())
    gathered = sorted(key for key in reads if key in stored and key not in graph | {"schedule", "num_graphs"})
    plain_keys = set(batch.keys()) if isinstance(batch, Data) else set()
    missing = sorted(key for key in reads if key in plain_keys and key not in stored)
    rows, nodes = int(padded.num_nodes), int(batch.num_nodes)
    text = (f"The padded batch has {rows} rows: the batch's {nodes} nodes, then {rows - nodes} replica rows, copies "
            f"of real nodes that the loss must not count. ")
    if gathered:
        text += f"The loss read {', '.join(map(repr, gathered))}, per-node attributes that the replicas have too. "
    if missing:
        text += f"It read {', '.join(map(repr, missing))}, which a padded batch does not have. "
    if "node_weight" not in reads:
        text += "It never read batch.node_weight. "
    return text + ("Weigh every row by batch.node_weight (0 on replicas; weighted_node_loss does), and pool per "
                   "graph with size=batch.num_graphs + 1, keeping [:batch.num_graphs]: the last row is the "
                   "replicas' graph (see PaddedBatch).")
