"""Every command README (and docs/distributed.md, docs/results.md) prints runs, in a short form: the same flags plus a
one-epoch quick switch.

The set-up and test commands are the ones CI runs (``.ci/run``), so CI fails
when they drift apart. The main job, the report on one's own runs and
``predict`` run in the default suite, with one training command of each
experiment script; every other command of the results tables, and the several
machine ``torchrun`` command, are marked slow: CI runs them as its second step
(``python -m pytest -q -m slow tests/test_readme_commands.py``, README's second
test command). The "Your own data" commands (``experiments/train.py``) run on
the example files they name, which must be the files docs/data-formats.md shows.
Nothing here writes into the repository: runs go to a temporary ``--out`` folder.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from corpora import CORPORA, HOW_TO_SUPPLY
from lab.scripts import load_script

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
DISTRIBUTED = (REPO / "docs" / "distributed.md").read_text()
RESULTS = (REPO / "docs" / "results.md").read_text()  # the full results tables, which README's table summarizes
TRAINING_SCRIPTS = ("sst", "sick", "trec", "structure")
SHORT = ["--quick", "--epochs", "1", "--threads", "1", "--no-progress"]


def shell_lines(page: str = README) -> list[str]:
    """The command lines of the ``bash`` blocks of ``page`` (README's by default), without comments."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", page, re.S):
        for line in block.splitlines():
            line = line.split("  #", 1)[0].strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def table_commands(pages: tuple[str, ...] = (README, RESULTS)) -> list[str]:
    """The commands in the results tables of README and docs/results.md (backticked, one or more per cell)."""
    return re.findall(r"`(python experiments/\w+\.py [^`]*)`", "\n".join(
        line for page in pages for line in page.splitlines() if line.startswith("|")))


def training_commands() -> list[str]:
    """Every README command that trains (sst.py, sick.py, trec.py; not predict), in order, without repeats."""
    seen: dict[str, None] = {}
    for line in shell_lines() + table_commands():
        words = shlex.split(line)
        if (words[:1] == ["python"] and len(words) > 1 and words[1] in {f"experiments/{s}.py" for s in
                                                                           TRAINING_SCRIPTS}
                and "predict" not in words and "--device" not in words):
            seen.setdefault(line)
    return list(seen)


def stand_in_encoder(name: str) -> str:
    """``--encoder NAME`` as a short form runs it: the registry's encoder where its package is installed, else
    the tiny encoder of ``tests/tiny_encoder.py`` (the command's flags and code path, without the weights)."""
    from graphtree.encoders import EncoderNotFoundError, encoder_folder

    try:
        encoder_folder(name)
        return name
    except EncoderNotFoundError:
        global _TINY
        if _TINY is None:
            from tiny_encoder import tiny_encoder_folder

            _TINY = str(tiny_encoder_folder())
        return _TINY


_TINY: str | None = None  # the tiny encoder's folder, made by the first short form that needs it


def short_form(command: str, out: Path) -> list[str]:
    """``command`` with its first seed only, one quick epoch, and its output under ``out`` (and, without the
    encoder's package, the tiny stand-in encoder: :func:`stand_in_encoder`)."""
    words = shlex.split(command)
    if "--encoder" in words:
        k = words.index("--encoder") + 1
        words[k] = stand_in_encoder(words[k])
    if "--seeds" in words:
        k = words.index("--seeds")
        end = k + 1
        while end < len(words) and not words[end].startswith("--"):
            end += 1
        words[k + 2:end] = []  # keep the first seed
    return [sys.executable, *words[1:], *SHORT, "--out", str(out)]


def run(argv: list[str], timeout: int = 900) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{shlex.join(argv)}\n{result.stderr[-3000:]}"
    return result


def main_job() -> str:
    """README's main job: the first command of its "Train a model" section."""
    section = README.split("\n## Train a model\n", 1)[1].split("\n## ", 1)[0]
    return next(line for line in shell_lines(section) if line.startswith("python experiments/"))


def first_of(script: str) -> str:
    return next(c for c in training_commands() if c.split()[1] == f"experiments/{script}.py")


# ------------------------------------------------------------------------------------------ without running


def test_ci_runs_the_readme_setup_and_test_commands():
    readme = [line.replace("python -m pip ", "pip ") for line in shell_lines()
              if line.startswith(("pip ", "python -m pip ", "python -m pytest"))]
    ci = [line.strip().replace("python -m pip ", "pip ")
          for line in (REPO / ".ci" / "run").read_text().splitlines()
          if line.strip().startswith(("pip ", "python -m pip ", "python -m pytest"))]
    assert readme == ci, "README's set-up and test commands must be exactly what CI runs"


def test_every_training_command_names_a_script_flags_it_knows():
    # Parsing alone catches a renamed or removed flag in a table cell without training anything.
    commands = training_commands()
    assert len(commands) >= 20
    assert set(table_commands((README,))) < set(commands)  # README's table and the rows only docs/results.md has
    for command in commands:
        words = shlex.split(command)
        module = load_script(REPO / words[1])
        module.parse_args(words[2:])


def test_short_form_keeps_the_flags_and_the_first_seed(tmp_path):
    argv = short_form("python experiments/sst.py --model slstm --seeds 4 5 6 --structure left", tmp_path)
    assert argv[1:] == ["experiments/sst.py", "--model", "slstm", "--seeds", "4", "--structure", "left", *SHORT,
                        "--out", str(tmp_path)]


# ------------------------------------------------------------------------------------------ running

needs_data = pytest.mark.skipif(CORPORA is None, reason=HOW_TO_SUPPLY)


def committed_state() -> dict[str, bytes]:
    """README, the pages under docs/ and every committed result file, as they are now."""
    paths = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")),
             *sorted((REPO / "experiments" / "results").rglob("*"))]
    return {str(p.relative_to(REPO)): p.read_bytes() for p in paths if p.is_file()}


