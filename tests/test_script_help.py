"""Every experiment script answers ``--help`` before importing torch, and every flag says what it does.

Each script runs in a fresh interpreter (``sys.modules`` of this test process has torch already), with
argparse's ``parse_known_args`` wrapped to keep the parsers the script builds: their flags are read from the
parser objects themselves, not from the help text's layout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = sorted(path.name for path in (REPO / "experiments").glob("*.py"))
HEAVY = ("torch", "torch_geometric", "numpy", "networkx", "graphtree.nn", "graphtree.datasets")

PROBE = """
import argparse, contextlib, io, json, runpy, sys
parsers = []
original = argparse.ArgumentParser.parse_known_args

def keep(self, *args, **kwargs):
    parsers.append(self)
    return original(self, *args, **kwargs)

argparse.ArgumentParser.parse_known_args = keep
path = sys.argv[1]
sys.argv = [path, "--help"]
out = io.StringIO()
try:
    with contextlib.redirect_stdout(out):
        runpy.run_path(path, run_name="__main__")
    code = None
except SystemExit as stop:
    code = stop.code
flags = [[action.option_strings or [action.dest], action.help]
         for parser in parsers for action in parser._actions if not isinstance(action, argparse._HelpAction)]
print(json.dumps({"code": code, "help": out.getvalue(), "flags": flags,
                  "heavy": [m for m in HEAVY if m in sys.modules]}))
"""


@pytest.fixture(scope="module")
def answers() -> dict[str, dict]:
    found = {}
    # runpy runs a script without putting its folder on the path, as ``python experiments/x.py`` does: the lab
    # beside the scripts comes through the environment instead.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "experiments"), os.environ.get("PYTHONPATH", "")])}
    for name in SCRIPTS:
        done = subprocess.run([sys.executable, "-c", f"HEAVY = {HEAVY!r}\n" + PROBE, f"experiments/{name}"],
                              cwd=REPO, capture_output=True, text=True, timeout=120, env=env)
        assert done.returncode == 0, done.stderr
        found[name] = json.loads(done.stdout.splitlines()[-1])
    return found


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_answers_without_importing_torch(name, answers):
    answer = answers[name]
    assert answer["code"] == 0 and "usage:" in answer["help"], answer
    assert answer["heavy"] == [], f"{name} --help imported {answer['heavy']}"


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_flag_has_a_help_line(name, answers):
    flags = answers[name]["flags"]
    assert flags, f"{name} built no parser"
    missing = [" / ".join(names) for names, text in flags if not (text or "").strip()]
    assert not missing, f"{name}: no help text for {', '.join(missing)}"
