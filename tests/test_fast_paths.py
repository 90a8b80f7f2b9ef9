"""Every fast path of every cell against that cell's ``update``, on every family of graphs, and the cells as
PyG layers.

A paper cell's ``update`` is its definition (checked against the papers' per-node references in
``test_tai_cells``, ``test_slstm``, ``test_lstm_rnn`` and ``test_teng_zhang``). Its fast path, the compiled
level kernel that :mod:`graphtree.backend.dispatch` chooses, is a second program that must compute the same
function on every shape a batch can take. The differential test runs both on the same weights and inputs:
the fast path in float32 against ``update`` in float64 (states, and the gradients of the inputs and of every
parameter), with ``update`` in float32 beside it as the yardstick of float32 rounding, for every setting that
has a fast path (enumerated from the cells' own settings, so a new fast path without an entry here fails)
and every graph family below, in training and in inference. Skipped where the kernels cannot be built.

``python tests/test_fast_paths.py`` prints the coverage table: fast path x setting x graph family.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import inspect
import itertools
import pkgutil
import random
import sys
from collections.abc import Iterator

import pytest
import torch
from torch_geometric.data import Batch, Data
from trees import chain_ptb, random_ptb

import graphtree
from graphtree.backend import dispatch, native
from graphtree.data import from_ptb
from graphtree.models.bicontree import _LeafSum
from graphtree.nn import (
    LSTMRNN,
    SLSTM,
    ChildSumTreeLSTM,
    HeadLexicalization,
    LexicalizedTreeLSTM,
    NaryTreeLSTM,
    TopDownTreeLSTM,
    TreeCell,
)
from graphtree.schedule import SPLIT_COST_SLOTS

# --------------------------------------------------------------------------- the settings with a fast path

# Every cell setting that has a fast path: (cell class, its settings, input width, maximum arity of the graphs
# it takes). The channels are small and unequal where the cell allows, so that a transposed weight shows.
FAST_CELLS: dict[str, tuple[type, dict, int, int]] = {
    "child_sum": (ChildSumTreeLSTM, {}, 7, 6),
    "nary_constituency": (NaryTreeLSTM, {}, 7, 2),
    "nary_unary": (NaryTreeLSTM, {"n_ary": 1}, 7, 1),
    "nary_ternary": (NaryTreeLSTM, {"n_ary": 3}, 7, 3),
    "nary_general": (NaryTreeLSTM, {"setting": "general"}, 7, 2),
    "nary_general_unary": (NaryTreeLSTM, {"n_ary": 1, "setting": "general"}, 7, 1),
    "nary_general_ternary": (NaryTreeLSTM, {"n_ary": 3, "setting": "general"}, 7, 3),
    "slstm_embedding": (SLSTM, {}, 6, 2),
    "slstm_lstm_leaf": (SLSTM, {"leaf": "lstm"}, 7, 2),
    "lstm_rnn_tanh": (LSTMRNN, {}, 6, 2),
    "lstm_rnn_softsign": (LSTMRNN, {"activation": "softsign"}, 6, 2),
    "lstm_rnn_sigmoid": (LSTMRNN, {"activation": "sigmoid"}, 6, 2),
    "lexicalized": (LexicalizedTreeLSTM, {}, 7, 2),
    "contree": (LexicalizedTreeLSTM, {"lexicalized": False}, 7, 2),
    "lexicalized_ternary": (LexicalizedTreeLSTM, {"n_ary": 3}, 7, 3),
    "contree_ternary": (LexicalizedTreeLSTM, {"n_ary": 3, "lexicalized": False}, 7, 3),
    "lexicalized_unary": (LexicalizedTreeLSTM, {"n_ary": 1}, 7, 1),
    "contree_unary": (LexicalizedTreeLSTM, {"n_ary": 1, "lexicalized": False}, 7, 1),
    "top_down": (TopDownTreeLSTM, {}, 7, 2),
    "top_down_ternary": (TopDownTreeLSTM, {"n_ary": 3}, 7, 3),
    "top_down_shared": (TopDownTreeLSTM, {"share_input_weights": True}, 7, 2),
    "top_down_shared_ternary": (TopDownTreeLSTM, {"n_ary": 3, "share_input_weights": True}, 7, 3),
    "top_down_unary": (TopDownTreeLSTM, {"n_ary": 1}, 7, 1),
    "top_down_shared_unary": (TopDownTreeLSTM, {"n_ary": 1, "share_input_weights": True}, 7, 1),
    "gated_head": (HeadLexicalization, {}, 7, 2),
    "left_head": (HeadLexicalization, {"method": "left"}, 7, 3),
    "right_head": (HeadLexicalization, {"method": "right"}, 7, 3),
    "average_head": (HeadLexicalization, {"method": "average"}, 7, 3),
    "leaf_sum": (_LeafSum, {}, 7, 2),
}

# Every setting of every class with a fast path, so that a setting the kernels start to serve fails the
# enumeration test until it has an entry above. The cells' constructors name these choices.
SETTINGS: dict[type, list[dict]] = {
    ChildSumTreeLSTM: [{}],
    NaryTreeLSTM: [{"n_ary": n, "setting": s, "forget": f} for n, s, f in
                   itertools.product((1, 2, 3), ("constituency", "general"), ("full", "tied", "zero"))],
    SLSTM: [{"leaf": leaf} for leaf in ("embedding", "lstm")],
    LSTMRNN: [{"activation": a} for a in ("tanh", "softsign", "sigmoid")],
    LexicalizedTreeLSTM: [{"n_ary": n, "lexicalized": lex} for n in (1, 2, 3) for lex in (True, False)],
    TopDownTreeLSTM: [{"n_ary": n, "share_input_weights": s} for n in (1, 2, 3) for s in (False, True)],
    # The fixed heads take any number of children, whatever n_ary says.
    HeadLexicalization: [{"method": "gated", "n_ary": n} for n in (1, 2, 3)] +
                        [{"method": m} for m in ("left", "right", "average")],
    _LeafSum: [{}],
}


def _make(name: str) -> torch.nn.Module:
    cls, settings, in_channels, _ = FAST_CELLS[name]
    return _construct(cls, settings, in_channels)


def _construct(cls: type, settings: dict, in_channels: int) -> torch.nn.Module:
    if cls in (HeadLexicalization, _LeafSum):
        return cls(in_channels, **settings)
    return cls(in_channels, 6, **settings)


def _canonical(cls: type, settings: dict) -> tuple:
    """A setting with its defaults filled in, so that ``{}`` and ``{"n_ary": 2}`` name the same setting."""
    parameters = inspect.signature(cls.__init__).parameters
    full = {k: p.default for k, p in parameters.items() if p.default is not inspect.Parameter.empty}
    return cls, tuple(sorted({**full, **settings}.items()))


# --------------------------------------------------------------------------- the graph families


def _plain(data: Data) -> Data:
    """Only the structure (so that trees from PTB and hand-made DAGs batch together)."""
    edge_pos = data.edge_pos if "edge_pos" in data else torch.zeros(data.edge_index.size(1), dtype=torch.long)
    return Data(edge_index=data.edge_index, edge_pos=edge_pos, num_nodes=data.num_nodes)


def _tree(ptb: str) -> Data:
    return _plain(from_ptb(ptb))


def _spine(num_leaves: int) -> str:
    """A right-branching tree: every level above the leaves holds one node, with a leaf and the spine below."""
    line = f"(0 w{num_leaves - 1})"
    for k in reversed(range(num_leaves - 1)):
        line = f"(0 (1 w{k}) {line})"
    return line


def _random_dag(num_nodes: int, arity: int, rng: random.Random) -> Data:
    """A DAG in which nodes have several parents: each node after the first few takes 1..arity children among
    the nodes before it (each at its own position), so children are shared and sit at different depths."""
    sources, targets, positions = [], [], []
    for node in range(3, num_nodes):
        children = rng.sample(range(node), rng.randint(1, min(arity, node)))
        for position, child in enumerate(children):
            sources.append(child)
            targets.append(node)
            positions.append(position)
    return Data(edge_index=torch.tensor([sources, targets]), edge_pos=torch.tensor(positions), num_nodes=num_nodes)


def families(arity: int, seed: int = 0) -> dict[str, Data]:
    """Every shape class a batch can take, for cells whose nodes have at most ``arity`` children."""
    rng = random.Random(seed)
    words = " ".join(f"({k % 5} w{k})" for k in range(arity))
    out = {
        "one node": _tree("(1 a)"),
        "one edge": _tree("(1 (2 a))"),
        "chain of 2": _tree(chain_ptb(2)),
        "chain of 7": _tree(chain_ptb(7)),
        "chain of 50": _tree(chain_ptb(50)),
        "leaf under a spine": _tree(_spine(12) if arity >= 2 else chain_ptb(12)),
        "widest node": _tree(f"(1 {words})" if arity >= 2 else "(1 (2 a))"),
        "random trees": Batch.from_data_list([_tree(random_ptb(rng.randint(1, 12), arity, rng))
                                              for _ in range(9)] if arity >= 2 else
                                             [_tree(chain_ptb(rng.randint(1, 12))) for _ in range(9)]),
        "dag": _random_dag(24, arity, rng),
    }
    out["mixed batch"] = Batch.from_data_list([_plain(g) for g in out.values()])
    out["empty"] = Data(edge_index=torch.zeros(2, 0, dtype=torch.long), edge_pos=torch.zeros(0, dtype=torch.long),
                        num_nodes=0)
    return out


FAMILIES = list(families(2))


def _several_parents(graph: Data) -> bool:
    return graph.edge_index.size(1) > 0 and bool(torch.bincount(graph.edge_index[0]).max() > 1)


def expects_fast_path(name: str, graph: Data) -> bool:
    """Where the fast path must run: everywhere, but for the top-down kernel where a node has several parents
    (it covers trees and forests; such DAGs run the cell's ``update``)."""
    return not (FAST_CELLS[name][0] is TopDownTreeLSTM and _several_parents(graph))


# --------------------------------------------------------------------------- running both


def _run(cell: torch.nn.Module, x: torch.Tensor, graph: Data, upstream: list[torch.Tensor],
         grad: bool = True) -> list[torch.Tensor | None]:
    """States, then the gradients of a weighted sum of them with respect to ``x`` and every parameter
    (``None`` for a parameter the graph never uses). Without ``grad``, the states under ``no_grad``."""
    if not grad:
        with torch.no_grad():
            states = cell(x, graph)
        return list(states) if isinstance(states, tuple) else [states]
    x = x.detach().requires_grad_()
    states = cell(x, graph)
    states = states if isinstance(states, tuple) else (states,)
    loss = sum((s * w.to(s.dtype)[:, :s.size(1)]).sum() for s, w in zip(states, upstream))
    grads = torch.autograd.grad(loss, [x, *cell.parameters()], allow_unused=True) if loss.requires_grad else \
        [None] * (1 + len(list(cell.parameters())))
    return [s.detach() for s in states] + list(grads)


@contextlib.contextmanager
def kernel_decisions() -> Iterator[list[bool]]:
    """Whether each pass got a compiled kernel, in order: a spy on :func:`graphtree.backend.dispatch.bound_kernel`,
    the one place that decides, which the engine asks once per pass through that module."""
    original = dispatch.bound_kernel
    ran: list[bool] = []

    def spy(*args):
        made = original(*args)
        ran.append(made is not None)
        return made

    dispatch.bound_kernel = spy
    try:
        yield ran
    finally:
        dispatch.bound_kernel = original


def differential(name: str, family: str, seed: int = 0, graph: Data | None = None) -> bool:
    """Run the fast path and the definition on one family (or on ``graph``), in training and in inference;
    assert that they agree; return whether the fast path ran."""
    _, _, in_channels, arity = FAST_CELLS[name]
    graph = families(arity, seed)[family] if graph is None else graph
    torch.manual_seed(seed)
    cell = _make(name)
    x = torch.randn(graph.num_nodes, in_channels)
    upstream = [torch.randn(graph.num_nodes, 8), torch.randn(graph.num_nodes, 8)]
    with native.use_native(True), kernel_decisions() as ran:
        fast = _run(cell, x, graph, upstream)
        fast_inference = _run(cell, x, graph, upstream, grad=False)
    with native.use_native(False):
        plain = _run(cell, x, graph, upstream)
        want = _run(copy.deepcopy(cell).double(), x.double(), graph, upstream)
    # Inference has the states only: the same references as training's.
    for k, (got, yardstick, w) in enumerate(itertools.chain(zip(fast, plain, want, strict=True),
                                                            zip(fast_inference, plain, want))):
        what = f"{name} on {family}, output {k} ({'training' if k < len(fast) else 'inference'})"
        if w is None:  # a parameter the graph never uses (a leaf alone uses no child weights)
            assert got is None or not got.any(), what
            continue
        assert got is not None and got.shape == w.shape and got.dtype == torch.float32, what
        if w.numel() == 0:
            continue
        scale = max(1.0, float(w.abs().max()))
        # The fast path is as close to float64 as the update in float32 is, within float32 rounding.
        err_fast = float((got.double() - w).abs().max())
        err_plain = float((yardstick.double() - w).abs().max())
        assert err_fast <= max(4 * err_plain, 1e-5 * scale), (what, err_fast, err_plain)
    return bool(ran) and all(ran)


CASES = [(name, family) for name in sorted(FAST_CELLS) for family in FAMILIES]


@pytest.mark.parametrize(("name", "family"), CASES, ids=[f"{n}-{f.replace(' ', '_')}" for n, f in CASES])
def test_the_fast_path_computes_the_update(kernels, name, family):
    graph = families(FAST_CELLS[name][3])[family]
    ran = differential(name, family)
    assert ran == expects_fast_path(name, graph), (name, family, "ran" if ran else "did not run")


# --------------------------------------------------------------------------- hubs and wide nodes

# The cells that take any number of children bottom-up (a hub's), and the top-down cells (any number of parents).
ANY_CHILDREN = ["child_sum", "left_head", "right_head", "average_head", "leaf_sum"]
TOP_DOWN = [name for name, (cls, *_) in FAST_CELLS.items() if cls is TopDownTreeLSTM]


def _edges(pairs: list[tuple[int, int]], positions: list[int], num_nodes: int) -> Data:
    return Data(edge_index=torch.tensor(pairs, dtype=torch.long).t().reshape(2, -1),
                edge_pos=torch.tensor(positions, dtype=torch.long), num_nodes=num_nodes)


def hub_families(hub: int = 150) -> dict[str, Data]:
    """Graphs whose levels mix a hub with narrow nodes, the shapes a plan split by width serves differently:

    * ``hub beside ones``: on one level, a node of ``hub`` children beside nodes of one child (and above them a
      root of two, one of them the hub);
    * ``level of hubs``: a level of three hubs of unequal widths (``hub // 2``, ``hub``, ``hub + 7``) beside a
      node of two;
    * ``hub of 2000``: one node of 2,000 children beside 30 nodes of one, each child a leaf;
    * ``hub above hubs``: a hub whose children are hubs and single nodes, at positions with gaps;
    * ``many parents``: a node with ``hub`` parents (every parent a root with that node and one leaf).
    """
    out = {}
    # hub beside ones: leaves 0..hub-1 under node H; leaf hub..hub+9 under nodes of one child; root R on top.
    H, ones = hub + 10, list(range(hub + 11, hub + 21))
    pairs = [(k, H) for k in range(hub)] + [(hub + k, ones[k]) for k in range(10)] + [(H, hub + 21), (ones[0],
                                                                                                    hub + 21)]
    positions = list(range(hub)) + [0] * 10 + [0, 1]
    out["hub beside ones"] = _edges(pairs, positions, hub + 22)
    # level of hubs: three hubs of unequal widths and a node of two, all over leaves.
    widths, pairs, positions, next_id = [hub // 2, hub, hub + 7, 2], [], [], 0
    for w in widths:
        parent = next_id + w
        pairs += [(next_id + k, parent) for k in range(w)]
        positions += list(range(w))
        next_id = parent + 1
    out["level of hubs"] = _edges(pairs, positions, next_id)
    # hub of 2000: leaves 0..1999 under node 2000; 30 chains of two beside it.
    pairs = [(k, 2000) for k in range(2000)] + [(2001 + 2 * k, 2002 + 2 * k) for k in range(30)]
    out["hub of 2000"] = _edges(pairs, list(range(2000)) + [0] * 30, 2061)
    # hub above hubs: root 0's children: two hubs (of 40 and 90 leaves) and three single nodes, positions with gaps.
    pairs, positions, next_id = [], [], 1
    for position, w in zip((0, 3, 5, 9, 12), (40, 90, 1, 1, 0)):
        node = next_id
        pairs.append((node, 0))
        positions.append(position)
        pairs += [(node + 1 + k, node) for k in range(w)]
        positions += list(range(w))
        next_id = node + 1 + w
    out["hub above hubs"] = _edges(pairs, positions, next_id)
    # many parents: node 0 is child 0 of every parent 1..hub, each of which also has a leaf of its own at 1.
    pairs = [(0, p) for p in range(1, hub + 1)] + [(hub + p, p) for p in range(1, hub + 1)]
    out["many parents"] = _edges(pairs, [0] * hub + [1] * hub, 2 * hub + 1)
    out["mixed with hubs"] = Batch.from_data_list([out["hub beside ones"], _plain(from_ptb("(1 (2 a) (3 b))")),
                                                   out["level of hubs"], out["many parents"]])
    return out


HUB_FAMILIES = list(hub_families())
HUB_CASES = [(name, family) for name in ANY_CHILDREN for family in HUB_FAMILIES] + \
    [(name, family) for name in TOP_DOWN for family in ("many parents", "hub beside ones")]


@pytest.mark.parametrize(("name", "family"), HUB_CASES, ids=[f"{n}-{f.replace(' ', '_')}" for n, f in HUB_CASES])
def test_the_fast_path_computes_the_update_on_hubs(kernels, name, family):
    graph = hub_families()[family]
    if FAST_CELLS[name][0] is TopDownTreeLSTM:  # positions select parameter sets: keep them below n_ary
        graph = Data(edge_index=graph.edge_index, edge_pos=graph.edge_pos.clamp(max=0), num_nodes=graph.num_nodes)
    ran = differential(name, family, graph=graph)
    assert ran == expects_fast_path(name, graph), (name, family, "ran" if ran else "did not run")


def test_a_plan_split_by_width_runs_each_hub_on_its_own_slots():
    # By hand: "hub beside ones" has, at height 1, a node of 150 children and ten of one. Split by width, they
    # run as two levels (10 x 1 and 1 x 150 slots); as one level, 11 x 150.
    graph = hub_families()["hub beside ones"]
    schedule = graphtree.Schedule.from_data(graph)
    plain, split = schedule.plan("bottom_up"), schedule.plan("bottom_up", SPLIT_COST_SLOTS)
    assert plain.level_sizes() == [160, 11, 1] and plain.widths == [0, 150, 2]
    assert split.level_sizes() == [160, 10, 1, 1] and split.widths == [0, 1, 150, 2]
    assert plain.num_slots == 11 * 150 + 2 and split.num_slots == 10 + 150 + 2
    # Every node keeps its children, in their slots: the same edges, read from either plan.
    for plan in (plain, split):
        edges = set()
        for a, slots, positions in zip(plan.ptr, plan.slots, plan.slot_pos):
            for row, (children, pos) in enumerate(zip(slots.tolist(), positions.tolist())):
                edges |= {(int(plan.order[c]), int(plan.order[a + row]), p)
                          for c, p in zip(children, pos) if c < plan.num_nodes}
        assert edges == set(zip(*graph.edge_index.tolist(), graph.edge_pos.tolist()))
    # Sentences are never split: a binary batch's levels waste fewer slots than a level costs.
    batch = Batch.from_data_list([_tree(random_ptb(12, 2, random.Random(k))) for k in range(25)])
    sentences = graphtree.Schedule.from_data(batch)
    assert sentences.plan("bottom_up", SPLIT_COST_SLOTS) is sentences.plan("bottom_up")


SWEEP = [(name, family, seed) for name in sorted(FAST_CELLS) for family in ("random trees", "dag", "mixed batch")
         for seed in range(1, 9)]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "family", "seed"), SWEEP)
