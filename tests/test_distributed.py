"""Data-parallel training under torchrun: 2 CPU processes (gloo) against 1, a kill and a resume, 2 "nodes".

Each test launches ``tests/distributed_helper.py`` through ``python -m
torch.distributed.run`` (torchrun), which trains a small N-ary Tree-LSTM on
random trees in float64 through :class:`graphtree.train.Trainer`. The reference
is the same script run as one plain process: with the global minibatch held
equal, 2 processes must end with the same metrics up to the order of float
sums, and every rank must hold the same parameters after every step. 43
training trees in minibatches of 6 leave one rank without an example in the last
minibatch of each epoch.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from graphtree.train import distributed
from graphtree.train.ordering import epoch_order

REPO = Path(__file__).resolve().parent.parent
HELPER = REPO / "tests" / "distributed_helper.py"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
ENV_KEYS = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def clean_env() -> dict[str, str]:
    """This environment without a surrounding torchrun's variables, one thread per process."""
    return {**{k: v for k, v in os.environ.items() if k not in ENV_KEYS}, "OMP_NUM_THREADS": "1"}


def launch(argv: list[str], timeout: int = 300, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=clean_env())
    if check:
        assert result.returncode == 0, result.stderr[-4000:]
    return result


def one_process(out: Path, *flags: str) -> dict:
    launch([sys.executable, str(HELPER), str(out), *flags])
    return json.loads((out / "result.json").read_text())


def two_processes(out: Path, *flags: str, check: bool = True) -> subprocess.CompletedProcess:
    return launch([*TORCHRUN, "--standalone", "--nproc_per_node", "2", str(HELPER), str(out), *flags], check=check)


def rank_records(out: Path, ranks: int) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(ranks)]


def assert_same_metrics(one: dict, two: dict) -> None:
    assert two["processes"] == 2 and one["processes"] == 1
    assert two["best_epoch"] == one["best_epoch"]
    for a, b in zip(one["history"], two["history"], strict=True):
        assert a["dev_root"] == b["dev_root"] and a["dev_phrase"] == b["dev_phrase"]
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-12, abs=0)
    assert two["test"]["root_correct"] == one["test"]["root_correct"]
    assert two["test"]["phrase_correct"] == one["test"]["phrase_correct"]


@pytest.fixture(scope="module")
def one_process_tai(tmp_path_factory) -> dict:
    """The reference: Tai et al.'s update (AdaGrad, sparse SGD embeddings) in one plain process."""
    return one_process(tmp_path_factory.mktemp("one") / "tai")


@pytest.mark.parametrize("preset", [
    "tai",  # AdaGrad, embeddings by SGD on sparse gradients (all-gathered outside DDP)
    pytest.param("teng", marks=pytest.mark.slow),  # Adam, embeddings dense (through DDP)
    pytest.param("zhu", marks=pytest.mark.slow),  # AdaGrad on sparse embedding gradients too
    pytest.param("teng_code", marks=pytest.mark.slow),  # lazy Adam (SparseAdam), minibatch of 1 per rank
])
def test_two_processes_train_as_one(tmp_path, preset, request):
    one = (request.getfixturevalue("one_process_tai") if preset == "tai"
           else one_process(tmp_path / "one", "--preset", preset))
    two_processes(tmp_path / "two", "--preset", preset)
    two = json.loads((tmp_path / "two" / "result.json").read_text())
    assert_same_metrics(one, two)
    assert two["sparse_embedding"] == (preset != "teng")
    ranks = rank_records(tmp_path / "two", 2)
    assert len(ranks[0]["steps"]) == 4 * 8  # 4 epochs of ceil(43 / 6) global minibatches on every rank
    assert ranks[0]["steps"] == ranks[1]["steps"], "parameters differ between ranks after some step"
    # Only rank 0 writes the run's files.
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == ["rank0.json", "rank1.json", "result.json",
                                                                   "run.csv", "run.pt"]


def test_two_processes_replayed_train_as_one_plain(tmp_path, one_process_tai):
    # The replayed path under torchrun: no DDP, every gradient averaged by one all-reduce inside the step (on the
    # CPU the padded step runs eagerly, with gloo; on GPUs the same step is captured, with NCCL). Against the plain
    # single process: the same metrics up to the order of float sums and the capturable update (float64: 1e-9).
    two_processes(tmp_path / "two", "--replay", "on")
    one, two = one_process_tai, json.loads((tmp_path / "two" / "result.json").read_text())
    assert two["replay"]["path"] == "padded" and two["replay"]["steps"]["eager"] == 0, two["replay"]
    assert not two["sparse_embedding"]  # a capturable update takes dense embedding gradients
    assert two["processes"] == 2 and two["best_epoch"] == one["best_epoch"]
    for a, b in zip(one["history"], two["history"], strict=True):
        assert a["dev_root"] == b["dev_root"] and a["dev_phrase"] == b["dev_phrase"]
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-9, abs=0)
    assert two["test"]["root_correct"] == one["test"]["root_correct"]
    ranks = rank_records(tmp_path / "two", 2)
    assert len(ranks[0]["steps"]) == 4 * 8 and ranks[0]["steps"] == ranks[1]["steps"]


