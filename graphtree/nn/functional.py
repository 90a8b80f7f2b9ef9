"""Small numerical helpers shared by the cells."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

__all__ = ["PackedWeights", "add_outer_", "fast_tanh", "onednn_available"]


def fast_tanh(z: Tensor) -> Tensor:
    """``tanh(z)`` as ``2 sigmoid(2z) - 1``: the same function, several times faster than ``torch.tanh`` on CPU."""
    return 2 * torch.sigmoid(2 * z) - 1


_ONEDNN: bool | None = None


def onednn_available() -> bool:
    """Whether prepacked oneDNN matmuls can be used (CPU builds with oneDNN; off with ``GRAPHTREE_ONEDNN=0``).

    Checked once, numerically, against ``torch.matmul``: the ops used are
    internal to PyTorch, so any surprise turns the fast path off rather than
    giving wrong numbers.
    """
    global _ONEDNN
    if _ONEDNN is None:
        _ONEDNN = False
        if os.environ.get("GRAPHTREE_ONEDNN", "1") != "0" and torch.backends.mkldnn.is_available():
            try:
                generator = torch.Generator().manual_seed(0)
                x, w, b = (torch.randn(*shape, generator=generator) for shape in ((5, 7), (3, 7), (3,)))
                packed = torch.ops.mkldnn._reorder_linear_weight(w, None)
                out = torch.ops.mkldnn._linear_pointwise(x, packed, b, "none", [], "")
                _ONEDNN = bool(torch.allclose(out, torch.addmm(b, x, w.t()), atol=1e-5))
            except (AttributeError, RuntimeError):
                _ONEDNN = False
    return _ONEDNN


class PackedWeights:
    r"""Matrix products with weights prepacked once per pass.

    Tree cells multiply small level slices by the same weights again and
    again. On CPU, oneDNN's matmul with a weight reordered once into its
    blocked layout (the layout ``torch.nn.LSTM`` uses internally) is two to
    three times faster for these shapes than ``torch.matmul``
    (``benchmarks/tree_lstm.py`` measures the effect). A cell makes one
    ``PackedWeights`` per pass, so a weight changed by an optimizer step is
    packed again on the next pass.

    Everything else (CUDA, float64, inputs under autograd, rows < 4) falls
    back to ``torch.addmm``/``torch.matmul`` with the same result up to
    float32 rounding.
    """

    min_rows = 4  # below this, packing does not pay

    def __init__(self) -> None:
        self._packed: dict[tuple[int, bool], tuple[Tensor, Tensor]] = {}
        self._memo: dict[str, Any] = {}

    def memo(self, key: str, compute: Callable[[], Any]) -> Any:
        """``compute()``, computed once per pass: for derived weights (sums, rescaled copies).

        Under autograd it is recomputed on every call, so that each level's graph owns its copy.
        """
        if torch.is_grad_enabled():
            return compute()
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def linear(self, x: Tensor, weight: Tensor, bias: Tensor | None = None, transpose: bool = False) -> Tensor:
        r""":math:`x W^\top + b`, or :math:`x W + b` with ``transpose=True``."""
        if not self._fast(x, weight, bias):
            w = weight if transpose else weight.t()
            return x @ w if bias is None else torch.addmm(bias, x, w)
        key = (id(weight), transpose)
        entry = self._packed.get(key)
        if entry is None:
            w = (weight.t() if transpose else weight).contiguous()
            # The weight itself is kept too, so that id() cannot be reused while the entry lives.
            entry = (weight, torch.ops.mkldnn._reorder_linear_weight(w, None))
            self._packed[key] = entry
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), entry[1], bias, "none", [], "")

    def _fast(self, x: Tensor, weight: Tensor, bias: Tensor | None) -> bool:
        if x.size(0) < self.min_rows or x.device.type != "cpu" or x.dtype != torch.float32:
            return False
        if weight.dtype != torch.float32 or (bias is not None and bias.dtype != torch.float32):
            return False
        if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad
                                        or (bias is not None and bias.requires_grad)):
            return False  # the oneDNN ops have no autograd formula
        return torch.backends.mkldnn.enabled and onednn_available()


def add_outer_(out: Tensor, grad_out: Tensor, x: Tensor) -> Tensor:
    r"""``out += grad_out^T x`` in place: a weight gradient summed over many rows.

    On CPU in float32 (with many rows) through oneDNN, about 1.5x faster here
    than ``addmm_``; elsewhere ``addmm_``.
    """
    fast = (grad_out.size(0) >= 64 and out.device.type == "cpu" and out.dtype == torch.float32
            and grad_out.dtype == torch.float32 and x.dtype == torch.float32
            and not (torch.is_grad_enabled() and (grad_out.requires_grad or x.requires_grad))
            and torch.backends.mkldnn.enabled and onednn_available())
    if not fast:
        return out.addmm_(grad_out.t(), x)
    # (grad_out^T x) = linear(grad_out^T, weight=x^T): x^T is packed once, for this product alone.
    packed = torch.ops.mkldnn._reorder_linear_weight(x.t().contiguous(), None)
    return out.add_(torch.ops.mkldnn._linear_pointwise(grad_out.t().contiguous(), packed, None, "none", [], ""))
