"""graphtree.nn.functional.dropout and its compiled mask against PyTorch's own, the reference it must equal.

The compiled ``bernoulli_`` claims to draw PyTorch's mask from PyTorch's generator state and to leave that
state where PyTorch leaves it; ``dropout`` claims to be ``F.dropout`` bit for bit, gradient and random stream
included. Each is checked against PyTorch itself, run from the same state.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import graphtree.nn.functional as functional
from graphtree.nn.functional import dropout


@pytest.mark.parametrize("seed", [0, 7, 2**40 + 3])
def test_bernoulli_draws_pytorchs_mask_and_state(kernels, seed):
    # Lengths about the twist's 624 words (two outputs an element) and the kernel's 4096-element blocks;
    # probabilities at the edges and with no short binary expansion.
    for length in (1, 2, 311, 312, 313, 623, 624, 1000, 4095, 4096, 4097, 20011):
        for p in (0.5, 0.8, 0.1, 1 / 3, 1e-12, 1 - 1e-12, 0.0, 1.0):
            ours, theirs = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
            warm_up = seed % 997  # the streams start mid-block
            torch.empty(warm_up).uniform_(generator=ours)
            torch.empty(warm_up).uniform_(generator=theirs)
            expected = torch.empty(length).bernoulli_(p, generator=theirs)
            mask = torch.empty(length)
            kernels.bernoulli_(mask, p, ours)
            assert torch.equal(mask, expected), (length, p)
            assert torch.equal(ours.get_state(), theirs.get_state()), (length, p)
            # and the streams go on alike
            assert torch.equal(torch.rand(5, generator=ours), torch.rand(5, generator=theirs))


def test_bernoulli_uses_the_default_generator_and_writes_the_kept_value(kernels):
    torch.manual_seed(11)
    expected = torch.empty(3000).bernoulli_(0.7) * 2.5
    expected_state = torch.get_rng_state()
    torch.manual_seed(11)
    mask = torch.empty(3000)
    kernels.bernoulli_(mask, 0.7, value=2.5)
    assert torch.equal(mask, expected)
    assert torch.equal(torch.get_rng_state(), expected_state)


def test_bernoulli_rejects_what_it_cannot_fill(kernels):
    with pytest.raises(RuntimeError, match="contiguous"):
        kernels.bernoulli_(torch.empty(4, 6).t(), 0.5)
    with pytest.raises(RuntimeError, match="float32"):
        kernels.bernoulli_(torch.empty(4, dtype=torch.float64), 0.5)
    with pytest.raises(RuntimeError, match=r"p must be in \[0, 1\]"):
        kernels.bernoulli_(torch.empty(4), 1.5)


def _twice(function, x, p, training, seed=3):
    """``function(x, p, training)`` from one seed: output, gradient, and the generator's state after."""
    torch.manual_seed(seed)
    x = x.detach().requires_grad_(x.is_floating_point())
    out = function(x, p, training)
    weights = torch.arange(out.numel(), dtype=out.dtype).view_as(out)
    grad = torch.autograd.grad((out * weights).sum(), x)[0] if out.requires_grad else None
    return out.detach(), grad, torch.get_rng_state()


@pytest.mark.parametrize("p", [0.5, 0.2, 0.3, 0.9])
@pytest.mark.parametrize("shape", [(900, 150), (7,), (3, 5, 11)])
def test_dropout_is_pytorchs(kernels, p, shape):
    x = torch.randn(shape)
    out, grad, state = _twice(dropout, x, p, True)
    out_ref, grad_ref, state_ref = _twice(F.dropout, x, p, True)
    assert torch.equal(out, out_ref)
    assert torch.equal(grad, grad_ref)
    assert torch.equal(state, state_ref)
    assert 0 < (out == 0).sum() < out.numel() or out.numel() < 20


@pytest.mark.parametrize("case", ["eval", "p=0", "p=1", "float64", "strided", "empty", "no grad"])
def test_dropout_everywhere_else_is_pytorchs_too(kernels, case):
    x = torch.randn(40, 30)
    p, training = 0.5, True
    if case == "eval":
        training = False
    elif case == "p=0":
        p = 0.0
    elif case == "p=1":
        p = 1.0
    elif case == "float64":
        x = x.double()
    elif case == "strided":
        x = x.t()
    elif case == "empty":
        x = torch.empty(0, 30)
    if case == "no grad":
        with torch.no_grad():
            results = [_twice(f, x, p, training) for f in (dropout, F.dropout)]
    else:
        results = [_twice(f, x, p, training) for f in (dropout, F.dropout)]
    for ours, theirs in zip(*results):
        assert (ours is None and theirs is None) or torch.equal(ours, theirs)


def test_dropout_rejects_a_bad_probability_as_pytorch_does(kernels):
    with pytest.raises(ValueError, match="between 0 and 1"):
        dropout(torch.randn(4), 1.5)


def test_dropout_alone_never_starts_a_build(monkeypatch):
    """A model whose cells are all PyTorch must not wait minutes for a compiler on its first dropout."""
    import graphtree.backend.native as native

    def no_build(strict):
        raise AssertionError("dropout started a build of the kernels")

    monkeypatch.setattr(native, "_kernels", None)
    monkeypatch.setattr(native, "_load", no_build)
    monkeypatch.setattr(functional, "_kept_value", {})
    x = torch.randn(300, 20)
    for ours, theirs in zip(_twice(dropout, x, 0.5, True), _twice(F.dropout, x, 0.5, True)):
        assert torch.equal(ours, theirs)
    assert functional._kept_value == {}  # checked again once the kernels are loaded


def test_a_mask_that_differs_from_pytorchs_is_never_used(kernels, monkeypatch):
    """Should a PyTorch release draw its masks otherwise, the first-use check finds it and F.dropout runs."""

    class Drifted:
        @staticmethod
        def bernoulli_(out, p, generator=None, value=1.0):
            kernels.bernoulli_(out, p, generator, value)
            out[0] = value - out[0]  # one element off

    monkeypatch.setattr(functional, "_kept_value", {})
    monkeypatch.setattr(functional, "native_kernels_if_loaded", lambda *tensors: Drifted)
    x = torch.randn(500, 20)
    with pytest.warns(RuntimeWarning, match="differs from PyTorch"):
        out, grad, state = _twice(dropout, x, 0.5, True)
    out_ref, grad_ref, state_ref = _twice(F.dropout, x, 0.5, True)
    assert torch.equal(out, out_ref) and torch.equal(grad, grad_ref) and torch.equal(state, state_ref)
    assert functional._kept_value == {0.5: None}


def test_the_benchmark_runs_and_finds_the_same_draws(kernels):
    repo = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "benchmarks/dropout_mask.py", "--batches", "2", "--threads", "1",
                           "--sst", "no-such-archive.zip"], cwd=repo, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| hidden") or line.startswith("| word")]
    assert len(rows) == 2 and all(row.rstrip(" |").endswith("yes") for row in rows), done.stdout
