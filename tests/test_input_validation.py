"""Wrong inputs that used to pass silently (or fail without saying where) are located errors or correct results.

Every expectation here is worked out by hand from the tree in the test, not
taken from the code under test: node numbers are pre-order for PTB strings and
token order for parent arrays, character offsets are counted in the string.
"""

from __future__ import annotations

import timeit

import networkx as nx
import numpy as np
import pytest
import torch
from torch_geometric.data import Batch, Data

import graphtree.schedule as schedule_module
from graphtree.data import from_heads, from_networkx, from_ptb, with_schedule
from graphtree.errors import ScheduleError, TreeFormatError
from graphtree.nn import SLSTM, ChildSumTreeLSTM, HeadLexicalization, NaryTreeLSTM
from graphtree.schedule import Schedule, schedule_of

# Two binary trees with the same node and edge counts (5 and 4) but different shapes. Pre-order numbering:
#   LEFT:  0 = root, 1 = (1 (1 a) (1 b)), 2 = a, 3 = b, 4 = c    edges 1->0, 2->1, 3->1, 4->0
#   RIGHT: 0 = root, 1 = a, 2 = (1 (1 b) (1 c)), 3 = b, 4 = c    edges 1->0, 2->0, 3->2, 4->2
LEFT = "(1 (1 (1 a) (1 b)) (1 c))"
RIGHT = "(1 (1 a) (1 (1 b) (1 c)))"
RIGHT_HEIGHT = [2, 0, 1, 0, 0]
RIGHT_LEAVES = [1, 3, 4]


def _cell_and_input() -> tuple[NaryTreeLSTM, torch.Tensor]:
    torch.manual_seed(0)
    return NaryTreeLSTM(4, 3), torch.randn(5, 4)


def _check_right_result(cell: NaryTreeLSTM, x: torch.Tensor, got: tuple[torch.Tensor, torch.Tensor]) -> None:
    """``got`` must be RIGHT's states: every leaf's equals a one-leaf tree's on its own row of ``x`` (a leaf
    depends on nothing else), and the whole equals a freshly parsed RIGHT."""
    for leaf in RIGHT_LEAVES:
        alone = cell(x[leaf:leaf + 1], from_ptb("(1 w)"))
        torch.testing.assert_close(got[0][leaf], alone[0][0])
        torch.testing.assert_close(got[1][leaf], alone[1][0])
    fresh = cell(x, from_ptb(RIGHT))
    torch.testing.assert_close(got[0], fresh[0])
    torch.testing.assert_close(got[1], fresh[1])


# -- 1. the schedule is data: a pass runs on the graph it is given, or on the schedule it carries ------------


def _edit_to_right(d: Data, how: str) -> None:
    """Turn LEFT's tensors in ``d`` into RIGHT's, in one of the ways a user might."""
    right = from_ptb(RIGHT)
    for key in ("edge_index", "edge_pos", "height", "depth", "is_root", "is_leaf"):  # flags too: they are checked
        if how == "reassign":
            d[key] = right[key]
        elif how == "in place":
            d[key].copy_(right[key])
        elif how == ".data":  # bypasses the version counter
            d[key].data.copy_(right[key])
        else:  # through a NumPy view: no version counter at all
            d[key].numpy()[...] = right[key].numpy()


@pytest.mark.parametrize("how", ["reassign", "in place", ".data", "numpy view"])
def test_a_graph_without_a_schedule_runs_on_its_edges_as_they_are_now(how: str):
    """Nothing is cached on the graph, so no kind of write, however it bypasses PyTorch's bookkeeping, can
    leave a pass running on the old edges."""
    cell, x = _cell_and_input()
    d = from_ptb(LEFT)
    cell(x, d)
    _edit_to_right(d, how)
    assert schedule_of(d).height.tolist() == RIGHT_HEIGHT
    _check_right_result(cell, x, cell(x, d))


@pytest.mark.parametrize("how", ["reassign", "in place", "numpy view"])
def test_an_attached_schedule_is_the_graph_the_pass_runs_on_until_it_is_replaced(how: str):
    cell, x = _cell_and_input()
    d = with_schedule(from_ptb(LEFT))
    left_states = cell(x, from_ptb(LEFT))
    _edit_to_right(d, how)
    # The schedule holds its own copies of LEFT's tensors: the pass still runs on LEFT, whole and consistent.
    for got, want in zip(cell(x, d), left_states, strict=True):
        torch.testing.assert_close(got, want)
    d.schedule = Schedule.from_data(d)  # the graph changed: its new schedule, as the docs say
    _check_right_result(cell, x, cell(x, d))


