"""Deep graphs: the work of a pass grows with the graph, not with the graph times its depth.

A per-level operation whose size is the whole graph (a fill, copy or index map of every node's rows at every
level) makes a pass over L levels cost O(L x graph): quadratic in depth. Here every tensor operation of a pass
is counted by the elements it writes (outputs that are new memory; for an in-place op, the part it writes), in
a graph of 48 levels and in one of 192 levels of the same width. Linear work gives a ratio of 4; one
graph-sized operation per level pushes it towards 16. Every paper cell, a cell of one's own, both directions,
the compiled kernels and the cells' ``update``; forward and backward. ``benchmarks/depth.py`` measures the time
and memory of the same thing at up to 10^6 nodes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch_geometric.data import Data

from graphtree.backend import native
from graphtree.nn import LSTMRNN, SLSTM, ChildSumTreeLSTM, LexicalizedTreeLSTM, NaryTreeLSTM, TopDownTreeLSTM, TreeCell


class MeanPool(TreeCell):
    def __init__(self, channels: int) -> None:
        super().__init__(state_channels=(channels,))
        self.W = torch.nn.Linear(channels, channels)

    def update(self, children, x):
        return (torch.tanh(self.W(x) + children.mean()),)


D = 4
CELLS = {"child_sum": lambda: ChildSumTreeLSTM(D, D), "nary": lambda: NaryTreeLSTM(D, D),
         "nary_general": lambda: NaryTreeLSTM(D, D, setting="general"), "slstm": lambda: SLSTM(D, D),
         "lstm_rnn": lambda: LSTMRNN(D, D), "lexicalized": lambda: LexicalizedTreeLSTM(D, D),
         "top_down": lambda: TopDownTreeLSTM(D, D), "own": lambda: MeanPool(D)}

# Ops that write all of their first argument; other in-place ops (index_put_, scatter_add_, index_add_, addmm_ into
# a slice...) write as many elements as their largest other tensor argument.
WHOLE_WRITES = {"fill_", "zero_", "copy_", "uniform_", "normal_", "masked_fill_", "clamp_", "mul_", "add_", "div_",
                "sub_"}


class ElementsWritten(TorchDispatchMode):
    """Sums, over every operation dispatched, the elements it writes into memory of its own."""

    def __init__(self, only: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.total, self.only = 0, only  # only: count these operations alone

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if self.only and name not in self.only:
            return out
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if name.endswith("_") and tensors:
            self.total += tensors[0].numel() if name in WHOLE_WRITES or len(tensors) == 1 else \
                max(t.numel() for t in tensors[1:])
            return out
        inputs = {t.untyped_storage().data_ptr() for t in tensors if t.numel()}
        for o in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(o, torch.Tensor) and o.numel() and o.untyped_storage().data_ptr() not in inputs:
                self.total += o.numel()  # not a view of an input
        return out


def _layered(levels: int, width: int = 4) -> Data:
    """``width`` nodes per level; node k of a level has children k and k + 1 (mod width) of the level below."""
    parent = torch.arange(width, levels * width).repeat_interleave(2)
    below = (parent // width - 1) * width
    offset = (parent % width + torch.tensor([0, 1]).repeat(parent.numel() // 2)) % width
    return Data(edge_index=torch.stack([below + offset, parent]), edge_pos=torch.tensor([0, 1]).repeat(
        parent.numel() // 2), num_nodes=levels * width)


def _written(make, levels: int, compiled: bool) -> int:
    torch.manual_seed(0)
    cell, graph = make(), _layered(levels)
    x = torch.randn(graph.num_nodes, D, requires_grad=True)
    with native.use_native(compiled):
        cell(x, graph)  # the schedule and slots, once, outside the count
        with ElementsWritten() as count:
            states = cell(x, graph)
            sum(s.sum() for s in states).backward()
    return count.total


@pytest.mark.parametrize("path", ["compiled", "update"])
@pytest.mark.parametrize("name", sorted(CELLS))
def test_a_pass_writes_in_proportion_to_the_graph(name, path, request):
    if path == "compiled" and name != "own":
        request.getfixturevalue("kernels")
    shallow, deep = _written(CELLS[name], 48, path == "compiled"), _written(CELLS[name], 192, path == "compiled")
    assert deep / shallow < 5, (name, path, shallow, deep)  # 4 for linear work, towards 16 for quadratic


def test_the_count_sees_a_graph_sized_write_per_level():
    # The control: a cell that zeroes a graph-sized buffer at every level is caught.
    class Wasteful(MeanPool):
        scratch = torch.zeros(0)

        def update(self, children, x):
            Wasteful.scratch.zero_()
            return super().update(children, x)

    def make(levels):
        Wasteful.scratch = torch.zeros(levels * 4, D)
        return Wasteful(D)

    shallow, deep = _written(lambda: make(48), 48, False), _written(lambda: make(192), 192, False)
    assert deep / shallow > 5, (shallow, deep)


@pytest.mark.parametrize("results", ["depth-cpu.json", "depth-cpu-jemalloc.json"])
def test_the_performance_pages_depth_tables_are_what_their_command_prints(results):
    repo = Path(__file__).resolve().parent.parent
    printed = subprocess.run([sys.executable, "benchmarks/depth.py", "--table", f"benchmarks/results/{results}"],
                             cwd=repo, capture_output=True, text=True, check=True).stdout.strip()
    assert printed.count("\n") > 10 and printed in (repo / "docs" / "performance.md").read_text()


def _one_node_with_many_parents(parents: int, roots: int = 32, children: int = 64) -> Data:
    """``roots`` roots over ``children`` nodes; child ``k`` hangs under root ``k % roots``, and child 0 under the
    first ``parents`` roots."""
    child = [roots + k for k in range(children)] + [roots] * (parents - 1)
    parent = [k % roots for k in range(children)] + list(range(1, parents))
    return Data(edge_index=torch.tensor([child, parent]), edge_pos=torch.zeros(len(child), dtype=torch.long),
                num_nodes=roots + children)


def test_the_top_down_step_runs_once_per_parent_not_once_per_slot():
    # A level's slots are as wide as its node with the most parents: one node with 32 parents among 63 with one
    # makes 64 x 32 slots for 95 edges. The gathered slots are that wide (the engine's layout), but the LSTM step's
    # products, counted here, should run on the 95 filled slots, not on all 2,048.
    def written(parents: int) -> int:
        torch.manual_seed(0)
        cell, graph = TopDownTreeLSTM(D, D), _one_node_with_many_parents(parents)
        x = torch.randn(graph.num_nodes, D, requires_grad=True)
        with native.use_native(False):  # the update on both graphs (the compiled kernel takes the tree)
            cell(x, graph)
            with ElementsWritten(only=("mm", "addmm")) as count:
                states = cell(x, graph)
                sum(s.sum() for s in states).backward()
        return count.total

    one, many = written(1), written(32)
    assert many / one < 3, (one, many)  # 95 edges against 64: about 1.5
