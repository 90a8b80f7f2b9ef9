"""Run set-up shared by the experiment scripts: common flags, where the data comes from, quick subsets."""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path

import torch

from ..datasets import MIRROR_ENV

__all__ = ["add_run_arguments", "default_mirror", "finished_run", "machine_description", "quick_sample",
           "resolve_device"]


def add_run_arguments(parser: argparse.ArgumentParser, repo: Path, epochs_help: str, quick_help: str) -> None:
    """The flags every experiment has: seeds, epochs, quick mode, threads, data root, progress bar."""
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--epochs", type=int, default=None, help=epochs_help)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (the same code runs on either)")
    parser.add_argument("--data-root", default=str(repo / "datasets"))
    parser.add_argument("--no-progress", action="store_true")


def default_mirror(repo: Path) -> str | None:
    """Where the corpora come from: ``$GRAPHTREE_MIRROR``, else ``../shared/data`` beside the repository."""
    if os.environ.get(MIRROR_ENV):
        return os.environ[MIRROR_ENV]
    shared = repo.parent / "shared" / "data"
    return str(shared) if shared.is_dir() else None


def quick_sample(data: list, size: int) -> list:
    """A fixed random subset in corpus order (corpus files are often sorted by label, so not the first rows)."""
    keep = torch.randperm(len(data), generator=torch.Generator().manual_seed(0))[:size]
    return [data[i] for i in sorted(keep.tolist())]


def resolve_device(name: str) -> torch.device:
    """The ``--device`` flag as a device, with a clear error when CUDA is asked for but absent."""
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {name}: this PyTorch sees no CUDA device (torch {torch.__version__})")
    return device


def machine_description(device: torch.device | str = "cpu") -> str:
    """What a results file records about the machine (and the GPU, for a run on one)."""
    text = f"{platform.machine()}, {os.cpu_count()} CPUs"
    device = torch.device(device)
    if device.type == "cuda":
        text += f", {torch.cuda.get_device_name(device)}"
    return text


def finished_run(results: Path, name: str, config: dict) -> dict | None:
    """The record of run ``name`` if ``results/<name>.json`` holds it, written with these settings; else ``None``.

    Results files are what a run leaves behind for good (checkpoints are
    scratch and may be gone), so a script skips a seed whose results file
    exists rather than training it again. A file written with other settings
    is an error, not something to overwrite.
    """
    path = Path(results) / f"{name}.json"
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    stored, wanted = record.get("config", {}), json.loads(json.dumps(config))
    if stored != wanted:
        changed = sorted(k for k in set(stored) | set(wanted) if stored.get(k) != wanted.get(k))
        raise ValueError(f"{path} holds a run with other settings (differing: {', '.join(changed)}); "
                         "delete it to run again, or give this run another name")
    return record
