"""Head lexicalization, lexicalized / top-down Tree-LSTMs and BiConTree (Teng & Zhang, 2017).

Every layer is checked against a per-node recursive reference written here from
the paper's equations; the references read the layers' parameter tensors (by the
blocks the docstrings name) but never call the layers' forward or update.
"""

from __future__ import annotations

import random

import pytest
import torch
from torch_geometric.data import Batch, Data

from graphtree.data import from_heads, from_ptb
from graphtree.errors import ScheduleError
from graphtree.models import BiTreeLSTM
from graphtree.nn.head_lexicalization import HeadLexicalization, head_leaves, head_words
from graphtree.nn.lexicalized import LexicalizedTreeLSTM
from graphtree.nn.top_down import TopDownTreeLSTM

DTYPE = torch.float64
TOL = dict(rtol=1e-6, atol=1e-6)

# A unary node over a phrase, a single-word sentence, left- and right-branching trees.
FIXED_TREES = [
    "(3 (2 a) (1 (2 b) (3 c)))",
    "(1 (2 w))",
    "(2 (1 (3 (2 d) (2 e))) (2 f))",
    "(4 (3 (2 (1 g) (2 h)) (2 i)) (3 j))",
]


def random_binary_ptb(num_leaves: int, rng: random.Random) -> str:
    words = [f"w{k}" for k in range(num_leaves)]

    def build(lo: int, hi: int) -> str:
        if hi - lo == 1:
            return f"({rng.randrange(5)} {words[lo]})"
        split = rng.randrange(lo + 1, hi)
        return f"({rng.randrange(5)} {build(lo, split)} {build(split, hi)})"

    return build(0, num_leaves)


def binary_trees(seed: int = 0) -> list[Data]:
    rng = random.Random(seed)
    lines = FIXED_TREES + [random_binary_ptb(rng.randrange(2, 9), rng) for _ in range(4)]
    return [from_ptb(line) for line in lines]


def ternary_trees() -> list[Data]:
    lines = ["(1 (2 a) (3 b) (4 c))", "(2 (1 (2 d) (2 e) (2 f)) (3 g))", "(3 (2 (1 h)) (2 i) (2 (1 j) (2 k)))",
             "(0 l)"]
    return [from_ptb(line) for line in lines]


def children_of(data: Data) -> list[list[tuple[int, int]]]:
    """``children[j]`` = sorted ``(position, child)`` pairs."""
    children: list[list[tuple[int, int]]] = [[] for _ in range(data.num_nodes)]
    for child, parent, pos in zip(*data.edge_index.tolist(), data.edge_pos.tolist(), strict=True):
        children[parent].append((pos, child))
    return [sorted(c) for c in children]


def parents_of(data: Data) -> list[list[tuple[int, int]]]:
    """``parents[j]`` = ``(parent, position of j under it)`` pairs in edge order."""
    parents: list[list[tuple[int, int]]] = [[] for _ in range(data.num_nodes)]
    for child, parent, pos in zip(*data.edge_index.tolist(), data.edge_pos.tolist(), strict=True):
        parents[child].append((parent, pos))
    return parents


def per_tree(trees: list[Data], x: torch.Tensor, reference) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """Run ``reference(tree, x_of_tree)`` on each tree and concatenate in batch order."""
    outs, start = [], 0
    for tree in trees:
        outs.append(reference(tree, x[start:start + tree.num_nodes]))
        start += tree.num_nodes
    if isinstance(outs[0], tuple):
        return tuple(torch.cat([o[k] for o in outs]) for k in range(len(outs[0])))
    return torch.cat(outs)


