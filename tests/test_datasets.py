"""SST, SICK and TREC datasets: download path (served from a local HTTP mirror), processing, bad input.

Synthetic corpora are built here, with expected labels written out by hand;
the real corpora are read from ``$GRAPHTREE_MIRROR`` or ``../shared/data`` when present.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import re
import threading
import zipfile
from pathlib import Path

import pytest
import torch
from corpora import CORPORA, needs_corpora
from torch_geometric.data import Batch, InMemoryDataset
from torch_geometric.loader import DataLoader

from graphtree import settings
from graphtree.data import from_heads
from graphtree.data.batching import separate_graphs
from graphtree.datasets import (
    MIRROR_ENV,
    SICK,
    SST,
    TREC,
    CorruptFileError,
    DatasetError,
    DownloadError,
    RemoteFile,
    pair_side,
    sick_target,
)
from graphtree.datasets.base import pack_string_lists, unpack_string_lists
from graphtree.engine import schedule_of
from graphtree.vocab import Vocab


@pytest.fixture(autouse=True)
def _no_env_mirror(monkeypatch):
    monkeypatch.delenv(MIRROR_ENV, raising=False)
    settings.reload()


# --------------------------------------------------------------------------- a mirror served over HTTP


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves a folder; paths under /cut/ announce more bytes than they send (a dropped connection)."""

    def do_GET(self):
        if self.path.startswith("/cut/"):
            body = (Path(self.directory) / self.path[len("/cut/"):]).read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body) + 1000))
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
            self.close_connection = True
            return
        super().do_GET()

    def log_message(self, *args):
        pass


@pytest.fixture
def http_mirror(tmp_path):
    folder = tmp_path / "mirror"
    folder.mkdir()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Handler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield folder, f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


# --------------------------------------------------------------------------- synthetic SST

SST_TREES = {
    "train": ["(3 (2 It) (4 (3 good) (2 .)))", "(2 (2 So) (2 so))", "(0 (1 Bad) (2 -LRB-))"],
    "dev": ["(1 (2 Meh) (0 awful))", "(4 (4 Great) (2 film))"],
    "test": ["(2 (3 Nice) (1 but))", "(3 (3 Fine) (2 ok))"],
}
# Labels in pre-order, written out by hand from the trees above.
SST_FINE_Y = {"train": [[3, 2, 4, 3, 2], [2, 2, 2], [0, 1, 2]]}
SST_BINARY_Y = {"train": [[1, -1, 1, 1, -1], [0, 0, -1]], "dev": [[0, -1, 0], [1, 1, -1]], "test": [[1, 1, -1]]}


def _zip_bytes(members: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in members.items():
            zf.writestr(name, text)
    return buffer.getvalue()


def _sst_zip(trees=SST_TREES) -> bytes:
    return _zip_bytes({f"trees/{s}.txt": "\n".join(lines) + "\n" for s, lines in trees.items()})


@pytest.fixture
def small_sst(monkeypatch, http_mirror):
    """SST with the synthetic archive on the HTTP mirror and its checksum and counts patched in."""
    folder, url = http_mirror
    data = _sst_zip()
    (folder / "sst").mkdir()
    (folder / "sst" / "trainDevTestTrees_PTB.zip").write_bytes(data)
    monkeypatch.setattr(SST, "ARCHIVE", RemoteFile("sst/trainDevTestTrees_PTB.zip", url + "official/sst.zip",
                                                   hashlib.sha256(data).hexdigest()))
    monkeypatch.setattr(SST, "MEMBER_SHA256", {})
    monkeypatch.setattr(SST, "SPLIT_SIZES", {"train": 3, "dev": 2, "test": 2})
    monkeypatch.setattr(SST, "BINARY_SIZES", {"train": 2, "dev": 2, "test": 1})
    return folder, url


def _files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())


