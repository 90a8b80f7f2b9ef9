"""Child-Sum and N-ary Tree-LSTMs (Tai et al. 2015) against per-node recursive references."""

import random

import networkx as nx
import pytest
import torch
from torch_geometric.data import Batch
from trees import chain_ptb, random_ptb

from graphtree.data import from_networkx, from_ptb
from graphtree.errors import ScheduleError
from graphtree.nn import ChildSumTreeLSTM, NaryTreeLSTM

IN, HID = 5, 4


@pytest.fixture(autouse=True)
def float64():
    """References are compared to 1e-6, so every test here runs in float64."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def children_of(data):
    """Children of every node, ordered by position (a plain dict walk, no schedule)."""
    kids = {v: [] for v in range(data.num_nodes)}
    for (child, parent), pos in zip(data.edge_index.t().tolist(), data.edge_pos.tolist()):
        kids[parent].append((pos, child))
    return {v: [c for _, c in sorted(k)] for v, k in kids.items()}


def child_sum_reference(cell, x, data):
    """Tai eqs 2-8, one node at a time by recursion."""
    d = HID
    W, bW = cell.W.weight, cell.W.bias
    Wi, Wo, Wu, Wf = W.split(d)
    bWi, bWo, bWu, bWf = bW.split(d)
    Ui, Uo, Uu = cell.U_iou.weight.split(d)
    bUi, bUo, bUu = cell.U_iou.bias.split(d)
    Uf, bUf = cell.U_f.weight, cell.U_f.bias
    kids = children_of(data)
    memo = {}

    def node(j):
        if j in memo:
            return memo[j]
        states = [node(k) for k in kids[j]]
        h_tilde = sum((h for h, _ in states), torch.zeros(d))
        i = torch.sigmoid(Wi @ x[j] + bWi + Ui @ h_tilde + bUi)
        o = torch.sigmoid(Wo @ x[j] + bWo + Uo @ h_tilde + bUo)
        u = torch.tanh(Wu @ x[j] + bWu + Uu @ h_tilde + bUu)
        c = i * u
        for h_k, c_k in states:
            f_jk = torch.sigmoid(Wf @ x[j] + bWf + Uf @ h_k + bUf)
            c = c + f_jk * c_k
        memo[j] = (o * torch.tanh(c), c)
        return memo[j]

    out = [node(j) for j in range(data.num_nodes)]
    return torch.stack([h for h, _ in out]), torch.stack([c for _, c in out])


def nary_reference(cell, x, data):
    """Tai eqs 9-14 (general) or the constituency setting with the leaf unit, by recursion."""
    d, N = HID, cell.n_ary
    kids = children_of(data)
    U = cell.U
    bias = cell.b_U.sum(0)

    def U_block(gate_row, child):
        return U[gate_row * d:(gate_row + 1) * d, child * d:(child + 1) * d]

    memo = {}

    def node(j):
        if j in memo:
            return memo[j]
        states = [node(k) for k in kids[j]]
        if cell.setting == "constituency" and not states:
            Wc, Wo = cell.W_leaf.weight.split(d)
            bc, bo = cell.W_leaf.bias.split(d)
            c = Wc @ x[j] + bc
            memo[j] = (torch.sigmoid(Wo @ x[j] + bo) * torch.tanh(c), c)
            return memo[j]
        states += [(torch.zeros(d), torch.zeros(d))] * (N - len(states))
        if cell.setting == "general":
            Wi, Wo, Wu, Wf = cell.W.weight.split(d)
            bi, bo, bu, bf = cell.W.bias.split(d)
            wx = [Wi @ x[j] + bi, Wo @ x[j] + bo, Wu @ x[j] + bu, Wf @ x[j] + bf]
        else:
            wx = [torch.zeros(d)] * 4
        pre = [wx[g] + bias[g * d:(g + 1) * d] + sum(U_block(g, l) @ states[l][0] for l in range(N))
               for g in range(3)]
        i, o, u = torch.sigmoid(pre[0]), torch.sigmoid(pre[1]), torch.tanh(pre[2])
        c = i * u
        for k in range(N):
            f_pre = wx[3] + bias[(3 + k) * d:(4 + k) * d] + sum(U_block(3 + k, l) @ states[l][0] for l in range(N))
            c = c + torch.sigmoid(f_pre) * states[k][1]
        memo[j] = (o * torch.tanh(c), c)
        return memo[j]

    out = [node(j) for j in range(data.num_nodes)]
    return torch.stack([h for h, _ in out]), torch.stack([c for _, c in out])


def mixed_batch(max_arity, seed=0, count=8):
    rng = random.Random(seed)
    # With one child per node allowed, only single-word chains are possible.
    trees = [from_ptb(random_ptb(rng.randint(1, 12) if max_arity > 1 else 1, max_arity, rng)) for _ in range(count)]
    if max_arity == 1:
        trees += [from_ptb(chain_ptb(length)) for length in (2, 5, 9)]
    trees.append(from_ptb("(1 (2 lone))"))  # a unary root
    return Batch.from_data_list(trees)


def assert_matches_reference(cell, batch, reference):
    torch.manual_seed(0)
    x = torch.randn(batch.num_nodes, IN, requires_grad=True)
    weights = torch.randn(batch.num_nodes, HID), torch.randn(batch.num_nodes, HID)

    h, c = cell(x, batch)
    loss = (h * weights[0]).sum() + (c * weights[1]).sum()
    grads = torch.autograd.grad(loss, [x, *cell.parameters()])

    h_ref, c_ref = reference(cell, x, batch)
    loss_ref = (h_ref * weights[0]).sum() + (c_ref * weights[1]).sum()
    grads_ref = torch.autograd.grad(loss_ref, [x, *cell.parameters()])

    torch.testing.assert_close(h, h_ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(c, c_ref, atol=1e-6, rtol=0)
    for g, g_ref in zip(grads, grads_ref):
        torch.testing.assert_close(g, g_ref, atol=1e-6, rtol=0)


def test_child_sum_matches_recursion_on_mixed_batch():
    torch.manual_seed(1)
    assert_matches_reference(ChildSumTreeLSTM(IN, HID), mixed_batch(max_arity=5), child_sum_reference)


def test_child_sum_matches_recursion_on_dag():
    rng = random.Random(3)
    g = nx.gnp_random_graph(20, 0.2, seed=4, directed=True)
    dag = nx.DiGraph([(u, v) for u, v in g.edges if u < v])
    dag.add_nodes_from(range(20))
    del rng
    data = from_networkx(dag)
    assert (torch.bincount(data.edge_index[0], minlength=20) > 1).any(), "want nodes with several parents"
    torch.manual_seed(2)
    assert_matches_reference(ChildSumTreeLSTM(IN, HID), data, child_sum_reference)


@pytest.mark.parametrize("setting", ["constituency", "general"])
@pytest.mark.parametrize("n_ary", [1, 2, 3])
def test_nary_matches_recursion(setting, n_ary):
    torch.manual_seed(n_ary)
    batch = mixed_batch(max_arity=n_ary, seed=n_ary)
    assert_matches_reference(NaryTreeLSTM(IN, HID, n_ary=n_ary, setting=setting), batch, nary_reference)


def test_published_parameter_counts():
    # Tai et al. 2015, Table 1, sentiment column.
    assert sum(p.numel() for p in NaryTreeLSTM(300, 150, n_ary=2).parameters()) == 316_800
    assert sum(p.numel() for p in ChildSumTreeLSTM(300, 168).parameters()) == 315_840


def copy_to_lstm(cell, lstm):
    """Copy a cell's W and U into nn.LSTM, whose gate order is i, f, g(=u), o."""
    d = HID
    with torch.no_grad():
        Wi, Wo, Wu, Wf = cell.W.weight.split(d)
        bi, bo, bu, bf = cell.W.bias.split(d)
        lstm.weight_ih_l0.copy_(torch.cat([Wi, Wf, Wu, Wo]))
        lstm.bias_ih_l0.copy_(torch.cat([bi, bf, bu, bo]))
        if isinstance(cell, ChildSumTreeLSTM):
            Ui, Uo, Uu = cell.U_iou.weight.split(d)
            ci, co, cu = cell.U_iou.bias.split(d)
            lstm.weight_hh_l0.copy_(torch.cat([Ui, cell.U_f.weight, Uu, Uo]))
            lstm.bias_hh_l0.copy_(torch.cat([ci, cell.U_f.bias, cu, co]))
        else:
            Ui, Uo, Uu, Uf = cell.U.split(d)
            ci, co, cu, cf = cell.b_U[0].split(d)
            lstm.weight_hh_l0.copy_(torch.cat([Ui, Uf, Uu, Uo]))
            lstm.bias_hh_l0.copy_(torch.cat([ci, cf, cu, co]))


