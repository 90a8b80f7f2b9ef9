"""Run in a fresh interpreter by ``tests/test_process.py``: print, as JSON, the process-wide state before and after
importing graphtree and running every layer (forward and backward, on the compiled kernels where they build and on
PyTorch's operators), a corpus cut and a Trainer's fit and test: what a library must leave alone."""

from __future__ import annotations

import ctypes
import gc
import json
import os
import sys
import warnings
from pathlib import Path

import torch
import torch_geometric  # noqa: F401  (PyTorch's and PyG's own imports are not graphtree's)

calls: list[str] = []


def watch(name: str) -> None:
    real = getattr(gc, name)
    setattr(gc, name, lambda *args: calls.append(f"gc.{name}") or real(*args))


for name in ("disable", "enable", "freeze", "unfreeze", "set_threshold"):
    watch(name)

THREADS = 2
torch.set_num_threads(THREADS)
TINY = torch.full((1 << 20,), 1e-39)  # subnormal; 32 times ATen's grain, so a product splits over the pool


def mmapped_bytes() -> int | None:
    """glibc's bytes in blocks served by mmap (mallinfo2's hblkhd), or None without it."""
    class MallInfo2(ctypes.Structure):
        _fields_ = [(field, ctypes.c_size_t) for field in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                     "keepcost")]

    try:
        mallinfo2 = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = MallInfo2
    return mallinfo2().hblkhd


def state() -> dict:
    block = torch.empty(1 << 24)  # 64 MiB: glibc serves it by mmap unless told otherwise (M_MMAP_MAX)
    mapped = mmapped_bytes()
    del block
    return {
        "gc_enabled": gc.isenabled(), "gc_frozen": gc.get_freeze_count(), "gc_threshold": gc.get_threshold(),
        "subnormals_kept_here": bool((torch.tensor([1e-39]) * 1.0).ne(0).all()),
        "subnormals_kept_on_pool": int((TINY * 1.0).count_nonzero()) == TINY.numel(),
        "threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
        "large_block_mmapped": None if mapped is None else mapped >= 1 << 26,
        "environment": sorted(os.environ.items()), "warning_filters": len(warnings.filters),
        "default_dtype": str(torch.get_default_dtype()), "grad_enabled": torch.is_grad_enabled(),
        "deterministic": torch.are_deterministic_algorithms_enabled(), "initial_seed": torch.initial_seed(),
        "anomaly": torch.is_anomaly_enabled(), "mkldnn": torch.backends.mkldnn.enabled,
        "recursion_limit": sys.getrecursionlimit(),
    }


def run_the_library(during: list[dict]) -> list[str]:
    from torch_geometric.data import Batch

    from graphtree.data import from_ptb
    from graphtree.models import BiTreeLSTM, NodeEmbedding, TreeClassifier
    from graphtree.models.bicontree import VARIANTS
    from graphtree.nn import LSTMRNN, SLSTM, ChildSumTreeLSTM, HeadLexicalization, NaryTreeLSTM
    from graphtree.train import OptimizerSpec, PaperOptimizer, Trainer

    vocab = {w: k for k, w in enumerate("a b c d e".split())}
    trees = [from_ptb(line, vocab) for line in ("(1 (0 a) (1 b))", "(0 (0 c) (1 (1 d) (0 e)))", "(1 a)")]
    batch = Batch.from_data_list(trees)
    layers = {"childsum": ChildSumTreeLSTM(4, 4), "nary": NaryTreeLSTM(4, 4), "slstm": SLSTM(4, 4),
              "lstmrnn": LSTMRNN(4, 4), "head": HeadLexicalization(4),
              **{variant: BiTreeLSTM(4, 4, 3, mlp_channels=4, variant=variant) for variant in VARIANTS}}
    ran = []
    for name, layer in layers.items():
        x = torch.randn(batch.num_nodes, 4, requires_grad=True)
        out = layer(x, batch)
        sum(o.sum() for o in (out if isinstance(out, tuple) else (out,))).backward()
        assert x.grad is not None
        ran.append(name)
    emb = NodeEmbedding(len(vocab), 4)
    model = TreeClassifier(emb, ChildSumTreeLSTM(4, 3), 2)
    optimizer = PaperOptimizer.for_model(model, emb, OptimizerSpec("sgd", 0.1, "sgd", 0.1, 1e-4, 2))
    trainer = Trainer(model, optimizer, epochs=2, batch_size=2, seed=0, progress=False, verbose=False,
                      on_step=lambda step: during.append(state()) if step == 1 else None)
    trainer.fit(trees, trees)
    trainer.test(trees)
    ran.append("trainer")
    from graphtree.backend import native

    if native.kernels_loaded():
        ran.append("compiled kernels")
    return ran


def read_a_corpus(folder: str) -> int:
    """A dataset of one's own files, processed and cut into graphs (where datasets touched the collector)."""
    from graphtree.datasets import GraphFiles

    trees = Path(folder) / "trees.txt"
    trees.write_text("".join(f"({k % 2} ({k % 2} w{k}) (0 (1 x) (0 y)))\n" for k in range(40)))
    data = GraphFiles(Path(folder) / "data", "train", files=trees, format="ptb", log=False)
    return sum(graph.num_nodes for graph in data)


if __name__ == "__main__":
    before = state()
    import graphtree  # noqa: F401

    imported = state()
    during: list[dict] = []
    ran = run_the_library(during)
    read = read_a_corpus(sys.argv[1])
    after = state()
    print(json.dumps({"before": before, "imported": imported, "training": during[0], "after": after,
                      "calls": calls, "ran": ran, "nodes_read": read}))
