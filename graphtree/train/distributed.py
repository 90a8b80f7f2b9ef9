"""Data-parallel training under ``torchrun``: PyTorch's ``torch.distributed`` and ``DistributedDataParallel``.

A script calls :func:`setup` once. Started by ``torchrun`` (which sets
``WORLD_SIZE``, ``RANK`` and ``LOCAL_RANK``), it joins the process group, with
the ``gloo`` backend on CPU and ``nccl`` on GPU; started plainly, it does nothing
and the script trains in one process. :class:`~graphtree.train.Trainer` then
finds the process group by itself:

* every minibatch of the single-process epoch (:func:`~graphtree.train.ordering.epoch_order`,
  the paper's minibatch size) is split across the ranks (:func:`shard`), so the
  union of the ranks' work is that epoch and the minibatch gradient is the
  single-process one up to the order of float sums;
* ``DistributedDataParallel`` averages the dense gradients; the word
  embeddings' sparse gradients, which ``nccl`` cannot all-reduce, are
  all-gathered and summed here (:func:`all_reduce_sparse_`), on either backend;
* dev and test sets are split across the ranks and their outputs gathered
  (:func:`gather_outputs`), so every rank computes the same metrics;
* rank 0 alone shows the progress bar and writes checkpoints, CSVs and
  results; a checkpoint holds every rank's random state, so a job killed at
  any moment resumes exactly.

Every node must see the same output and data folders (a shared file system),
as ``torchrun`` runs the same command on each.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = ["all_gather_objects", "all_reduce_sparse_", "barrier", "gather_outputs", "is_main", "launched",
           "main_first", "rank", "setup", "shard", "world_size"]

T = TypeVar("T")


def _active() -> bool:
    return dist.is_available() and dist.is_initialized()


def launched() -> bool:
    """Whether ``torchrun`` started this process as one of several (before or after :func:`setup`)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def world_size() -> int:
    """Processes in the job (1 outside ``torchrun``)."""
    return dist.get_world_size() if _active() else 1


def rank() -> int:
    """This process's rank (0 outside ``torchrun``)."""
    return dist.get_rank() if _active() else 0


def is_main() -> bool:
    """Whether this process writes files and shows progress (rank 0)."""
    return rank() == 0


def setup(device: torch.device | str = "cpu") -> torch.device:
    """Join ``torchrun``'s process group, if started by it; return the device this process trains on.

    ``gloo`` serves CPU training and ``nccl`` GPU training; on GPU each process
    takes the card of its local rank (``--device cuda`` means "one card per
    process"). Outside ``torchrun`` this returns ``device`` and does nothing else.
    """
    device = torch.device(device)
    if not launched() or _active():
        return device
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    atexit.register(_teardown)
    return device


def _teardown() -> None:
    if _active():
        dist.destroy_process_group()


def barrier() -> None:
    """Wait for every rank (no-op in one process)."""
    if _active():
        dist.barrier()


@contextmanager
def main_first() -> Iterator[None]:
    """Rank 0 runs the body first, the others after it: for work that writes a cache the others then read
    (processing a dataset, building the compiled kernels)."""
    if not is_main():
        barrier()
    try:
        yield
    finally:
        if is_main():
            barrier()


def shard(items: Sequence[T]) -> list[T]:
    """This rank's share of ``items``: every ``world_size()``-th one, from position ``rank()``."""
    return list(items[rank()::world_size()])


def all_gather_objects(obj: Any) -> list[Any]:
    """``obj`` of every rank, in rank order (``[obj]`` in one process)."""
    if not _active():
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def gather_outputs(run: Callable[[Any], Tensor], items: Sequence[Any]) -> list[Tensor]:
    """``[run(item) for item in items]``, each rank computing its :func:`shard` and every rank receiving all.

    The outputs travel through the CPU and come back on the device of the
    rank's own outputs (or the CPU, for a rank that had none).
    """
    if world_size() == 1:
        return [run(item) for item in items]
    mine = {k: run(items[k]) for k in range(rank(), len(items), world_size())}
    device = next((t.device for t in mine.values()), torch.device("cpu"))
    merged: dict[int, Tensor] = {}
    for part in all_gather_objects({k: t.detach().cpu() for k, t in mine.items()}):
        merged.update(part)
    return [merged[k].to(device) for k in range(len(items))]


def all_reduce_sparse_(param: Tensor) -> None:
    """Average ``param``'s sparse gradient over the ranks, in place, as DDP averages dense ones.

    Each rank's rows (indices and values) are all-gathered, padded to the
    longest, and summed by coalescing; ``all_gather`` of dense tensors exists
    on every backend, sparse all-reduce on ``gloo`` only. A rank without a
    gradient contributes no rows.
    """
    size = param.shape
    grad = param.grad.coalesce() if param.grad is not None else torch.sparse_coo_tensor(
        torch.zeros(len(size), 0, dtype=torch.long, device=param.device),
        torch.zeros(0, *size[1:], dtype=param.dtype, device=param.device), size)
    indices, values = grad.indices(), grad.values()
    count = torch.tensor([indices.size(1)], device=param.device)
    counts = [torch.zeros_like(count) for _ in range(world_size())]
    dist.all_gather(counts, count)
    longest = int(max(c.item() for c in counts))
    pad = longest - indices.size(1)
    indices = torch.cat([indices, indices.new_zeros(indices.size(0), pad)], 1)
    values = torch.cat([values, values.new_zeros(pad, *values.shape[1:])], 0)
    all_indices = [torch.empty_like(indices) for _ in counts]
    all_values = [torch.empty_like(values) for _ in counts]
    dist.all_gather(all_indices, indices)
    dist.all_gather(all_values, values)
    n = [int(c.item()) for c in counts]
    # The rows are PyTorch's own (valid by construction): skipping the invariant checks explicitly keeps torch
    # from warning that it skipped them implicitly.
    with torch.sparse.check_sparse_tensor_invariants(enable=False):
        total = torch.sparse_coo_tensor(torch.cat([i[:, :k] for i, k in zip(all_indices, n)], 1),
                                        torch.cat([v[:k] for v, k in zip(all_values, n)], 0), size).coalesce()
    param.grad = total / world_size()
