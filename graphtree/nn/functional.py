"""Small numerical helpers shared by the cells."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

__all__ = ["PackedWeights", "add_outer_", "fast_tanh", "onednn_available", "onednn_cache_file",
           "onednn_preferred"]


# Below this many elements ``torch.tanh`` wins: the sigmoid form costs three more operator calls, and on a
# tree level's few rows the calls, not the arithmetic, are the cost.
FAST_TANH_MIN_ELEMENTS = 12_000


def fast_tanh(z: Tensor) -> Tensor:
    """``tanh(z)``; on large CPU tensors as ``2 sigmoid(2z) - 1``, the same function, faster than ``torch.tanh``."""
    if z.numel() < FAST_TANH_MIN_ELEMENTS or z.device.type != "cpu":
        return torch.tanh(z)
    return torch.sigmoid(z.mul(2)).mul(2).sub_(1)


_ONEDNN: bool | None = None
_ONEDNN_PAYS: bool | None = None

# With GRAPHTREE_ONEDNN=auto: how much faster the oneDNN product must be, on the probe below, before it is
# used; where the two are about equal, the plain PyTorch path is kept.
ONEDNN_MARGIN = 1.2


def onednn_available() -> bool:
    """Whether prepacked oneDNN matmuls can be used at all (CPU builds with oneDNN).

    Checked once, numerically, against ``torch.matmul``: the ops used are
    internal to PyTorch, so any surprise turns the fast path off rather than
    giving wrong numbers. Whether they are *used* is :func:`onednn_preferred`.
    """
    global _ONEDNN
    if _ONEDNN is None:
        _ONEDNN = False
        if torch.backends.mkldnn.is_available():
            try:
                generator = torch.Generator().manual_seed(0)
                x, w, b = (torch.randn(*shape, generator=generator) for shape in ((5, 7), (3, 7), (3,)))
                packed = torch.ops.mkldnn._reorder_linear_weight(w, None)
                out = torch.ops.mkldnn._linear_pointwise(x, packed, b, "none", [], "")
                _ONEDNN = bool(torch.allclose(out, torch.addmm(b, x, w.t()), atol=1e-5))
            except (AttributeError, RuntimeError):
                _ONEDNN = False
    return _ONEDNN


def onednn_preferred() -> bool:
    """Whether the cells' matrix products go through oneDNN (see :class:`PackedWeights`).

    ``GRAPHTREE_ONEDNN=0`` (the default) never, ``1`` wherever
    :func:`onednn_available`. With ``auto`` the choice is made once per
    machine: oneDNN and ``torch.addmm`` are timed on a product of a tree
    level's shape, oneDNN is used only if it is clearly faster, and the verdict
    is kept in :func:`onednn_cache_file` so that every later process on the
    machine (a resumed run, a second seed) computes with the same kernels and
    rounds the same way (delete the file to measure again).

    ``0`` is the default because the probe did not predict the training step:
    on an AVX-512 host it found oneDNN faster on the product, while every
    cell's whole training step was slower with it, as on an AVX2-only host
    (``machine.onednn_probe_speedup`` and ``matmul_backends`` in
    ``benchmarks/results/cpu-threads2.json``, and in the AVX2 host's version of
    that file in the git history: ``benchmarks/tree_lstm.py`` times both). Choosing oneDNN also gives up the
    compiled level loops, which multiply with ``addmm``. The two paths agree
    up to float32 rounding.
    """
    global _ONEDNN_PAYS
    if _ONEDNN_PAYS is None:
        mode = os.environ.get("GRAPHTREE_ONEDNN", "0").strip().lower()
        if mode not in ("0", "1", "auto"):
            raise ValueError(f"GRAPHTREE_ONEDNN must be 0, 1 or auto, got {mode!r}")
        if mode == "0" or not onednn_available():
            _ONEDNN_PAYS = False
        else:
            _ONEDNN_PAYS = mode == "1" or _machine_verdict()
    return _ONEDNN_PAYS


def onednn_cache_file() -> Path:
    """Where the ``auto`` verdict of :func:`onednn_preferred` is kept for this machine and PyTorch build."""
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    identity = "\n".join([platform.machine(), torch.__version__, torch.backends.cpu.get_cpu_capability(),
                          *_cpu_description()])
    return Path(root) / "graphtree" / f"onednn-{hashlib.sha256(identity.encode()).hexdigest()[:16]}.json"


def _cpu_description() -> list[str]:
    """The first processor's identifying lines in ``/proc/cpuinfo`` (empty where there is no such file)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            first = handle.read().split("\n\n", 1)[0]
    except OSError:
        return [platform.processor()]
    keys = ("vendor_id", "cpu family", "model", "model name", "stepping", "flags")
    return [line for line in first.splitlines() if line.split(":", 1)[0].strip() in keys]