def compare_with_grads(layer: torch.nn.Module, x: torch.Tensor, got, want) -> float:
    """Assert values and the gradients of x and every parameter agree; return the max deviation."""
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    worst = 0.0
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, **TOL)
        worst = max(worst, float((g - w).detach().abs().max()))
    gen = torch.Generator().manual_seed(1)
    weights = [torch.randn(w.shape, generator=gen, dtype=w.dtype) for w in want]
    names = ["x", *(name for name, _ in layer.named_parameters())]
    wrt = [x, *layer.parameters()]

    def grads(outputs):
        loss = sum((o * r).sum() for o, r in zip(outputs, weights, strict=True))
        return torch.autograd.grad(loss, wrt, allow_unused=True)

    for name, g, w in zip(names, grads(got), grads(want), strict=True):
        assert (g is None) == (w is None), name
        if g is not None:
            torch.testing.assert_close(g, w, **TOL, msg=lambda m, name=name: f"gradient of {name}: {m}")
            worst = max(worst, float((g - w).abs().max()))
    return worst


def blk(W: torch.Tensor, row: int, col: int, d: int, d_col: int | None = None) -> torch.Tensor:
    d_col = d if d_col is None else d_col
    return W[row * d:(row + 1) * d, col * d_col:(col + 1) * d_col]


# ---------------------------------------------------------------------------------------------
# References from the equations


def ref_heads(layer: HeadLexicalization, tree: Data, x: torch.Tensor) -> torch.Tensor:
    children, D, N = children_of(tree), layer.channels, layer.n_ary
    memo: dict[int, torch.Tensor] = {}

    def head(j: int) -> torch.Tensor:
        if j in memo:
            return memo[j]
        kids = children[j]
        if not kids:
            out = x[j]  # a leaf's head lexicon is its word
        elif layer.method == "left":
            out = head(kids[0][1])
        elif layer.method == "right":
            out = head(kids[-1][1])
        elif layer.method == "average":
            out = sum(head(c) for _, c in kids) / len(kids)
        elif len(kids) == 1:
            out = head(kids[0][1])
        elif N == 2:  # eqs 8-9 as printed
            x_L, x_R = head(kids[0][1]), head(kids[1][1])
            W_zx_L, W_zx_R = layer.W_zx[:, :D], layer.W_zx[:, D:]
            z = torch.sigmoid(W_zx_L @ x_L + W_zx_R @ x_R + layer.b_z)
            out = z * x_L + (1 - z) * x_R
        else:  # the documented softmax over children
            xs = {p: head(c) for p, c in kids}
            x_all = [xs.get(p, torch.zeros(D, dtype=x.dtype)) for p in range(N)]
            logits = []
            for k in range(N - 1):
                logits.append(sum(blk(layer.W_zx, k, m, D) @ x_all[m] for m in range(N)) + layer.b_z[k * D:(k + 1) * D])
            logits.append(torch.zeros(D, dtype=x.dtype))
            present = sorted(xs)
            weight = torch.softmax(torch.stack([logits[p] for p in present]), dim=0)
            out = sum(weight[k] * xs[p] for k, p in enumerate(present))
        memo[j] = out
        return out

    return torch.stack([head(j) for j in range(tree.num_nodes)])


