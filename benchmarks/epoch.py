"""The SST training epoch a user waits for, in one process and in several (``torchrun``), phase by phase.

For each model and each setup ``PxT`` (P processes of T threads), ``experiments/sst.py`` trains ``--epochs``
epochs of SST (fine-grained, GloVe 50d vectors, the paper's settings and minibatch) into a temporary folder, as
a user would start it: plain ``python`` for one process, ``python -m torch.distributed.run --standalone
--nproc_per_node P`` for several. The figures are the epoch's training pass as the results file records it
(``train_seconds``: batches, forward, backward, optimizer, gradient all-reduce; not the dev evaluation nor
start-up), as training trees per second, and its split into the trainer's phases
(:data:`graphtree.train.trainer.PHASES`, rank 0's, and the dev evaluation), and the wall time of the whole
command (``command``: start-up, imports and data included, the epochs, dev and test: what a user waits for).
Before the measured runs, one unrecorded run per checkout fills the corpus cache and loads the kernels, as any
run after the first finds them. Rounds alternate the order of the setups so that drift of the machine hits all
alike; tables give the median over rounds.

    python benchmarks/epoch.py --models nary bicontree --setups 1x1 2x1 1x2 --rounds 2 \
        --out benchmarks/results/processes-cpu.json --readme processes
    python benchmarks/epoch.py --setups 1x1 1x2 --rounds 1 --out benchmarks/results/epoch-cpu.json --readme epoch
    python benchmarks/epoch.py --table benchmarks/results/epoch-cpu.json --readme epoch   # tables only
    python benchmarks/epoch.py --table benchmarks/results/epoch-cpu.json --plot benchmarks/results/epoch-cpu.png
    python benchmarks/epoch.py --models childsum --setups 1x1 1x2 --rounds 1 --baseline ../graphtree-before \
        --update benchmarks/results/epoch-cpu.json --readme epoch   # a few models again, the rest kept
    python benchmarks/epoch.py --setups 1x1 1x2 --rounds 1 --baseline ../graphtree-before   # an A/B
    python benchmarks/epoch.py --models nary --setups 1x1 1x2 --rounds 3 --embeddings random --readme epoch-random
    python benchmarks/epoch.py --device cuda --setups 1x1 --rounds 1 --embeddings random   # on a GPU
    python benchmarks/epoch.py --breakdown --models nary --embeddings random --threads 2 --rounds 3
        # one epoch piece by piece, in this process (below)

``--baseline CHECKOUT`` alternates every run with the same run of another checkout (each imports its own
graphtree) and adds a before/after table of epoch seconds: the ratio of the two medians, and ``paired``, the
median over rounds of each round's ratio (the two checkouts run back to back), which drift of the machine between
rounds moves less.

``--breakdown`` times one epoch of the first model in this process instead, piece by piece: what the trainer
does outside the step (cutting the minibatches out of the concatenated corpus, their schedules, dev evaluation,
the thread budget's looks) and the step four ways, interleaved in blocks of minibatches: as the script trains,
without dropout, with frozen word vectors, and as ``benchmarks/tree_lstm.py`` times it (neither). Its last line,
the epoch over the benchmark's step, is the epoch's cost over its step's in one run.

``--readme processes`` writes the speed-up table into docs/performance.md's ``<!-- results:processes -->`` block,
``--readme epoch`` the phase table (and the before/after table) into ``<!-- results:epoch -->``. ``× step`` is
the epoch's training pass over its training step (forward, backward, optimizer and embedding update).
``--plot PNG`` draws the phase table: a bar per model and setup split into the phases, and the baseline's epoch
under it with the paired ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import lab_path  # noqa: F401  (the lab, not installed)
import torch
from lab.provenance import processor
from lab.report import write_readme_section

from graphtree.train import atomic_write_text

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "performance.md"  # where --readme writes its block

NAMES = {"nary": "Constituency Tree-LSTM (Tai et al.)", "childsum": "Child-Sum Tree-LSTM (Tai et al.)",
         "slstm": "S-LSTM (Zhu et al.)", "lstmrnn": "LSTM-RNN (Le & Zuidema)", "contree": "ConTree (Teng & Zhang)",
         "contree_lex": "ConTree + Lex (Teng & Zhang)", "topdown": "Top-down (Teng & Zhang)",
         "bicontree": "BiConTree (Teng & Zhang)"}
ALL_MODELS = list(NAMES)
PHASE_COLUMNS = ("batches", "forward", "backward", "optimizer", "embeddings", "dev")
STEP_PHASES = ("forward", "backward", "optimizer", "embeddings")  # the training step; "× step": epoch over these
TRAINING_PHASES = ("batches", *STEP_PHASES)  # the epoch's training pass (dev is not in it)


def git(*args: str, repo: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True).stdout.strip()


def setup_name(setup: str) -> str:
    processes, threads = (int(v) for v in setup.split("x"))
    return (f"{processes} process{'es' if processes > 1 else ''} × {threads} thread{'s' if threads > 1 else ''}")


EMBEDDINGS = {"glove50": "GloVe 50d", "random": "random vectors of the paper's size"}


def train_once(model: str, processes: int, epochs: int, threads: int, repo: Path = REPO,
               embeddings: str = "glove50", device: str = "cpu", flags: Sequence[str] = (),
               environment: Mapping[str, str] | None = None) -> dict:
    """One run of the SST script of the checkout ``repo``; its per-epoch training seconds and trees per second.
    ``flags``: more flags of the script; ``environment``: more variables of its environment."""
    script = ["experiments/sst.py", "--model", model, "--embeddings", embeddings, "--fine-grained",
              "--epochs", str(epochs), "--threads", str(threads), "--no-progress", *flags]
    if device != "cpu":
        script += ["--device", device]
    launcher = [sys.executable] if processes == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)]
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = str(threads)
    env["PYTHONPATH"] = str(repo)  # that checkout's graphtree, whatever is installed
    env.update(environment or {})
    with tempfile.TemporaryDirectory() as out:
        began = time.perf_counter()
        done = subprocess.run([*launcher, *script, "--out", out], cwd=repo, env=env, capture_output=True,
                              text=True)
        command_seconds = time.perf_counter() - began
        if done.returncode != 0:
            raise SystemExit(f"{shlex.join(launcher + script)} failed:\n{done.stderr[-3000:]}")
        (result,) = Path(out).glob("**/sst/*.json")  # OUT/sst/, or OUT/quick/sst/ under --quick
        record = json.loads(result.read_text())
    trees = int(re.search(r"SST fine-grained: (\d+) /", done.stderr).group(1))
    seconds = [h["train_seconds"] for h in record["history"]]
    return {"train_seconds": seconds, "trees_per_s": [trees / s for s in seconds], "train_trees": trees,
            **({"threads_used": record["threads_used"]} if "threads_used" in record else {}),
            "phases": [h.get("phases") for h in record["history"]], "command_seconds": command_seconds,
            "command": shlex.join(["python" if processes == 1 else "torchrun", *launcher[3:], *script])}


def source(results: dict) -> str:
    vectors = EMBEDDINGS[results.get("embeddings", "glove50")]
    reruns = "".join(f"; the rows of {', '.join(NAMES.get(m, m) for m in rerun['models'])} rerun at "
                     f"{rerun['commit'][:7]}{'+dirty' if rerun['dirty'] else ''} (`{rerun['command']}`)"
                     for rerun in results.get("reruns", []))
    return (f"SST (fine-grained, {vectors}, the paper's minibatch), {results['machine']}, median of "
            f"{results['rounds']} round(s) of {results['epochs']} epoch(s) (`{results['command']}`, at "
            f"{results['commit'][:7]}{'+dirty' if results['dirty'] else ''}{reruns})")


def merge_rerun(results: dict, rerun: dict) -> dict:
    """``results`` with the models of ``rerun`` (a measurement of a few models with the same settings, against
    the same baseline commit) replaced by its runs; the rerun's commit and command are kept beside them."""
    for key in ("machine", "epochs", "rounds", "setups", "embeddings"):
        if results.get(key) != rerun.get(key):
            raise SystemExit(f"--update: the file was measured with {key} {results.get(key)!r}, this run with "
                             f"{rerun.get(key)!r}: rerun them alike or measure every model anew")
    if ("baseline" in results) != ("baseline" in rerun) or (
            "baseline" in results and results["baseline"]["commit"] != rerun["baseline"]["commit"]):
        raise SystemExit("--update: give --baseline the checkout the file was compared against "
                         f"({results.get('baseline', {}).get('commit', 'none')[:7]})")
    merged = json.loads(json.dumps(results))
    for model, rows in rerun["models"].items():
        merged["models"][model] = rows
        if "baseline" in rerun:
            merged["baseline"]["models"][model] = rerun["baseline"]["models"][model]
    # an earlier rerun keeps only the models this one did not measure again
    earlier = [{**r, "models": [m for m in r["models"] if m not in rerun["models"]]} for r in merged.get("reruns", [])]
    earlier = [r for r in earlier if r["models"]]
    merged["reruns"] = earlier + [{"models": list(rerun["models"]), "commit": rerun["commit"],
                                   "dirty": rerun["dirty"], "command": rerun["command"]}]
    return merged