def _read_verdict(path: Path) -> bool | None:
    try:
        return bool(json.loads(path.read_text())["onednn"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _machine_verdict() -> bool:
    path = onednn_cache_file()
    verdict = _read_verdict(path)
    if verdict is not None:
        return verdict
    speedup = _onednn_speedup()
    verdict = speedup >= ONEDNN_MARGIN
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"onednn": verdict, "speedup": round(speedup, 3), "margin": ONEDNN_MARGIN,
                                   "torch": torch.__version__}) + "\n")
        try:
            # A hard link never replaces a file: of processes that measured at the same time, the first to
            # get here decides for all of them.
            os.link(tmp, path)
        except FileExistsError:
            settled = _read_verdict(path)
            if settled is None:
                os.replace(tmp, path)  # an unreadable file: ours takes its place
            else:
                verdict = settled
    except OSError:
        pass  # a read-only home, or no hard links: this process keeps its own measurement
    finally:
        tmp.unlink(missing_ok=True)
    return verdict


def _onednn_speedup(rows: int = 64, out_features: int = 750, in_features: int = 300, rounds: int = 31) -> float:
    """``addmm`` time over oneDNN time for one level-sized product, on one thread.

    The two are timed in alternating rounds and the median of the rounds'
    ratios is returned: other processes sharing the cores slow both sides of
    a round alike, so the ratio holds where the times themselves drift.
    """
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, in_features, generator=generator)
    w = torch.randn(out_features, in_features, generator=generator)
    b = torch.randn(out_features, generator=generator)
    packed = torch.ops.mkldnn._reorder_linear_weight(w, None)
    w_t = w.t()
    products = (lambda: torch.ops.mkldnn._linear_pointwise(x, packed, b, "none", [], ""),
                lambda: torch.addmm(b, x, w_t))
    ratios = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            for product in products:
                product()
            for _ in range(rounds):
                seconds = []
                for product in products:
                    began = time.perf_counter()
                    for _ in range(4):
                        product()
                    seconds.append(time.perf_counter() - began)
                ratios.append(seconds[1] / seconds[0])
    finally:
        torch.set_num_threads(threads)
    return sorted(ratios)[len(ratios) // 2]


class PackedWeights:
    r"""Matrix products with weights prepacked once per pass.

    Tree cells multiply small level slices by the same weights again and
    again. On CPU, oneDNN's matmul with a weight reordered once into its
    blocked layout (the layout ``torch.nn.LSTM`` uses internally) can be
    several times faster for these shapes than ``torch.addmm``, or slower:
    it depends on the processor, so it is used where
    :func:`onednn_preferred` says so (``benchmarks/tree_lstm.py`` times
    training both ways). A cell makes one ``PackedWeights`` per pass, so a
    weight changed by an optimizer step is packed again on the next pass.

    Everything else (CUDA, float64, inputs under autograd, rows < 4, oneDNN
    not preferred) uses ``torch.addmm``/``torch.matmul``, with the same
    result up to float32 rounding.
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
        # Where oneDNN is not preferred (the common verdict) this is the only test made: it runs at every product.
        if not (_ONEDNN_PAYS if _ONEDNN_PAYS is not None else onednn_preferred()):
            return False
        if x.size(0) < self.min_rows or x.device.type != "cpu" or x.dtype != torch.float32:
            return False
        if weight.dtype != torch.float32 or (bias is not None and bias.dtype != torch.float32):
            return False
        if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad
                                        or (bias is not None and bias.requires_grad)):
            return False  # the oneDNN ops have no autograd formula
        return torch.backends.mkldnn.enabled


def add_outer_(out: Tensor, grad_out: Tensor, x: Tensor) -> Tensor:
    r"""``out += grad_out^T x`` in place: a weight gradient summed over many rows.

    On CPU in float32 (with many rows) through oneDNN where
    :func:`onednn_preferred` says it pays; elsewhere ``addmm_``.
    """
    fast = (grad_out.size(0) >= 64 and out.device.type == "cpu" and out.dtype == torch.float32
            and grad_out.dtype == torch.float32 and x.dtype == torch.float32
            and not (torch.is_grad_enabled() and (grad_out.requires_grad or x.requires_grad))
            and torch.backends.mkldnn.enabled and onednn_preferred())
    if not fast:
        return out.addmm_(grad_out.t(), x)
    # (grad_out^T x) = linear(grad_out^T, weight=x^T): x^T is packed once, for this product alone.
    packed = torch.ops.mkldnn._reorder_linear_weight(x.t().contiguous(), None)
    return out.add_(torch.ops.mkldnn._linear_pointwise(grad_out.t().contiguous(), packed, None, "none", [], ""))