@pytest.fixture(scope="module")
def main_job_out(tmp_path_factory) -> Path:
    """The main job, run in its short form: its output folder."""
    if CORPORA is None:
        pytest.skip(HOW_TO_SUPPLY)
    out = tmp_path_factory.mktemp("runs")
    before = committed_state()
    result = run(short_form(main_job(), out))
    assert re.search(r"epoch 1/1: loss [\d.]+, dev root [\d.]+", result.stderr), result.stderr
    assert committed_state() == before, "a run wrote into README or the committed results"
    return out


@needs_data
def test_the_main_job_trains_and_writes_outside_the_repository(main_job_out):
    (record,) = (main_job_out / "quick" / "sst").glob("*.json")
    assert (main_job_out / "quick" / "checkpoints" / "sst" / f"{record.stem}.pt").is_file()


@needs_data
def test_predict_as_readme_prints_it(main_job_out, tmp_path, nlp):
    pytest.importorskip("matplotlib")
    (command,) = [line for line in shell_lines() if " predict " in line]
    words = shlex.split(command)
    # README's checkpoint is under runs/; the short-form run's is under <out>/quick/.
    words[3] = str(main_job_out / "quick" / Path(words[3]).relative_to("runs"))
    picture = tmp_path / "tree.png"
    result = run([sys.executable, *words[1:], "--png", str(picture)])
    assert result.stdout.count("\n") >= 3 and picture.is_file()


@needs_data
def test_reports_on_ones_own_runs_leave_the_committed_ones_alone(main_job_out):
    reports = [line for line in shell_lines() if line.startswith("python experiments/report_")]
    assert reports
    before = committed_state()
    for command in reports:
        words = shlex.split(command)
        words[words.index("--results") + 1] = str(main_job_out)
        # The short-form run is a --quick one, which a report of full runs leaves out: it then says so in one line
        # and writes nothing (exit 2); either way, nothing committed changes.
        result = subprocess.run([sys.executable, *words[1:]], cwd=REPO, capture_output=True, text=True, timeout=900)
        assert result.returncode == 0 or (result.returncode == 2 and "nothing written" in result.stderr), (
            f"{shlex.join(words)}\n{result.stderr[-3000:]}")
    assert committed_state() == before, "a report on one's own runs wrote into README or the committed results"


@needs_data
@pytest.mark.parametrize("script", ["sick", "trec"])
def test_one_command_of_each_experiment_runs(script, tmp_path):
    result = run(short_form(first_of(script), tmp_path))
    assert "epoch 1/1: loss" in result.stderr
    assert len(list((tmp_path / "quick" / script).glob("*.json"))) == 1


@pytest.mark.slow
@needs_data
@pytest.mark.parametrize("command", training_commands())
def test_every_readme_training_command_runs(command, tmp_path):
    run(short_form(command, tmp_path))
    assert list((tmp_path / "quick").glob("*/*.json"))


# ------------------------------------------------------------------------------------------ your own data

OWN_DATA = README.split("\n## Your own data\n", 1)[1].split("\n## ", 1)[0]
FORMATS = (REPO / "docs" / "data-formats.md").read_text(encoding="utf-8")
EXAMPLES_SHOWN = FORMATS.split("\n## The files in `examples/`\n", 1)[1]
EXAMPLE_FILES = ("trees.conllu", "trees.ptb", "graphs.jsonl")  # in the order docs/data-formats.md shows them


def own_data_commands() -> list[str]:
    """README's commands of experiments/train.py."""
    return [line for line in shell_lines() if line.startswith("python experiments/train.py ")]


def made_data() -> dict[str, list[str]]:
    """The data files README's "Your own data" makes with ``python -m graphtree.datasets.code SOURCE OUT``: OUT ->
    the command's words."""
    made = {}
    for line in shell_lines(OWN_DATA):
        words = shlex.split(line)
        if words[:3] == ["python", "-m", "graphtree.datasets.code"]:
            made[words[4]] = words
    return made


def data_of(command: str, tmp_path: Path) -> list[str]:
    """``command``'s words, a ``--data`` that README makes first made under ``tmp_path`` (by its command)."""
    words = shlex.split(command)
    data = words[words.index("--data") + 1]
    if data in made_data():
        convert = made_data()[data]
        made = tmp_path / Path(data).name
        run([sys.executable, *convert[1:4], str(made), *convert[5:]], timeout=300)
        words[words.index("--data") + 1] = str(made)
    return words