def test_a_clone_shares_the_schedule_of_the_graph_it_copies():
    cell, x = _cell_and_input()
    left = with_schedule(from_ptb(LEFT))
    d = left.clone()
    assert d.schedule is left.schedule
    d.edge_index, d.edge_pos, d.height, d.depth, d.is_root, d.is_leaf = (
        from_ptb(RIGHT)[k] for k in ("edge_index", "edge_pos", "height", "depth", "is_root", "is_leaf"))
    del d.schedule  # other edges: without the copied schedule, the pass builds the clone's own
    _check_right_result(cell, x, cell(x, d))
    assert schedule_of(left).height.tolist() == [2, 1, 0, 0, 0]  # LEFT's heights, kept by the original


def test_an_attached_schedule_of_another_size_is_an_error_that_names_both_sizes():
    d = with_schedule(from_ptb("(1 (1 a) (1 b))"))
    d.num_nodes = 4  # an isolated extra node: a leaf and a root, height 0 and depth 0
    d.height, d.depth = torch.tensor([1, 0, 0, 0]), torch.tensor([0, 1, 1, 0])
    d.is_root, d.is_leaf = d.depth == 0, d.height == 0
    with pytest.raises(ScheduleError, match=r"built for 3 nodes and 2 edges, but the graph has 4 nodes and 2 "
                                            r"edges; attach a new one"):
        schedule_of(d)
    with pytest.raises(ScheduleError, match="built for 3 nodes"):
        with_schedule(d)
    d.schedule = Schedule.from_data(d)
    assert schedule_of(d).num_nodes == 4 and schedule_of(d).bottom_up.level_sizes() == [3, 1]


@pytest.fixture
def count_builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    builds = [0]
    original = schedule_module.Schedule.__init__

    def counting(self, *args, **kwargs) -> None:
        builds[0] += 1
        original(self, *args, **kwargs)

    monkeypatch.setattr(schedule_module.Schedule, "__init__", counting)
    return builds


def test_trainer_flow_builds_each_schedule_once(count_builds: list[int]):
    """The trainer attaches a batch's schedule on the host, then moves the batch (new tensors, same values):
    the schedule moves with it, and the passes after the move use it instead of building another."""
    torch.manual_seed(0)
    cell = NaryTreeLSTM(4, 3)
    batch = with_schedule(Batch.from_data_list([from_ptb(LEFT), from_ptb(RIGHT)]))  # Trainer.to_device
    assert count_builds[0] == 1
    moved = batch.apply(lambda t: t.clone())  # what batch.to(device) does to every tensor, here without a GPU
    assert moved.schedule is batch.schedule
    x = torch.randn(10, 4, requires_grad=True)
    h, c = cell(x, moved)
    (h.sum() + c.sum()).backward()
    cell(x, moved)
    assert count_builds[0] == 1


def test_a_batch_without_a_schedule_gets_one_per_pass_and_keeps_none(count_builds: list[int]):
    torch.manual_seed(0)
    cell = NaryTreeLSTM(4, 3)
    batch = Batch.from_data_list([from_ptb(LEFT), from_ptb(RIGHT)])
    x = torch.randn(10, 4)
    for _ in range(3):
        cell(x, batch)
    assert count_builds[0] == 3 and "schedule" not in batch
    schedule = Schedule.from_data(batch)  # built once, passed to every call
    for _ in range(3):
        cell(x, schedule)
    assert count_builds[0] == 4


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_trainer_to_device_keeps_the_host_schedule(count_builds: list[int]):
    from graphtree.train.trainer import Trainer

    trainer = Trainer.__new__(Trainer)
    trainer.device = torch.device("cuda")
    batch = trainer.to_device(Batch.from_data_list([from_ptb(LEFT), from_ptb(RIGHT)]))
    cell = NaryTreeLSTM(4, 3).cuda()
    cell(torch.randn(10, 4, device="cuda"), batch)
    cell(torch.randn(10, 4, device="cuda"), batch)
    assert count_builds[0] == 1


def test_taking_an_attached_schedule_is_cheap():
    """It runs once per forward: it must stay a few attribute reads (generous bound for a loaded machine)."""
    batch = with_schedule(Batch.from_data_list([from_ptb(LEFT)] * 25))
    seconds = min(timeit.repeat(lambda: schedule_of(batch), number=2000, repeat=5)) / 2000
    assert seconds < 50e-6


# -- 2. stored levels must be exact -------------------------------------------------------------------------


