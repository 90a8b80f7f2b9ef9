"""Functions the models share with PyTorch's, computing the same numbers faster."""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import Tensor

from ..backend.native import native_kernels_if_loaded
from ..errors import InvalidArgumentError

__all__ = ["dropout"]

# Per dropout probability p: the value F.dropout gives a kept element of 1 (PyTorch's float32 1 / (1 - p)), once
# this process has checked that the compiled mask is PyTorch's for that p; None where it was not.
_kept_value: dict[float, float | None] = {}


def dropout(input: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    r""":func:`torch.nn.functional.dropout`, the same numbers on the same random stream, its mask drawn faster.

    On the CPU, PyTorch draws dropout's mask one element at a time (``bernoulli_``, about 12 ns an element:
    ``benchmarks/dropout_mask.py`` times it on SST minibatches). For a contiguous float32 CPU tensor this draws the
    same mask from the same default generator with a compiled kernel (``graphtree/csrc/dropout.cpp``) and
    leaves the generator where PyTorch would: the output, its gradient and every later random number are
    those of ``F.dropout(input, p, training)``, bit for bit. The first call with a given ``p`` checks that
    against PyTorch (on a copy of the generator's state); anything else, or a failed check, calls
    ``F.dropout`` itself. It uses the kernels only once a cell has loaded them: dropout alone never starts
    their build (a model whose cells are all PyTorch gets ``F.dropout``).

    Args:
        input (Tensor): Any tensor.
        p (float): Probability of an element being zeroed.
        training (bool): Apply dropout; otherwise return ``input``.
    """
    if not training or p == 0 or input.numel() == 0 or p == 1 or not _eligible(input):
        return F.dropout(input, p, training)
    kept = _kept_value[p] if p in _kept_value else _check(p)
    extension = native_kernels_if_loaded(input.detach())
    if kept is None or extension is None:
        return F.dropout(input, p, training)
    noise = torch.empty_like(input, requires_grad=False)
    extension.bernoulli_(noise, 1 - p, value=kept)  # F.dropout's noise.bernoulli_(1 - p).div_(1 - p)
    return input * noise


def _eligible(input: Tensor) -> bool:
    return input.is_cpu and input.dtype == torch.float32 and input.is_contiguous() and not input.is_inference()


def _check(p: float) -> float | None:
    """PyTorch's kept value for ``p`` if the compiled mask reproduces ``F.dropout`` exactly, else ``None``."""
    extension = native_kernels_if_loaded(torch.empty(0))
    if not 0 < p < 1:
        raise InvalidArgumentError(f"dropout probability has to be between 0 and 1, but got {p}")
    if extension is None:  # not loaded (yet): asked again next time
        return None
    kept = float(torch.ones(1).div_(1 - p))
    ones = torch.ones(2 * 624 + 7)  # more than two twists of the generator, an odd length
    before = torch.get_rng_state()
    try:
        expected = F.dropout(ones, p, True)
        expected_state = torch.get_rng_state()
        torch.set_rng_state(before)
        noise = torch.empty_like(ones)
        extension.bernoulli_(noise, 1 - p, value=kept)
        same = torch.equal(ones * noise, expected) and torch.equal(torch.get_rng_state(), expected_state)
    finally:
        torch.set_rng_state(before)
    if not same:
        warnings.warn(f"graphtree's compiled dropout mask differs from PyTorch {torch.__version__}'s for p={p}; "
                      "using F.dropout", RuntimeWarning, stacklevel=3)
    _kept_value[p] = kept if same else None
    return _kept_value[p]
