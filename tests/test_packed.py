"""The oneDNN fast path (prepacked weights) against plain torch matmuls.

The per-node recursive references of the cell tests run in float64, where the
fast path is off; here the same cells run in float32 with it on and off.
"""

import json
import random

import pytest
import torch
from fused import with_and_without_onednn
from torch_geometric.data import Batch
from trees import random_ptb

from graphtree.data import from_ptb
from graphtree.nn import SLSTM, ChildSumTreeLSTM, NaryTreeLSTM, functional
from graphtree.nn.functional import PackedWeights, add_outer_, onednn_available

needs_onednn = pytest.mark.skipif(not onednn_available(), reason="this PyTorch build has no usable oneDNN")


@needs_onednn
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_equals_matmul(transpose, with_bias):
    torch.manual_seed(0)
    weight = torch.randn(48, 32)
    x = torch.randn(20, 32 if not transpose else 48)
    bias = torch.randn(48 if not transpose else 32) if with_bias else None
    expected = x.double() @ (weight.double() if transpose else weight.double().t())
    if bias is not None:
        expected = expected + bias.double()
    packed = PackedWeights()
    first = packed.linear(x, weight, bias, transpose=transpose)
    again = packed.linear(x, weight, bias, transpose=transpose)  # from the cached pack
    assert len(packed._packed) == 1
    torch.testing.assert_close(first.double(), expected, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(again, first)


def test_fallbacks_are_plain_matmuls():
    torch.manual_seed(0)
    weight = torch.randn(6, 5, dtype=torch.float64)
    x = torch.randn(8, 5, dtype=torch.float64)
    packed = PackedWeights()
    assert torch.equal(packed.linear(x, weight), x @ weight.t())  # float64: no oneDNN
    assert not packed._packed
    w32 = weight.float().requires_grad_()
    out = packed.linear(x.float(), w32)  # under autograd: differentiable
    out.sum().backward()
    torch.testing.assert_close(w32.grad, x.float().sum(0).expand(6, 5))
    assert packed.linear(torch.randn(2, 5), w32.detach()).shape == (2, 6)  # too few rows to pack
    assert not packed._packed


def _batch(seed, count=30):
    rng = random.Random(seed)
    return Batch.from_data_list([from_ptb(random_ptb(rng.randint(1, 20), 2, rng)) for _ in range(count)])


def _run(cell, x, batch):
    h, c = cell(x, batch)
    weights = torch.linspace(-1, 1, h.numel()).view_as(h)
    loss = (h * weights).sum() + (c * weights.flip(0)).sum()
    wrt = [x, *cell.parameters()] if x.requires_grad else list(cell.parameters())
    return (h, c, *torch.autograd.grad(loss, wrt))


CELLS = {
    "child_sum": lambda: ChildSumTreeLSTM(24, 16),
    "nary": lambda: NaryTreeLSTM(24, 16),
    "nary_general": lambda: NaryTreeLSTM(24, 16, setting="general"),
    "slstm_lstm_leaves": lambda: SLSTM(24, 16, leaf="lstm"),
    "slstm": lambda: SLSTM(16, 16),
}


@needs_onednn
@pytest.mark.filterwarnings("ignore:TF32 acceleration")
@pytest.mark.parametrize("name", list(CELLS))
@pytest.mark.parametrize("input_grad", [True, False])
def test_cells_agree_with_and_without_onednn(name, input_grad, monkeypatch):
    torch.manual_seed(0)
    cell = CELLS[name]()
    batch = _batch(seed=1)
    x = torch.randn(batch.num_nodes, cell.in_channels, requires_grad=input_grad)

    with_onednn, without = with_and_without_onednn(monkeypatch, lambda: _run(cell, x, batch))
    for a, b in zip(with_onednn, without, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)


@needs_onednn
@pytest.mark.parametrize("rows", [10, 300])
def test_add_outer_equals_addmm(rows):
    torch.manual_seed(0)
    grad_out, x = torch.randn(rows, 40), torch.randn(rows, 24)
    start = torch.randn(40, 24)
    expected = start.double() + grad_out.double().t() @ x.double()
    torch.testing.assert_close(add_outer_(start.clone(), grad_out, x).double(), expected, atol=1e-4, rtol=1e-5)


@pytest.fixture
def fresh_verdict(monkeypatch, tmp_path):
    """A machine with oneDNN (real or not) whose verdict has not been made yet, caching under ``tmp_path``."""
    monkeypatch.setattr(functional, "_ONEDNN", True)
    monkeypatch.setattr(functional, "_ONEDNN_PAYS", None)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("GRAPHTREE_ONEDNN", "auto")
    probes = []

    def probe(speedup):
        monkeypatch.setattr(functional, "_onednn_speedup", lambda: probes.append(speedup) or speedup)
        return probes
    return probe


@pytest.mark.parametrize(("setting", "speedup", "expected"), [
    ("0", 5.0, False), ("1", 0.5, True), ("auto", 5.0, True), ("auto", 1.0, False), ("auto", 1.1, False),
    (None, 5.0, False)])
def test_onednn_preferred_follows_the_variable_and_the_probe(setting, speedup, expected, fresh_verdict, monkeypatch):
    probes = fresh_verdict(speedup)
    if setting is None:  # the default: plain products, and no probe
        monkeypatch.delenv("GRAPHTREE_ONEDNN")
    else:
        monkeypatch.setenv("GRAPHTREE_ONEDNN", setting)
    assert functional.onednn_preferred() is expected
    assert probes == ([speedup] if setting == "auto" else [])


@pytest.mark.parametrize("first_speedup", [5.0, 0.9])
def test_the_verdict_is_measured_once_per_machine(first_speedup, fresh_verdict, monkeypatch):
    """A later process reads the first one's verdict instead of timing again (its timing could differ)."""
    probes = fresh_verdict(first_speedup)
    first = functional.onednn_preferred()
    assert probes == [first_speedup]
    assert json.loads(functional.onednn_cache_file().read_text())["onednn"] is first
    monkeypatch.setattr(functional, "_ONEDNN_PAYS", None)  # as in a new process
    fresh_verdict(1.0 / first_speedup)
    assert functional.onednn_preferred() is first
    assert probes == [first_speedup]


def test_a_verdict_written_meanwhile_wins(fresh_verdict, monkeypatch):
    """Two processes measuring at once end up with one verdict: the one on disk first."""
    fresh_verdict(5.0)

    def another_process_decides_first():
        functional.onednn_cache_file().parent.mkdir(parents=True, exist_ok=True)
        functional.onednn_cache_file().write_text(json.dumps({"onednn": False}))
        return 5.0
    monkeypatch.setattr(functional, "_onednn_speedup", another_process_decides_first)
    assert functional.onednn_preferred() is False
    assert json.loads(functional.onednn_cache_file().read_text()) == {"onednn": False}
    assert [p.name for p in functional.onednn_cache_file().parent.iterdir()] == [functional.onednn_cache_file().name]


def test_an_unreadable_verdict_is_measured_again(fresh_verdict):
    probes = fresh_verdict(5.0)
    functional.onednn_cache_file().parent.mkdir(parents=True)
    functional.onednn_cache_file().write_text("{not json")
    assert functional.onednn_preferred() is True
    assert probes == [5.0]
    assert json.loads(functional.onednn_cache_file().read_text())["onednn"] is True


def test_onednn_preferred_rejects_other_values(monkeypatch):
    monkeypatch.setattr(functional, "_ONEDNN_PAYS", None)
    monkeypatch.setenv("GRAPHTREE_ONEDNN", "yes")
    with pytest.raises(ValueError, match="GRAPHTREE_ONEDNN must be 0, 1 or auto"):
        functional.onednn_preferred()


@needs_onednn
def test_speed_probe_times_both_products():
    speedup = functional._onednn_speedup(rows=8, out_features=16, in_features=8, rounds=2)
    assert 0 < speedup < float("inf")


def test_plain_products_when_onednn_is_not_preferred(monkeypatch):
    monkeypatch.setattr(functional, "_ONEDNN_PAYS", False)
    weight, x = torch.randn(48, 32), torch.randn(20, 32)
    packed = PackedWeights()
    torch.testing.assert_close(packed.linear(x, weight), x @ weight.t())
    assert not packed._packed