def test_the_example_files_are_those_the_format_page_shows():
    blocks = re.findall(r"```(?:text|json)\n(.*?)```", EXAMPLES_SHOWN, re.S)
    assert len(blocks) == len(EXAMPLE_FILES)
    for block, name in zip(blocks, EXAMPLE_FILES):
        lines = (REPO / "examples" / name).read_text(encoding="utf-8").splitlines()
        assert len(lines) == 10, name
        # The page aligns the CoNLL-U columns with spaces where the file has tabs: compare the fields.
        assert [line.split() for line in block.splitlines()] == [line.split() for line in lines], name


def test_own_data_commands_parse_and_name_files_that_exist():
    train = load_script(REPO / "experiments" / "train.py")

    commands = own_data_commands()
    assert commands and all(line in OWN_DATA for line in commands)
    for command in commands:
        args = train.parse_args(shlex.split(command)[2:])
        assert (REPO / args.data).exists() or args.data in made_data(), command


@pytest.mark.parametrize("command", own_data_commands())
def test_own_data_command_runs_end_to_end(command, tmp_path):
    before = committed_state()
    result = run([*short_form(shlex.join(data_of(command, tmp_path)), tmp_path), "--data-root",
                  str(tmp_path / "data")], timeout=300)
    assert ("epoch 1/1: loss" in result.stderr) == ("--model tfidf" not in command) or "--model tfidf" in command
    (path,) = (tmp_path / "quick" / "train").glob("*.json")
    record = json.loads(path.read_text())
    predictions = (path.parent / record["predictions"]).read_text().splitlines()
    assert len(predictions) == 1 + record["config"]["data"]["sizes"]["test"]  # a header, a line per test graph
    trains = "--model tfidf" not in command  # the baseline fits in one go: no epochs, no checkpoint
    assert (tmp_path / "quick" / "checkpoints" / "train" / f"{path.stem}.pt").is_file() == trains
    assert committed_state() == before


# ------------------------------------------------------------------------------------------ torchrun

TORCHRUN_ENV = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def torchrun_commands() -> list[str]:
    """The ``torchrun`` lines of docs/distributed.md: one machine first, then several."""
    return [line for line in shell_lines(DISTRIBUTED) if line.startswith("torchrun ")]


def torchrun_short_form(command: str, out: Path, **launcher_flags: str) -> list[str]:
    """``command`` through ``python -m torch.distributed.run`` (what ``torchrun`` is), with the script's short
    form, ``--out`` under ``out``, the repository's data root, and ``launcher_flags`` replaced."""
    words = shlex.split(command)
    at = next(k for k, w in enumerate(words) if w.startswith("experiments/"))
    launcher, script = words[1:at], words[at:]
    for flag, value in launcher_flags.items():
        launcher[launcher.index(f"--{flag}") + 1] = value
    for flag in ("--out", "--data-root"):  # folders of README's reader
        if flag in script:
            k = script.index(flag)
            del script[k:k + 2]
    return [sys.executable, "-m", "torch.distributed.run", *launcher, *script, *SHORT, "--out", str(out)]


def clean_env() -> dict[str, str]:
    """This environment without a surrounding torchrun's variables, one thread per process."""
    return {**{k: v for k, v in os.environ.items() if k not in TORCHRUN_ENV}, "OMP_NUM_THREADS": "1"}


def test_docs_show_a_one_machine_and_a_several_machine_torchrun_command():
    one, several = torchrun_commands()
    assert "--standalone" in one and "--rdzv_endpoint HOST:" in several
    assert shlex.split(one)[shlex.split(one).index("--nproc_per_node") + 1] == "2"


@needs_data
def test_the_torchrun_command_trains_in_two_processes_and_writes_once(tmp_path):
    one, _ = torchrun_commands()
    before = committed_state()
    result = subprocess.run(torchrun_short_form(one, tmp_path), cwd=REPO, capture_output=True, text=True,
                            timeout=900, env=clean_env())
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("epoch 1/1: loss") == 1  # rank 0 speaks for the job
    (path,) = (tmp_path / "quick" / "sst").glob("*.json")
    assert json.loads(path.read_text())["processes"] == 2
    assert committed_state() == before


@pytest.mark.slow
@needs_data
def test_the_several_machine_command_runs_as_two_local_nodes(tmp_path):
    _, several = torchrun_commands()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        endpoint = f"127.0.0.1:{s.getsockname()[1]}"
    argv = torchrun_short_form(several, tmp_path, nproc_per_node="1", rdzv_endpoint=endpoint)
    nodes = [subprocess.Popen(argv, cwd=REPO, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    for node in nodes:
        _, err = node.communicate(timeout=900)
        assert node.returncode == 0, err[-3000:]
    (path,) = (tmp_path / "quick" / "sst").glob("*.json")
    assert json.loads(path.read_text())["processes"] == 2
