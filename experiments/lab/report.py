"""The statistics and tables the experiment report scripts (``experiments/report_*.py``) share: run files, mean ± std,
Markdown tables, the parts every report has (its head, runs, commands, compute), the results page
``docs/results.md`` and README's summary table, the provenance of the numbers (which commit made them, and whether
they still hold at the current numerics), the targets and orderings checked against a paper, the statistics of
seeds (confidence intervals, Welch's t-test, seeds needed to separate two rows; these need SciPy), and the plots."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from .provenance import NUMERICS_VERSION
from .runs import ArgumentParser

__all__ = ["CHECKS_FILE", "RESULTS_PAGE", "SECTIONS", "SEEDS_CAP", "STALE_MARK", "SUMMARY_HEADER", "Provenance",
           "Standing", "anchor", "best_dev_run", "code_cell", "commands_section", "compute_note", "compute_used",
           "duration", "format_p", "format_seeds", "git_added", "hardware", "line_plot", "load_checks", "load_runs",
           "markdown_table", "mean_interval", "mean_std", "minutes", "no_runs", "orderings_table", "pooled_counts",
           "pooled_std", "provenance_lines", "publish", "report_head", "report_script", "results_folder",
           "runs_section", "runs_table", "seeds_to_separate", "short", "shown", "stale_footnote", "stale_lines",
           "stale_mark", "summary_label", "target_line", "wall_minutes", "welch_p", "windows", "with_seeds",
           "within", "within_table", "write_readme_section", "write_summary"]


def load_runs(folder: Path, experiment: str, keep: Callable[[dict], bool] = lambda record: True, *,
              quick: bool = False) -> list[dict]:
    """The run records (``*.json``) of ``experiment`` in ``folder``, sorted by file name: the full runs, or with
    ``quick`` the quick ones only (the two never mix)."""
    runs = []
    for path in sorted(folder.glob("*.json")):
        record = json.loads(path.read_text())
        if record.get("experiment") == experiment and bool(record["config"].get("quick")) == quick and keep(record):
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


def wall_minutes(runs: Sequence[dict]) -> str:
    """Wall time per run in minutes, mean ± std; ``—`` when there are none."""
    return mean_std([r["wall_time_s"] / 60 for r in runs], 1, empty="—")


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


def compute_note(runs: list[dict], parts: Sequence[tuple[list[dict], str]] = (), note: str = "") -> list[str]:
    """A report's compute paragraph: ``Compute: 12 runs, 3.5 h of wall time (...)``, then what each of ``parts``
    (runs, where they are reported) cost, then ``note``; nothing without runs."""
    if not runs:
        return []
    costs = ", ".join(f"{plural(len(some), 'run')} and {duration(sum(r['wall_time_s'] for r in some))} {where}"
                      for some, where in parts)
    return [f"Compute: {compute_used(runs)}" + (f": {costs}" if costs else "") + "." + (f" {note}" if note else ""),
            ""]


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

    Returns False (and writes nothing) when the file or its markers are missing.
    """
    if not readme.is_file():
        return False
    source = readme.read_text()
    begin, end = f"<!-- results:{key} -->", f"<!-- /results:{key} -->"
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), flags=re.S)
    if not pattern.search(source):
        return False
    updated = pattern.sub(lambda _: f"{begin}\n{text.strip()}\n{end}", source, count=1)
    if updated != source:
        from graphtree.train.checkpoint import atomic_write_text  # with torch: only a report that writes needs it

        atomic_write_text(updated, readme)
    return True


# --- Where the numbers come from, and whether they still hold -----------------------------------------------------

STALE_MARK = "†"
CHECKS_FILE = "reproduced.json"


def short(commit: str | None) -> str:
    """A commit as its 7-character abbreviation; ``unknown`` for none."""
    return commit[:7] if commit else "unknown"