def test_sst_from_http_mirror_fine_and_binary(tmp_path, small_sst):
    _, url = small_sst
    root = tmp_path / "data"
    train = SST(root, "train", mirror=url)
    assert len(train) == 3
    assert [train[i].y.tolist() for i in range(3)] == SST_FINE_Y["train"]
    assert train[0].tokens == ["It", "good", "."] and train[2].tokens == ["Bad", "-LRB-"]
    assert train.num_classes == 5
    # The archive is unpacked and removed; only the trees stay.
    assert _files_under(root / "sst" / "raw") == ["trees/dev.txt", "trees/test.txt", "trees/train.txt"]

    for split in ("train", "dev", "test"):
        binary = SST(root, split, fine_grained=False, mirror=url)
        assert [binary[i].y.tolist() for i in range(len(binary))] == SST_BINARY_Y[split]
        assert binary.num_classes == 2
    processed = _files_under(root / "sst" / "processed")
    assert "train-fine-tokens-f2.pt" in processed and "train-binary-tokens-f2.pt" in processed


def test_sst_batches_and_schedules(tmp_path, small_sst):
    dev = SST(tmp_path, "dev", mirror=small_sst[1])
    batch = next(iter(DataLoader(dev, batch_size=2)))
    assert batch.num_graphs == 2 and batch.tokens == [["Meh", "awful"], ["Great", "film"]]
    assert batch.edge_index.tolist() == [[1, 2, 4, 5], [0, 0, 3, 3]]
    assert schedule_of(batch).num_nodes == 6


def test_sst_cache_is_named_by_vocab_and_reused_offline(tmp_path, small_sst):
    root = tmp_path / "data"
    SST(root, "dev", mirror=small_sst[1])
    vocab = Vocab(["great", "meh", "film"])
    with_vocab = SST(root, "dev", vocab=vocab, mirror=small_sst[1])
    # "Meh" falls back to its lowercase entry; "awful" is unknown (0); inner nodes carry no word (-1).
    assert with_vocab[0].word.tolist() == [-1, 2, 0]
    assert with_vocab[1].word.tolist() == [-1, 1, 3]
    names = _files_under(root / "sst" / "processed")
    assert f"dev-fine-vocab-{vocab.fingerprint}-f2.pt" in names and "dev-fine-tokens-f2.pt" in names
    other = Vocab(["film"])
    assert other.fingerprint != vocab.fingerprint
    # Raw and processed files exist: nothing is fetched, so a dead mirror does not matter.
    again = SST(root, "dev", vocab=vocab, mirror="http://127.0.0.1:9/")
    assert again[1].word.tolist() == [-1, 1, 3]


def test_processed_files_pack_string_lists_and_read_back_the_same_graphs(tmp_path, small_sst):
    root = tmp_path / "data"
    dev = SST(root, "dev", mirror=small_sst[1])
    # Stored: one string and two tensors, which the safe loader reads at once; read back: the same token lists.
    stored, _, _ = torch.load(root / "sst" / "processed" / "dev-fine-tokens-f2.pt", weights_only=True)
    assert stored["tokens"]["counts"].tolist() == [2, 2]
    assert [dev[i].tokens for i in range(len(dev))] == [["Meh", "awful"], ["Great", "film"]]
    assert dev._data.tokens == [["Meh", "awful"], ["Great", "film"]]


def test_sst_script_vocabulary_from_token_columns_is_the_one_from_graphs(tmp_path, small_sst):
    from lab.scripts import load_script

    sst = load_script(Path(__file__).resolve().parent.parent / "experiments" / "sst.py")

    root, url = str(tmp_path / "data"), small_sst[1]
    # Hand-written: the words of every split ("so" twice; "-LRB-" found as "(").
    table = {"it", "good", ".", "so", "(", "awful", "film", "but"}
    graphs = [g for split in ("train", "dev", "test") for g in SST(root, split, mirror=url)]
    with_vectors = sst.build_vocab({}, root, url, table)
    assert with_vectors == Vocab.build(graphs, pretrained=table)
    assert with_vectors.itos == ["<unk>", "so", "-LRB-", ".", "awful", "but", "film", "good", "it"]
    assert sst.build_vocab({}, root, url, None) == Vocab.build(SST(root, "train", mirror=url))