def test_two_processes_on_height_grouped_minibatches_train_as_one(tmp_path):
    # Every rank cuts the same grouped order and takes its share of each minibatch: the one-process run's result.
    one = one_process(tmp_path / "one", "--group-by-height", "2")
    two_processes(tmp_path / "two", "--group-by-height", "2")
    assert_same_metrics(one, json.loads((tmp_path / "two" / "result.json").read_text()))
    (single,), ranks = rank_records(tmp_path / "one", 1), rank_records(tmp_path / "two", 2)
    assert ranks[0]["orders"] == ranks[1]["orders"] == single["orders"]
    assert all(sorted(order) == list(range(43)) for order in single["orders"])
    assert single["orders"][0] != epoch_order(43, 7, 0).tolist()  # the helper's seed: grouped, not plain
    assert ranks[0]["steps"] == ranks[1]["steps"]


def test_a_killed_job_resumes_and_ends_as_an_uninterrupted_one(tmp_path):
    # Dropout on: every rank's own random stream must come back from the checkpoint.
    flags = ("--dropout", "0.5", "--epochs", "3")
    two_processes(tmp_path / "full", *flags)
    killed = two_processes(tmp_path / "run", *flags, "--kill-at-step", "13", check=False)  # in epoch 2 of 3
    assert killed.returncode != 0 and not (tmp_path / "run" / "result.json").exists()
    two_processes(tmp_path / "run", *flags)
    full, resumed = (json.loads((tmp_path / d / "result.json").read_text()) for d in ("full", "run"))
    assert resumed == full
    assert [r["final"] for r in rank_records(tmp_path / "run", 2)] == [r["final"] for r in
                                                                       rank_records(tmp_path / "full", 2)]


def store_reads(out: Path, rank: int) -> list[int]:
    """The training-store positions every process of ``rank`` read (its loader workers)."""
    return [int(line) for path in sorted(out.glob(f"reads-{rank}-*.txt")) for line in path.read_text().split()]


def test_on_disk_trains_as_in_memory_in_one_process_and_two(tmp_path, one_process_tai):
    # One process: the store's minibatches, read by loader workers, are the in-memory ones, bit for bit.
    disk_one = one_process(tmp_path / "disk1", "--on-disk")
    assert disk_one == one_process_tai
    two_processes(tmp_path / "disk2", "--on-disk")
    disk_two = json.loads((tmp_path / "disk2" / "result.json").read_text())
    assert_same_metrics(one_process_tai, disk_two)
    ranks = rank_records(tmp_path / "disk2", 2)
    assert ranks[0]["steps"] == ranks[1]["steps"]
    # Each rank read its own shares only: together one epoch's reads 4 times over (43 graphs, plus the one example
    # the rank without a share of the last minibatch of 1 reads), each rank about half.
    reads = [store_reads(tmp_path / "disk2", r) for r in range(2)]
    assert len(reads[0]) + len(reads[1]) == 4 * (43 + 1)
    assert all(len(r) <= 4 * 22 for r in reads)
    assert sorted(store_reads(tmp_path / "disk1", 0)) == sorted(list(range(43)) * 4)


@pytest.mark.slow  # the checkpoints are the in-memory path's (tested above); here only the batches' source differs
def test_an_on_disk_job_killed_resumes_as_an_uninterrupted_one(tmp_path):
    flags = ("--dropout", "0.5", "--epochs", "2", "--on-disk")
    two_processes(tmp_path / "full", *flags)
    killed = two_processes(tmp_path / "run", *flags, "--kill-at-step", "10", check=False)  # in epoch 2 of 2
    assert killed.returncode != 0 and not (tmp_path / "run" / "result.json").exists()
    two_processes(tmp_path / "run", *flags)
    full, resumed = (json.loads((tmp_path / d / "result.json").read_text()) for d in ("full", "run"))
    assert resumed == full


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_nodes_over_a_c10d_rendezvous(tmp_path, one_process_tai):
    one = one_process_tai
    endpoint = f"127.0.0.1:{free_port()}"
    nodes = [subprocess.Popen([*TORCHRUN, "--nnodes", "2", "--nproc_per_node", "1", "--rdzv_backend", "c10d",
                               "--rdzv_endpoint", endpoint, "--rdzv_id", "graphtree-test", str(HELPER),
                               str(tmp_path / "two")], cwd=REPO, env=clean_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for node in nodes:
        _, err = node.communicate(timeout=300)
        assert node.returncode == 0, err[-4000:]
    assert_same_metrics(one, json.loads((tmp_path / "two" / "result.json").read_text()))
    ranks = rank_records(tmp_path / "two", 2)
    assert ranks[0]["steps"] == ranks[1]["steps"]


def test_one_process_outside_torchrun():
    assert (distributed.world_size(), distributed.rank(), distributed.is_main()) == (1, 0, True)
    assert distributed.shard([1, 2, 3]) == [1, 2, 3]
    with distributed.main_first():
        pass


def test_the_own_data_command_trains_under_torchrun(tmp_path):
    # TaskTrainer (graph labels) through experiments/train.py: one set of files, the run marked as 2 processes.
    launch([*TORCHRUN, "--standalone", "--nproc_per_node", "2", "experiments/train.py", "--data",
            "examples/graphs.jsonl", "--model", "childsum", "--quick", "--epochs", "2", "--no-progress",
            "--out", str(tmp_path / "runs"), "--data-root", str(tmp_path / "data")])
    (record,) = (tmp_path / "runs" / "quick" / "train").glob("*.json")
    result = json.loads(record.read_text())
    assert result["processes"] == 2 and len(result["history"]) == 2
    assert len(list((tmp_path / "runs" / "quick" / "train").glob("*.predictions.tsv"))) == 1
