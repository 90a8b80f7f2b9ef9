"""Run set-up shared by the experiment scripts: common flags, where runs go, where the data comes from, errors.

Where runs go: every script writes under an output folder, ``runs/`` beside the
experiments (ignored by git) unless ``--out DIR`` says otherwise, laid out as

    DIR/<task>/<run>.json, <run>.csv            results and per-epoch metrics
    DIR/checkpoints/<task>/<run>.pt             resumable checkpoints (the best-dev model inside)
    DIR/quick/<task>/...                        --quick smoke runs, kept apart from full runs

The committed reference results (``experiments/results``) have the same
layout, so ``--out experiments/results`` adds a run to them; no ordinary run
writes there.

Output: each finished run's line (its dev and test scores) goes to stdout; the
progress bar, the line per epoch and the notes go to stderr, so ``> FILE`` keeps
the results.

Errors: :func:`main_guard` turns the errors a user can act on (graphtree's input
errors, a missing file, an unknown name) into one line on stderr and exit status
2, as :class:`ArgumentParser` does for a bad flag (argparse's usage left out:
``--help`` prints it). :data:`QUICK_EPOCHS`: what ``--quick`` trains everywhere.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TypeVar

from graphtree import settings
from graphtree.errors import GraphtreeError

if TYPE_CHECKING:
    from collections.abc import Iterator

    import torch

    from graphtree.backend.thread_budget import ThreadBudget
    from graphtree.datasets.download import RemoteFile

# torch, the datasets and the trainer are imported where they are used, not here: a script builds its parser from
# this module and answers --help, or a mistyped flag, without waiting seconds for them to load.
MIRROR_ENV = settings.ENVIRONMENT["mirror"]

__all__ = [
    "MIRROR_ENV",
    "QUICK_EPOCHS",
    "ArgumentParser",
    "RunError",
    "RunPaths",
    "add_run_arguments",
    "at_least_one",
    "check_embeddings",
    "check_flags_first",
    "check_training_flags",
    "corpus_file",
    "default_mirror",
    "epochs_of",
    "fail",
    "finished_run",
    "machine_description",
    "main_guard",
    "note",
    "quick_sample",
    "recorded_command",
    "resolve_device",
    "run_record",
    "start_process",
    "thread_budget",
    "user_errors",
]

T = TypeVar("T")


class RunError(GraphtreeError):
    """Something a user of the experiment scripts can fix: the message says what and how."""


def fail(message: str) -> NoReturn:
    """Stop a script with ``message`` as a user error (one line, exit status 2)."""
    raise RunError(message)


def note(message: str) -> None:
    """A line for the user on stderr, from rank 0 only under ``torchrun`` (one copy, not one per process)."""
    from graphtree.train import distributed

    if distributed.is_main():
        print(message, file=sys.stderr)


# graphtree's errors name the Python arguments (a dataset's mirror=, format=, root=); the scripts' users set them
# with $GRAPHTREE_MIRROR, --format and --data-root, so main_guard says those instead.
COMMAND_LINE_TERMS = (
    (re.compile(rf"pass mirror= \(or set \${MIRROR_ENV}\)"), f"set ${MIRROR_ENV}"),
    (re.compile(rf"(use another |point )mirror= / \${MIRROR_ENV}"), rf"\1${MIRROR_ENV}"),
    (re.compile(r"pass it as mirror="), f"set ${MIRROR_ENV} to it"),
    (re.compile(r"(?<![\w$])mirror=(?=')"), f"${MIRROR_ENV}="),
    (re.compile(r"pass format="), "give --format"),
    (re.compile(r"(?<![\w-])root='([^']*)'"), r"--data-root \1"),
    (re.compile(r"give root "), "give --data-root "),
    (re.compile(r"^root "), "--data-root "),
)


def in_command_line_terms(message: str) -> str:
    """``message`` with graphtree's Python argument names replaced by the flags and variables of the scripts."""
    for pattern, replacement in COMMAND_LINE_TERMS:
        message = pattern.sub(replacement, message)
    return message