def test_leaf_with_a_stored_height_above_zero_is_an_error():
    # (1 (1 a) (1 b)): 0 = root, 1 = a, 2 = b. Node 1 is a leaf, so its height must be 0; the root's 2 still
    # sits above both children, which is all the old check looked at.
    d = from_ptb("(1 (1 a) (1 b))")
    d.height = torch.tensor([2, 1, 0])
    with pytest.raises(ScheduleError, match=r"node 1 has height 1, expected 0 \(it has no children\)"):
        schedule_of(d)


def test_parent_height_must_be_one_above_its_highest_child():
    d = from_ptb("(1 (1 a) (1 b))")
    d.height = torch.tensor([3, 0, 0])  # children at 0, so the root must be at 1
    with pytest.raises(ScheduleError, match=r"node 0 has height 3, expected 1 "):
        schedule_of(d)


def test_stored_depth_must_be_exact():
    d = from_ptb("(1 (1 a) (1 b))")
    d.depth = torch.tensor([0, 1, 2])  # node 2's only parent is the root (depth 0), so it must be at 1
    with pytest.raises(ScheduleError, match=r"node 2 has depth 2, expected 1 "):
        schedule_of(d)
    d.depth = torch.tensor([1, 2, 2])  # the root has no parent: depth 0
    with pytest.raises(ScheduleError, match=r"node 0 has depth 1, expected 0 \(it has no parents\)"):
        schedule_of(d)


def test_level_error_names_the_node_in_the_batch():
    second = from_ptb("(1 (1 a) (1 b))")
    second.height = torch.tensor([2, 1, 0])
    batch = Batch.from_data_list([from_ptb("(1 (1 a) (1 b))"), second])
    with pytest.raises(ScheduleError, match=r"node 4 \(node 1 of graph 1 in the batch\) has height 1, expected 0"):
        schedule_of(batch)


def test_exact_levels_are_accepted_on_trees_and_dags():
    g = nx.DiGraph([("a", "r"), ("b", "r"), ("s", "a"), ("s", "b"), ("t", "b")])
    for data in (from_ptb(LEFT), from_ptb(RIGHT), from_networkx(g), from_heads([2, 3, 0, 3, -1])):
        assert Schedule.from_data(data).num_nodes == data.num_nodes


# -- 3. PTB labels ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("line", "start", "offending"), [
    ("(٣ a)", 1, 1),              # Arabic-Indic three: str.isdigit() and int() take it
    ("(３ a)", 1, 1),             # fullwidth three
    ("(² a)", 1, 1),              # superscript two: isdigit() takes it, int() does not
    ("(1 (1٣ a))", 4, 5),         # the label starts at 4, the bad character is at 5
    ("(1 (2 a) (۴ b))", 10, 10),
])
def test_ptb_labels_are_ascii_digits_only(line: str, start: int, offending: int):
    with pytest.raises(TreeFormatError) as info:
        from_ptb(line)
    assert info.value.position == start  # every label error points at the label's start
    assert f"{line[offending]!r} at position {offending} is not an ASCII digit" in str(info.value)


def test_ptb_label_past_int64_is_located():
    with pytest.raises(TreeFormatError, match="int64") as info:
        from_ptb("(1 (9223372036854775808 a))")
    assert info.value.position == 4
    assert from_ptb("(9223372036854775807 a)").y.tolist() == [2**63 - 1]


def test_ptb_valid_labels_still_parse():
    assert from_ptb("(10 (007 a) (2 b))").y.tolist() == [10, 7, 2]
    with pytest.raises(TreeFormatError) as info:
        from_ptb("(1 (-1 a))")  # negative labels were never allowed
    assert info.value.position == 4


# -- 4. parent-array labels and networkx attributes ---------------------------------------------------------


@pytest.mark.parametrize(("labels", "token", "shown"), [
    ([1, 1.5, 2], 2, "1.5"),
    ([1, 2, True], 3, "True"),
    (["3", 1, 2], 1, "'3'"),
    ([1, "a", 2], 2, "'a'"),
    ([1, 2, -2], 3, "-2"),
    ([2**63, 1, 2], 1, str(2**63)),
    ([1, float("nan"), 2], 2, "nan"),
])
def test_parent_array_labels_must_be_integers(labels: list, token: int, shown: str):
    with pytest.raises(TreeFormatError) as info:
        from_heads([2, 0, 2], tokens="a b c", labels=labels)
    assert info.value.position == token
    assert f"label {shown} of token {token}" in str(info.value)


