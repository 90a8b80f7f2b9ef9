"""Shared checks for cells with a hand-written level backward and for the oneDNN fast path."""

from __future__ import annotations

from collections.abc import Callable

import torch

from graphtree.nn.functional import PackedWeights


def spy_backward_level(monkeypatch, cell_class: type) -> list[int]:
    """A list that grows by one at every call of ``cell_class.backward_level``: shows which path the engine took."""
    calls: list[int] = []
    original = cell_class.backward_level

    def counted(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cell_class, "backward_level", counted)
    return calls


def fused_and_recomputed(monkeypatch, cell_class: type, run: Callable[[], tuple[torch.Tensor, ...]]
                         ) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
    """``run()`` through the hand-written backward, then through the engine's autograd recompute path."""
    calls = spy_backward_level(monkeypatch, cell_class)
    fused = run()
    assert calls, "the engine never called backward_level"
    calls.clear()
    monkeypatch.setattr(cell_class, "fused_backward", False)
    recomputed = run()
    assert not calls, "the recompute path called backward_level"
    return fused, recomputed


def with_and_without_onednn(monkeypatch, run: Callable[[], tuple[torch.Tensor, ...]]
                            ) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
    """``run()`` with the oneDNN products, then with plain matmuls; asserts each path was really taken."""
    taken: list[bool] = []
    fast = PackedWeights._fast
    monkeypatch.setattr(PackedWeights, "_fast", lambda self, *a: taken.append(fast(self, *a)) or taken[-1])
    with_onednn = run()
    assert any(taken), "the oneDNN path was never taken"
    with torch.backends.mkldnn.flags(enabled=False):
        taken.clear()
        without = run()
        assert not any(taken)
    return with_onednn, without