def ref_lexicalized(layer: LexicalizedTreeLSTM, tree: Data, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    children, d, N = children_of(tree), layer.hidden_channels, layer.n_ary
    W_h, W_c, W_co, b = layer.W_h, layer.W_c, layer.W_co, layer.b
    if layer.lexicalized:
        W_xi, W_xf, W_xg, W_xo = layer.W_x.split(d)
    else:
        W_xi, W_xg, W_xo = layer.W_x.split(d)
    b_i, b_f, b_g, b_o = b[:d], [b[(1 + k) * d:(2 + k) * d] for k in range(N)], b[(1 + N) * d:(2 + N) * d], b[-d:]
    i_row, g_row, o_row = 0, 1 + N, 2 + N  # row blocks of W_h; forget gate of child k is row 1 + k
    memo: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def state(j: int) -> tuple[torch.Tensor, torch.Tensor]:
        if j in memo:
            return memo[j]
        kids = dict((p, c) for p, c in children[j])
        if not kids:  # leaf (Figure 1c): an LSTM step on the word, no predecessor
            i = torch.sigmoid(W_xi @ x[j] + b_i)
            g = torch.tanh(W_xg @ x[j] + b_g)
            c = i * g
            o = torch.sigmoid(W_xo @ x[j] + W_co @ c + b_o)
            memo[j] = (o * torch.tanh(c), c)
            return memo[j]
        zero = torch.zeros(d, dtype=x.dtype)
        hs = [state(kids[n])[0] if n in kids else zero for n in range(N)]
        cs = [state(kids[n])[1] if n in kids else zero for n in range(N)]
        lex = layer.lexicalized
        i = torch.sigmoid((W_xi @ x[j] if lex else 0) + sum(blk(W_h, i_row, n, d) @ hs[n] + blk(W_c, 0, n, d) @ cs[n]
                                                            for n in range(N)) + b_i)
        f = [torch.sigmoid((W_xf @ x[j] if lex else 0)
                           + sum(blk(W_h, 1 + k, n, d) @ hs[n] + blk(W_c, 1 + k, n, d) @ cs[n] for n in range(N))
                           + b_f[k]) for k in range(N)]
        g = torch.tanh((W_xg @ x[j] if lex else 0) + sum(blk(W_h, g_row, n, d) @ hs[n] for n in range(N)) + b_g)
        c = sum(f[k] * cs[k] for k in range(N)) + i * g
        o = torch.sigmoid((W_xo @ x[j] if lex else 0) + sum(blk(W_h, o_row, n, d) @ hs[n] for n in range(N))
                          + W_co @ c + b_o)
        memo[j] = (o * torch.tanh(c), c)
        return memo[j]

    states = [state(j) for j in range(tree.num_nodes)]
    return torch.stack([s[0] for s in states]), torch.stack([s[1] for s in states])


def ref_top_down(layer: TopDownTreeLSTM, tree: Data, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    parents, d = parents_of(tree), layer.hidden_channels
    memo: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def step(j: int, h_prev: torch.Tensor, c_prev: torch.Tensor, N: int) -> tuple[torch.Tensor, torch.Tensor]:
        s = 0 if layer.share_input_weights else N
        W_xi, W_xf, W_xg, W_xo = layer.W_x[s].split(d)
        b_i, b_f, b_g, b_o = layer.b[s].split(d)
        W_hi, W_hf, W_hg, W_ho = layer.W_h[N].split(d)
        W_ci, W_cf = layer.W_c[N].split(d)
        W_co = layer.W_co[N]
        i = torch.sigmoid(W_xi @ x[j] + W_hi @ h_prev + W_ci @ c_prev + b_i)
        f = torch.sigmoid(W_xf @ x[j] + W_hf @ h_prev + W_cf @ c_prev + b_f)
        g = torch.tanh(W_xg @ x[j] + W_hg @ h_prev + b_g)
        c = f * c_prev + i * g
        o = torch.sigmoid(W_xo @ x[j] + W_ho @ h_prev + W_co @ c + b_o)
        return o * torch.tanh(c), c

    def state(j: int) -> tuple[torch.Tensor, torch.Tensor]:
        if j not in memo:
            if not parents[j]:  # root: zero predecessor, parameter set U_L
                zero = torch.zeros(d, dtype=x.dtype)
                memo[j] = step(j, zero, zero, 0)
            else:  # mean over parents of the step from each
                steps = [step(j, *state(p), pos) for p, pos in parents[j]]
                memo[j] = (sum(s[0] for s in steps) / len(steps), sum(s[1] for s in steps) / len(steps))
        return memo[j]

    states = [state(j) for j in range(tree.num_nodes)]
    return torch.stack([s[0] for s in states]), torch.stack([s[1] for s in states])


# ---------------------------------------------------------------------------------------------
# Head lexicalization


@pytest.mark.parametrize("method", ["gated", "left", "right", "average"])
def test_heads_match_reference(method):
    torch.manual_seed(0)
    trees = binary_trees()
    batch = Batch.from_data_list(trees)
    layer = HeadLexicalization(5, method).to(DTYPE)
    x = torch.randn(batch.num_nodes, 5, dtype=DTYPE, requires_grad=True)
    if method == "gated":
        with torch.no_grad():
            layer.b_z.mul_(4)  # keep the gate away from 1/2 so a swapped L/R would show
    compare_with_grads(layer, x, layer(x, batch), per_tree(trees, x, lambda t, xt: ref_heads(layer, t, xt)))


@pytest.mark.parametrize("method", ["gated", "left", "right", "average"])
def test_heads_nary_match_reference(method):
    torch.manual_seed(1)
    trees = ternary_trees()
    batch = Batch.from_data_list(trees)
    layer = HeadLexicalization(4, method, n_ary=3).to(DTYPE)
    x = torch.randn(batch.num_nodes, 4, dtype=DTYPE, requires_grad=True)
    compare_with_grads(layer, x, layer(x, batch), per_tree(trees, x, lambda t, xt: ref_heads(layer, t, xt)))


def leftmost_and_rightmost_leaf(tree: Data) -> tuple[list[int], list[int]]:
    children = children_of(tree)

    def descend(j: int, end: int) -> int:
        while children[j]:
            j = children[j][end][1]
        return j

    return ([descend(j, 0) for j in range(tree.num_nodes)], [descend(j, -1) for j in range(tree.num_nodes)])


@pytest.mark.parametrize("side", ["left", "right"])
def test_forced_gate_and_fixed_heads_pick_the_outermost_leaf(side):
    trees = binary_trees(3)
    batch = Batch.from_data_list(trees)
    offsets = torch.tensor([0] + [t.num_nodes for t in trees[:-1]]).cumsum(0)
    expected = torch.cat([torch.tensor(leftmost_and_rightmost_leaf(t)[0 if side == "left" else 1]) + off
                          for t, off in zip(trees, offsets, strict=True)])
    x = torch.randn(batch.num_nodes, 6, dtype=DTYPE)
    gated = HeadLexicalization(6).to(DTYPE)
    with torch.no_grad():
        gated.W_zx.zero_()
        gated.b_z.fill_(1000.0 if side == "left" else -1000.0)  # sigma is exactly 1 (or 0) in float64
    fixed = HeadLexicalization(6, side).to(DTYPE)
    for layer in (gated, fixed):
        (heads,) = layer(x, batch)  # its one state, as every cell returns its states
        assert torch.equal(heads, x[expected])
        assert torch.equal(head_leaves(heads, batch), expected)


def test_head_words_by_cosine_similarity():
    # (S (A a b) c) with hand-picked head vectors; nodes in pre-order: 0 S, 1 A, 2 a, 3 b, 4 c.
    tree = from_ptb("(2 (2 (2 a) (2 b)) (2 c))")
    x_head = torch.tensor([[1.0, 0.1], [0.0, 1.0], [1.0, 0.0], [0.1, 1.0], [1.0, 0.2]])
    # Root: cos to A = 0.0995, to c = 0.9988 -> c. A: cos to a = 0, to b = 0.995 -> b.
    assert head_leaves(x_head, tree).tolist() == [4, 3, 2, 3, 4]
    assert head_words(x_head, tree) == ["c", "b", "a", "b", "c"]
    batch = Batch.from_data_list([from_ptb("(1 (2 u) (3 v))"), tree])
    x_batch = torch.cat([torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0]]), x_head])
    assert head_words(x_batch, batch) == ["v", "u", "v", "c", "b", "a", "b", "c"]


