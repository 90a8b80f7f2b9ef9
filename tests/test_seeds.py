"""lab.seeds: the per-seed loop of the experiment scripts, on a toy experiment with hand-worked
expectations: a finished seed is skipped, a run killed after its last epoch resumes and is written, the results
file holds what every experiment records, and each trained run's line goes to stdout."""

from __future__ import annotations

import argparse
import json

import pytest
from lab.seeds import Outcome, SeedRun, count_parameters, seed_names, train_seeds

from graphtree.data import from_ptb
from graphtree.models import NodeEmbedding, TreeClassifier
from graphtree.nn import NaryTreeLSTM
from graphtree.train import PRESETS, PaperOptimizer, Trainer
from graphtree.vocab import Vocab

VOCAB = Vocab(["a", "film", "the", "man"])
DATA = [from_ptb("(1 (1 a) (1 film))", VOCAB), from_ptb("(0 (0 the) (1 man))", VOCAB)]
CONFIG = {"model": "toy", "epochs": 2}


class Toy:
    """A toy experiment: records the seeds it builds; ``fail_after_fit`` stops a run like a kill after training."""

    def __init__(self, out, fail_after_fit: bool = False) -> None:
        self.out, self.built, self.fail_after_fit = out, [], fail_after_fit

    def build(self, run: SeedRun) -> Trainer:
        self.built.append(run.seed)
        embedding = NodeEmbedding(len(VOCAB), 4)
        model = TreeClassifier(embedding, NaryTreeLSTM(4, 3), 2)
        return Trainer(model, PaperOptimizer.for_model(model, embedding, PRESETS["tai"]), epochs=2, batch_size=2,
                       **run.trainer_options())

    def score(self, trainer: Trainer, fit) -> Outcome:
        if self.fail_after_fit:
            raise KeyboardInterrupt  # killed after the last epoch's checkpoint, before the results file
        test = trainer.test(DATA)
        return Outcome(fit.best_dev, test.as_dict(), f"test root {test.root:.2f}",
                       {"num_parameters": count_parameters(trainer.model)})

    def run(self, seeds: list[int]) -> list:
        argv = ["--seeds", *map(str, seeds), "--out", str(self.out)]
        args = argparse.Namespace(seeds=seeds, out=str(self.out), quick=False, no_progress=True, threads=1)
        return train_seeds("toy", args, argv, CONFIG, run_name=lambda seed: f"toy_s{seed}", build=self.build,
                           score=self.score, train=DATA, dev=DATA)


def test_a_second_command_trains_only_the_seeds_not_finished(tmp_path, capsys):
    first = Toy(tmp_path)
    assert first.run([1, 2]) == [tmp_path / "toy" / "toy_s1.json", tmp_path / "toy" / "toy_s2.json"]
    out = capsys.readouterr().out.splitlines()
    assert first.built == [1, 2] and [line.split(":")[0] for line in out] == ["toy_s1", "toy_s2"]

    again = Toy(tmp_path)
    assert again.run([1, 2, 3])[-1] == tmp_path / "toy" / "toy_s3.json"
    captured = capsys.readouterr()
    assert again.built == [3]  # seeds 1 and 2 have their results file
    assert [line.split(":")[0] for line in captured.out.splitlines()] == ["toy_s3"]  # results on stdout
    assert captured.err.count("finished earlier") == 2 and "toy_s3 epoch 2/2" in captured.err  # progress: stderr


def test_the_results_file_holds_the_record_of_every_experiment(tmp_path, capsys):
    Toy(tmp_path).run([4])
    record = json.loads((tmp_path / "toy" / "toy_s4.json").read_text())
    assert record["experiment"] == "toy" and record["run"] == "toy_s4" and record["seed"] == 4
    assert record["config"] == CONFIG and record["command"] == "python experiments/toy.py --seeds 4"  # no --out
    assert [h["epoch"] for h in record["history"]] == [1, 2] and record["best_epoch"] in (1, 2)
    assert record["test"]["root_total"] == 2 and record["num_parameters"] > 0 and record["threads"] == 1
    assert (tmp_path / "toy" / "toy_s4.csv").is_file()
    assert (tmp_path / "checkpoints" / "toy" / "toy_s4.pt").is_file()


def test_a_run_killed_after_training_resumes_from_its_checkpoint(tmp_path, capsys):
    with pytest.raises(KeyboardInterrupt):
        Toy(tmp_path, fail_after_fit=True).run([1])
    assert not (tmp_path / "toy" / "toy_s1.json").exists()
    capsys.readouterr()
    resumed = Toy(tmp_path)
    resumed.run([1])
    (line,) = capsys.readouterr().out.splitlines()
    assert resumed.built == [1] and line.endswith("(resumed after epoch 2)")
    assert (tmp_path / "toy" / "toy_s1.json").is_file()


def test_run_names_name_the_epochs_only_where_they_are_not_the_experiments_own():
    assert seed_names("mean_glove50", 10, 10, quick=False)(3) == "mean_glove50_s3"
    assert seed_names("mean_glove50", 20, 10, quick=False)(3) == "mean_glove50_ep20_s3"
    assert seed_names("mean_glove50", 2, 10, quick=True)(1) == "mean_glove50_s1"  # OUT/quick/ tells it apart