def command_seconds(runs: list[dict]) -> float | None:
    """The median wall time of the runs' whole commands; ``None`` for runs measured before it was recorded."""
    seconds = [run["command_seconds"] for run in runs if "command_seconds" in run]
    return statistics.median(seconds) if seconds else None


def timed_epochs(results: dict) -> Iterator[tuple[str, str, list[dict], list[tuple[float, dict]], float]]:
    """Per model and setup whose runs timed their phases: the runs, each timed epoch's training seconds and
    phases, and the median epoch."""
    for model, rows in results["models"].items():
        for setup in results["setups"]:
            runs = rows[setup]["runs"]
            epochs = [(run["train_seconds"][k], phases) for run in runs
                      for k, phases in enumerate(run.get("phases") or []) if phases]
            if epochs:
                yield model, setup, runs, epochs, statistics.median(seconds for seconds, _ in epochs)


def phase_table(results: dict) -> str:
    """Seconds of one training epoch and of its phases, by model and setup (and of the whole command, where
    recorded)."""
    commands = any(command_seconds(rows[s]["runs"]) is not None
                   for rows in results["models"].values() for s in results["setups"])
    lines = [f"Seconds of one training epoch and its phases, {source(results)}:", "",
             "| model | setup | trees/s | epoch (training) | " + " | ".join(PHASE_COLUMNS) + " | × step |"
             + (" command |" if commands else ""),
             "|---|---|---|---|" + "---|" * len(PHASE_COLUMNS) + "---|" + ("---|" if commands else "")]
    for model, setup, runs, epochs, median in timed_epochs(results):
        cells = [f"{statistics.median(p[c] for _, p in epochs):.2f}" for c in PHASE_COLUMNS]
        over_step = statistics.median(seconds / sum(p[c] for c in STEP_PHASES) for seconds, p in epochs)
        command = command_seconds(runs)
        command_cell = (" — |" if command is None else f" {command:.2f} |") if commands else ""
        lines.append(f"| {NAMES.get(model, model)} | {setup_name(setup)} | "
                     f"{results['models'][model][setup]['median_trees_per_s']:.0f} | {median:.2f} | "
                     + " | ".join(cells) + f" | {over_step:.2f} |{command_cell}")
    return "\n".join(lines) + "\n" if len(lines) > 4 else ""  # runs from before the trainer timed phases: none