# ---------------------------------------------------------------------------------------------
# Lexicalized bottom-up Tree-LSTM


@pytest.mark.parametrize("lexicalized", [True, False])
def test_lexicalized_matches_reference(lexicalized):
    torch.manual_seed(2)
    trees = binary_trees(5)
    batch = Batch.from_data_list(trees)
    layer = LexicalizedTreeLSTM(5, 4, lexicalized=lexicalized).to(DTYPE)
    x = torch.randn(batch.num_nodes, 5, dtype=DTYPE, requires_grad=True)
    got = layer(x, batch)
    want = per_tree(trees, x, lambda t, xt: ref_lexicalized(layer, t, xt))
    compare_with_grads(layer, x, got, want)


def test_lexicalized_nary_matches_reference():
    torch.manual_seed(3)
    trees = ternary_trees()
    batch = Batch.from_data_list(trees)
    layer = LexicalizedTreeLSTM(3, 4, n_ary=3).to(DTYPE)
    x = torch.randn(batch.num_nodes, 3, dtype=DTYPE, requires_grad=True)
    compare_with_grads(layer, x, layer(x, batch),
                       per_tree(trees, x, lambda t, xt: ref_lexicalized(layer, t, xt)))


def test_unlexicalized_ignores_internal_inputs():
    batch = Batch.from_data_list(binary_trees(7))
    layer = LexicalizedTreeLSTM(3, 4, lexicalized=False).to(DTYPE)
    x = torch.randn(batch.num_nodes, 3, dtype=DTYPE)
    x2 = torch.where(batch.is_leaf.unsqueeze(-1), x, torch.randn_like(x))
    torch.testing.assert_close(layer(x, batch), layer(x2, batch), rtol=0, atol=0)