def test_dataset_length_follows_its_storage(tmp_path, small_sst):
    root = tmp_path / "data"
    dev = SST(root, "dev", mirror=small_sst[1])
    assert len(dev) == 2 and len(dev[1:]) == 1 and [g.tokens for g in dev[::-1]] == [["Great", "film"],
                                                                                      ["Meh", "awful"]]
    # Another storage loaded into the same dataset: counted anew, not the first one's count.
    one, slices = InMemoryDataset.collate([from_heads([0, 1], tokens=["a", "b"])])
    dev.data, dev.slices = one, slices
    assert dev.len() == len(dev) == 1


@pytest.mark.parametrize("value", [
    [["a", "bc"], [], ["", "déjà", "\x00", "a b", "🙂"], [""]],  # empty lists and strings, any characters
    [["only"]],
])
def test_string_lists_pack_and_unpack_exactly(value):
    packed = pack_string_lists(value)
    assert isinstance(packed, dict) and isinstance(packed["lengths"], torch.Tensor)
    assert unpack_string_lists(packed) == value


def test_other_values_are_stored_as_they_are():
    for value in ([1, 2], [["a", 1]], [], [torch.zeros(2)], "text", torch.ones(3), {"a": ["b"]}):
        assert pack_string_lists(value) is value
        assert unpack_string_lists(value) is value


def test_sst_uses_official_url_by_default_and_env_mirror(tmp_path, small_sst, monkeypatch):
    folder, url = small_sst
    # Default: the official URL (here pointed at the local server).
    (folder / "official").mkdir()
    (folder / "official" / "sst.zip").write_bytes((folder / "sst" / "trainDevTestTrees_PTB.zip").read_bytes())
    assert len(SST(tmp_path / "a", "test")) == 2
    # The environment variable replaces the official URL; a broken official URL proves it is not used.
    monkeypatch.setattr(SST, "ARCHIVE", RemoteFile(SST.ARCHIVE.path, "http://127.0.0.1:9/nothing.zip",
                                                   SST.ARCHIVE.sha256))
    monkeypatch.setenv(MIRROR_ENV, url)
    settings.reload()  # the environment is read once a process; reload reads it again
    assert len(SST(tmp_path / "b", "test")) == 2
    with settings.overridden(mirror=str(folder)):  # a local folder works as well, set in code here
        assert len(SST(tmp_path / "c", "test")) == 2


def test_sst_archive_placed_by_hand_is_used(tmp_path, small_sst):
    raw = tmp_path / "sst" / "raw"
    raw.mkdir(parents=True)
    (raw / "trainDevTestTrees_PTB.zip").write_bytes(_sst_zip())
    assert len(SST(tmp_path, "dev", mirror="http://127.0.0.1:9/")) == 2