def test_the_fast_path_computes_the_update_over_seeds(kernels, name, family, seed):
    differential(name, family, seed)


def _cell_classes() -> set[type]:
    """Every class in the package that names a fast path (every module imported, so none is missed)."""
    for module in pkgutil.walk_packages(graphtree.__path__, "graphtree."):
        try:
            importlib.import_module(module.name)
        except ImportError:  # an optional dependency that is not installed
            continue

    def below(cls: type) -> set[type]:
        return {cls} | set().union(*(below(sub) for sub in cls.__subclasses__()))

    return {cls for cls in below(TreeCell) - {TreeCell} if cls.__module__.startswith("graphtree.")
            and vars(cls).get("level_kernel") is not None}


def _kernel_runs(cls: type, settings: dict) -> bool:
    """Whether the fast path runs for this setting, on a tree that every setting takes."""
    arity = settings.get("n_ary", 2)
    cell = _construct(cls, settings, 6)  # square: S-LSTM's embedding leaves take hidden-sized features
    graph = _tree(_spine(3) if arity >= 2 else chain_ptb(3))
    with torch.no_grad(), native.use_native(True), kernel_decisions() as ran:
        cell(torch.randn(graph.num_nodes, 6), graph)
    return bool(ran) and all(ran)


def test_every_fast_path_and_setting_it_serves_is_tested(kernels):
    classes = _cell_classes()
    assert classes == set(SETTINGS), "a class with a fast path has no settings here (or one here no fast path)"
    # Each fast path is its cell's own: dispatch holds the choice, no cell's maker.
    shared = {name for name, fn in vars(dispatch).items()
              if inspect.isfunction(fn) and fn.__module__ == dispatch.__name__}
    assert shared == {"bound_kernel"}, f"graphtree.backend.dispatch holds more than the choice: {sorted(shared)}"
    tested = {_canonical(cls, settings) for cls, settings, _, _ in FAST_CELLS.values()}
    wrong = []
    for cls, grid in SETTINGS.items():
        for settings in grid:
            runs, covered = _kernel_runs(cls, settings), _canonical(cls, settings) in tested
            if runs != covered:
                wrong.append(f"{cls.__name__}({settings}): " + ("a fast path without an entry in FAST_CELLS" if runs
                                                                 else "no fast path, but an entry in FAST_CELLS"))
    assert not wrong, "\n".join(wrong)