def test_too_many_children_is_an_error():
    for layer, message in [(LexicalizedTreeLSTM(3, 2), "3 children"), (HeadLexicalization(3), "3 children"),
                           (TopDownTreeLSTM(3, 2), "positions 0..1")]:
        data = ternary_trees()[1]
        with pytest.raises(ScheduleError, match=message):
            layer(torch.randn(data.num_nodes, 3), data)


# ---------------------------------------------------------------------------------------------
# Top-down Tree-LSTM


@pytest.mark.parametrize("share", [False, True])
def test_top_down_matches_reference(share):
    torch.manual_seed(4)
    trees = binary_trees(9)
    batch = Batch.from_data_list(trees)
    layer = TopDownTreeLSTM(5, 4, share_input_weights=share).to(DTYPE)
    x = torch.randn(batch.num_nodes, 5, dtype=DTYPE, requires_grad=True)
    compare_with_grads(layer, x, layer(x, batch), per_tree(trees, x, lambda t, xt: ref_top_down(layer, t, xt)))


def test_top_down_nary_and_dag_match_reference():
    torch.manual_seed(5)
    # A DAG: node 3 is child 1 of node 1 and child 0 of node 2; node 4 has parents 1, 2 and 0.
    dag = Data(edge_index=torch.tensor([[1, 2, 3, 3, 4, 4, 4, 5], [0, 0, 1, 2, 1, 2, 0, 3]]),
               edge_pos=torch.tensor([0, 1, 1, 0, 0, 2, 2, 0]), num_nodes=6)
    chain = Data(edge_index=torch.tensor([[1, 2], [0, 1]]), edge_pos=torch.tensor([2, 1]), num_nodes=3)
    layer = TopDownTreeLSTM(3, 4, n_ary=3).to(DTYPE)
    for trees in (ternary_trees(), [dag, chain, dag]):
        batch = Batch.from_data_list(trees)
        x = torch.randn(batch.num_nodes, 3, dtype=DTYPE, requires_grad=True)
        compare_with_grads(layer, x, layer(x, batch),
                           per_tree(trees, x, lambda t, xt: ref_top_down(layer, t, xt)))


def test_top_down_chain_is_a_sequential_lstm():
    torch.manual_seed(6)
    T, D, d = 40, 5, 4
    chain = from_heads(list(range(T)))  # token 1 is the root, token k + 1 hangs under token k
    assert chain.depth.tolist() == list(range(T))
    lstm = torch.nn.LSTM(D, d).to(DTYPE)
    layer = TopDownTreeLSTM(D, d).to(DTYPE)
    with torch.no_grad():
        layer.W_x[0].copy_(lstm.weight_ih_l0)  # both in the gate order i, f, g, o
        layer.W_h[0].copy_(lstm.weight_hh_l0)
        layer.b[0].copy_(lstm.bias_ih_l0 + lstm.bias_hh_l0)
        layer.W_c.zero_()  # torch.nn.LSTM has no peepholes
        layer.W_co.zero_()
    x = torch.randn(T, D, dtype=DTYPE)
    h, c = layer(x, chain)
    out, (_, c_n) = lstm(x.unsqueeze(1))
    torch.testing.assert_close(h, out[:, 0], **TOL)
    torch.testing.assert_close(c[-1], c_n[0, 0], **TOL)


