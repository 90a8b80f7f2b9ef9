"""Atomic file writes and the random state a run needs to resume bit for bit."""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["atomic_save", "atomic_write_text", "get_rng_state", "seed_everything", "set_rng_state"]


def _atomic_replace(path: Path, write: Any) -> None:
    # Write next to the target (same file system, so os.replace is atomic), flush to disk, then
    # rename: a reader or a restarted run sees either the old file or the new one, never half of one.
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes owner-only files; results are meant to be shared
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_save(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save`` to ``path`` through a temporary file and a rename."""
    _atomic_replace(Path(path), lambda handle: torch.save(obj, handle))


def atomic_write_text(text: str, path: str | os.PathLike) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file and a rename."""
    _atomic_replace(Path(path), lambda handle: handle.write(text.encode("utf-8")))


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and PyTorch's global generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def get_rng_state() -> dict[str, Any]:
    """The state of every global generator a training step may draw from (dropout, shuffles)."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # dropout masks drawn on the GPU
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`get_rng_state` returned."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