def coverage_table() -> str:
    """Fast path x setting x graph family: "fast" where the kernel ran and equals the update, "update" where the
    cell's own update ran (no kernel covers that case)."""
    lines = ["| fast path | setting | " + " | ".join(FAMILIES) + " |", "|---" * (len(FAMILIES) + 2) + "|"]
    for name in sorted(FAST_CELLS, key=lambda n: (FAST_CELLS[n][0].__name__, n)):
        cls, settings, _, _ = FAST_CELLS[name]
        marks = []
        for family in FAMILIES:
            ran = differential(name, family)
            marks.append("fast" if ran else "update")
        setting = ", ".join(f"{k}={v!r}" for k, v in settings.items()) or "default"
        lines.append(f"| `{cls.__name__}.level_kernel` | {cls.__name__}({setting}) | " + " | ".join(marks) + " |")
    return "\n".join(lines)


def test_a_subclass_with_its_own_update_runs_it(kernels):
    class Scaled(ChildSumTreeLSTM):
        def update(self, children, Wx):
            h, c = super().update(children, Wx)
            return 2 * h, c

    torch.manual_seed(2)
    cell, plain = Scaled(5, 4), ChildSumTreeLSTM(5, 4)
    plain.load_state_dict(cell.state_dict())
    data = from_ptb("(1 (2 a) (3 b))")
    x = torch.randn(data.num_nodes, 5)
    with native.use_native(True):
        h, _ = cell(x, data)
        h_plain, _ = plain(x, data)
    leaves = ~data.is_root
    torch.testing.assert_close(h[leaves], 2 * h_plain[leaves])  # the leaves: the subclass's update ran


