"""PyTorch's intra-op threads, fewer while other processes keep the processors busy.

A tree level is small work: a training step of a Tree-LSTM runs a hundred or more short parallel regions
(most of them the BLAS splitting a level's product, the rest PyTorch's elementwise operations and
reductions), and each region ends when its slowest thread does. Where another process is busy on the
processors the intra-op threads run on, the operating system deschedules one of them now and then, and the
whole region waits for it: a time slice, milliseconds, where the region itself takes microseconds. On two
cores beside one busy process, an SST Child-Sum epoch at two threads took several times as long as at one
(``benchmarks/contention.py``; docs/performance.md, "Threads on a shared machine").

:class:`ThreadBudget` notices that contention and gives way: every half second at most (when asked, from the
training loop's thread), it reads how much processor time the processors this process may run on spent busy
(``/proc/stat``) and how much of it was this process's own (:func:`time.process_time`); the rest is other
work. Where other work keeps more than ``margin`` of a processor busy, one thread fewer, down to one; when
the processors are free again, back up to the budget. Reading the two counters costs microseconds.

Nothing happens at import or construction: a process opts in by making a budget and calling :meth:`check`
(or :meth:`watching` a model, which calls it before every forward pass), from the thread that runs the
model, since PyTorch's and OpenMP's thread counts are that thread's. Where ``/proc/stat`` is missing (not
Linux), the budget keeps its full count.

Numbers: a product split over two threads may round differently from the same product on one (the BLAS
blocks it otherwise), so a run whose thread count changed gives its results to float32 rounding, not bit for
bit, of a run at a fixed count. Runs on one thread have no budget and are unchanged.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from ..errors import InvalidArgumentError

__all__ = ["ThreadBudget"]

# Fields of a "cpuN" line of /proc/stat, in clock ticks: user nice system idle iowait irq softirq steal ...
# Busy: all but idle and iowait (steal counts: another machine's work on the same processor delays ours too).
_IDLE_FIELDS = (3, 4)


class ThreadBudget:
    """Up to ``threads`` intra-op threads (``torch.set_num_threads``), fewer while other processes keep the
    processors busy.

    Args:
        threads: The most threads to use (the user's ``--threads``); at least 1.
        interval: The fewest seconds between two looks at the processors.
        margin: The share of a processor that other work may keep busy before a thread gives way to it (0.25:
            a quarter of a processor; a quiet machine's own background stays well under it).
        stat: Where the processors' counters are read (Linux's ``/proc/stat``).
    """

    def __init__(self, threads: int, *, interval: float = 0.5, margin: float = 0.25,
                 stat: str | os.PathLike = "/proc/stat") -> None:
        if threads < 1:
            raise InvalidArgumentError(f"threads must be at least 1, got {threads}")
        if interval <= 0 or not 0 <= margin < 1:
            raise InvalidArgumentError(f"interval must be positive and margin in [0, 1), got {interval} and {margin}")
        self.threads, self.interval, self.margin = threads, interval, margin
        self._stat = Path(stat)
        self._cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        self._tick = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01
        self.current = threads  # the count the last look allowed
        self.seconds: dict[int, float] = {}  # seconds spent at each thread count, while checked
        self.other_load = 0.0  # processors' worth of other work at the last look
        self._since = time.monotonic()
        # The first look now (reading two counters; nothing is set), so that the first check, after the data
        # has loaded, already knows how busy the processors were meanwhile.
        self._last: tuple[float, float, float] | None = self._look()

    def _busy_seconds(self) -> float | None:
        """Seconds the processors this process may run on have spent busy since boot, or ``None`` (no
        ``/proc/stat``, or none of its processors listed)."""
        try:
            lines = self._stat.read_text().splitlines()
        except OSError:
            return None
        wanted = {f"cpu{c}" for c in self._cpus}
        ticks, found = 0, 0
        for line in lines:
            name, _, rest = line.partition(" ")
            if name in wanted:
                fields = [int(v) for v in rest.split()]
                ticks += sum(v for k, v in enumerate(fields[:8]) if k not in _IDLE_FIELDS)
                found += 1
        return ticks * self._tick if found else None

    def _look(self) -> tuple[float, float, float] | None:
        busy = self._busy_seconds()
        return None if busy is None else (time.monotonic(), busy, time.process_time())

    def wanted(self, other_load: float) -> int:
        """The thread count for ``other_load`` processors' worth of other work: the processors it leaves
        free (a processor counts as taken above ``margin`` of it), between 1 and the budget."""
        taken = math.ceil(other_load - self.margin) if other_load > self.margin else 0
        return max(1, min(self.threads, len(self._cpus) - taken if self._cpus else self.threads))

    def check(self) -> int:
        """Look at the processors if ``interval`` has passed since the last look, and set the thread count they
        allow; the count in force. Call it from the thread that runs the model."""
        now = time.monotonic()
        if self._last is None or now - self._last[0] >= self.interval:
            look = self._look()
            if look is not None:
                self._count(now)
                if self._last is not None:
                    wall, busy, own = (a - b for a, b in zip(look, self._last))
                    self.other_load = max(0.0, (busy - own) / wall)
                    self.current = self.wanted(self.other_load)
                self._last = look
        # Every time, not only after a look: a block that ended inside this one (a nested watching) handed the
        # whole pool back.
        if torch.get_num_threads() != self.current:
            torch.set_num_threads(self.current)
        return self.current

    def _before_forward(self, module: torch.nn.Module, inputs: tuple) -> None:
        self.check()  # returns nothing: a pre-hook's return value would replace the model's inputs

    def _count(self, now: float) -> None:
        self.seconds[self.current] = self.seconds.get(self.current, 0.0) + now - self._since
        self._since = now

    @contextmanager
    def watching(self, model: torch.nn.Module) -> Iterator[ThreadBudget]:
        """:meth:`check` on entry and before every forward pass of ``model`` for the duration; the full budget
        after, so that what runs around the block (e.g. a setting undone on every thread of the pool) finds
        the pool whole. Within the interval of the last look, the block starts at the count it allowed."""
        self._since = time.monotonic()
        # A look now, not at the first forward pass: what comes before it (a trainer's first minibatches) runs
        # parallel regions too.
        torch.set_num_threads(self.check())
        handle = model.register_forward_pre_hook(self._before_forward)
        try:
            yield self
        finally:
            handle.remove()
            self._count(time.monotonic())
            torch.set_num_threads(self.threads)

    def record(self) -> dict[str, float]:
        """Seconds spent at each thread count while checked, for a results file (``{"2": 31.2, "1": 4.0}``)."""
        return {str(k): round(v, 1) for k, v in sorted(self.seconds.items(), reverse=True)}