def test_parent_array_valid_labels_still_work():
    labels = [np.int64(4), None, -1]
    assert from_heads([2, 0, 2], labels=labels).y.tolist() == [4, -1, -1]
    assert from_heads([2, 0, 2], labels=torch.tensor([1, 2, 3])).y.tolist() == [1, 2, 3]
    assert from_heads([2, 0, 2], labels=[1.0, 0, 2]).y.tolist() == [1, 0, 2]


def test_parent_entries_reject_bools():
    with pytest.raises(TreeFormatError, match="head entry True of token 1") as info:
        from_heads([True, 0])
    assert info.value.position == 1


@pytest.mark.parametrize("bad", [0.5, "a", "1", True, -1])
def test_networkx_positions_must_be_non_negative_integers(bad):
    g = nx.DiGraph()
    g.add_edge("x", "p", position=bad)
    g.add_edge("y", "p", position=1)
    with pytest.raises(TreeFormatError) as info:
        from_networkx(g)
    assert f"edge 'x' -> 'p' has 'position' {bad!r}" in str(info.value)


def test_networkx_valid_positions_still_work():
    g = nx.DiGraph()
    g.add_edge("x", "p", position=np.int64(1))
    g.add_edge("y", "p", position=0.0)
    assert from_networkx(g).edge_pos.tolist() == [1, 0]


@pytest.mark.parametrize("as_tensor", [False, True])
def test_networkx_ragged_features_name_the_node(as_tensor: bool):
    g = nx.DiGraph([("a", "r"), ("b", "r")])
    for name, x in (("a", [1.0, 0.0]), ("r", [0.0, 1.0]), ("b", [1.0])):
        g.nodes[name]["x"] = torch.tensor(x) if as_tensor else x
    # graph.nodes order: a, r, b; b (index 2) is the odd one out
    with pytest.raises(TreeFormatError, match=r"node 'b' \(index 2\) has 'x' of shape \(1,\), but node 'a' "
                                              r"\(index 0\) has shape \(2,\)") as info:
        from_networkx(g)
    assert info.value.position == 2


def test_networkx_ragged_within_one_node_is_an_error():
    g = nx.DiGraph([("a", "r")])
    g.nodes["a"]["x"] = [[1.0, 2.0], [3.0]]
    g.nodes["r"]["x"] = [[1.0, 2.0], [3.0, 4.0]]
    with pytest.raises(TreeFormatError, match=r"node 'a' \(index 0\) has a ragged 'x'"):
        from_networkx(g)


def test_networkx_non_numeric_attributes_stay_lists():
    g = nx.DiGraph([("a", "r")])
    g.nodes["a"]["words"], g.nodes["r"]["words"] = ["the", "cat"], ["sat"]
    g.nodes["a"]["x"], g.nodes["r"]["x"] = [1, 2], [3.5, 4]
    data = from_networkx(g)
    assert data.words == [["the", "cat"], ["sat"]]
    assert data.x.dtype == torch.float32 and data.x.tolist() == [[1.0, 2.0], [3.5, 4.0]]


# -- 5. edge_pos shape and dtype ----------------------------------------------------------------------------


def test_edge_pos_of_the_wrong_length_is_named():
    d = from_ptb("(1 (1 a) (1 b))")  # 2 edges
    d.edge_pos = torch.tensor([0, 1, 0])
    with pytest.raises(ScheduleError, match=r"edge_pos has 3 entries, expected 2 \(one per edge of edge_index\)"):
        schedule_of(d)
    d.edge_pos = torch.tensor([[0, 1]])
    with pytest.raises(ScheduleError, match=r"edge_pos must have shape \[2\].*got \(1, 2\)"):
        schedule_of(d)


def test_edge_pos_must_be_integer():
    d = from_ptb("(1 (1 a) (1 b))")
    d.edge_pos = torch.tensor([0.0, 0.5])  # .long() used to turn 0.5 into a second position 0
    with pytest.raises(ScheduleError, match=r"edge_pos must hold integers, got torch\.float32"):
        schedule_of(d)


def test_edge_index_out_of_range_with_stored_levels_is_named():
    d = Data(edge_index=torch.tensor([[1, 3], [0, 0]]), num_nodes=3, height=torch.tensor([1, 0, 0]),
             depth=torch.tensor([0, 1, 1]))
    with pytest.raises(ScheduleError, match=r"edge 1 \(3 -> 0\) refers to node 3, but the graph has 3 nodes"):
        schedule_of(d)


# --------------------------------------------------------------------------- inputs a cell used to take silently


