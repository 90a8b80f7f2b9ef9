"""What a results file records about the code and machine that produced it, and when its numbers went stale.

A run's numbers are reproducible only together with the code that made them:
the graphtree commit (and whether the work tree had uncommitted changes), the
PyTorch version, the thread count, the path the cells' level math took
(compiled kernels or PyTorch operators round differently) and the processor
(:func:`processor`: PyTorch's kernels, MKL and oneDNN pick their vector code by
what the processor offers, so an AVX-512 machine and an AVX2 one round
differently). :func:`provenance` collects these for a results file.

:data:`NUMERICS_VERSION` counts the changes to graphtree that alter the
numbers a run produces (rounding included). Every results file records the
version it ran at; the reports flag a row whose runs were made at an older
version (or before runs recorded one) as stale, until it is rerun or one of
its runs is shown to reproduce bit for bit at the current version
(``experiments/reproduce.py``). Bump it, with a line in
:data:`NUMERICS_HISTORY`, in the commit that changes the numbers; the slow test
that reruns one committed run per task catches a change that forgets to.
"""

from __future__ import annotations

import platform
import subprocess
from functools import cache
from pathlib import Path

import torch

from ..backend.native import cpu_description

__all__ = ["NUMERICS_HISTORY", "NUMERICS_VERSION", "code_state", "git_state", "processor", "processor_name",
           "provenance"]

NUMERICS_VERSION = 1
NUMERICS_HISTORY = {
    1: "first recorded version: compiled level kernels and level loop for every cell (graphtree/csrc), "
       "torch.addmm products, fused optimizer steps with weight copies remade every training pass",
}
# Changes at a version that alter only models without a committed run at that version, so that no committed
# number goes stale (the version stays):
# - version 1: the SST span BiLSTM (graphtree.models.spans) reads each span's state from one run per first
#   word, padded in groups of similar length (oneDNN's LSTM), instead of one packed sequence per node; its
#   committed runs then all predated provenance.

PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def git_state(root: Path = PACKAGE_ROOT) -> tuple[str | None, bool | None]:
    """``(commit, dirty)`` of the git work tree holding ``root``; ``(None, None)`` outside git."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        # Only tracked files count: untracked run outputs or caches do not change the code that ran.
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit or None, bool(status.strip())


@cache
def code_state() -> tuple[str | None, bool | None]:
    """:func:`git_state` of graphtree as this process first asked for it. The experiment scripts ask when they
    start (:func:`graphtree.experiments.runs.main_guard`), so a run records the code it imported, not the commit the
    work tree has moved to (a ``git pull``) by the time the run ends."""
    return git_state()


@cache
def processor_name() -> str:
    """The processor's model name as the kernel build reads it (``/proc/cpuinfo``), else the platform's."""
    described = dict(line.split(":", 1) for line in cpu_description() if ":" in line)
    name = {k.strip(): v.strip() for k, v in described.items()}.get("model name", "")
    return name or platform.processor() or platform.machine() or "unknown processor"


@cache
def processor() -> str:
    """The processor's model name and the vector instructions PyTorch's CPU kernels use on it, e.g.
    ``"Intel(R) Xeon(R) Processor (AVX512)"``: two runs round alike only on the same kind."""
    return f"{processor_name()} ({torch.backends.cpu.get_cpu_capability()})"


def provenance(threads: int, kernels: str) -> dict:
    """The provenance block of a results file.

    Args:
        threads: The number of CPU threads the run used.
        kernels: ``"compiled"`` where the cells ran on graphtree's compiled
            kernels, ``"pytorch"`` where on PyTorch operators only.
    """
    commit, dirty = code_state()
    return {"commit": commit, "dirty": dirty, "torch": torch.__version__, "threads": threads,
            "kernels": kernels, "numerics": NUMERICS_VERSION, "processor": processor()}