def table(results: dict) -> str:
    setups = results["setups"]
    lines = [f"Training trees per second, {source(results)}; × the first column:", "",
             "| model | " + " | ".join(setup_name(s) for s in setups) + " |", "|---|" + "---|" * len(setups)]
    for model, rows in results["models"].items():
        base = rows[setups[0]]["median_trees_per_s"]
        cells = []
        for s in setups:
            rate = rows[s]["median_trees_per_s"]
            cells.append(f"{rate:.0f}" + ("" if s == setups[0] else f" ({rate / base:.2f}×)"))
        lines.append(f"| {NAMES.get(model, model)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def measure(args: argparse.Namespace) -> dict:
    """Every run of every model and setup, interleaved (with ``--baseline``, with that checkout's runs); the
    results JSON."""
    # The command without --out, which names a file of this machine, not a setting of the measurement; a
    # baseline checkout is named by its commit.
    argv, skip = [], False
    for arg in sys.argv[1:]:
        if skip:
            skip = False
        elif arg in ("--out", "--baseline"):
            skip = True
        else:
            argv.append(arg)
    results = {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
               "machine": f"{processor()}, {os.cpu_count()} CPUs" + (
                   f", {torch.cuda.get_device_name()}" if args.device == "cuda" else ""),
               "device": args.device, "torch": torch.__version__,
               "epochs": args.epochs, "rounds": args.rounds, "setups": args.setups, "embeddings": args.embeddings,
               "command": shlex.join(["python", "benchmarks/epoch.py", *argv]),
               "models": {}}
    checkouts = {"models": REPO}
    if args.baseline:
        baseline = Path(args.baseline).resolve()
        results["baseline"] = {"commit": git("rev-parse", "HEAD", repo=baseline),
                               "dirty": bool(git("status", "--porcelain", "--untracked-files=no", repo=baseline)),
                               "models": {}}
        results["command"] += f" --baseline <checkout of {results['baseline']['commit'][:7]}>"
        checkouts["baseline"] = baseline
    # One run per checkout first, not recorded: each command times what it always does, not a first run's
    # processing of the corpus into its cache or build of the kernels.
    for repo in checkouts.values():
        train_once(args.models[0], 1, 1, 1, repo, args.embeddings, args.device)
    for model in args.models:
        runs = {name: {s: [] for s in args.setups} for name in checkouts}
        for round_ in range(args.rounds):
            for k, setup in enumerate(args.setups if round_ % 2 == 0 else args.setups[::-1]):
                processes, threads = (int(v) for v in setup.split("x"))
                # Alternate which checkout goes first, so that drift of the machine hits both alike.
                order = list(checkouts.items())
                for name, repo in order if (round_ + k) % 2 == 0 else order[::-1]:
                    run = train_once(model, processes, args.epochs, threads, repo, args.embeddings, args.device)
                    runs[name][setup].append(run)
                    which = ", baseline" if name == "baseline" else ""
                    print(f"{model}, {setup_name(setup)}, round {round_ + 1}{which}: "
                          f"{', '.join(f'{r:.0f}' for r in run['trees_per_s'])} trees/s", file=sys.stderr)
        for name in checkouts:
            target = results["models"] if name == "models" else results["baseline"]["models"]
            target[model] = {s: {"runs": r, "median_trees_per_s": statistics.median(
                x for run in r for x in run["trees_per_s"])} for s, r in runs[name].items()}
    return results


def paired_ratio(after_runs: list[dict], before_runs: list[dict]) -> float:
    """The median over rounds of one round's after / before epoch: each round runs the two checkouts back to
    back, so drift of the machine between rounds, which moves the ratio of the two medians, cancels."""
    return statistics.median(a / b for after, before in zip(after_runs, before_runs, strict=True)
                             for a, b in zip(after["train_seconds"], before["train_seconds"], strict=True))


def comparison(results: dict) -> str:
    """Epoch seconds against the baseline checkout's, run for run in the same measurement."""
    if "baseline" not in results:
        return ""
    base = results["baseline"]
    commands = all(command_seconds(rows[s]["runs"]) is not None and command_seconds(
        base["models"][model][s]["runs"]) is not None for model, rows in results["models"].items()
        for s in results["setups"])
    lines = [f"One training epoch against {base['commit'][:7]}{'+dirty' if base['dirty'] else ''}, "
             f"{source(results)}:", "", "| model | setup | before (s) | after (s) | after / before | paired |"
             + (" command before (s) | command after (s) | after / before |" if commands else ""),
             "|---|---|---|---|---|---|" + ("---|---|---|" if commands else "")]
    for model, rows in results["models"].items():
        for setup in results["setups"]:
            after = statistics.median(s for run in rows[setup]["runs"] for s in run["train_seconds"])
            before = statistics.median(s for run in base["models"][model][setup]["runs"] for s in run["train_seconds"])
            paired = paired_ratio(rows[setup]["runs"], base["models"][model][setup]["runs"])
            line = (f"| {NAMES.get(model, model)} | {setup_name(setup)} | {before:.2f} | {after:.2f} | "
                    f"{after / before:.2f} | {paired:.2f} |")
            if commands:
                command_before = command_seconds(base["models"][model][setup]["runs"])
                command_after = command_seconds(rows[setup]["runs"])
                line += f" {command_before:.2f} | {command_after:.2f} | {command_after / command_before:.2f} |"
            lines.append(line)
    return "\n".join(lines) + "\n"


def phase_bars(results: dict) -> list[dict]:
    """What the figure draws, per model and setup: the median of each training phase over the epochs measured,
    ``loop`` (the median epoch less their sum: the trainer's loop around them), and where the results have a
    baseline, its median epoch and the paired after / before ratio. The segments add up to the phase table's
    ``epoch (training)``."""
    bars = []
    for model, setup, runs, epochs, median in timed_epochs(results):
        segments = {c: statistics.median(p[c] for _, p in epochs) for c in TRAINING_PHASES}
        segments["loop"] = max(0.0, median - sum(segments.values()))
        bar = {"model": model, "setup": setup, "epoch": median, "segments": segments}
        if "baseline" in results:
            before = results["baseline"]["models"][model][setup]["runs"]
            bar["before"] = statistics.median(s for run in before for s in run["train_seconds"])
            bar["paired"] = paired_ratio(runs, before)
        bars.append(bar)
    return bars


def plot(results: dict, path: Path) -> None:
    """The phase table as a picture: one panel per setup, a bar per model split into the epoch's phases, and
    under it the baseline's whole epoch with the paired after / before ratio, where the results have one."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = phase_bars(results)
    if not bars:
        raise SystemExit("--plot: the results hold no epoch split into phases")
    setups = [s for s in results["setups"] if any(b["setup"] == s for b in bars)]
    models = [m for m in results["models"] if any(b["model"] == m for b in bars)]
    colors = dict(zip((*TRAINING_PHASES, "loop"), plt.get_cmap("tab10").colors))
    widest = max(max(b["epoch"], b.get("before", 0.0)) for b in bars)
    fig, axes = plt.subplots(1, len(setups), figsize=(5.2 * len(setups), 0.55 * len(models) + 1.9),
                             sharey=True, squeeze=False)
    for ax, setup in zip(axes[0], setups):
        for row, model in enumerate(models):
            bar = next((b for b in bars if b["model"] == model and b["setup"] == setup), None)
            if bar is None:
                continue
            left = 0.0
            for phase, seconds in bar["segments"].items():
                ax.barh(row, seconds, left=left, height=0.42, color=colors[phase], label=phase)
                left += seconds
            if "before" in bar:
                ax.barh(row + 0.3, bar["before"], height=0.16, color="0.75",
                        label=f"before ({results['baseline']['commit'][:7]}), whole epoch")
                ax.text(bar["before"] + 0.01 * widest, row + 0.3, f"{bar['paired']:.2f}×", va="center",
                        fontsize=7)
        ax.set_title(setup_name(setup), fontsize=9)
        ax.set_xlim(0, widest * 1.12)
        ax.set_xlabel("seconds of one training epoch (median)")
        ax.grid(axis="x", lw=0.4, alpha=0.5)
    axes[0][0].set_yticks(range(len(models)), [NAMES.get(m, m) for m in models], fontsize=8)
    axes[0][0].invert_yaxis()
    legend = {}  # one entry a label, from whichever panel drew it first
    for ax in axes[0]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    fig.legend(legend.values(), legend.keys(), loc="lower center", ncol=len(legend), fontsize=7, frameon=False)
    ratio = " (after / before, paired)" if "baseline" in results else ""
    fig.suptitle(f"SST training epoch by phase{ratio}, {results['machine']}, "
                 f"at {results['commit'][:7]}{'+dirty' if results['dirty'] else ''}", fontsize=9)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    # The figure names the measurement it draws, so that a test can tell a figure left behind by its results.
    fig.savefig(path, dpi=110, metadata={"Description": source(results)})
    plt.close(fig)


# --------------------------------------------------------------------------- --breakdown: the epoch, piece by piece

VARIANTS = {  # name: (dropout as the script's, embeddings trained)
    "as trained": (True, True),
    "without dropout": (False, True),
    "embeddings frozen": (True, False),
    "as the step benchmark": (False, False),  # benchmarks/tree_lstm.py's step: no dropout, frozen vectors
}
BLOCK = 20  # minibatches a variant runs before the next one's turn


def _sst_script():
    """``experiments/sst.py`` as a module (its run settings, vocabulary, splits and models)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("sst_script", REPO / "experiments" / "sst.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["sst_script"] = module
    spec.loader.exec_module(module)
    return module


def breakdown(args: argparse.Namespace) -> dict:
    """One SST epoch of ``args.models[0]`` in this process, split into what the trainer does outside the step
    (cutting minibatches, their schedules, dev evaluation, the thread budget's looks) and the step itself, which
    is timed four ways in blocks of :data:`BLOCK` minibatches, the four interleaved (each with a model of its
    own, from the same initial weights): as the script trains (dropout, word vectors updated), without dropout,
    with frozen vectors, and as ``benchmarks/tree_lstm.py`` times its step (neither). Each block's least time
    over ``args.rounds`` rounds, summed over the epoch: what the machine's load adds to a block is left out."""
    from lab.harness import initial_vectors
    from lab.runs import default_mirror

    from graphtree.backend.thread_budget import ThreadBudget
    from graphtree.backend.threads import denormals_flushed
    from graphtree.data import with_schedule
    from graphtree.data.batching import BatchCutter
    from graphtree.models import node_loss
    from graphtree.train import OptimizerSpec, PaperOptimizer
    from graphtree.train.batches import collate
    from graphtree.train.metrics import evaluate
    from graphtree.train.ordering import epoch_order

    sst = _sst_script()
    model_name = args.models[0]
    torch.set_num_threads(args.threads)
    cfg = sst.OPTIONS.config(sst.parse_args(["--model", model_name, "--embeddings", args.embeddings,
                                             "--fine-grained", "--epochs", "1"]), None)
    if args.embeddings != "random":
        raise SystemExit("--breakdown: --embeddings random (the issue's setting)")
    root, mirror = str(REPO / "datasets"), default_mirror(REPO)
    vocab = sst.build_vocab(cfg, root, mirror, None)
    train, dev = (sst.load_split(cfg, split, vocab, root, mirror) for split in ("train", "dev"))
    batch_size = OptimizerSpec(**cfg["optimizer"]).batch_size

    def make(dropout: bool, trained: bool) -> tuple[torch.nn.Module, PaperOptimizer]:
        torch.manual_seed(1)
        vectors = initial_vectors(vocab, None, cfg["dim"], 1, "uniform", sst.RANDOM_INIT)
        model, embedding = sst.build_model({**cfg, "dropout": cfg["dropout"] if dropout else 0.0}, len(vocab),
                                           5, vectors)
        embedding.requires_grad_(trained)
        model.train()
        return model, PaperOptimizer.for_model(model, embedding, OptimizerSpec(**cfg["optimizer"]))

    seconds: dict[str, float] = {}
    with denormals_flushed():
        began = time.perf_counter()
        cutter = BatchCutter.of(train)
        seconds["concatenation (once a run)"] = time.perf_counter() - began
        cuts, schedules = [], []
        for round_ in range(args.rounds):
            order = epoch_order(len(train), 1, round_).tolist()
            began = time.perf_counter()
            cut = list(cutter.batches(order, batch_size))
            cuts.append(time.perf_counter() - began)
            began = time.perf_counter()
            batches = [with_schedule(batch) for batch in cut]
            schedules.append(time.perf_counter() - began)
        seconds["cutting minibatches"], seconds["schedules"] = min(cuts), min(schedules)
        models = {name: make(*flags) for name, flags in VARIANTS.items()}
        phases = {name: dict.fromkeys(("forward", "backward", "optimizer", "embeddings"), 0.0) for name in VARIANTS}
        for start in range(0, len(batches), BLOCK):
            block = batches[start:start + BLOCK]
            best: dict[str, dict[str, float]] = {}
            for _ in range(args.rounds):
                for name, (model, optimizer) in models.items():
                    times = dict.fromkeys(phases[name], 0.0)
                    for batch in block:
                        t0 = time.perf_counter()
                        loss = node_loss(model(batch), batch.y)
                        t1 = time.perf_counter()
                        optimizer.zero_grad()
                        (loss / batch.num_graphs).backward()
                        t2 = time.perf_counter()
                        optimizer.step_model()
                        t3 = time.perf_counter()
                        optimizer.step_embeddings()
                        t4 = time.perf_counter()
                        for phase, took in zip(times, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                            times[phase] += took
                    if name not in best or sum(times.values()) < sum(best[name].values()):
                        best[name] = times
            for name, times in best.items():
                for phase, took in times.items():
                    phases[name][phase] += took
        model = models["as trained"][0]
        evaluations, building = [], []
        for _ in range(args.rounds):
            began = time.perf_counter()
            dev_batches = [with_schedule(b) for b in collate(dev, 256)]
            built = time.perf_counter()
            evaluate(model, dev_batches)
            building.append(built - began)
            evaluations.append(time.perf_counter() - built)
        seconds["dev batches (once a run)"], seconds["dev evaluation"] = min(building), min(evaluations)
        budget = ThreadBudget(max(args.threads, 2), interval=1e-9)  # a look at every call: its cost
        began = time.perf_counter()
        for _ in range(100):
            budget.check()
        look = (time.perf_counter() - began) / 100
        torch.set_num_threads(args.threads)
    # The trainer looks at most every half second: an epoch of E seconds takes at most 2E looks.
    step = {name: sum(p.values()) for name, p in phases.items()}
    epoch = seconds["cutting minibatches"] + seconds["schedules"] + step["as trained"]
    seconds["thread budget's looks (at most 2 a second)"] = 2 * epoch * look
    return {"model": model_name, "threads": args.threads, "rounds": args.rounds, "minibatches": len(batches),
            "outside the step": seconds, "step": phases, "step seconds": step, "epoch (training)": epoch,
            "budget look seconds": look, "budget other load": budget.other_load,
            "epoch over the benchmark's step": epoch / step["as the step benchmark"],
            "epoch over its own step": epoch / step["as trained"],
            "machine": f"{processor()}, {os.cpu_count()} CPUs", "commit": git("rev-parse", "HEAD"),
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
            "load average": os.getloadavg(),
            "command": shlex.join(["python", "benchmarks/epoch.py", "--breakdown", "--models", model_name,
                                   "--threads", str(args.threads), "--rounds", str(args.rounds),
                                   "--embeddings", args.embeddings])}


def breakdown_table(result: dict) -> str:
    """The breakdown as a table: seconds per epoch of each part, and the step's variants."""
    step = result["step seconds"]
    lines = [f"One SST training epoch of {NAMES.get(result['model'], result['model'])} ({result['minibatches']} "
             f"minibatches) piece by piece, {result['machine']}, {result['threads']} thread(s), each block's least "
             f"of {result['rounds']} round(s) (`{result['command']}`, at {result['commit'][:7]}"
             f"{'+dirty' if result['dirty'] else ''}; load average {result['load average'][0]:.1f}):", "",
             "| part | seconds an epoch | × the benchmark's step |", "|---|---:|---:|"]
    base = step["as the step benchmark"]
    for part, took in result["outside the step"].items():
        lines.append(f"| {part} | {took:.3f} | {took / base:.3f} |")
    for name, phases in result["step"].items():
        split = ", ".join(f"{phase} {took:.2f}" for phase, took in phases.items())
        lines.append(f"| step {name} ({split}) | {step[name]:.3f} | {step[name] / base:.3f} |")
    epoch = result["epoch (training)"]
    lines.append(f"| epoch (training): cutting, schedules, step as trained | {epoch:.3f} | {epoch / base:.3f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=ALL_MODELS, choices=ALL_MODELS)
    parser.add_argument("--setups", nargs="+", default=["1x1", "2x1", "1x2"],
                        help="PxT: P processes of T threads each (default: 1x1 2x1 1x2)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--embeddings", choices=tuple(EMBEDDINGS), default="glove50",
                        help="the SST script's word vectors: glove50 (default) or random (300d for most models)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the SST script trains (--device of experiments/sst.py; one GPU a process)")
    parser.add_argument("--out", default=None, help="JSON of every run (default: print only)")
    parser.add_argument("--baseline", default=None, metavar="CHECKOUT",
                        help="another checkout of graphtree whose runs alternate with this one's (an A/B)")
    parser.add_argument("--table", default=None, help="only write the table of this JSON (no runs)")
    parser.add_argument("--update", default=None, metavar="JSON",
                        help="measure --models again and replace their rows in this results JSON (same settings "
                             "and baseline; the file names the commit of each rerun); written back in place")
    parser.add_argument("--readme", choices=("processes", "epoch", "epoch-random"), default=None,
                        help="write the speed-up table (processes) or the phase table (epoch; epoch-random for a "
                             "run with --embeddings random) into docs/performance.md")
    parser.add_argument("--breakdown", action="store_true",
                        help="time the epoch of the first of --models piece by piece in this process (cutting, "
                             "schedules, the step with and without dropout and trained vectors, dev, the thread "
                             "budget's looks) instead of running the script")
    parser.add_argument("--threads", type=int, default=1, help="--breakdown's intra-op threads (default 1)")
    parser.add_argument("--plot", default=None, metavar="PNG",
                        help="draw the phase table as a figure into this file (matplotlib: pip install -e '.[plot]')")
    args = parser.parse_args()
    if args.breakdown:
        result = breakdown(args)
        print(breakdown_table(result))
        if args.out:
            atomic_write_text(json.dumps(result, indent=1) + "\n", Path(args.out))
        return
    if args.table:
        results = json.loads(Path(args.table).read_text())
    else:
        if any(not re.fullmatch(r"[1-9]\d*x[1-9]\d*", s) for s in args.setups):
            parser.error("--setups: each one PxT, e.g. 2x1")
        results = measure(args)
        if args.update:
            results = merge_rerun(json.loads(Path(args.update).read_text()), results)
            args.out = args.out or args.update
    tables = {"processes": table(results), "epoch": phase_table(results), "comparison": comparison(results)}
    tables["epoch-random"] = tables["epoch"]
    print(*(t for t in tables.values() if t), sep="\n")
    if args.out:
        atomic_write_text(json.dumps(results, indent=1) + "\n", Path(args.out))
    readme = tables[args.readme] + ("\n" + tables["comparison"] if args.readme.startswith("epoch")
                                    and tables["comparison"]
                                    else "") if args.readme else ""
    if args.plot:
        plot(results, Path(args.plot))
    if args.readme and not write_readme_section(PAGE, args.readme, readme):
        raise SystemExit(f"docs/performance.md has no <!-- results:{args.readme} --> block")


if __name__ == "__main__":
    main()