def git_added(folder: Path) -> dict[str, str]:
    """The commit that first added each file under ``folder`` to git, by path relative to ``folder`` (``sst/x.json``).

    One ``git log`` over the folder. Its entries run newest first, so the last one of a file is its first addition (a
    file deleted and added again keeps the first). Renames count as additions, since the name is what a run is found
    by. Empty outside git, and for files git has never held.
    """
    try:
        out = subprocess.run(
            ["git", "-c", "core.quotePath=off", "log", "--diff-filter=A", "--no-renames", "--name-only",
             "--relative", "--format=%x00%H", "--", "."],
            cwd=folder, capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    added: dict[str, str] = {}
    commit = None
    for line in out.splitlines():
        if line.startswith("\0"):  # the format line; a file name cannot hold a NUL
            commit = line[1:]
        elif line and commit:
            added[line] = commit
    return added


def load_checks(results: Path) -> list[dict]:
    """The reproduction checks of ``results/reproduced.json`` (reruns of committed runs compared epoch by epoch);
    none where the file is missing."""
    path = results / CHECKS_FILE
    if not path.exists():
        return []
    checks = json.loads(path.read_text())
    if not isinstance(checks, list):
        raise ValueError(f"{path}: expected a JSON list of checks")
    return checks


@dataclass(frozen=True)
class Standing:
    """Whether a row's numbers hold at the current numerics: ``reason`` says why not, ``note`` how a row whose runs
    predate them was shown to hold."""

    current: bool
    reason: str = ""
    note: str = ""


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


class Provenance:
    """The code behind one task's runs in one results folder.

    A run's JSON names the commit it ran at (its ``provenance`` block); a JSON from before that block existed is
    dated by the commit that added it to git, which came after the run, hence "recorded in" rather than "ran at".
    A group of runs (a row of a table: one model, task and setting over seeds) is current when each of its runs
    ran at the current numerics version or was made by the same code (commit) as a run that a check in
    ``reproduced.json`` reran at that version with every compared epoch identical. A check that found a
    difference keeps the row stale whatever its runs record. A check applies to the run file it reran (its
    ``run_commit``), not to a later run saved under the same name.
    """

    def __init__(self, task: str, added: Mapping[str, str] | None = None, checks: Iterable[dict] = ()) -> None:
        self.task = task
        self.added = dict(added or {})
        self.checks = [c for c in checks if c.get("task") == task]

    @classmethod
    def of(cls, results: Path, task: str) -> Provenance:
        """The provenance of ``results/<task>/*.json``: one ``git log`` and ``reproduced.json``."""
        return cls(task, git_added(results), load_checks(results))

    def origin(self, record: dict) -> str:
        """``ran at 1a2b3c4`` (``+dirty`` where the work tree had uncommitted changes), ``recorded in 1a2b3c4`` for a
        JSON without provenance, ``unknown`` where git does not know it either."""
        return " ".join(part for part in self._origin(record) if part)

    def _origin(self, record: dict) -> tuple[str, str]:
        block = record.get("provenance")
        if block:
            return "ran at", short(block.get("commit")) + ("+dirty" if block.get("dirty") else "")
        commit = self.added.get(f"{self.task}/{record.get('run')}.json")
        return ("recorded in", short(commit)) if commit else ("unknown", "")

    def origins(self, runs: Sequence[dict]) -> str:
        """The origins of a row's runs with counts, in the order first met: ``recorded in 1a2b3c4 (3), 5d6e7f8 (1)``."""
        counts: dict[str, dict[str, int]] = {}
        for r in runs:
            kind, commit = self._origin(r)
            by_commit = counts.setdefault(kind, {})
            by_commit[commit] = by_commit.get(commit, 0) + 1
        return "; ".join(f"{kind} " + ", ".join(f"{commit} ({n})" if commit else f"({n})" for commit, n in by.items())
                         for kind, by in counts.items()) or "—"

    def standing(self, runs: Sequence[dict]) -> Standing:
        """Whether the numbers of ``runs`` (one row) hold at the current numerics version, and why (not).

        Runs that ran at the current numerics version hold. The others are grouped by the code that made them (the
        commit they ran at, or for a legacy JSON the commit that recorded it): a group holds when a check at the
        current version reran one of its runs and found every compared epoch identical, since one code makes the
        same numbers for every seed; a check that found a difference makes the row stale whatever else holds.
        """
        seeds = {r.get("run"): r.get("seed") for r in runs}
        by_name = {r.get("run"): r for r in runs}
        # A check speaks of the file it reran: a run rerun since under the same name is not the one it checked.
        at_current = {c.get("run"): c for c in self.checks
                      if c.get("run") in seeds and c.get("numerics") == NUMERICS_VERSION
                      and c.get("run_commit") == self.run_commit(by_name[c.get("run")])}

        def described(check: dict) -> str:
            return (f"{short(check.get('commit'))} (seed {seeds[check['run']]}, "
                    f"{plural(int(check.get('epochs_compared', 0)), 'epoch')})")

        failed = sorted((c for c in at_current.values() if not c.get("identical")), key=lambda c: str(c.get("run")))
        if failed:  # a difference found at the current code outweighs anything the files record
            return Standing(False, f"reproduced check failed: differs at HEAD (rerun at {described(failed[0])})")
        groups: dict[tuple[str, str], list[dict]] = {}
        for r in runs:
            if self.numerics(r) != NUMERICS_VERSION:
                groups.setdefault(self._origin(r), []).append(r)
        notes, unverified = [], []
        for group in groups.values():
            passed = sorted((at_current[r["run"]] for r in group if r.get("run") in at_current),
                            key=lambda c: str(c.get("run")))
            if passed:
                notes.append(described(passed[0]))
            else:
                unverified.extend(group)
        if not unverified:
            return Standing(True, note=f"reproduced at {', '.join(notes)}" if notes else "")
        legacy = sum(self.numerics(r) is None for r in unverified)
        other = sorted({v for r in unverified if (v := self.numerics(r)) is not None})
        reasons = []
        if legacy:
            reasons.append(f"{plural(legacy, 'run')} without provenance (legacy), not reproduced")
        if other:
            count = sum(self.numerics(r) in other for r in unverified)
            # A version above this checkout's: runs made by newer code than the one reporting on them.
            which = "an older" if other[-1] < NUMERICS_VERSION else "another"
            versions = ", ".join(map(str, other))
            reasons.append(f"{plural(count, 'run')} at {which} numerics version ({versions}; now {NUMERICS_VERSION})")
        return Standing(False, "; ".join(reasons))

    @staticmethod
    def run_commit(record: dict) -> str | None:
        """The commit a run ran at (its provenance block), None for a legacy JSON: what a check records as
        ``run_commit`` of the run it reran (checks made before that field existed all reran legacy runs)."""
        block = record.get("provenance")
        return block.get("commit") if block else None

    @staticmethod
    def numerics(record: dict) -> int | None:
        """The numerics version a run recorded; None for a JSON without provenance."""
        block = record.get("provenance")
        return block.get("numerics") if block else None

    def mark(self, runs: Sequence[dict]) -> str:
        """``†`` for a row with runs whose numbers are stale; nothing otherwise."""
        return STALE_MARK if runs and not self.standing(runs).current else ""

    def code(self, runs: Sequence[dict]) -> str:
        """A table's code cell for a row: its runs' origins, and how it was reproduced where it was."""
        note = self.standing(runs).note if runs else ""
        return self.origins(runs) + (f"; {note}" if note else "")


def stale_mark(prov: Provenance | None, runs: Sequence[dict]) -> str:
    """``prov.mark(runs)``; nothing without a provenance (hand-made records in tests)."""
    return prov.mark(runs) if prov is not None else ""


def stale_footnote(checks: str = CHECKS_FILE, commands: str = "beside it") -> str:
    """The footnote a table with a stale mark carries."""
    return (f"{STALE_MARK} stale: the runs predate the current numerics (version {NUMERICS_VERSION}) and none was "
            f"reproduced at it, or a rerun at it differs: rerun with the command {commands}; see `{checks}`.")


def provenance_lines(prov: Provenance, rows: Sequence[tuple[str, Sequence[dict], str]]) -> list[str]:
    """The report's provenance section: each stale row with its reason and command, each reproduced row.

    Args:
        prov: The task's provenance.
        rows: ``(label, runs, command)`` of every row of the report's tables; rows without runs are skipped.
    """
    stale, reproduced = [], []
    for label, runs, command in rows:
        if not runs:
            continue
        standing = prov.standing(runs)
        if not standing.current:
            stale.append(f"- {label}: {standing.reason}. Rerun: `{command}`")
        elif standing.note:
            reproduced.append(f"- {label}: {standing.note}.")
    lines = ["## Provenance", "",
             "Which code each number comes from. A run's JSON records the commit it ran at (*ran at*, `+dirty` where "
             "the work tree had uncommitted changes); for a JSON from before runs recorded it, the commit that added "
             "the file to git, which came after the run (*recorded in*). The numerics version counts the changes "
             "that alter a run's numbers, rounding included (`lab.provenance`); this checkout is at "
             f"version {NUMERICS_VERSION}. A row is current when all its runs ran at that version, or when one of "
             f"its runs, rerun at it, matched every compared epoch exactly (`{CHECKS_FILE}`); other rows' numbers "
             f"carry {STALE_MARK}.", ""]
    if stale:
        lines += [f"Stale rows ({len(stale)}):", "", *stale, ""]
    else:
        lines += ["Every row with runs is current.", ""]
    if reproduced:
        lines += ["Rows whose runs predate the current numerics, reproduced at it:", "", *reproduced, ""]
    return lines


def target_line(what: str, floor: float, values: Sequence[float], digits: int = 1, *, floor_digits: int = 1,
                mark: str = "", detail: str = "", min_seeds: int = 3, interval: bool = False) -> str:
    """A target checked on the mean of seeds: ``BiConTree, test accuracy ≥ 93.0: 93.3 ± 0.7 (3 seeds), met.``

    ``mark`` follows the measured figure (the stale mark), ``detail`` the seed count (with ``interval``, the 95%
    confidence interval of the mean comes first); fewer than ``min_seeds`` seeds make the verdict incomplete.
    """
    bounds = mean_interval(values) if interval else None
    if bounds:
        detail = f"; 95% confidence interval of the mean {bounds[0]:.1f} to {bounds[1]:.1f}{detail}"
    head = f"{what} ≥ {floor:.{floor_digits}f}"
    if not values:
        return f"{head}: not run."
    verdict = "met" if statistics.mean(values) >= floor else "missed"
    if len(values) < min_seeds:
        verdict += f" (incomplete: fewer than {min_seeds} seeds)"
    return f"{head}: {mean_std(values, digits)}{mark} ({plural(len(values), 'seed')}{detail}), {verdict}."


# --------------------------------------------------------------------------- statistics of seeds

SEEDS_CAP = 1000  # beyond this, "more than 1000"


def pooled_std(a: Sequence[float], b: Sequence[float]) -> float:
    """The pooled sample standard deviation of two rows' seeds."""
    df = len(a) + len(b) - 2
    return (((len(a) - 1) * statistics.variance(a) + (len(b) - 1) * statistics.variance(b)) / df) ** 0.5


def seeds_to_separate(gap: float, std: float, power: float = 0.8, alpha: float = 0.05) -> int:
    """Seeds per row for a two-sided two-sample t-test at ``alpha`` to find a true difference ``gap`` between
    rows whose seeds have standard deviation ``std`` with probability ``power`` (the noncentral t
    distribution; ``SEEDS_CAP + 1`` when even ``SEEDS_CAP`` seeds would not)."""
    from scipy import stats  # only the statistics need SciPy

    if std == 0:
        return 2
    for n in range(2, SEEDS_CAP + 1):
        df = 2 * n - 2
        critical = stats.t.ppf(1 - alpha / 2, df)
        shift = gap / (std * (2 / n) ** 0.5)
        found = stats.nct.sf(critical, df, shift) + stats.nct.cdf(-critical, df, shift)
        if found >= power:
            return n
    return SEEDS_CAP + 1


def format_seeds(n: int) -> str:
    """A seed count of :func:`seeds_to_separate` as a report says it."""
    return f"more than {SEEDS_CAP}" if n > SEEDS_CAP else str(n)


def mean_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float] | None:
    """Student's t confidence interval of the mean of ``values`` (``None`` for fewer than two)."""
    from scipy import stats

    if len(values) < 2:
        return None
    half = stats.t.ppf((1 + level) / 2, len(values) - 1) * statistics.stdev(values) / len(values) ** 0.5
    return statistics.mean(values) - half, statistics.mean(values) + half


