"""``experiments/sst.py predict``: clear errors for bad files, and every node of the parse classified by the
checkpoint's best-dev model (not its last one)."""

import warnings
from pathlib import Path

import pytest
import torch
from lab.runs import main_guard
from lab.scripts import load_script
from lab.sst_predict import picture_path

from graphtree.data import from_ptb
from graphtree.models import NodeEmbedding, TreeClassifier
from graphtree.nn import NaryTreeLSTM
from graphtree.train import PRESETS, PaperOptimizer, Trainer
from graphtree.vocab import Vocab

sst = load_script(Path(__file__).resolve().parent.parent / "experiments" / "sst.py")

CLASSES = ["negative", "positive"]


def predict_error(argv: list[str], capsys) -> str:
    """The one line ``sst.py predict`` prints for a user error (exit status 2, no traceback)."""
    with pytest.raises(SystemExit) as exit_info:
        main_guard(lambda: sst.main(["predict", *argv]), "sst.py")
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_predict_names_a_missing_or_foreign_checkpoint(tmp_path, capsys):
    assert f"no checkpoint at {tmp_path / 'absent.pt'}" in predict_error([str(tmp_path / "absent.pt"), "A film."],
                                                                          capsys)
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    assert "is not a checkpoint of experiments/sst.py" in predict_error([str(tmp_path / "other.pt"), "A film."],
                                                                         capsys)
    (tmp_path / "text.pt").write_text("not a checkpoint at all")
    assert "does not load" in predict_error([str(tmp_path / "text.pt"), "A film."], capsys)
    # A TREC run's checkpoint: a Trainer checkpoint, but of another experiment.
    trec_cfg = dict(model="bicontree", trees="binary", parser="spacy", supervision="root")
    torch.save({"config": trec_cfg, "extra": {}, "best": {"model": None}}, tmp_path / "trec.pt")
    assert "checkpoint of another experiment" in predict_error([str(tmp_path / "trec.pt"), "A film."], capsys)


def test_predict_names_an_empty_sentence_and_a_missing_picture_folder(tmp_path, capsys):
    path = str(_checkpoint(tmp_path, Vocab(["a", "film"])))
    capsys.readouterr()  # the training's own lines
    assert "the sentence is empty" in predict_error([path, "   "], capsys)
    missing = tmp_path / "no" / "such" / "tree.png"
    assert f"the folder {missing.parent} does not exist" in predict_error([path, "A film.", "--png", str(missing)],
                                                                         capsys)


def _checkpoint(tmp_path: Path, vocab: Vocab) -> Path:
    """A real training checkpoint whose best model says "positive" everywhere and whose last model "negative"."""
    cfg = dict(model="nary", dim=8, hidden=6, dropout=0.0, structure="gold", head=None, activation=None)
    embedding = NodeEmbedding(len(vocab), cfg["dim"])
    model = TreeClassifier(embedding, NaryTreeLSTM(cfg["dim"], cfg["hidden"]), len(CLASSES))
    path = tmp_path / "run.pt"
    trainer = Trainer(model, PaperOptimizer.for_model(model, embedding, PRESETS["tai"]), epochs=1, batch_size=2,
                      seed=0, checkpoint=path, config=cfg, progress=False,
                      extra={"vocab": vocab.itos[1:], "lowercase": vocab.lowercase, "classes": CLASSES})
    data = [from_ptb("(1 (1 a) (1 film))", vocab), from_ptb("(0 (0 the) (1 man))", vocab)]
    trainer.fit(data, data)
    state = torch.load(path, weights_only=False)
    for weights, winner in ((state["best"]["model"], 1), (state["model"], 0)):
        weights["classifier.bias"] = torch.tensor([0.0, 0.0])
        weights["classifier.bias"][winner] = 100.0
    torch.save(state, path)
    return path


def test_predict_prints_every_node_with_the_best_models_class(tmp_path, capsys, nlp):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (pip install -e '.[plot]')")
    vocab = Vocab(["a", "film", "the", "man"])
    picture = tmp_path / "tree.png"
    sst.main(["predict", str(_checkpoint(tmp_path, vocab)), "The man saw a film .", "--png", str(picture)])

    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert captured.err.endswith(f"picture: {picture}\n")
    words = "The man saw a film .".split()
    assert len(lines) == 2 * len(words) - 1  # a binarized tree: every word and every phrase, once
    assert all("[1 positive 100%]" in line for line in lines)
    depth = [(len(line) - len(line.lstrip())) // 2 for line in lines]
    spans = [line.split("] ", 1)[1].split() for line in lines]
    assert depth[0] == 0 and spans[0] == words  # the root first, over the whole sentence
    # Pre-order: a node's children follow it one level deeper, and their spans tile its span left to right.
    for k, span in enumerate(spans):
        kids = []
        for j in range(k + 1, len(lines)):
            if depth[j] <= depth[k]:
                break
            if depth[j] == depth[k] + 1:
                kids.extend(spans[j])
        assert kids == span or (not kids and len(span) == 1)
    assert picture.stat().st_size > 0


def test_the_picture_goes_to_a_png_file_that_is_named(tmp_path, capsys):
    out = tmp_path / "runs"
    assert picture_path(None, out) == out / "sst-tree.png"  # the default: under the output folder
    (tmp_path / "pictures").mkdir()
    assert picture_path(str(tmp_path / "pictures"), out) == tmp_path / "pictures" / "sst-tree.png"
    assert picture_path(f"{tmp_path / 'pictures'}/", out) == tmp_path / "pictures" / "sst-tree.png"  # not ".png"
    assert picture_path(str(tmp_path / "pictures" / "tree"), out) == tmp_path / "pictures" / "tree.png"
    assert picture_path(str(tmp_path / "tree.PNG"), out) == tmp_path / "tree.PNG"
    with pytest.raises(SystemExit) as stop:
        main_guard(lambda: picture_path(str(tmp_path / "tree.txt"), out), "sst.py")
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "--png" in err and "ending in .png" in err


def test_predict_draws_under_the_output_folder_without_matplotlib_notices(tmp_path, capsys, nlp):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (pip install -e '.[plot]')")
    path = str(_checkpoint(tmp_path, Vocab(["a", "film"])))
    capsys.readouterr()  # the training's own lines
    out = tmp_path / "runs"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # as a user sees them: a warning would be an error here
        sst.main(["predict", path, "A film \N{CLAPPER BOARD} .", "--out", str(out)])  # a character the font lacks
    err = capsys.readouterr().err
    assert err == f"picture: {out / 'sst-tree.png'}\n" and (out / "sst-tree.png").stat().st_size > 0