def test_sst_corrupt_archive_leaves_nothing_and_next_run_is_clean(tmp_path, small_sst):
    folder, url = small_sst
    good = (folder / "sst" / "trainDevTestTrees_PTB.zip").read_bytes()
    (folder / "sst" / "trainDevTestTrees_PTB.zip").write_bytes(good[: len(good) // 2])
    root = tmp_path / "data"
    with pytest.raises(CorruptFileError, match="truncated or corrupt"):
        SST(root, "train", mirror=url)
    assert _files_under(root) == []
    (folder / "sst" / "trainDevTestTrees_PTB.zip").write_bytes(good)
    assert len(SST(root, "train", mirror=url)) == 3


def test_sst_corrupt_archive_without_checksum_is_caught_by_unzip(tmp_path, small_sst, monkeypatch):
    folder, url = small_sst
    monkeypatch.setattr(SST, "ARCHIVE", RemoteFile(SST.ARCHIVE.path, None, None))
    good = (folder / "sst" / "trainDevTestTrees_PTB.zip").read_bytes()
    (folder / "sst" / "trainDevTestTrees_PTB.zip").write_bytes(good[:-40])
    with pytest.raises(CorruptFileError, match=r"truncated or corrupt.*removed"):
        SST(tmp_path, "train", mirror=url)
    assert _files_under(tmp_path / "sst") == []


def test_sst_download_cut_short(tmp_path, small_sst, monkeypatch):
    _, url = small_sst
    monkeypatch.setattr(SST, "ARCHIVE", RemoteFile("sst.zip", url + "cut/sst/trainDevTestTrees_PTB.zip", None))
    with pytest.raises(CorruptFileError, match="cut short"):
        SST(tmp_path, "train")
    assert _files_under(tmp_path / "sst") == []


def test_sst_wrong_counts_in_archive(tmp_path, small_sst, monkeypatch):
    monkeypatch.setattr(SST, "SPLIT_SIZES", {"train": 4, "dev": 2, "test": 2})
    with pytest.raises(CorruptFileError, match=r"trees/train.txt inside .* has 3 lines, expected 4"):
        SST(tmp_path, "train", mirror=small_sst[1])
    assert _files_under(tmp_path / "sst") == []


def test_sst_label_outside_classes(tmp_path, small_sst, monkeypatch):
    folder, url = small_sst
    trees = dict(SST_TREES, dev=["(1 (2 Meh) (0 awful))", "(4 (7 Great) (2 film))"])
    data = _sst_zip(trees)
    (folder / "sst" / "trainDevTestTrees_PTB.zip").write_bytes(data)
    monkeypatch.setattr(SST, "ARCHIVE", RemoteFile(SST.ARCHIVE.path, None, hashlib.sha256(data).hexdigest()))
    with pytest.raises(DatasetError, match=r"dev.txt, line 2: label 7 is outside the 5 SST classes"):
        SST(tmp_path, "dev", mirror=url)
    assert not list((tmp_path / "sst" / "processed").glob("dev-*.pt"))


def test_mirror_lacking_the_file(tmp_path, http_mirror):
    folder, url = http_mirror
    with pytest.raises(DownloadError, match=r"sst/trainDevTestTrees_PTB.zip.*HTTP 404 \(the mirror lacks it\)"):
        SST(tmp_path / "a", "train", mirror=url)
    with pytest.raises(DownloadError, match=r"the mirror .* lacks sst/trainDevTestTrees_PTB.zip"):
        SST(tmp_path / "b", "train", mirror=folder)
    with pytest.raises(DownloadError, match="neither an http"):
        SST(tmp_path / "c", "train", mirror=tmp_path / "no-such-folder")


def test_bad_split_and_bad_root(tmp_path, small_sst):
    folder, _ = small_sst
    with pytest.raises(DatasetError, match=r"no split 'valid'; choose one of 'train', 'dev', 'test'"):
        SST(tmp_path, "valid")
    with pytest.raises(DatasetError, match=r"looks like a data mirror.*pass it as mirror="):
        SST(folder, "train")
    (tmp_path / "file").write_text("x")
    with pytest.raises(DatasetError, match="is a file"):
        SST(tmp_path / "file", "train")
    (tmp_path / "data" / "sst" / "raw").mkdir(parents=True)
    with pytest.raises(DatasetError, match="is the sst folder itself"):
        SST(tmp_path / "data" / "sst", "train")


# --------------------------------------------------------------------------- synthetic SICK

SICK_PAIRS = [  # (a tokens, a parents, b tokens, b parents, score, id)
    ("A dog runs", "2 3 0", "The cat sleeps", "2 3 0", "4.5", "7"),
    ("Kids play outside .", "2 0 2 2", "Nobody is playing", "3 3 0", "1", "9"),
]


def _write_sick_parses(folder: Path, split: str, pairs=SICK_PAIRS) -> None:
    out = folder / "sick" / "dependency_parses" / split
    out.mkdir(parents=True)
    for k, name in enumerate(["a.toks", "a.parents", "b.toks", "b.parents", "sim.txt", "id.txt"]):
        (out / name).write_text("".join(p[k] + "\n" for p in pairs))


@pytest.fixture
def small_sick(monkeypatch, tmp_path):
    folder = tmp_path / "mirror"
    _write_sick_parses(folder, "dev")
    monkeypatch.setattr(SICK, "SPLIT_SIZES", {"train": 2, "dev": 2, "test": 2})
    return folder


def test_sick_target_hand_values():
    assert sick_target(4.5).tolist() == [0, 0, 0, 0.5, 0.5]
    assert sick_target(5.0).tolist() == [0, 0, 0, 0, 1]
    assert sick_target(1.0).tolist() == [1, 0, 0, 0, 0]
    torch.testing.assert_close(sick_target(3.2), torch.tensor([0, 0, 0.8, 0.2, 0]))
    scores = torch.tensor([1.0, 2.7, 3.25, 4.9, 5.0])
    p = sick_target(scores)
    assert p.shape == (5, 5)
    # Tai et al.: the expected rating under p is the score.
    torch.testing.assert_close(p @ torch.arange(1.0, 6.0), scores)
    with pytest.raises(ValueError, match="outside"):
        sick_target(5.5)
    with pytest.raises(ValueError, match="outside"):
        sick_target(torch.tensor([2.0, 0.5]))


def test_sick_pairs_and_batching(tmp_path, small_sick):
    dev = SICK(tmp_path / "data", "dev", mirror=small_sick)
    assert len(dev) == 2
    first = dev[0]
    assert first.tokens_a == ["A", "dog", "runs"] and first.tokens_b == ["The", "cat", "sleeps"]
    assert first.score.tolist() == [4.5] and first.pair_id.tolist() == [7]
    assert first.target.tolist() == [[0, 0, 0, 0.5, 0.5]]
    assert first.edge_index_a.tolist() == [[0, 1], [1, 2]]

    # Reference: the trees made directly and batched by PyG.
    trees = {side: [from_heads(p[1 if side == "a" else 3], p[0 if side == "a" else 2]) for p in SICK_PAIRS]
             for side in "ab"}
    batch = next(iter(DataLoader(dev, batch_size=2)))
    assert batch.num_graphs == 2
    assert batch.edge_index_a.tolist() == [[0, 1, 3, 5, 6], [1, 2, 4, 4, 4]]  # second pair offset by 3 nodes
    assert batch.score.tolist() == [4.5, 1.0] and batch.target.shape == (2, 5)
    for side in "ab":
        got, ref = pair_side(batch, side), Batch.from_data_list(trees[side])
        for key in ("edge_index", "edge_pos", "height", "depth", "word_pos", "child_pos", "is_root", "batch", "ptr"):
            assert torch.equal(got[key], ref[key]), (side, key)
        assert got.tokens == ref.tokens and got.num_nodes == ref.num_nodes and got.num_graphs == 2
    both, ref = pair_side(batch, "both"), Batch.from_data_list(trees["a"] + trees["b"])
    for key in ("edge_index", "edge_pos", "height", "batch", "ptr"):
        assert torch.equal(both[key], ref[key]), key
    assert both.tokens == ref.tokens
    assert schedule_of(both).num_nodes == 13
    single = pair_side(dev[1], "b")
    assert single.tokens == [["Nobody", "is", "playing"]] and single.batch.tolist() == [0, 0, 0]
    with pytest.raises(ValueError, match="side must be"):
        pair_side(batch, "c")


def test_sick_with_vocab_and_http_mirror(tmp_path, http_mirror, monkeypatch):
    folder, url = http_mirror
    _write_sick_parses(folder, "train")
    monkeypatch.setattr(SICK, "SPLIT_SIZES", {"train": 2, "dev": 2, "test": 2})
    vocab = Vocab.build([p[0].split() + p[2].split() for p in SICK_PAIRS])
    train = SICK(tmp_path, "train", vocab=vocab, mirror=url)
    assert train[1].word_a.tolist() == [vocab[t] for t in ["Kids", "play", "outside", "."]]
    assert Vocab.build(train) == vocab  # the vocabulary reads pairs too


def test_sick_bad_inputs(tmp_path, small_sick, monkeypatch):
    with pytest.raises(DownloadError, match="no official download; pass mirror="):
        SICK(tmp_path / "a", "dev")
    with pytest.raises(DatasetError, match="parser must be"):
        SICK(tmp_path, "dev", parser="corenlp")
    bad = tmp_path / "bad"
    _write_sick_parses(bad, "dev", [SICK_PAIRS[0], (*SICK_PAIRS[1][:4], "6.5", "9")])
    with pytest.raises(DatasetError, match=r"sim.txt, line 2: relatedness score 6.5 is outside \[1, 5\]"):
        SICK(tmp_path / "b", "dev", mirror=bad)
    short = tmp_path / "short"
    _write_sick_parses(short, "dev", SICK_PAIRS[:1])
    with pytest.raises(CorruptFileError, match="has 1 lines, expected 2"):
        SICK(tmp_path / "c", "dev", mirror=short)
    assert not (tmp_path / "c" / "sick" / "raw" / "dependency_parses" / "dev" / "a.toks").exists()


# --------------------------------------------------------------------------- synthetic TREC (needs spaCy)

TREC_TRAIN = [
    "NUM:date When was Ozzy Osbourne born ?",
    "LOC:city What county is Modesto , California in ?",
    "HUM:desc Who was Galileo ?",
    "DESC:def What is an atom ?",
    "ENTY:animal What fowl grabs the spotlight ?",
    "ABBR:exp What is the full form of .com ?",
    "HUM:ind Who invented the telephone ?",
    "LOC:city Which city has the oldest relationship as a sister\xf0city with Los Angeles ?",
    "NUM:count How many legs does a spider have ?",
    "DESC:manner How did serfdom develop ?",
]
TREC_TEST = ["NUM:dist How far is it from Denver to Aspen ?", "HUM:gr What team won ?"]
COARSE = ["ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"]


@pytest.fixture
def small_trec(monkeypatch, tmp_path, nlp):  # nlp: skipped without spaCy's model
    folder = tmp_path / "mirror" / "trec"
    folder.mkdir(parents=True)
    (folder / "train_5500.label").write_bytes(("\n".join(TREC_TRAIN) + "\n").encode("latin-1"))
    (folder / "TREC_10.label").write_bytes(("\n".join(TREC_TEST) + "\n").encode("latin-1"))
    monkeypatch.setattr(TREC, "FILES", {k: RemoteFile(v.path, None, None) for k, v in TREC.FILES.items()})
    monkeypatch.setattr(TREC, "FILE_SIZES", {"train": 10, "test": 2})
    monkeypatch.setattr(TREC, "DEV_SIZE", 3)
    return folder.parent


def test_trec_splits_labels_and_trees(tmp_path, small_trec):
    root = tmp_path / "data"
    train = TREC(root, "train", mirror=small_trec)
    dev = TREC(root, "dev", mirror=small_trec)
    test = TREC(root, "test", mirror=small_trec)
    assert (len(train), len(dev), len(test)) == (7, 3, 2)
    questions = [line.split(" ", 1)[1].split() for line in TREC_TRAIN]
    seen = [d.tokens for d in train] + [d.tokens for d in dev]
    assert sorted(map(tuple, seen)) == sorted(map(tuple, questions))  # a partition of the training file
    assert ["sister\xf0city" in tokens for tokens in seen].count(True) == 1  # Latin-1 decoded
    for ds, lines in ((train, TREC_TRAIN), (dev, TREC_TRAIN), (test, TREC_TEST)):
        label_of = {tuple(line.split(" ", 1)[1].split()): line.split(":")[0] for line in lines}
        for d in ds:
            assert int(d.is_root.sum()) == 1
            assert d.y[d.is_root].tolist() == [COARSE.index(label_of[tuple(d.tokens)])]
            assert (d.y[~d.is_root] == -1).all()
            assert d.coarse.tolist() == [COARSE.index(label_of[tuple(d.tokens)])]
            assert d.num_nodes == len(d.tokens)
    assert test[0].tokens == ["How", "far", "is", "it", "from", "Denver", "to", "Aspen", "?"]
    assert test[1].fine.tolist() == [TREC.FINE_CLASSES.index("HUM:gr")]

    # The same seed gives the same dev set; different seeds give different ones.
    assert [d.tokens for d in TREC(root, "dev", mirror=small_trec)] == [d.tokens for d in dev]
    dev_sets = {tuple(TREC(root, "dev", dev_seed=s, mirror=small_trec, log=False).dev_indices()) for s in range(6)}
    assert len(dev_sets) > 1

    binary = TREC(root, "test", tree="binary", mirror=small_trec)
    for d, dep in zip(binary, test, strict=True):
        n = len(d.tokens)
        assert d.num_nodes == 2 * n - 1 and int(d.is_leaf.sum()) == n
        assert d.y[d.is_root].tolist() == dep.y[dep.is_root].tolist()
    fine = TREC(root, "test", fine_grained=True, mirror=small_trec)
    assert fine.num_classes == 50 and fine[0].y[fine[0].is_root].tolist() == [TREC.FINE_CLASSES.index("NUM:dist")]


def test_trec_label_outside_classes(tmp_path, small_trec):
    (small_trec / "trec" / "TREC_10.label").write_text("NUM:date When ?\nFOO:bar What is it ?\n")
    with pytest.raises(DatasetError, match=r"TREC_10.label, line 2: label 'FOO:bar' is not one of the 50"):
        TREC(tmp_path, "test", mirror=small_trec)
    with pytest.raises(DatasetError, match="tree must be"):
        TREC(tmp_path, "test", tree="constituency")


@pytest.mark.usefixtures("nlp")
def test_sick_parsed_with_spacy_from_semeval_zip(tmp_path, monkeypatch):
    folder = tmp_path / "mirror" / "sick"
    folder.mkdir(parents=True)
    rows = ["pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment",
            "4\tThe young boys are playing outdoors\tThere is no boy playing outdoors\t3.6\tCONTRADICTION",
            "24\tA kid is swimming\tA child swims in the pool\t4.9\tENTAILMENT"]
    (folder / "sick_trial.zip").write_bytes(_zip_bytes({"SICK_trial.txt": "\n".join(rows) + "\n"}))
    monkeypatch.setattr(SICK, "ZIPS", {k: RemoteFile(v.path, None, None) for k, v in SICK.ZIPS.items()})
    monkeypatch.setattr(SICK, "SPLIT_SIZES", {"train": 2, "dev": 2, "test": 2})
    dev = SICK(tmp_path / "data", "dev", parser="spacy", mirror=folder.parent)
    assert len(dev) == 2
    assert dev[0].tokens_a == ["The", "young", "boys", "are", "playing", "outdoors"]
    assert dev[1].tokens_b == ["A", "child", "swims", "in", "the", "pool"]
    assert dev.pair_id.tolist() == [4, 24] and dev.score.tolist() == pytest.approx([3.6, 4.9])
    assert int(dev.is_root_a.sum()) == int(dev.is_root_b.sum()) == 2  # one tree per sentence
    torch.testing.assert_close(dev.target[1], torch.tensor([0, 0, 0, 0.1, 0.9]))
    assert _files_under(tmp_path / "data" / "sick" / "raw") == ["SICK_trial.txt"]  # the zip was unpacked and removed
    assert any(name.startswith("dev-spacy-") for name in _files_under(tmp_path / "data" / "sick" / "processed"))


# --------------------------------------------------------------------------- the real corpora

needs_data = needs_corpora


def _root_labels(split: str) -> list[int]:
    # Independent of the PTB reader: the root label is the number after the first bracket.
    with zipfile.ZipFile(CORPORA / "sst" / "trainDevTestTrees_PTB.zip") as zf:
        lines = zf.read(f"trees/{split}.txt").decode().splitlines()
    return [int(re.match(r"\((\d)", line).group(1)) for line in lines if line.strip()]


@needs_data
@pytest.mark.parametrize("split", ["dev", pytest.param("test", marks=pytest.mark.slow)])
def test_real_sst(tmp_path, split):
    fine = SST(tmp_path, split, mirror=CORPORA)
    binary = SST(tmp_path, split, fine_grained=False, mirror=CORPORA)
    roots = _root_labels(split)
    assert len(fine) == len(roots) == {"dev": 1101, "test": 2210}[split]
    assert len(binary) == sum(r != 2 for r in roots) == {"dev": 872, "test": 1821}[split]
    assert fine.y[fine.is_root].tolist() == roots
    assert binary.y[binary.is_root].tolist() == [int(r > 2) for r in roots if r != 2]
    assert set(binary.y.unique().tolist()) == {-1, 0, 1}
    # Neutral phrases are exactly the unlabelled nodes of the binary task.
    sizes = fine.slices["y"].diff()
    root_of_node = torch.repeat_interleave(torch.tensor(roots), sizes)
    assert int(((fine.y == 2) & (root_of_node != 2)).sum()) == int((binary.y == -1).sum())


@needs_data
def test_real_sick_dev(tmp_path):
    dev = SICK(tmp_path, "dev", mirror=CORPORA)
    folder = CORPORA / "sick" / "dependency_parses" / "dev"
    scores = [float(x) for x in (folder / "sim.txt").read_text().split()]
    assert len(dev) == 500
    torch.testing.assert_close(dev.score, torch.tensor(scores))
    torch.testing.assert_close(dev.target @ torch.arange(1.0, 6.0), torch.tensor(scores))
    assert dev[0].tokens_a == (folder / "a.toks").read_text().splitlines()[0].split()
    assert int(dev.is_root_a.sum()) == int(dev.is_root_b.sum()) == 500


@needs_data
@pytest.mark.usefixtures("nlp")
def test_real_trec_test(tmp_path):
    test = TREC(tmp_path, "test", mirror=CORPORA)
    lines = (CORPORA / "trec" / "TREC_10.label").read_text(encoding="latin-1").splitlines()
    assert len(test) == 500
    assert test.coarse.view(-1).tolist() == [COARSE.index(line.split(":")[0]) for line in lines]
    assert int(test.is_root.sum()) == 500


@needs_data
@pytest.mark.slow
@pytest.mark.usefixtures("nlp")
def test_real_full_counts(tmp_path):
    for split, n, n_binary in (("train", 8544, 6920), ("dev", 1101, 872), ("test", 2210, 1821)):
        assert len(SST(tmp_path, split, mirror=CORPORA, log=False)) == n
        assert len(SST(tmp_path, split, fine_grained=False, mirror=CORPORA, log=False)) == n_binary
    for split, n in (("train", 4500), ("dev", 500), ("test", 4927)):
        assert len(SICK(tmp_path, split, mirror=CORPORA, log=False)) == n
    sizes = {split: len(TREC(tmp_path, split, tree="binary", mirror=CORPORA, log=False))
             for split in ("train", "dev", "test")}
    assert sizes == {"train": 4952, "dev": 500, "test": 500}


def test_views_of_a_dataset_share_one_cut_of_its_storage(tmp_path, small_sst, monkeypatch):
    from graphtree.datasets import base

    dev = SST(tmp_path / "data", "dev", mirror=small_sst[1])
    cuts = []

    def cut(data, slices):
        cuts.append(len(slices["y"]) - 1)
        return separate_graphs(data, slices)

    monkeypatch.setattr(base, "separate_graphs", cut)
    first, second = dev[0:1], dev[1:2]  # views made before any graph was read (as batches for evaluation are)
    assert [g.tokens for g in second] == [["Great", "film"]] and [g.tokens for g in first] == [["Meh", "awful"]]
    assert [g.tokens for g in dev] == [["Meh", "awful"], ["Great", "film"]]
    assert cuts == [2]  # the storage was cut once, for the dataset and both views
    one, slices = InMemoryDataset.collate([from_heads([0, 1], tokens=["a", "b"]), from_heads([0], tokens=["c"])])
    dev.data, dev.slices = one, slices  # another storage: cut anew
    assert [g.tokens for g in dev] == [["a", "b"], ["c"]] and cuts == [2, 2]


def test_cutting_a_corpus_leaves_the_garbage_collector_alone(tmp_path, small_sst, monkeypatch):
    import gc

    from graphtree.datasets import base

    dev = SST(tmp_path / "data", "dev", mirror=small_sst[1])
    seen = []

    def cut(data, slices):
        seen.append(gc.isenabled())
        return separate_graphs(data, slices)

    monkeypatch.setattr(base, "separate_graphs", cut)
    was = gc.isenabled()
    try:
        gc.enable()
        assert dev[1].tokens == ["Great", "film"] and dev[0].tokens == ["Meh", "awful"]
        assert seen == [True] and gc.isenabled()  # cut once, the collector as the program has it
    finally:
        (gc.enable if was else gc.disable)()