def main_guard(main: Callable[[], T], prog: str) -> T:
    """Run ``main`` and return what it returns; a user error ends it with one line ``prog: error: ...`` and exit
    status 2, no traceback. The code's commit is read first, before the run (see
    :func:`~lab.provenance.code_state`). The run opts into what a script sets for its process
    (:func:`lab.process.opted_in`: the garbage collector quieter, subnormal floats flushed),
    all put back when it ends."""
    from . import process
    from .provenance import code_state

    code_state()
    with user_errors(prog), process.opted_in():
        return main()


@contextmanager
def user_errors(prog: str) -> Iterator[None]:
    """A user error inside ends the process with one line ``prog: error: ...`` and exit status 2, no traceback;
    Ctrl-C with a line saying how to resume (exit status 130)."""
    try:
        yield
    except (GraphtreeError, FileNotFoundError) as error:
        text = str(error) if not isinstance(error, FileNotFoundError) or not error.filename else (
            f"no such file: {error.filename}")
        print(f"{prog}: error: {in_command_line_terms(' '.join(text.split()))}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; the same command resumes from the last finished epoch", file=sys.stderr)
        raise SystemExit(130) from None


def check_flags_first(parse: Callable[[list[str]], object], prog: str, argv: Sequence[str] | None = None) -> None:
    """Parse the command line before the script imports torch and its models: ``--help`` and a flag's error are
    answered at once (in well under a second) instead of after seconds of imports. A script calls it at the top,
    under ``if __name__ == "__main__"``, with its own ``parse_args``; ``main`` parses again (parsing is cheap)."""
    with user_errors(prog):
        parse(list(sys.argv[1:] if argv is None else argv))


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line, ``prog: error: ...`` with exit status 2, as :func:`main_guard`'s
    (argparse prints its usage first, many lines for a script with many flags, which buries the error)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (--help lists the flags)\n")


QUICK_EPOCHS = 2   # --quick trains this many epochs in every experiment: a smoke run of the whole pipeline


