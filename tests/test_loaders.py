"""Graphs of one's own through PyG's DataLoader, worker processes included, into the cells; TreeLoader builds
each batch's level schedule in the worker that collates it, and the main process does not build it again."""

from __future__ import annotations

import io
import multiprocessing
import os
import pickle
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Batch
from torch_geometric.loader import DataLoader

import graphtree.schedule as schedule_module
from graphtree.data import TreeLoader, from_ptb, with_schedule
from graphtree.datasets import GraphFiles, ListOps
from graphtree.engine import schedule_of
from graphtree.models import NodeEmbedding
from graphtree.nn import ChildSumTreeLSTM, NaryTreeLSTM, TopDownTreeLSTM
from graphtree.schedule import Schedule
from graphtree.vocab import Vocab

DATA = Path(__file__).parent / "data"
needs_fork = pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(),
                                reason="the build spy reaches the workers by fork")


@pytest.fixture(scope="module")
def listops(tmp_path_factory) -> ListOps:
    root = tmp_path_factory.mktemp("listops")
    return ListOps(root, "test", train_size=0, dev_size=0, test_size=36, max_depth=4, log=False)


@pytest.fixture(scope="module")
def own_graphs(tmp_path_factory) -> GraphFiles:
    """tests/data/example.jsonl (trees and DAGs, a node with two parents) with word ids."""
    root = tmp_path_factory.mktemp("graphs")
    vocab = Vocab.build(GraphFiles(root, "all", files=DATA / "example.jsonl", log=False))
    return GraphFiles(root, "all", files=DATA / "example.jsonl", vocab=vocab, log=False)


@pytest.fixture
def builds(tmp_path, monkeypatch):
    """Every schedule and plan build, in any process forked from here: a list of (what, pid)."""
    log = tmp_path / "builds.txt"
    from_data, build_plan = Schedule.from_data.__func__, schedule_module._build_plan

    def note(what: str) -> None:
        with open(log, "a") as handle:  # one short write per line: the workers' lines do not mix
            handle.write(f"{what} {os.getpid()}\n")

    def spy_from_data(cls, data):
        note("schedule")
        return from_data(cls, data)

    def spy_build_plan(*args, **kwargs):
        note("plan")
        return build_plan(*args, **kwargs)

    monkeypatch.setattr(Schedule, "from_data", classmethod(spy_from_data))
    monkeypatch.setattr(schedule_module, "_build_plan", spy_build_plan)
    return lambda: [tuple(line.split()) for line in log.read_text().splitlines()] if log.exists() else []


def one_by_one(cell: torch.nn.Module, embedding: NodeEmbedding, graphs: list) -> torch.Tensor:
    """The cell on each graph alone, its node states concatenated in graph order: no batching, no loader."""
    return torch.cat([cell(embedding(g.word), g)[0] for g in graphs])


def test_pyg_dataloader_with_workers_feeds_the_cells_as_the_graphs_alone(own_graphs):
    torch.manual_seed(0)
    embedding = NodeEmbedding(len(own_graphs.vocab), 6)
    cells = [ChildSumTreeLSTM(6, 5), NaryTreeLSTM(6, 5, n_ary=2), TopDownTreeLSTM(6, 5)]
    graphs = list(own_graphs)
    with torch.no_grad():
        expected = [one_by_one(cell, embedding, graphs) for cell in cells]
        got = [[] for _ in cells]
        sizes = []
        for batch in DataLoader(own_graphs, batch_size=4, num_workers=2):
            sizes.append(batch.num_graphs)
            for k, cell in enumerate(cells):
                got[k].append(cell(embedding(batch.word), batch)[0])
    assert sizes == [4, 4, 2]
    for k in range(len(cells)):
        assert torch.allclose(torch.cat(got[k]), expected[k], atol=1e-6), type(cells[k]).__name__