def test_gradcheck_on_a_tiny_tree():
    tree = from_ptb("(1 (2 (3 a) (1 b)) (2 c))")
    x = torch.randn(tree.num_nodes, 2, dtype=DTYPE, requires_grad=True)
    layers = [HeadLexicalization(2).to(DTYPE), LexicalizedTreeLSTM(2, 2).to(DTYPE),
              LexicalizedTreeLSTM(2, 2, lexicalized=False).to(DTYPE), TopDownTreeLSTM(2, 2).to(DTYPE)]
    for layer in layers:
        def outputs(x_in, *params, layer=layer):
            out = layer(x_in, tree)
            return out if isinstance(out, tuple) else (out,)

        assert torch.autograd.gradcheck(outputs, (x, *layer.parameters()))


# ---------------------------------------------------------------------------------------------
# BiConTree model


def test_model_features_follow_eq_15():
    torch.manual_seed(7)
    trees = binary_trees(11)
    batch = Batch.from_data_list(trees)
    model = BiTreeLSTM(5, 4, num_classes=3, mlp_channels=6).to(DTYPE).eval()
    x = torch.randn(batch.num_nodes, 5, dtype=DTYPE)
    out = model.encode(x, batch)
    heads = per_tree(trees, x, lambda t, xt: ref_heads(model.head, t, xt))
    h_up = per_tree(trees, heads, lambda t, xt: ref_lexicalized(model.bottom_up, t, xt))[0]
    h_down = per_tree(trees, heads, lambda t, xt: ref_top_down(model.top_down, t, xt))[0]
    torch.testing.assert_close(out.head, heads, **TOL)
    torch.testing.assert_close(out.node, torch.cat([h_up, h_down], dim=-1), **TOL)
    start = 0
    for tree in trees:
        children = children_of(tree)

        def leaves(j: int, children=children) -> list[int]:
            return [j] if not children[j] else [leaf for _, c in children[j] for leaf in leaves(c)]

        for j in range(tree.num_nodes):
            span = [start + leaf for leaf in leaves(j)]
            want = torch.cat([h_up[start + j], h_down[start + j], h_down[span].mean(dim=0)])
            torch.testing.assert_close(out.features[start + j], want, **TOL)
        start += tree.num_nodes
    roots = model.roots(batch)
    assert roots.tolist() == (torch.tensor([0] + [t.num_nodes for t in trees[:-1]]).cumsum(0)).tolist()
    logits = model(x, batch)
    want = torch.relu(out.features @ model.W_hl.weight.t() + model.W_hl.bias) @ model.W_lp.weight.t() + model.W_lp.bias
    torch.testing.assert_close(logits, want, **TOL)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_leaf_sum_and_its_gradient_by_hand(dtype):
    # Each node's sum runs over the leaves below it, so a leaf's gradient is the sum of the upstream gradients of
    # the nodes above it (itself included), and an inner node's row gets none. float64 takes the Python level
    # loop, float32 the compiled one where the kernels build.
    from graphtree.models.bicontree import _LeafSum

    trees = binary_trees(13) + ternary_trees()
    batch = Batch.from_data_list(trees)
    h = torch.randn(batch.num_nodes, 3, dtype=dtype, requires_grad=True)
    upstream = torch.randn(batch.num_nodes, 3, dtype=dtype)
    total, count = _LeafSum(3)(h, batch)
    (grad,) = torch.autograd.grad((total * upstream).sum(), h)
    start = 0
    for tree in trees:
        children = children_of(tree)

        def leaves(j: int, children=children) -> list[int]:
            return [j] if not children[j] else [leaf for _, c in children[j] for leaf in leaves(c)]

        want_grad = torch.zeros(tree.num_nodes, 3, dtype=dtype)
        for j in range(tree.num_nodes):
            below = leaves(j)
            torch.testing.assert_close(total[start + j], h[[start + k for k in below]].sum(dim=0).detach())
            assert int(count[start + j]) == len(below)
            for k in below:
                want_grad[k] += upstream[start + j]
        torch.testing.assert_close(grad[start:start + tree.num_nodes], want_grad)
        start += tree.num_nodes


