"""lab.sst_options: ``experiments/sst.py``'s flags, run settings and run names, checked
against every committed SST run (its recorded command gives its recorded settings and name) and hand-written
cases."""

from __future__ import annotations

import json
import shlex
import types
from pathlib import Path

import pytest
from lab.runs import RunError
from lab.scripts import load_script

from graphtree.models import BiTreeLSTM

REPO = Path(__file__).resolve().parent.parent
sst = load_script(REPO / "experiments" / "sst.py")
OPTIONS = sst.OPTIONS


def committed_runs() -> list[dict]:
    records = (json.loads(p.read_text()) for p in sorted((REPO / "experiments" / "results" / "sst").glob("*.json")))
    return [r for r in records if isinstance(r, dict) and "config" in r and r["config"]["model"] not in sst.BASELINES]


# The published widths of the registry's encoders (their config.json's hidden_size).
ENCODER_WIDTHS = {"minilm": 384, "mpnet": 768}


def test_every_committed_run_has_the_settings_and_name_its_command_gives():
    runs = committed_runs()
    assert len(runs) > 100
    for record in runs:
        args = OPTIONS.parse(shlex.split(record["command"])[2:], REPO)
        vectors = None if args.embeddings == "random" else types.SimpleNamespace(dim=50)  # GloVe 6B 50d
        config = OPTIONS.config(args, vectors, ENCODER_WIDTHS.get(args.encoder))
        recorded = record["config"]
        # Runs made before the optimizer record gained a field lack it; the rest is the same.
        config["optimizer"] = {k: config["optimizer"][k] for k in recorded["optimizer"]}
        assert config == recorded, record["run"]
        assert OPTIONS.run_name(recorded, record["seed"]) == record["run"]


def test_run_names_say_what_differs_from_the_paper():
    def name(*argv: str, seed: int = 1, dim: int | None = None) -> str:
        args = OPTIONS.parse(list(argv), REPO)
        return OPTIONS.run_name(OPTIONS.config(args, dim and types.SimpleNamespace(dim=dim)), seed)

    assert name() == "nary_random_fine_s1"
    assert name("--model", "lstmrnn", "--activation", "softsign", "--binary", seed=3) == (
        "lstmrnn_softsign_random_binary_s3")
    assert name("--model", "bicontree", "--embeddings", "glove50", "--head", "average", "--epochs", "5",
                "--lr", "0.002", "--batch-size", "10", "--share-input-weights", dim=50) == (
        "bicontree_head-average_glove50_fine_ep5_bs10_lr0.002_shared-inputs_s1")
    assert name("--model", "childsum", "--settings-of", "zhu", "--supervision", "root+leaf", "--structure",
                "left", "--dropout", "0.1", "--l2", "0", "--random-init", "normal") == (
        "childsum_random_fine_sup-root-leaf_struct-left_settings-zhu_do0.1_l2-0_init-normal_s1")
    assert name("--model", "topdown", "--optimizer", "teng_code", "--quick", "--epochs", "2") == (
        "topdown_head-gated_random_fine_opt-teng-code_s1")


def test_settings_of_another_paper_take_its_sizes_dropout_epochs_and_optimizer():
    config = OPTIONS.config(OPTIONS.parse(["--model", "childsum", "--settings-of", "zhu"], REPO), None)
    zhu = sst.MODELS["slstm"]
    assert (config["paper"], config["dim"], config["hidden"], config["dropout"], config["epochs"]) == (
        "zhu", zhu["dim"], zhu["hidden"], zhu["dropout"], zhu["epochs"])
    assert config["optimizer"] == sst.PRESETS["zhu"].as_dict() and config["settings_of"] == "zhu"
    # Within the model's own paper the settings are its paper model's, and no settings_of is recorded.
    same = OPTIONS.config(OPTIONS.parse(["--model", "childsum", "--settings-of", "tai"], REPO), None)
    assert same["hidden"] == sst.MODELS["nary"]["hidden"] and "settings_of" not in same


@pytest.mark.parametrize(("argv", "message"), [
    (["--model", "bilstm", "--settings-of", "zhu"], "--settings-of applies to the tree models, not bilstm"),
    (["--model", "nb", "--settings-of", "zhu"], "--settings-of applies to the tree models, not nb"),
    (["--model", "nary", "--settings-of", "teng"], "only settings within one of the two groups can be swapped"),
    (["--model", "nary", "--optimizer", "teng_code"], "--optimizer teng_code applies to Teng & Zhang's models"),
    (["--model", "contree", "--settings-of", "teng", "--optimizer", "teng_code"], "--optimizer teng_code applies"),
    (["--model", "nary", "--share-input-weights"], "--share-input-weights applies to the models with a top-down"),
    (["--embeddings", "glove50", "--random-init", "normal"], "--random-init applies to --embeddings random only"),
    (["--l2", "-1"], "--l2 must be non-negative, got -1.0"),
    (["--lr", "0"], "--lr must be positive, got 0.0"),
    (["--dropout", "1"], "--dropout must be in [0, 1), got 1.0"),
])
def test_flags_that_do_not_go_together_are_one_line_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        OPTIONS.parse(argv, REPO)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and message in err, err


def test_the_flags_default_to_the_repository_folders():
    args = OPTIONS.parse([], REPO)
    assert (args.model, args.out, args.data_root) == ("nary", str(REPO / "runs"), str(REPO / "datasets"))


def test_every_model_of_the_table_is_built_as_its_paper_says():
    """lab.sst_models builds Teng & Zhang's model (a BiTreeLSTM) for exactly the table's Teng &
    Zhang rows, and a model for every row; LSTM-RNN's memory is its vector size."""
    for model in (m for m in sst.MODELS if sst.MODELS[m]["paper"] != "encoder"):  # --model encoder: below
        cfg = OPTIONS.config(OPTIONS.parse(["--model", model], REPO), types.SimpleNamespace(dim=8))
        net, embedding = sst.build_model(dict(cfg, hidden=8), 10, 5, None)
        assert embedding.embedding.weight.shape == (10, 8)
        assert any(isinstance(m, BiTreeLSTM) for m in net.modules()) == (sst.MODELS[model]["paper"] == "teng")
    cfg = OPTIONS.config(OPTIONS.parse(["--model", "lstmrnn"], REPO), None)
    with pytest.raises(RunError, match="the memory size is the vector size"):
        sst.build_model(dict(cfg, hidden=cfg["dim"] + 1), 10, 5, None)
    with pytest.raises(ValueError, match="not a model of experiments/sst"):
        sst.build_model(dict(cfg, model="gru"), 10, 5, None)


def test_the_encoder_alone_needs_an_encoder_and_is_the_span_mean(tmp_path, capsys):
    pytest.importorskip("transformers")
    from tiny_encoder import tiny_encoder_folder

    from graphtree.models import EncoderSpanClassifier

    with pytest.raises(SystemExit):
        OPTIONS.parse(["--model", "encoder"], REPO)
    assert "--model encoder needs --encoder" in capsys.readouterr().err
    folder = str(tiny_encoder_folder(tmp_path / "tiny"))
    cfg = OPTIONS.config(OPTIONS.parse(["--model", "encoder", "--encoder", folder], REPO), None, 16)
    net, leaves = sst.build_model(cfg, 10, 5, None)
    assert isinstance(net, EncoderSpanClassifier) and leaves.out_channels == 16
    assert cfg["optimizer"]["name"] == "adamw" and OPTIONS.run_name(cfg, 1) == "encoder_tiny_fine_s1"