@needs_fork
def test_tree_loader_builds_each_schedule_in_its_worker_and_the_main_process_none(listops, builds):
    torch.manual_seed(0)
    embedding = NodeEmbedding(len(listops.vocab), 6)
    cell = ChildSumTreeLSTM(6, 5)
    loader = TreeLoader(listops, batch_size=12, num_workers=2, multiprocessing_context="fork")
    assert isinstance(loader, DataLoader)  # PyG's loader, with every argument it takes
    arrived, states = [], []
    with torch.no_grad():
        for batch in loader:
            assert isinstance(batch.schedule, Schedule), "the batch arrived without its schedule"
            assert schedule_of(batch) is batch.schedule  # taken as it came, not rebuilt
            arrived.append(batch)
            states.append(cell(embedding(batch.word), batch)[0])
    log = builds()
    main = str(os.getpid())
    assert [what for what, _ in log].count("schedule") == len(arrived) == 3
    assert [what for what, _ in log].count("plan") == 3  # bottom-up, the default direction
    assert all(pid != main for _, pid in log), f"the main process built: {log}"
    assert len({pid for _, pid in log}) == 2  # both workers collated
    # The same graphs, batched and scheduled here, give the same states.
    with torch.no_grad():
        for k, batch in enumerate(arrived):
            here = Batch.from_data_list([listops[i] for i in range(12 * k, 12 * k + 12)])
            assert torch.equal(here.edge_index, batch.edge_index)
            assert torch.allclose(cell(embedding(here.word), here)[0], states[k], atol=1e-6)
    assert [what for what, pid in builds() if pid == main].count("schedule") == 3  # the spy sees this process


@needs_fork
def test_pyg_loader_alone_leaves_the_schedule_to_the_training_step(listops, builds):
    cell = ChildSumTreeLSTM(6, 5)
    embedding = NodeEmbedding(len(listops.vocab), 6)
    with torch.no_grad():
        for batch in DataLoader(listops, batch_size=12, num_workers=2, multiprocessing_context="fork"):
            assert "schedule" not in batch
            cell(embedding(batch.word), batch)
    main = str(os.getpid())
    assert builds() == [("schedule", main), ("plan", main)] * 3


@needs_fork
def test_tree_loader_builds_the_directions_asked_for(listops, builds):
    cell = TopDownTreeLSTM(6, 5, n_ary=5)  # ListOps: up to 5 arguments per operator
    embedding = NodeEmbedding(len(listops.vocab), 6)
    loader = TreeLoader(listops, batch_size=18, shuffle=True, num_workers=2, multiprocessing_context="fork",
                        directions=("bottom_up", "top_down"))
    seen = 0
    with torch.no_grad():
        for batch in loader:
            cell(embedding(batch.word), batch)
            seen += batch.num_graphs
    assert seen == len(listops) == 36
    assert sorted(what for what, _ in builds()) == ["plan"] * 4 + ["schedule"] * 2
    assert all(pid != str(os.getpid()) for _, pid in builds())


def test_a_carried_schedule_survives_the_pickling_between_processes(builds):
    batch = with_schedule(Batch.from_data_list([from_ptb("(3 (2 The) (3 (2 Rock) (4 rocks)))"),
                                                from_ptb("(1 (2 a) (1 b))")]))
    built = schedule_of(batch)
    buffer = io.BytesIO()
    ForkingPickler(buffer, pickle.HIGHEST_PROTOCOL).dump(batch)  # what a DataLoader worker sends
    copy = pickle.loads(buffer.getvalue())
    assert builds() == [("schedule", str(os.getpid())), ("plan", str(os.getpid()))]
    schedule = schedule_of(copy)
    assert builds() == [("schedule", str(os.getpid())), ("plan", str(os.getpid()))]  # nothing rebuilt
    assert schedule is copy.schedule and schedule is not built
    assert torch.equal(schedule.bottom_up.order, built.bottom_up.order)
    # It travels as data: a graph taken apart again leaves it behind, and the graphs batch anew.
    graphs = copy.to_data_list()
    assert all("schedule" not in g for g in graphs)
    assert torch.equal(schedule_of(Batch.from_data_list(graphs)).bottom_up.order, built.bottom_up.order)


def test_with_schedule_checks_directions_and_passes_other_batches_through():
    batch = Batch.from_data_list([from_ptb("(1 (2 a) (1 b))")])
    with pytest.raises(ValueError, match="directions must be among"):
        with_schedule(batch, ("sideways",))
    assert "schedule" not in batch
    assert with_schedule(batch, "top_down") is batch and ("top_down", None) in batch.schedule._plans
    plain = Batch.from_data_list([from_ptb("(1 a)")])
    del plain.edge_index
    assert with_schedule(plain) is plain and "schedule" not in plain