@pytest.mark.parametrize("make", [lambda: ChildSumTreeLSTM(IN, HID),
                                  lambda: NaryTreeLSTM(IN, HID, n_ary=1, setting="general")])
def test_chain_is_a_standard_lstm(make):
    torch.manual_seed(5)
    cell = make()
    length = 12
    data = from_ptb(chain_ptb(length))  # node 0 is the top, node length-1 the leaf
    x = torch.randn(length, IN)
    h, c = cell(x, data)
    lstm = torch.nn.LSTM(IN, HID)
    copy_to_lstm(cell, lstm)
    # The sequence runs from the leaf up to the root.
    out, (_, c_last) = lstm(x.flip(0).unsqueeze(1))
    torch.testing.assert_close(h.flip(0), out.squeeze(1), atol=1e-10, rtol=0)
    torch.testing.assert_close(c[0], c_last.view(-1), atol=1e-10, rtol=0)


def test_child_sum_ignores_child_order_nary_does_not():
    torch.manual_seed(6)
    left = from_ptb("(0 (0 a) (0 (0 b) (0 c)) (0 d))")
    right = from_ptb("(0 (0 d) (0 (0 c) (0 b)) (0 a))")
    # Node ids in pre-order: left = [root, a, (bc), b, c, d]; right = [root, d, (cb), c, b, a].
    x_left = torch.randn(6, IN)
    x_right = x_left[[0, 5, 2, 4, 3, 1]]
    child_sum = ChildSumTreeLSTM(IN, HID)
    torch.testing.assert_close(child_sum(x_left, left)[0][0], child_sum(x_right, right)[0][0])
    nary = NaryTreeLSTM(IN, HID, n_ary=3)
    assert not torch.allclose(nary(x_left, left)[0][0], nary(x_right, right)[0][0], atol=1e-4)


