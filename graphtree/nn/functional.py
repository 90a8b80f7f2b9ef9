"""Small numerical helpers shared by the cells."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["fast_tanh"]


def fast_tanh(z: Tensor) -> Tensor:
    """``tanh(z)`` as ``2 sigmoid(2z) - 1``: the same function, several times faster than ``torch.tanh`` on CPU."""
    return 2 * torch.sigmoid(2 * z) - 1