def test_an_edge_given_twice_without_positions_is_named():
    # Child-Sum summed child 1 twice here; from_networkx refuses the same multigraph.
    cell = ChildSumTreeLSTM(3, 4)
    data = Data(edge_index=torch.tensor([[1, 2, 1], [0, 0, 0]]), num_nodes=3)
    with pytest.raises(ScheduleError, match=r"edge 2 \(1 -> 0\) repeats edge 0"):
        cell(torch.randn(3, 3), data)


def test_one_child_at_two_positions_is_two_inputs():
    # A gate whose two operands are one wire: edge_pos says so, and the binary cell reads the child twice.
    torch.manual_seed(0)
    cell = NaryTreeLSTM(3, 4, setting="general")
    x = torch.randn(2, 3)
    twice = Data(edge_index=torch.tensor([[1, 1], [0, 0]]), edge_pos=torch.tensor([0, 1]), num_nodes=2)
    h, _ = cell(x, twice)
    with torch.no_grad():  # by hand: the root's gates from the child's h in both slots
        leaf_h, leaf_c = cell(x[1:], Data(edge_index=torch.zeros(2, 0, dtype=torch.long), num_nodes=1))
        d = 4
        U_h = torch.cat([leaf_h, leaf_h], dim=1) @ cell.U.t() + cell.b_U.sum(0)  # rows i, o, u, f_1, f_2
        Wx = cell.W(x[:1])  # rows i, o, u, f
        i, o = torch.sigmoid(U_h[:, :d] + Wx[:, :d]), torch.sigmoid(U_h[:, d:2 * d] + Wx[:, d:2 * d])
        u = torch.tanh(U_h[:, 2 * d:3 * d] + Wx[:, 2 * d:3 * d])
        f1, f2 = torch.sigmoid(U_h[:, 3 * d:4 * d] + Wx[:, 3 * d:]), torch.sigmoid(U_h[:, 4 * d:] + Wx[:, 3 * d:])
        c = i * u + f1 * leaf_c + f2 * leaf_c
        torch.testing.assert_close(h[:1], o * torch.tanh(c))


@pytest.mark.parametrize("cell", [ChildSumTreeLSTM(3, 3), SLSTM(3, 3), HeadLexicalization(3),
                                  HeadLexicalization(3, "left")], ids=repr)
def test_integer_features_name_the_cell(cell):
    # S-LSTM's embedding leaves and the head lexicalization cast integers silently; the others failed in a layer.
    with pytest.raises(TypeError, match=rf"{type(cell).__name__} expects floating-point node features, got "
                                        r"torch.int64"):
        cell(torch.ones(3, 3, dtype=torch.long), torch.tensor([[1, 2], [0, 0]]))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_features_of_another_float_dtype_name_the_cell_and_both_dtypes(dtype):
    with pytest.raises(TypeError, match=rf"NaryTreeLSTM has torch.float32 parameters but got node features of dtype "
                                        rf"{dtype}"):
        NaryTreeLSTM(3, 4)(torch.ones(3, 3, dtype=dtype), torch.tensor([[1, 2], [0, 0]]))


def test_too_many_feature_rows_name_x_not_an_internal_input():
    # Child-Sum hands the engine W x under the name Wx: the error named that, not the x the user passed.
    data = Data(edge_index=torch.tensor([[1, 2], [0, 0]]), num_nodes=3)
    with pytest.raises(ScheduleError, match=r"ChildSumTreeLSTM got node features x of 5 rows for a graph of 3 nodes"):
        ChildSumTreeLSTM(3, 4)(torch.randn(5, 3), data)


@pytest.mark.parametrize("parents", [None, 5, torch.tensor(5), {1: 0}], ids=["None", "int", "0-d tensor", "dict"])
def test_from_heads_says_what_it_expects(parents):
    with pytest.raises(TypeError, match=r"from_heads expects the head of each token .* got "):
        from_heads(parents)


def test_one_child_too_many_reads_in_the_singular():
    edges = Data(edge_index=torch.tensor([[1, 2], [0, 0]]), edge_pos=torch.tensor([0, 1]), num_nodes=3)
    with pytest.raises(ScheduleError, match=r"node 0 has 2 children \(or a child at position 1\), but NaryTreeLSTM "
                                            r"takes at most 1"):
        NaryTreeLSTM(3, 4, n_ary=1)(torch.randn(3, 3), edges)
    one = Data(edge_index=torch.tensor([[1], [0]]), edge_pos=torch.tensor([2]), num_nodes=2)
    with pytest.raises(ScheduleError, match=r"node 0 has 1 child \(or a child at position 2\)"):
        NaryTreeLSTM(3, 4)(torch.randn(2, 3), one)