# --------------------------------------------------------------------------- PyG's calling convention


def test_a_cell_takes_a_bare_edge_index_as_pyg_layers_do():
    torch.manual_seed(3)
    trees = [from_ptb("(3 (2 The) (3 (2 Rock) (4 rocks)))"), from_ptb("(1 (2 a) (1 dull))")]
    batch = Batch.from_data_list(trees)
    x = torch.randn(batch.num_nodes, 6)
    for cell in (ChildSumTreeLSTM(6, 5), NaryTreeLSTM(6, 5), TopDownTreeLSTM(6, 5)):
        want = cell(x, batch)
        got = cell(x, batch.edge_index, batch.edge_pos) if not isinstance(cell, ChildSumTreeLSTM) else \
            cell(x, batch.edge_index)
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b)


def test_the_schedule_of_a_bare_edge_index_follows_its_edits():
    # Built for each call and kept nowhere: an in-place edit is a new graph, not the old levels.
    cell = ChildSumTreeLSTM(3, 4)
    x = torch.randn(4, 3)
    edges = torch.tensor([[0, 1, 2], [2, 2, 3]])  # 0, 1 -> 2 -> 3
    h_before, _ = cell(x, edges)
    edges[1, 2] = 0  # now 2 -> 0 is impossible (0 is a child of 2): a cycle, which must be reported
    with pytest.raises(Exception, match="cycle"):
        cell(x, edges)
    edges[:, 2] = torch.tensor([3, 2])  # 0, 1 -> 2 and 3 -> 2: node 2 has three children
    h_after, _ = cell(x, edges)
    assert not torch.allclose(h_after[2], h_before[2])


