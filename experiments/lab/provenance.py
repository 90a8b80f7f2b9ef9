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

# torch and the kernel build are imported where used: the report scripts read NUMERICS_VERSION without them.

__all__ = ["NUMERICS_HISTORY", "NUMERICS_VERSION", "VECTOR_FLAGS", "build_record", "code_state", "git_state",
           "processor", "processor_name", "processor_record", "provenance", "rounding_differences"]

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
    start (:func:`lab.runs.main_guard`), so a run records the code it imported, not the commit the
    work tree has moved to (a ``git pull``) by the time the run ends."""
    return git_state()


@cache
def processor_name() -> str:
    """The processor's model name as the kernel build reads it (``/proc/cpuinfo``), else the platform's."""
    from graphtree.backend.native import cpu_description

    described = dict(line.split(":", 1) for line in cpu_description() if ":" in line)
    name = {k.strip(): v.strip() for k, v in described.items()}.get("model name", "")
    return name or platform.processor() or platform.machine() or "unknown processor"


@cache
def processor() -> str:
    """The processor's model name and the vector instructions PyTorch's CPU kernels use on it, e.g.
    ``"Intel(R) Xeon(R) Processor (AVX512)"``: two runs round alike only on the same kind."""
    import torch

    return f"{processor_name()} ({torch.backends.cpu.get_cpu_capability()})"


VECTOR_FLAGS = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni",
                "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")
"""The processor flags (``/proc/cpuinfo``) that choose vector code in PyTorch, MKL and oneDNN, and so rounding."""


@cache
def processor_record() -> dict:
    """This processor as a results file records it: vendor, model name, the :data:`VECTOR_FLAGS` it has, and the
    vector code PyTorch's CPU kernels chose on it (e.g. ``AVX512``). MKL also picks its code by vendor."""
    import torch

    from graphtree.backend.native import cpu_description

    described = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in cpu_description() if ":" in line)}
    flags = set(described.get("flags", "").split())
    return {"vendor": described.get("vendor_id") or platform.machine() or "unknown", "model": processor_name(),
            "flags": [flag for flag in VECTOR_FLAGS if flag in flags],
            "capability": torch.backends.cpu.get_cpu_capability()}


@cache
def build_record() -> dict:
    """How this PyTorch was built, as far as it decides rounding: its version and commit, its BLAS and LAPACK,
    the MKL and oneDNN (MKL-DNN) versions and OpenMP (from ``torch.__config__.show()``)."""
    import torch

    shown = torch.__config__.show()
    settings = dict(item.strip().split("=", 1) for item in shown.split("Build settings:", 1)[-1].split(",")
                    if "=" in item)
    lines = [line.strip(" -") for line in shown.splitlines()]

    def line_with(*words: str) -> str | None:
        return next((line for line in lines if any(word in line for word in words)), None)

    return {"torch": torch.__version__, "commit": settings.get("COMMIT_SHA"), "blas": settings.get("BLAS_INFO"),
            "lapack": settings.get("LAPACK_INFO"), "mkl": line_with("Math Kernel Library"),
            "onednn": line_with("MKL-DNN", "oneDNN"), "openmp": line_with("OpenMP")}


def rounding_differences(recorded: dict, here_processor: dict | None = None,
                         here_build: dict | None = None) -> list[str]:
    """What differs between the machine a run's ``provenance`` block records and this one, as far as rounding
    goes (processor and PyTorch build; threads and kernels are the rerun's own to match): one line each, or
    ``"...: not recorded"`` for what the run predates. Empty: bit-identical numbers can be expected here."""
    here_processor = here_processor if here_processor is not None else processor_record()
    here_build = here_build if here_build is not None else build_record()
    lines = []
    cpu = recorded.get("cpu")
    if cpu is None:
        named = recorded.get("processor")  # results files before the record named the processor only
        here_named = f"{here_processor['model']} ({here_processor['capability']})"
        if named is None:
            lines.append(f"processor: not recorded (this machine: {here_named})")
        elif named != here_named:
            lines.append(f"processor: {named} for the run, {here_named} here")
        else:
            lines.append(f"processor: {named} for the run and here, but its vendor and flags not recorded")
    else:
        for key in ("vendor", "model", "flags", "capability"):
            if cpu.get(key) != here_processor.get(key):
                lines.append(f"processor {key}: {cpu.get(key)} for the run, {here_processor.get(key)} here")
    build = recorded.get("build")
    if build is None:
        torch_version = recorded.get("torch")
        if torch_version is not None and torch_version != here_build["torch"]:
            lines.append(f"torch: {torch_version} for the run, {here_build['torch']} here")
        lines.append("BLAS / torch build: not recorded")
    else:
        for key in ("torch", "commit", "blas", "lapack", "mkl", "onednn", "openmp"):
            if build.get(key) != here_build.get(key):
                lines.append(f"torch build {key}: {build.get(key)} for the run, {here_build.get(key)} here")
    return lines


def provenance(threads: int, kernels: str) -> dict:
    """The provenance block of a results file.

    Args:
        threads: The number of CPU threads the run used.
        kernels: ``"compiled"`` where the cells ran on graphtree's compiled
            kernels, ``"pytorch"`` where on PyTorch operators only.
    """
    import torch

    commit, dirty = code_state()
    return {"commit": commit, "dirty": dirty, "torch": torch.__version__, "threads": threads,
            "kernels": kernels, "numerics": NUMERICS_VERSION, "processor": processor(), "cpu": processor_record(),
            "build": build_record()}