def at_least_one(text: str) -> int:
    """An argparse type: a whole number of at least 1 (epochs, threads), else argparse's one-line error."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_run_arguments(parser: argparse.ArgumentParser, repo: Path, default_epochs: int | str,
                      quick_sample: str) -> None:
    """The flags every experiment has: seeds, epochs, quick mode, output folder, threads, data root, progress bar.
    ``quick_sample`` says what ``--quick`` keeps of the data (e.g. "1000 / 300 / 500 sentences")."""
    parser.add_argument("--seeds", type=int, nargs="+", default=[1],
                        help="one run per seed, one after another (default: 1)")
    parser.add_argument("--epochs", type=at_least_one, default=None, help=f"at least 1 (default: {default_epochs})")
    parser.add_argument("--quick", action="store_true",
                        help=f"a smoke run: a fixed sample ({quick_sample}), {QUICK_EPOCHS} epochs; results under "
                             "OUT/quick/")
    parser.add_argument("--out", default=str(repo / "runs"),
                        help="output folder: results in OUT/<task>/, checkpoints in OUT/checkpoints/<task>/ "
                             "(default: runs/ beside the experiments, ignored by git)")
    parser.add_argument("--threads", type=at_least_one, default=1,
                        help="CPU threads per process (default 1); above 1, fewer while other processes keep the "
                             "processors busy, unless --fixed-threads")
    parser.add_argument("--fixed-threads", action="store_true",
                        help="keep --threads threads even while other processes keep the processors busy (numbers "
                             "then equal bit for bit those of another run at the same count)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (the same code runs on either)")
    parser.add_argument("--replay", choices=["auto", "on", "off"], default="auto",
                        help="training steps and dev/test passes replayed as CUDA graphs on padded batches: auto "
                             "(default) on a GPU, not on the CPU; on (on the CPU: the padded step, eagerly); off. "
                             "The results file's replay says which path ran (graphtree.train.replaying)")
    parser.add_argument("--group-by-height", type=at_least_one, default=None, metavar="W",
                        help="minibatches of trees of similar height, so that each runs fewer levels: the epoch's "
                             "shuffled order sorted by height within windows of W minibatches, the minibatches then "
                             "shuffled (graphtree.train.ordering.height_grouped_order); recorded in the results file "
                             "and the run's name (_hgW). Default: the plain shuffled order")
    parser.add_argument("--data-root", default=str(repo / "datasets"),
                        help="folder of the data: <root>/<corpus>/raw the fetched files, <root>/<corpus>/processed "
                             "the caches (default: datasets/ beside the experiments)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (one line per epoch stays)")


def check_training_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """argparse's one-line error for a learning rate, L2 strength or dropout out of range (flags a script does not
    have, or left at ``None``, are not checked)."""
    l2, lr, dropout = (getattr(args, name, None) for name in ("l2", "lr", "dropout"))
    if l2 is not None and l2 < 0:
        parser.error(f"--l2 must be non-negative, got {l2}")
    if lr is not None and lr <= 0:
        parser.error(f"--lr must be positive, got {lr}")
    if dropout is not None and not 0.0 <= dropout < 1.0:
        parser.error(f"--dropout must be in [0, 1), got {dropout}")


def thread_budget(args: argparse.Namespace, device: torch.device) -> ThreadBudget | None:
    """The training loop's :class:`~graphtree.backend.thread_budget.ThreadBudget` of ``--threads``: fewer threads
    while other processes keep the processors busy; ``None`` for one thread, ``--fixed-threads`` or a GPU."""
    if args.threads < 2 or getattr(args, "fixed_threads", False) or device.type != "cpu":
        return None
    from graphtree.backend.thread_budget import ThreadBudget

    return ThreadBudget(args.threads)


def epochs_of(args: argparse.Namespace, default: int) -> int:
    """The epochs a run trains: ``--epochs``, else :data:`QUICK_EPOCHS` under ``--quick``, else ``default``."""
    return args.epochs or (QUICK_EPOCHS if args.quick else default)


def start_process(args: argparse.Namespace) -> torch.device:
    """Threads and device of this process (one, or this one of ``torchrun``'s): the device it trains on."""
    from graphtree.train import distributed

    from . import process

    process.set_threads(args.threads)
    return distributed.setup(resolve_device(args.device))


@dataclass(frozen=True)
class RunPaths:
    """Where the runs of one task go, under an output folder (see the module docstring)."""

    results: Path
    checkpoints: Path

    @classmethod
    def under(cls, out: str | os.PathLike, task: str, quick: bool = False) -> RunPaths:
        root = Path(out) / "quick" if quick else Path(out)
        return cls(root / task, root / "checkpoints" / task)


def recorded_command(script: str, argv: Sequence[str]) -> str:
    """The command a results file records: ``python experiments/<script> ...`` without ``--out DIR``, which says
    where the files went, not what the run computed (and would name a folder of one machine)."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--out":
            skip = True
        elif not arg.startswith("--out="):
            kept.append(arg)
    return " ".join(["python", f"experiments/{script}", *kept])


def default_mirror(repo: Path) -> str | None:
    """Where the corpora come from: ``$GRAPHTREE_MIRROR``, else ``../shared/data`` beside the repository."""
    mirror = settings.current().mirror
    if mirror:
        return mirror
    shared = repo.parent / "shared" / "data"
    return str(shared) if shared.is_dir() else None


def corpus_file(remote: RemoteFile, repo: Path) -> Path | None:
    """A corpus file where the experiments find it, for the scripts that read the raw file (the benchmarks): in the
    mirror of :func:`default_mirror` where that is a folder (read in place), else fetched from the mirror's URL or
    the official one into ``datasets/`` beside the experiments' data; ``None`` where it cannot be had."""
    from graphtree.datasets.download import DatasetError, fetch

    mirror = default_mirror(repo)
    if mirror is not None and not mirror.startswith(("http://", "https://")):
        local = Path(mirror).expanduser() / remote.path
        return local if local.is_file() else None
    dest = repo / "datasets" / "raw" / remote.path
    try:
        return dest if dest.is_file() else fetch(remote, dest, mirror, log=True)
    except DatasetError:
        return None


def check_embeddings(name: str, allowed: tuple[str, ...]) -> None:
    """A user error unless ``--embeddings`` is one of ``allowed`` or an existing GloVe text file."""
    if name not in allowed and not Path(name).is_file():
        fail(f"--embeddings {name}: not one of {', '.join(allowed)} and no such file; give one of those, or the "
             "path of a GloVe text file (e.g. glove.840B.300d.txt)")


def quick_sample(data: list, size: int) -> list:
    """A fixed random subset in corpus order (corpus files are often sorted by label, so not the first rows)."""
    import torch

    keep = torch.randperm(len(data), generator=torch.Generator().manual_seed(0))[:size]
    return [data[i] for i in sorted(keep.tolist())]


def resolve_device(name: str) -> torch.device:
    """The ``--device`` flag as a device, with a clear error when CUDA is asked for but absent."""
    import torch

    try:
        device = torch.device(name)
    except RuntimeError:
        fail(f"--device {name}: not a device name; use cpu, cuda or cuda:N")
    if device.type == "cuda" and not torch.cuda.is_available():
        fail(f"--device {name}: this PyTorch sees no CUDA device (torch {torch.__version__}); use --device cpu")
    return device


def machine_description(device: torch.device | str = "cpu") -> str:
    """What a results file records about the machine (and the GPU, for a run on one)."""
    import torch

    text = f"{platform.machine()}, {os.cpu_count()} CPUs"
    device = torch.device(device)
    if device.type == "cuda":
        text += f", {torch.cuda.get_device_name(device)}"
    return text


def kernels_used(device: torch.device | str) -> str:
    """``"compiled"`` where this process ran the cells on graphtree's compiled kernels, else ``"pytorch"``."""
    import torch

    from graphtree.backend import native

    return "compiled" if torch.device(device).type == "cpu" and native.kernels_loaded() else "pytorch"


def run_record(threads: int, device: torch.device | str = "cpu") -> dict:
    """The fields every results file ends with: threads (per process), device, versions, machine, provenance and
    what the script set for its process (:func:`lab.process.record`); ``processes`` too for a
    run trained by several (``torchrun``)."""
    import torch

    from graphtree.train import distributed

    from . import process
    from .provenance import provenance

    record = {"threads": threads, "device": str(device), "torch": torch.__version__,
              "python": platform.python_version(), "machine": machine_description(device),
              "provenance": provenance(threads, kernels_used(device)), "process": process.record()}
    if distributed.world_size() > 1:
        record["processes"] = distributed.world_size()
    return record


def finished_run(results: Path, name: str, config: dict) -> dict | None:
    """The record of run ``name`` if ``results/<name>.json`` holds it, written with these settings; else ``None``.

    Results files are what a run leaves behind for good (checkpoints are
    scratch and may be gone), so a script skips a seed whose results file
    exists rather than training it again. A file written with other settings
    is a user error, not something to overwrite.
    """
    path = Path(results) / f"{name}.json"
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    stored, wanted = record.get("config", {}), json.loads(json.dumps(config))
    if stored != wanted:
        changed = sorted(k for k in set(stored) | set(wanted) if stored.get(k) != wanted.get(k))
        fail(f"{path} holds a run with other settings (differing: {', '.join(changed)}); delete it to run again, "
             "or write this run elsewhere with --out DIR")
    return record
