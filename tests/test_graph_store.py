"""Graph stores on disk (graphtree.datasets.store) and GraphFiles(on_disk=True).

The reference is the in-memory path: every graph read from a store must equal, attribute by attribute and
dtype by dtype, the graph GraphFiles gives in memory from the same file; a file parsed in many small chunks
must give the graphs one whole-file parse gives, including the decisions that depend on the whole file (the
graph-label target, feature widths). Bad stores must fail naming the file, before any graph is trained on.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import stat
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Data

import graphtree.datasets.files as files_module
import graphtree.datasets.store as store_module
import graphtree.version
from graphtree.data import TreeLoader
from graphtree.datasets import GraphFiles
from graphtree.datasets.store import GraphStore, StoreError, decode_graph, encode_graph, write_store
from graphtree.errors import TreeFormatError


def assert_same_graph(a: Data, b: Data) -> None:
    assert set(a.keys()) == set(b.keys())
    for key in a.keys():
        if isinstance(a[key], torch.Tensor):
            assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
            assert torch.equal(a[key], b[key]) or (a[key].is_floating_point() and torch.allclose(
                a[key], b[key], equal_nan=True, rtol=0, atol=0)), key
        else:
            assert a[key] == b[key], key


def jsonl(path: Path, count: int, seed: int = 0, label=lambda k, rng: rng.randint(0, 2), x: bool = True) -> Path:
    rng = random.Random(seed)
    lines = []
    for k in range(count):
        n = rng.randint(1, 6)
        record = {"nodes": [{"token": f"w{rng.randint(0, 9)}", **({"x": [1.0, float(i)]} if x else {})}
                            for i in range(n)], "parents": [-1] + [rng.randrange(i) for i in range(1, n)]}
        value = label(k, rng)
        if value is not None:
            record["y"] = value
        lines.append(json.dumps(record))
        if k % 17 == 3:
            lines.append("")  # blank lines keep later line numbers honest
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(files_module, "_CHUNK_LINES", 7)  # many chunks from a small file


def test_encode_decode_round_trip_every_kind():
    data = Data(edge_index=torch.tensor([[1, 2], [0, 0]]), x=torch.randn(3, 2), empty=torch.zeros(0, 4),
                mask=torch.tensor([True, False, True]), half=torch.tensor([1.5], dtype=torch.bfloat16),
                tokens=["a", "ß", ""], num_nodes=3, name="t")
    back = decode_graph(encode_graph(data))
    assert_same_graph(data, back)
    back.x += 1  # a writable tensor of its own
    with pytest.raises(TypeError, match="attribute 'bad'"):
        encode_graph(Data(bad=object()))


@pytest.mark.parametrize("split", ["train", "dev", "test", "all"])
def test_graph_files_on_disk_equal_in_memory(tmp_path, small_chunks, split):
    data = jsonl(tmp_path / "g.jsonl", 60)
    memory = GraphFiles(tmp_path / "root", split, files=data, log=False)
    disk = GraphFiles(tmp_path / "root", split, files=data, log=False, on_disk=True, workers=2)
    assert disk.reads_from_disk and not memory.reads_from_disk
    assert len(disk) == len(memory) > 0
    for a, b in zip(memory, disk, strict=True):
        assert_same_graph(a, b)
    picked = [3, 0, len(disk) - 1]
    for a, b in zip([memory[i] for i in picked], disk.__getitems__(picked), strict=True):
        assert_same_graph(a, b)


@pytest.mark.parametrize("fmt", ["ptb", "conllu"])
def test_other_formats_on_disk_in_chunks(tmp_path, small_chunks, fmt):
    if fmt == "ptb":
        text = "".join(f"({k % 3} ({k % 2} a) (1 (0 b) (_ c)))\n" + ("\n" if k % 4 == 0 else "") for k in range(20))
    else:
        text = "".join(f"# label = {k % 3}\n1\tw{k}\t_\t_\t_\t_\t0\troot\t_\t_\n2\tv\t_\t_\t_\t_\t1\tdep\t_\t_\n\n"
                       for k in range(20))
    path = tmp_path / f"d.{fmt}"
    path.write_text(text)
    memory = GraphFiles(tmp_path / "root", "all", files=path, log=False)
    disk = GraphFiles(tmp_path / "root", "all", files=path, log=False, on_disk=True, workers=1)
    for a, b in zip(memory, disk, strict=True):
        assert_same_graph(a, b)


def test_auto_target_decided_by_the_whole_file_across_chunks(tmp_path, small_chunks):
    # Integer labels early, one number late: the whole file is regression, so early chunks (read as classes
    # on their own) are fixed; graphs without a label get NaN, as in memory, whichever chunk they are in.
    def label(k, rng):
        return 2.5 if k == 50 else (None if k < 12 else -1 if k == 20 else k % 3)
    data = jsonl(tmp_path / "g.jsonl", 60, label=label)
    memory = GraphFiles(tmp_path / "root", "all", files=data, log=False)
    disk = GraphFiles(tmp_path / "root", "all", files=data, log=False, on_disk=True, workers=2)
    assert memory[0].graph_y.dtype == torch.float
    for a, b in zip(memory, disk, strict=True):
        assert_same_graph(a, b)


def test_class_errors_and_feature_widths_are_located_across_chunks(tmp_path, small_chunks):
    bad = jsonl(tmp_path / "neg.jsonl", 40, label=lambda k, rng: -3 if k == 30 else 1)
    with pytest.raises(TreeFormatError) as memory:
        GraphFiles(tmp_path / "root", "all", files=bad, target="class", log=False)
    with pytest.raises(TreeFormatError) as disk:
        GraphFiles(tmp_path / "root", "all", files=bad, target="class", log=False, on_disk=True, workers=1)
    assert str(disk.value) == str(memory.value)
    lines = jsonl(tmp_path / "x.jsonl", 40).read_text().splitlines()
    record = json.loads(lines[-1])
    record["nodes"] = [{**node, "x": [1.0, 2.0, 3.0]} for node in record["nodes"]]
    lines[-1] = json.dumps(record)
    (tmp_path / "x.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(TreeFormatError, match=rf"x\.jsonl: x: .*line {len(lines)}\)"):
        GraphFiles(tmp_path / "root", "all", files=tmp_path / "x.jsonl", log=False, on_disk=True, workers=1)
    assert not list((tmp_path / "root").rglob("*.sqlite*"))  # a failed build leaves no store, nor a part of one


def test_tree_loader_reads_a_store_in_workers(tmp_path):
    data = jsonl(tmp_path / "g.jsonl", 30)
    disk = GraphFiles(tmp_path / "root", "train", files=data, log=False, on_disk=True, workers=1)
    memory = GraphFiles(tmp_path / "root", "train", files=data, log=False)
    loader = TreeLoader(disk, batch_size=5, num_workers=2)
    reference = TreeLoader(memory, batch_size=5)
    for a, b in zip(reference, loader, strict=True):
        assert b.schedule is not None and torch.equal(a.edge_index, b.edge_index) and torch.equal(a.x, b.x)


# --------------------------------------------------------------------------- bad stores


@pytest.fixture
def store(tmp_path) -> Path:
    graphs = [Data(edge_index=torch.tensor([[1], [0]]), y=torch.arange(2) + k, tokens=["a", "b"]) for k in range(300)]
    path = tmp_path / "s.sqlite"
    write_store(path, [[encode_graph(g) for g in graphs[:100]], [encode_graph(g) for g in graphs[100:]]],
                {"fingerprint": "abc"})
    return path


def test_a_store_reads_back_and_checks_what_it_was_built_from(store):
    opened = GraphStore(store, expect={"fingerprint": "abc"})
    assert len(opened) == 300 and opened[7].y.tolist() == [7, 8]
    assert [g.y[0].item() for g in opened.multi_get([299, 0, 5])] == [299, 0, 5]
    assert [g.y[0].item() for g in opened[10:13]] == [10, 11, 12]
    with pytest.raises(StoreError, match=rf"{store.name}: built from other files or settings \(fingerprint 'abc'"):
        GraphStore(store, expect={"fingerprint": "xyz"})


def test_a_truncated_store_names_the_file(store):
    store.write_bytes(store.read_bytes()[: store.stat().st_size // 2])
    with pytest.raises(StoreError, match=rf"{store}: truncated"):
        GraphStore(store)


def test_a_corrupt_store_names_the_file(store, tmp_path):
    raw = bytearray(store.read_bytes())
    at = raw.index(b"GT1\x00", len(raw) // 2)  # an encoded graph in the second half: damage its header
    raw[at + 8:at + 20] = b"\xff" * 12
    store.write_bytes(bytes(raw))
    opened = GraphStore(store)  # the cheap checks on opening pass: the damage is inside one record
    with pytest.raises(StoreError, match=rf"{store}: graph \d+ is corrupt"):
        list(opened)
    (tmp_path / "junk.sqlite").write_bytes(b"not a database" * 100)
    with pytest.raises(StoreError, match=r"junk\.sqlite: not a graph store"):
        GraphStore(tmp_path / "junk.sqlite")
    with pytest.raises(StoreError, match=r"missing\.sqlite: no such graph store"):
        GraphStore(tmp_path / "missing.sqlite")


def test_a_store_with_rows_missing_names_the_file(store):
    with sqlite3.connect(store) as connection:
        connection.execute("DELETE FROM graphs WHERE id = 150")
    opened = GraphStore(store)  # the first and last ids still agree with the count: found on reading
    with pytest.raises(StoreError, match=rf"{store}: graph 150 is missing"):
        list(opened)
    with sqlite3.connect(store) as connection:
        connection.execute("DELETE FROM graphs WHERE id = 299")
    with pytest.raises(StoreError, match=rf"{store}: damaged"):
        GraphStore(store)


def test_a_store_of_another_version_or_format_names_the_file(store, monkeypatch):
    monkeypatch.setattr(graphtree.version, "__version__", "9.9.9")
    with pytest.raises(StoreError, match=rf"{store}: built by graphtree 0\.1\.0, this is 9\.9\.9"):
        GraphStore(store)
    monkeypatch.undo()
    with sqlite3.connect(store) as connection:
        connection.execute("UPDATE meta SET value = '99' WHERE key = 'format'")
    with pytest.raises(StoreError, match=rf"{store}: a graph store of format 99"):
        GraphStore(store)


def test_graph_files_refuses_a_store_built_from_other_files(tmp_path):
    first = jsonl(tmp_path / "a.jsonl", 20, seed=1)
    GraphFiles(tmp_path / "root", "all", files=first, name="d", log=False, on_disk=True, workers=1)
    (built,) = (tmp_path / "root" / "d" / "processed").glob("*.sqlite")
    other = jsonl(tmp_path / "b.jsonl", 20, seed=2)
    memory = GraphFiles(tmp_path / "root", "all", files=other, name="d", log=False)
    expected = built.with_name(f"all-{memory.options_tag()}-tokens-f2-s1.sqlite")
    os.replace(built, expected)  # a store of a.jsonl where b.jsonl's belongs
    with pytest.raises(StoreError, match=rf"{expected.name}: built from other files"):
        GraphFiles(tmp_path / "root", "all", files=other, name="d", log=False, on_disk=True)
    rebuilt = GraphFiles(tmp_path / "root", "all", files=other, name="d", log=False, on_disk=True,
                         force_reload=True, workers=1)
    for a, b in zip(memory, rebuilt, strict=True):
        assert_same_graph(a, b)


def test_a_store_on_a_read_only_file_system_names_the_file(tmp_path, monkeypatch):
    # What SQLite says on a read-only file system (root, as these tests may run, writes into read-only folders).
    def refuse(*args, **kwargs):
        raise sqlite3.OperationalError("unable to open database file")
    monkeypatch.setattr(store_module.sqlite3, "connect", refuse)
    with pytest.raises(StoreError, match=r"new\.sqlite: cannot write the graph store here \(unable to open"):
        write_store(tmp_path / "new.sqlite", [[encode_graph(Data(y=torch.zeros(1)))]], {})
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_store_on_a_read_only_path(tmp_path, store):
    folder = tmp_path / "ro"
    folder.mkdir()
    try:
        folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
        with pytest.raises(StoreError, match=r"ro/new\.sqlite: cannot write the graph store here"):
            write_store(folder / "new.sqlite", [[encode_graph(Data(y=torch.zeros(1)))]], {})
    finally:
        folder.chmod(stat.S_IRWXU)


def test_a_store_is_read_from_a_read_only_folder_and_not_written(tmp_path, store):
    folder = tmp_path / "ro"
    folder.mkdir()
    os.replace(store, folder / store.name)
    (folder / store.name).chmod(stat.S_IRUSR)
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        opened = GraphStore(folder / store.name)
        assert len(list(opened)) == 300
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            opened.db.cursor.execute("DELETE FROM graphs")
        if os.geteuid() == 0:  # root may write anywhere: the read-only file system is PyG's no-root case
            return
        with pytest.raises(StoreError, match=r"ro/x\.sqlite: cannot write the graph store here"):
            write_store(folder / "x.sqlite", [], {})
    finally:
        folder.chmod(stat.S_IRWXU)


def test_a_batch_collated_from_the_bytes_is_pyg_s(store, tmp_path):
    from torch_geometric.data import Batch

    opened = GraphStore(store)
    picked = [5, 0, 299, 17]
    encoded = opened.read_encoded(picked)
    reference = Batch.from_data_list([opened[i] for i in picked])
    batch = encoded.collate_encoded()
    assert set(batch.keys()) == set(reference.keys())
    for key in reference.keys():
        assert (torch.equal(batch[key], reference[key]) if isinstance(reference[key], torch.Tensor)
                else batch[key] == reference[key]), key
    assert batch.to_data_list()[2].y.tolist() == [299, 300]
    # Graphs with different attributes: collated graph by graph, as PyG does.
    mixed = tmp_path / "mixed.sqlite"
    write_store(mixed, [[encode_graph(Data(y=torch.zeros(2), num_nodes=2)),
                         encode_graph(Data(y=torch.ones(1), num_nodes=1, extra=torch.ones(1)))]], {})
    mixed_store = GraphStore(mixed)
    both = mixed_store.read_encoded([0, 1]).collate_encoded()
    reference = Batch.from_data_list(mixed_store.multi_get([0, 1]))
    assert set(both.keys()) == set(reference.keys()) and torch.equal(both.y, reference.y)


def test_a_packed_batch_unpacks_to_the_same_batch_and_schedule():
    from torch_geometric.data import Batch

    from graphtree.data import with_schedule
    from graphtree.data.loader import PackedBatch

    graphs = [Data(edge_index=torch.tensor([[1, 2], [0, 0]]), x=torch.randn(3, 2), num_nodes=3, tokens=["a", "b", "c"]),
              Data(edge_index=torch.zeros(2, 0, dtype=torch.long), x=torch.randn(1, 2), num_nodes=1, tokens=["d"])]
    batch = with_schedule(Batch.from_data_list(graphs))
    shared = torch.arange(4.0)
    back = PackedBatch({"batch": batch, "twice": [shared, shared], "half": torch.ones(3, dtype=torch.bfloat16),
                        "view": torch.arange(10)[::3]}).unpack()
    assert torch.equal(back["batch"].x, batch.x) and torch.equal(back["batch"].edge_index, batch.edge_index)
    assert back["batch"].tokens == batch.tokens and back["batch"].num_graphs == 2
    for direction_plan, original in zip(vars(back["batch"].schedule).values(), vars(batch.schedule).values()):
        if isinstance(original, torch.Tensor):
            assert torch.equal(direction_plan, original)
    back["batch"].schedule.check_fits(back["batch"])
    first, second = back["twice"]
    first[0] = 7.0  # one tensor met twice comes back as one
    assert second[0] == 7.0
    assert back["half"].dtype == torch.bfloat16 and back["view"].tolist() == [0, 3, 6, 9]
    # the batch is PyG's own class again (rebuilt without its metaclass), whole: graphs cut back out of it
    assert type(back["batch"]) is type(batch) and back["batch"].get_example(0).num_nodes == 3
    assert back["batch"].to_data_list()[1].tokens == ["d"]