def welch_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p of Welch's t-test that two rows' seeds share one mean (1.0 when either has one seed, or
    both have no spread and the same mean)."""
    if len(a) < 2 or len(b) < 2:
        return 1.0
    if statistics.stdev(a) == 0 and statistics.stdev(b) == 0:
        return 1.0 if statistics.mean(a) == statistics.mean(b) else 0.0
    from scipy import stats

    return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


def format_p(p: float) -> str:
    """A p-value as its comparison: "= 0.07" or "< 0.01"."""
    return f"= {p:.2f}" if p >= 0.01 else "< 0.01"


def results_folder(description: str, committed: Path, argv: Sequence[str] | None = None) -> tuple[Path, bool]:
    """The ``--results DIR`` argument of a report script: the folder holding ``<task>/*.json``, and whether it is the
    committed one (only a report on the committed results may rewrite the README; any other goes into DIR itself,
    so a report on one's own runs never writes into committed files)."""
    parser = ArgumentParser(description=description)
    parser.add_argument("--results", type=Path, default=committed,
                        help="folder holding <task>/*.json; the report is written there (default: the committed "
                             "experiments/results, which also updates README.md)")
    results = parser.parse_args(argv).results
    if not results.is_dir():
        parser.error(f"--results {results}: no such folder; give the folder that holds <task>/*.json (e.g. runs)")
    return results, results.resolve() == committed.resolve()


def no_runs(task: str, results: Path, looked: Sequence[Path], what: str = "runs", out: Path | None = None) -> NoReturn:
    """End a report script that found nothing to report in ``--results``: one line on stderr, ``report_<task>.py:
    error: ...``, naming the folders it looked in and the command that writes such runs, and exit status 2, as a bad
    flag does; no report is written (an empty report would pass for one). ``out``: the ``--out`` that writes such
    runs, ``results`` unless given."""
    where = " or ".join(f"{folder}/*.json" for folder in looked)
    print(f"report_{task}.py: error: --results {results}: no {what} in {where}; nothing written "
          f"(python experiments/{task}.py --out {results if out is None else out} writes them)", file=sys.stderr)
    raise SystemExit(2)


def shown(results: Path, repo: Path) -> str:
    """``results`` as a report names it: relative to the repository where inside it (no machine's paths in a
    committed report), as given otherwise."""
    try:
        return results.resolve().relative_to(repo.resolve()).as_posix()
    except ValueError:
        return str(results)


def within(values: Sequence[float], paper: float) -> bool:
    """The reproduction criterion: the mean of seeds within one point or one sample standard deviation of the
    paper."""
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return abs(statistics.mean(values) - paper) <= max(1.0, spread)


def within_table(rows: Sequence[tuple[str, float | None, Sequence[dict]]], metric: Callable[[dict], float],
                 prov: Provenance | None = None, min_seeds: int = 3) -> list[str]:
    """Rows checked against the paper by :func:`within`: ``(label, the paper's number, our runs)`` each, ``label``
    filling the first two columns (``name | task``), ``metric`` a run's number; rows without a paper's number are
    left out."""
    lines = ["| Row | Task | Paper | Ours | Ours − paper | Within |", "|---|---|---|---|---|---|"]
    for label, paper, runs in rows:
        if paper is None:
            continue
        values = [metric(r) for r in runs]
        if not values:
            lines.append(f"| {label} | {paper:.1f} | not run | — | — |")
            continue
        verdict = ("yes" if within(values, paper) else "no") + (" (incomplete)" if len(values) < min_seeds else "")
        lines.append(f"| {label} | {paper:.1f} | {mean_std(values)}{stale_mark(prov, runs)} | "
                     f"{statistics.mean(values) - paper:+.1f} | {verdict} |")
    return lines


def best_dev_run(runs: Sequence[dict], metric: str) -> dict:
    """The run a paper that reports the best-dev run of several would pick: the best dev ``metric``, ties to the
    lower seed."""
    return max(runs, key=lambda r: (r["dev"][metric], -r["seed"]))


def orderings_table(orderings: Sequence[tuple[str, Mapping[str, float], Mapping[str, Sequence[float]]]], *,
                    min_gap: float, alpha: float, min_seeds: int) -> list[str]:
    """Whether our rows rank as a paper's do: one line per table of the paper, with the pairs it separates by at
    least ``min_gap`` points, those our means keep in its order, the reversed ones (each with its p), those our
    seeds separate (Welch's t-test at ``alpha``) and the seeds per row a t-test would need to find the paper's gaps.

    Args:
        orderings: ``(title, the paper's number by row, our seeds' values by row)`` for each table; a row without
            values is named as not run.
        min_gap: Pairs the paper separates by less are not counted (one seed's noise is larger).
        alpha: The p below which our seeds separate a pair.
        min_seeds: Fewer seeds in a row make its line incomplete.
    """
    lines = [f"Orderings: each pair of rows the paper separates by at least {min_gap} points, and "
             "whether our means rank them the same way. A pair our seeds separate is one whose difference "
             f"Welch's t-test finds at p < {alpha}; each reversed pair gives its p. The last column is a power "
             "analysis: how many seeds per row a two-sample t-test would need to find the paper's gap between "
             f"two rows (at p < {alpha}, 80% of the time) when the seeds spread as ours do (pooled standard "
             "deviation of the pair); over the table's pairs, smallest to largest.", "",
             "| Table | Paper's order (best first) | Pairs as in the paper | Reversed | Pairs our seeds separate "
             "| Seeds per row to find the paper's gaps |",
             "|---|---|---|---|---|---|"]
    for title, papers, values in orderings:
        names = list(papers)
        ranked = sorted(names, key=lambda n: -papers[n])
        order = " > ".join(f"{n} {papers[n]:.1f}" for n in ranked)
        missing = [n for n in names if not values[n]]
        means = {n: statistics.mean(values[n]) for n in names if values[n]}
        # Pairs among the rows that have runs: a table half run still says what its finished rows show.
        pairs = [(a, b) for i, a in enumerate(ranked) for b in ranked[i + 1:]
                 if a in means and b in means and papers[a] - papers[b] >= min_gap]
        if not pairs:
            lines.append(f"| {title} | {order} | not run: {', '.join(missing)} | — | — | — |" if missing
                         else f"| {title} | {order} | no pair {min_gap} points apart | — | — | — |")
            continue
        p_of = {(a, b): welch_p(values[a], values[b]) for a, b in pairs}
        reversed_pairs = [f"{a} {means[a]:.1f} < {b} {means[b]:.1f} (p {format_p(p_of[a, b])})"
                          for a, b in pairs if means[a] <= means[b]]
        separated = [(a, b) for a, b in pairs if p_of[a, b] < alpha]
        held = sum(means[a] > means[b] for a, b in separated)
        verdict = (f"{held} as in the paper, {len(separated) - held} reversed, of {len(pairs)}" if separated
                   else f"none of {len(pairs)}")
        kept = f"{len(pairs) - len(reversed_pairs)} of {len(pairs)}"
        if any(len(values[n]) < min_seeds for n in means):
            kept += " (incomplete)"
        if missing:
            kept += f"; not run: {', '.join(missing)}"
        needed = sorted(seeds_to_separate(papers[a] - papers[b], pooled_std(values[a], values[b]))
                        for a, b in pairs if len(values[a]) > 1 and len(values[b]) > 1)
        power = "—" if not needed else format_seeds(needed[0]) + (
            f" to {format_seeds(needed[-1])}" if needed[-1] != needed[0] else "")
        lines.append(f"| {title} | {order} | {kept} | {'; '.join(reversed_pairs) or 'none'} | {verdict} "
                     f"| {power} |")
    return lines


# --------------------------------------------------------------------------- Markdown tables and report pages


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """The lines of a Markdown table."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows)]


def code_cell(prov: Provenance | None, runs: Sequence[dict]) -> str:
    """A table's code cell for a row: :meth:`Provenance.code`, ``—`` without runs or provenance."""
    return prov.code(runs) if prov is not None and runs else "—"


def runs_table(runs: Sequence[dict], prov: Provenance | None,
               columns: Sequence[tuple[str, Callable[[dict], str]]], per_epoch_digits: int = 0) -> list[str]:
    """A report's table of every run, by name: its best epoch, ``columns`` (header, cell of a run), its training
    seconds per epoch, where it ran and the code it ran."""
    header = ["Run", "Best epoch / epochs", *(name for name, _ in columns), "s per epoch (train)", "Where", "Code"]
    return markdown_table(header, ([r["run"], f"{r['best_epoch']} / {len(r['history'])}",
                                    *(cell(r) for _, cell in columns),
                                    f"{r['train_seconds_per_epoch']:.{per_epoch_digits}f}", hardware(r),
                                    prov.origin(r) if prov is not None else "—"]
                                   for r in sorted(runs, key=lambda r: r["run"])))


COMMITTED = "experiments/results"  # the committed results folder, as the reports name it


def report_script(task: str, results: str = COMMITTED) -> str:
    """The command that writes a report: ``python experiments/report_<task>.py [--results DIR]``."""
    return f"python experiments/report_{task}.py" + ("" if results == COMMITTED else f" --results {results}")


def report_head(title: str, task: str, results: str, lead: str) -> list[str]:
    """A report's title, the command that generated it from which files, and its lead paragraph."""
    return [f"# {title}", "", f"Generated by `{report_script(task, results)}` from `{results}/{task}/*.json`; do not "
            "edit.", "", lead, ""]


def stale_lines(prov: Provenance | None, groups: Iterable[Sequence[dict]], checks: str = CHECKS_FILE,
                commands: str = "under Commands below") -> list[str]:
    """The stale footnote after a table (with a blank line before it) where any of its ``groups`` of runs is
    stale; nothing otherwise."""
    return ["", stale_footnote(checks, commands)] if any(stale_mark(prov, runs) for runs in groups) else []


def runs_section(runs: Sequence[dict], table: Sequence[str]) -> list[str]:
    """A report's *Runs* section: ``table`` (every run), or that there are none."""
    return ["## Runs", "", *(table if runs else ["No runs yet."])]


def commands_section(commands: Iterable[str], script: str) -> list[str]:
    """A report's *Commands* section: the command of each row, then the report's own."""
    return ["", "## Commands", "", "```", *commands, script, "```", ""]


def with_seeds(command: str, seeds: Sequence[int]) -> str:
    """A run's recorded command with ``--seeds`` set to ``seeds`` (each run records the one seed it ran)."""
    listed = "--seeds " + " ".join(map(str, sorted(seeds)))
    return re.sub(r"--seeds(\s+\d+)+", listed, command) if "--seeds" in command else f"{command} {listed}"


# The results page: each task's section, written by its report script between ``<!-- results:KEY -->`` markers, and
# README's summary table, one row per model, whose rows each report script writes for its task.
RESULTS_PAGE = "docs/results.md"
SECTIONS = {"sst": "Stanford Sentiment Treebank", "sick": "SICK semantic relatedness",
            "trec": "TREC question classification", "structure": "Structure benchmarks"}
SUMMARY_HEADER = ("Task", "Model", "Ours", "Paper", "Minutes per run", "Command")


def anchor(title: str) -> str:
    """The anchor of a Markdown heading, as GitHub makes it: ``Structure benchmarks`` → ``structure-benchmarks``."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def summary_label(key: str, label: str) -> str:
    """README summary table's first cell for a row of task ``key``: ``label`` linked to the task's section of the
    results page (which is how :func:`write_summary` knows the row's task)."""
    return f"[{label}]({RESULTS_PAGE}#{anchor(SECTIONS[key])})"


def write_summary(readme: Path, key: str, rows: Sequence[Sequence[str]]) -> bool:
    """Replace the rows of task ``key`` in README's summary table (between ``<!-- results:summary -->`` and
    ``<!-- /results:summary -->``) by ``rows``, each starting with its :func:`summary_label`; the other tasks' rows
    stay, in the order of ``SECTIONS``. Returns False (and writes nothing) without the file or its markers."""
    text = readme.read_text() if readme.is_file() else ""
    found = re.search(r"<!-- results:summary -->\n(.*?)<!-- /results:summary -->", text, re.S)
    if found is None:
        return False
    targets = {k: f"]({RESULTS_PAGE}#{anchor(title)})" for k, title in SECTIONS.items()}
    kept: dict[str, list[str]] = {k: [] for k in SECTIONS}
    for line in found.group(1).splitlines()[2:]:  # below the header and its rule
        first = line.split(" | ", 1)[0]
        owner = next((k for k, target in targets.items() if target in first), None)
        if owner is not None and owner != key:
            kept[owner].append(line)
    kept[key] = markdown_table(SUMMARY_HEADER, rows)[2:]
    table = markdown_table(SUMMARY_HEADER, [])
    return write_readme_section(readme, "summary", "\n".join([*table, *(line for k in SECTIONS for line in kept[k])]))


def publish(repo: Path, key: str, section: str, summary: Sequence[Sequence[str]]) -> list[str]:
    """Write a task's section of the results page (under the heading ``SECTIONS[key]``) and its rows of README's
    summary table; returns the files written to (those with markers for it)."""
    text = f"## {SECTIONS[key]}\n\n{section.strip()}\n"
    written = [RESULTS_PAGE] if write_readme_section(repo / RESULTS_PAGE, key, text) else []
    return written + (["README.md"] if write_summary(repo / "README.md", key, summary) else [])


# --------------------------------------------------------------------------- plots


def pooled_counts(runs: Sequence[dict], key: str) -> dict[int, list[int]]:
    """(correct, total) by sentence length, height or span (the test set's ``key``), summed over runs: one test set,
    so seeds weigh equally."""
    out: dict[int, list[int]] = {}
    for r in runs:
        for k, (c, t) in r["test"].get(key, {}).items():
            counts = out.setdefault(int(k), [0, 0])
            counts[0] += c
            counts[1] += t
    return out


def windows(counts: Mapping[int, Sequence[int]], last: int = 45, half: int = 2) -> tuple[list[int], list[float]]:
    """Accuracy (%) over the lengths in ``[l - half, l + half]`` for each ``l`` (Tai et al. Fig. 3); lengths beyond
    ``last`` join the last window."""
    xs, ys = [], []
    for center in range(1 + half, last + 1):
        lo, hi = center - half, (center + half if center < last else 10**9)
        c = sum(v[0] for k, v in counts.items() if lo <= k <= hi)
        t = sum(v[1] for k, v in counts.items() if lo <= k <= hi)
        if t:
            xs.append(center)
            ys.append(100.0 * c / t)
    return xs, ys


def line_plot(path: Path, panels: Sequence[tuple[Sequence[tuple[str, Sequence[float], Sequence[float]]], str, str,
                                                 str]],
              figsize: tuple[float, float], **style) -> None:
    """Save a figure of side-by-side panels of lines (needs matplotlib).

    Args:
        path: The PNG to write.
        panels: ``(series, x label, y label, title)`` for each panel, ``series`` as ``(label, xs, ys)``; the first
            panel carries the legend where it has lines.
        figsize: The figure's size in inches.
        style: Passed to each line (``marker``, ``ms``).
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=figsize, squeeze=False)
    for ax, (series, xlabel, ylabel, title) in zip(axes[0], panels):
        for label, xs, ys in series:
            ax.plot(xs, ys, label=label, lw=1.4, **style)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
    if panels[0][0]:
        axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