@pytest.mark.parametrize("variant", ["contree", "contree_lex", "top_down", "bicontree"])
def test_model_variants_train(variant):
    torch.manual_seed(8)
    batch = Batch.from_data_list(binary_trees(13))
    model = BiTreeLSTM(4, 3, num_classes=5, mlp_channels=6, variant=variant, dropout=0.5)
    x = torch.randn(batch.num_nodes, 4)
    loss = torch.nn.functional.cross_entropy(model(x, batch), batch.y)
    loss.backward()
    used = {name for name, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert used == {name for name, _ in model.named_parameters()}
    assert (model.head is None) == (variant == "contree")
    assert (model.bottom_up is None) == (variant == "top_down")
    assert (model.top_down is None) == (variant in ("contree", "contree_lex"))


def lstm_count(d: int, D: int, lexicalized: bool) -> int:
    """Bottom-up cell, by equation: i (eq 10) W_hi^L, W_hi^R, W_ci^L, W_ci^R; f^L and f^R likewise; g (eq 11)
    W_hg^L, W_hg^R; o W_ho^L, W_ho^R, W_co; biases b_i, b_fl, b_fr, b_g, b_o; input maps W_xi, W_xg, W_xo and,
    lexicalized, W_xf (shared by f^L and f^R)."""
    square = 4 + 4 + 4 + 2 + 3
    return square * d * d + 5 * d + (4 if lexicalized else 3) * d * D


def top_down_count(d: int, D: int, shared: bool) -> int:
    """Eq 14 per position: W_h{i,f,g,o}, W_c{i,f,o} (7 d x d), W_x{i,f,g,o} (d x D), b_{i,f,g,o}."""
    per_set = 7 * d * d
    inputs = 4 * d * D + 4 * d
    return 2 * per_set + (1 if shared else 2) * inputs


def classifier_count(width: int, mlp: int = 128, classes: int = 5) -> int:
    return width * mlp + mlp + mlp * classes + classes  # eq 16: W_hl, b_hl, W_lp, b_lp


def head_count(D: int) -> int:
    return 2 * D * D + D  # eq 9: W_zx^L, W_zx^R, b_z


@pytest.mark.parametrize("variant,d,table4", [
    ("contree", 150, 538_223), ("contree_lex", 75, 376_673), ("contree_lex", 150, 763_523),
    ("contree_lex", 215, 1_253_493), ("contree_lex", 300, 2_110_973), ("bicontree", 75, 564_923),
    ("bicontree", 150, 1_297_523)])
def test_parameter_counts_against_table_4(variant, d, table4):
    D = 300  # GloVe-300d; the lookup table is not counted (section 7.4)
    by_hand = {
        "contree": lstm_count(d, D, False) + classifier_count(d),
        "contree_lex": head_count(D) + lstm_count(d, D, True) + classifier_count(d),
        "bicontree": head_count(D) + lstm_count(d, D, True) + top_down_count(d, D, True) + classifier_count(3 * d),
    }[variant]
    model = BiTreeLSTM(D, d, num_classes=5, variant=variant, share_input_weights=True)
    assert sum(p.numel() for p in model.parameters()) == by_hand == table4
    if variant == "bicontree":  # eq 14 as printed: each position has its own input maps and biases
        full = BiTreeLSTM(D, d, num_classes=5, variant=variant)
        extra = 4 * d * D + 4 * d
        assert sum(p.numel() for p in full.parameters()) == table4 + extra