def test_forget_options_reduce_parameters_and_match_full_when_equal():
    torch.manual_seed(7)
    full, tied, zero = (NaryTreeLSTM(IN, HID, n_ary=3, forget=f) for f in ("full", "tied", "zero"))
    d, N = HID, 3
    assert sum(p.numel() for p in full.parameters()) - sum(p.numel() for p in zero.parameters()) == N * (N - 1) * d * d
    assert sum(p.numel() for p in tied.parameters()) - sum(p.numel() for p in zero.parameters()) == d * d
    # Build the full U_kl from the tied blocks: both cells must then agree.
    with torch.no_grad():
        full.W_leaf.load_state_dict(tied.W_leaf.state_dict())
        full.b_U.copy_(tied.b_U)
        full.U[:3 * d].copy_(tied.U)
        for k in range(N):
            for l in range(N):
                block = tied.U_f_diag[k] if k == l else tied.U_f_off
                full.U[(3 + k) * d:(4 + k) * d, l * d:(l + 1) * d] = block
    batch = mixed_batch(max_arity=3, seed=9)
    x = torch.randn(batch.num_nodes, IN)
    torch.testing.assert_close(full(x, batch)[0], tied(x, batch)[0])


def test_deep_chain_runs_forward_and_backward():
    torch.set_default_dtype(torch.float32)
    length = 10_000
    data = from_ptb(chain_ptb(length))
    for cell in (ChildSumTreeLSTM(8, 8), NaryTreeLSTM(8, 8, n_ary=1), NaryTreeLSTM(8, 8, n_ary=2)):
        x = torch.randn(length, 8, requires_grad=True)
        h, c = cell(x, data)
        (h.sum() + c.sum()).backward()
        assert torch.isfinite(h).all() and torch.isfinite(x.grad).all()
        assert all(torch.isfinite(p.grad).all() for p in cell.parameters())


def test_bad_input_is_a_clear_error():
    cell = NaryTreeLSTM(IN, HID, n_ary=2)
    data = from_ptb("(0 (1 a) (2 b) (3 c))")
    with pytest.raises(ScheduleError, match=r"node 0 has 3 children.*at most 2"):
        cell(torch.randn(4, IN), data)
    batch = Batch.from_data_list([from_ptb("(0 (1 a) (2 b))"), data])
    with pytest.raises(ScheduleError, match="node 0 of graph 1"):
        cell(torch.randn(7, IN), batch)
    with pytest.raises(ValueError, match=r"\[num_nodes, 5\]"):
        cell(torch.randn(4, IN + 1), data)
    with pytest.raises(ScheduleError, match="x of 3 rows for a graph of 4 nodes"):
        ChildSumTreeLSTM(IN, HID)(torch.randn(3, IN), data)
    with pytest.raises(ScheduleError, match="edge_index must hold integers"):  # a tensor is read as edge_index
        ChildSumTreeLSTM(IN, HID)(torch.randn(4, IN), torch.zeros(2, 3))
    with pytest.raises(ScheduleError, match="expected a graphtree Schedule"):
        ChildSumTreeLSTM(IN, HID)(torch.randn(4, IN), [[0, 1], [2, 2]])


def test_tree_classifier_sums_the_loss_over_labelled_nodes():
    from graphtree.models import NodeEmbedding, TreeClassifier, node_loss

    data = from_ptb("(3 (2 a) (4 (1 b) (0 c)))", vocab={"a": 0, "b": 1, "c": 2})
    data.y[1] = -1  # one unlabelled node
    model = TreeClassifier(NodeEmbedding(3, IN), NaryTreeLSTM(IN, HID), num_classes=5, dropout=0.0)
    logits = model(data)
    assert logits.shape == (5, 5)
    # Hand reference: -sum of log-softmax at the labelled nodes' gold classes.
    log_p = torch.log_softmax(logits, dim=-1)
    expected = -(log_p[0, 3] + log_p[2, 4] + log_p[3, 1] + log_p[4, 0])
    torch.testing.assert_close(node_loss(logits, data.y), expected)
    # Internal nodes (no word) see zero input vectors.
    assert model.embedding(data.word)[[0, 2]].abs().sum() == 0


@pytest.mark.parametrize("make", [lambda: ChildSumTreeLSTM(3, 2), lambda: NaryTreeLSTM(3, 2),
                                  lambda: NaryTreeLSTM(3, 2, setting="general")])
def test_gradcheck_through_the_engine(make):
    torch.manual_seed(8)
    cell = make()
    batch = Batch.from_data_list([from_ptb("(1 (2 (3 a)) (4 (0 b) (1 c)))"), from_ptb("(2 a)")])
    x = torch.randn(batch.num_nodes, 3, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, *params: cell(x, batch), (x, *cell.parameters()))
