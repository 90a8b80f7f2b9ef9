"""The speed benchmark's baselines compute the model they stand for: the plain level loop and the recursive
reference against graphtree's N-ary Tree-LSTM with the same weights, logits and gradients, in float64."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import torch
from torch_geometric.data import Batch
from trees import random_ptb

from graphtree import settings
from graphtree.data import from_ptb
from graphtree.models import NodeEmbedding, TreeClassifier, node_loss
from graphtree.nn import NaryTreeLSTM

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def module(name: str):
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", BENCHMARKS / f"{name}.py")
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = loaded  # dataclasses look their module up there
    spec.loader.exec_module(loaded)
    return loaded


def test_plain_level_loop_and_recursive_reference_match_the_nary_cell():
    torch.manual_seed(0)
    rng = random.Random(0)
    vocab: dict[str, int] = {}
    trees = [from_ptb(random_ptb(rng.randint(1, 14), 2, rng, num_labels=3), lambda w: vocab.setdefault(w, len(vocab)))
             for _ in range(12)]
    batch = Batch.from_data_list(trees)
    model = TreeClassifier(NodeEmbedding(len(vocab), 6, freeze=True), NaryTreeLSTM(6, 5), 3, dropout=0.0).double()

    plain = module("plain_level_loop").PlainLevelTreeLSTM(len(vocab), 6, 5, 3).double()
    plain.load_from(model.embedding.embedding, model.cell, model.classifier)
    expected = model(batch)
    torch.testing.assert_close(plain(batch), expected, rtol=0, atol=1e-12)
    node_loss(expected, batch.y).backward()
    plain.loss(batch).backward()
    torch.testing.assert_close(plain.U.weight.grad, model.cell.U.grad, rtol=0, atol=1e-12)
    torch.testing.assert_close(plain.W_leaf.weight.grad, model.cell.W_leaf.weight.grad, rtol=0, atol=1e-12)
    torch.testing.assert_close(plain.output.weight.grad, model.classifier.weight.grad, rtol=0, atol=1e-12)

    recursive = module("recursive_reference")
    reference = recursive.RecursiveTreeLSTM(len(vocab), 6, 5, 3).double()
    reference.load_from(model.embedding.embedding, model.cell, model.classifier)
    with torch.no_grad():
        for tree in trees:
            root, words = recursive.tree_from_data(tree)
            outputs: list[torch.Tensor] = []
            reference(root, words, outputs)
            logits = model(Batch.from_data_list([tree]))
            # The recursion emits its logits in post-order, children left to right: match them by value.
            assert len(outputs) == tree.num_nodes
            for row in torch.cat(outputs):
                assert torch.isclose(logits, row, rtol=0, atol=1e-12).all(dim=1).any()


def test_the_benchmark_writes_a_results_file_only_where_asked(tmp_path, monkeypatch, capsys):
    tree_lstm = module("tree_lstm")
    (tmp_path / "mirror" / "sst").mkdir(parents=True)
    (tmp_path / "mirror" / "sst" / "trainDevTestTrees_PTB.zip").write_bytes(b"")
    monkeypatch.setenv("GRAPHTREE_MIRROR", str(tmp_path / "mirror"))
    settings.reload()  # the environment is read once a process
    args = tree_lstm.parse_args(["--count-ops"])
    assert args.out is None  # no default file: the committed results change only with --out
    assert args.sst == str(tmp_path / "mirror" / "sst" / "trainDevTestTrees_PTB.zip")  # where the experiments read
    monkeypatch.setenv("GRAPHTREE_MIRROR", str(tmp_path))  # a mirror without SST: random trees
    settings.reload()  # the environment is read once a process
    assert tree_lstm.parse_args([]).sst == ""
    tree_lstm.write_results(None, "{}")
    assert "not written" in capsys.readouterr().err and not list(tmp_path.rglob("*.json"))
    tree_lstm.write_results(str(tmp_path / "out" / "ops.json"), "{}")
    assert (tmp_path / "out" / "ops.json").read_text() == "{}"


def _plain_cells_and_batch():
    cells = module("plain_cells")
    ab = module("ab_cells")
    import graphtree.nn

    made = {}
    for name in cells.PLAIN_LOOPS:
        if name == "gru":
            made[name] = (cells.ChildSumGRU(6, 5), 6)
            continue
        config = ab.CELLS[name]
        wide = config.args[0] if len(config.args) == 1 else None  # a cell of one width (the head's)
        args = (6,) if wide else (6 if config.args[0] != config.args[1] else 5, 5)
        made[name] = (getattr(graphtree.nn, config.cls)(*args, **config.kwargs), args[0])
    return cells, ab, made


def test_every_plain_cell_loop_computes_its_cell():
    """engine_vs_plain.py's baselines: each plain loop gives its cell's states and gradients in float64."""
    torch.manual_seed(0)
    cells, ab, made = _plain_cells_and_batch()
    from graphtree.data import with_schedule

    for name, (cell, width) in made.items():
        batch, x = ab.make_batches(6, width, 0)[0]
        assert cells.check_equal(name, cell, with_schedule(batch), x) < 1e-12, name


def test_the_plain_cell_check_finds_a_loop_that_differs():
    """The check can fail: a plain loop on a weight changed by one part in 10^6 is caught."""
    torch.manual_seed(0)
    cells, ab, made = _plain_cells_and_batch()
    from graphtree.data import with_schedule

    cell, width = made["childsum"]
    batch, x = ab.make_batches(6, width, 0)[0]
    loop = cells.PLAIN_LOOPS["childsum"]

    def nudged(c):
        run = loop(c)

        def differs(x, levels):
            with torch.no_grad():
                c.U_f.bias.mul_(1 + 1e-6)
            try:
                return run(x, levels)
            finally:
                with torch.no_grad():
                    c.U_f.bias.div_(1 + 1e-6)
        return differs

    cells.PLAIN_LOOPS["childsum"] = nudged
    try:
        assert cells.check_equal("childsum", cell, with_schedule(batch), x) > 1e-9
    finally:
        cells.PLAIN_LOOPS["childsum"] = loop