def test_propagate_keeps_pygs_meaning_and_names_bad_calls():
    cell = ChildSumTreeLSTM(3, 4)
    edges = torch.tensor([[0, 1], [2, 2]])
    x = torch.randn(3, 3)
    h, _ = cell.propagate(edges, Wx=cell.W(x))  # PyG: propagate(edge_index, **the arguments of update)
    torch.testing.assert_close(h, cell(x, edges)[0])
    with pytest.raises(ValueError, match="size must be None"):
        cell.propagate(edges, size=(3, 3), Wx=cell.W(x))
    with pytest.raises(ValueError, match="needs the per-node inputs"):
        cell.propagate(edges)


def test_a_cell_that_defines_no_update_says_so():
    class Empty(TreeCell):
        def forward(self, x, edge_index):
            return self.propagate(edge_index, x=x)

    cell = Empty(state_channels=(2,))
    with pytest.raises(NotImplementedError, match="must define update"):
        cell(torch.randn(2, 2), Data(edge_index=torch.tensor([[0], [1]]), num_nodes=2))


# --------------------------------------------------------------------------- a known answer: the standard LSTM


def test_the_general_nary_cell_with_one_child_is_the_standard_lstm_on_a_chain(kernels):
    # The compiled general N-ary level once added into its bias in place on a level of one node (a view of the
    # bias was its gates), so every later level read a corrupted bias: off by 0.46 here.
    torch.manual_seed(0)
    cell = NaryTreeLSTM(5, 6, n_ary=1, setting="general")
    chain = torch.stack([torch.arange(49), torch.arange(1, 50)])  # node k is the child of node k + 1
    x = torch.randn(50, 5)
    lstm = torch.nn.LSTMCell(5, 6)
    d = 6
    W_i, W_o, W_u, W_f = cell.W.weight.split(d)
    b_i, b_o, b_u, b_f = cell.W.bias.split(d)
    U_i, U_o, U_u, U_f = cell.U.split(d)
    bias_U = cell.b_U.sum(0)
    with torch.no_grad():  # LSTMCell's gate order: i, f, g (= u), o
        lstm.weight_ih.copy_(torch.cat([W_i, W_f, W_u, W_o]))
        lstm.bias_ih.copy_(torch.cat([b_i, b_f, b_u, b_o]))
        lstm.weight_hh.copy_(torch.cat([U_i, U_f, U_u, U_o]))
        lstm.bias_hh.copy_(torch.cat([bias_U[:d], bias_U[3 * d:], bias_U[2 * d:3 * d], bias_U[d:2 * d]]))
        h, c = torch.zeros(1, d), torch.zeros(1, d)
        want = []
        for k in range(50):
            h, c = lstm(x[k:k + 1], (h, c))
            want.append(h)
        want = torch.cat(want)
        with native.use_native(True):
            got = cell(x, chain)[0]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


if __name__ == "__main__":
    print(coverage_table())
    sys.exit(0)
