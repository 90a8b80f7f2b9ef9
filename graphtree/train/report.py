"""Helpers the experiment report scripts share: run files, mean ± std, README sections."""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable, Iterable
from pathlib import Path

from .checkpoint import atomic_write_text

__all__ = ["compute_used", "duration", "hardware", "load_runs", "mean_std", "minutes", "write_readme_section"]


def load_runs(folder: Path, experiment: str, keep: Callable[[dict], bool] = lambda record: True) -> list[dict]:
    """The run records (``*.json``) of ``experiment`` in ``folder``, sorted by file name; quick runs never count."""
    runs = []
    for path in sorted(folder.glob("*.json")):
        record = json.loads(path.read_text())
        if record.get("experiment") == experiment and not record["config"].get("quick") and keep(record):
            runs.append(record)
    return runs


def mean_std(values: Iterable[float], digits: int = 1, empty: str = "not run") -> str:
    """``mean ± sample std`` (n - 1) of ``values``; a single value alone; ``empty`` for none."""
    values = list(values)
    if not values:
        return empty
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def minutes(runs: list[dict]) -> str:
    """Mean wall time of ``runs`` in minutes (one decimal below ten), ``—`` when there are none."""
    if not runs:
        return "—"
    mean = statistics.mean(r["wall_time_s"] for r in runs) / 60
    return f"{mean:.1f}" if mean < 10 else f"{mean:.0f}"


def compute_used(runs: list[dict]) -> str:
    """The wall time of ``runs`` in all and by where they ran, e.g. ``12 runs, 3.5 h of wall time (3.5 h on 1 thread,
    x86_64, 2 CPUs)``."""
    by_where: dict[str, float] = {}
    for r in runs:
        where = hardware(r)
        by_where[where] = by_where.get(where, 0.0) + r["wall_time_s"]
    parts = "; ".join(f"{duration(seconds)} on {where}"
                      for where, seconds in sorted(by_where.items(), key=lambda item: -item[1]))
    return f"{len(runs)} run{'s' if len(runs) != 1 else ''}, {duration(sum(by_where.values()))} of wall time" + (
        f" ({parts})" if parts else "")


def duration(seconds: float) -> str:
    """``3.5 h`` from an hour on, ``12 min`` below."""
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def hardware(record: dict) -> str:
    """Where a run ran, from its JSON: threads and machine (and GPU), e.g. ``1 thread, x86_64, 2 CPUs``."""
    threads = record.get("threads")
    where = record.get("machine", "?")
    if str(record.get("device", "cpu")).startswith("cuda"):
        return f"GPU: {where}"
    return f"{threads} thread{'s' if threads != 1 else ''}, {where}"


def write_readme_section(readme: Path, key: str, text: str) -> bool:
    """Replace the README block between ``<!-- results:KEY -->`` and ``<!-- /results:KEY -->`` by ``text``.

    Returns False (and writes nothing) when the README has no such markers.
    """
    source = readme.read_text()
    begin, end = f"<!-- results:{key} -->", f"<!-- /results:{key} -->"
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), flags=re.S)
    if not pattern.search(source):
        return False
    updated = pattern.sub(lambda _: f"{begin}\n{text.strip()}\n{end}", source, count=1)
    if updated != source:
        atomic_write_text(updated, readme)
    return True
