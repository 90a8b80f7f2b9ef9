"""The training step on a GPU: eager, replayed as CUDA graphs (:mod:`graphtree.replay`), and cuDNN's LSTM.

For every cell and batch size, on the first sentences of the SST training split
(random trees of SST's size distribution without it), trees per second of a
training step (forward, every node classified, backward, AdaGrad step):

* ``eager``: the cell as it runs without replay (one kernel launch after another
  from Python and autograd);
* ``replayed``: :class:`graphtree.replay.ReplayedStep`, every batch padded to its
  bucket shape and replayed from a captured graph. The shapes of the workload
  are captured before the timed repetitions (the steady state of a long run);
  the padding of each batch on the host is inside the timed region;
* ``plain``: the plainest level loop of the N-ary model (``plain_level_loop.py``);
* ``lstm``: ``torch.nn.LSTM`` (cuDNN) over the same words, a classifier on every step.

Every repetition restores each model's initial weights and optimizer state
(in place: a captured graph reads the very tensors it was captured with) and
times every contender back to back, in a rotating order; ratios are taken
within a repetition, and medians reported. ``× today`` divides by the eager
GPU rows of ``benchmarks/results/cuda-threads1.json``.

``--epoch`` adds one SST training epoch per model (batch 25, shuffled): the
whole epoch as a user waits for it, collation and schedules included, the
first epoch (captures included) and the second, replayed and eager.

    python benchmarks/gpu_step.py --device cuda --out benchmarks/results/gpu/step.json
    python benchmarks/gpu_step.py --device cuda --no-grid --epoch --out benchmarks/results/gpu/epoch.json
    python benchmarks/gpu_step.py --table benchmarks/results/gpu/step.json benchmarks/results/gpu/epoch.json
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from plain_level_loop import PlainLevelTreeLSTM
from torch import nn
from torch_geometric.data import Batch, Data
from tree_lstm import (
    CELL_NAMES,
    HIDDEN,
    LEARNING_RATE,
    NUM_CLASSES,
    RESULTS,
    SequenceLSTM,
    TreeStats,
    forward_flops,
    load_sst,
    machine,
    matmul_probe,
    median,
    padded_words,
    random_trees,
    sst_archive,
    synchronize,
    timed,
    tree_model,
)

from graphtree.data import with_schedule
from graphtree.models import node_loss
from graphtree.replay import Buckets, ReplayedStep
from graphtree.train import make_optimizer

CELLS = ("nary", "child_sum", "slstm", "lstm_rnn", "contree_lex", "top_down", "bicontree")
TODAY = RESULTS / "cuda-threads1.json"


class Contender:
    """A model and its optimizer on one workload; ``reset`` restores both in place."""

    def __init__(self, name: str, model: nn.Module, replay: bool, device: torch.device) -> None:
        self.name, self.model = name, model
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = make_optimizer("adagrad", params, LEARNING_RATE, capturable=replay)
        self.step = ReplayedStep(model, self.optimizer) if replay else None
        self._weights = copy.deepcopy(model.state_dict())
        self._state = {id(p): {k: v.clone() for k, v in s.items() if torch.is_tensor(v)}
                       for p, s in self.optimizer.state.items()}
        self.times: list[float] = []

    def reset(self) -> None:
        with torch.no_grad():
            for name, value in self.model.state_dict().items():
                value.copy_(self._weights[name])
            for p, state in self.optimizer.state.items():
                for key, value in state.items():
                    saved = self._state.get(id(p), {}).get(key)
                    if saved is not None:
                        value.copy_(saved)
                    elif torch.is_tensor(value):
                        value.zero_()

    def train(self, batches: list[Any]) -> None:
        self.model.train()
        for batch in batches:
            if self.step is not None:
                self.step(batch)
            else:
                self.optimizer.zero_grad(set_to_none=True)
                node_loss(self.model(batch), batch.y).backward()
                self.optimizer.step()


class LSTMContender(Contender):
    def train(self, batches: list[Any]) -> None:
        self.model.train()
        for words, labels in batches:
            self.optimizer.zero_grad(set_to_none=True)
            logits = self.model(words)
            F.cross_entropy(logits.view(-1, NUM_CLASSES), labels.view(-1), ignore_index=-1,
                            reduction="sum").backward()
            self.optimizer.step()


def workload(trees: list[Data], B: int, count: int, device: torch.device) -> tuple[list, list, list, TreeStats]:
    """The first ``count`` trees (a whole number of batches of B): host batches with their schedules, the same
    on the device, the padded word batches of nn.LSTM, and their counts."""
    count = math.ceil(count / B) * B
    groups = [trees[k:k + B] for k in range(0, count, B)]
    host = [Batch.from_data_list(g) for g in groups]
    for batch in host:
        with_schedule(batch, ("bottom_up", "top_down"))
    stats = TreeStats()
    for tree in trees[:count]:
        stats.add(tree)
    return host, [b.to(device) for b in host], [padded_words(g, device) for g in groups], stats


def run_grid(args: argparse.Namespace, trees: list[Data], vocab_size: int, device: torch.device,
             done: Any = lambda rows: None) -> list[dict]:
    """Every contender at every batch size; ``done(rows)`` after each batch size (a run stopped later keeps
    what finished)."""
    rows = []
    E = args.embedding
    for B in args.batch_sizes:
        host, on_device, words, stats = workload(trees, B, args.workload, device)
        torch.manual_seed(0)
        contenders: list[Contender] = []
        for cell in args.cells:
            model = tree_model(cell, E, vocab_size).to(device)
            contenders.append(Contender(f"{cell}/eager", model, False, device))
            contenders.append(Contender(f"{cell}/replayed", copy.deepcopy(model), True, device))
        if "nary" in args.cells:
            nary = contenders[0].model
            plain = PlainLevelTreeLSTM(vocab_size, E, HIDDEN, NUM_CLASSES).to(device)
            plain.load_from(nary.embedding.embedding, nary.cell, nary.classifier)
            contenders.append(Contender("plain/eager", plain, False, device))
        contenders.append(LSTMContender("lstm/eager", SequenceLSTM(vocab_size, E, HIDDEN, NUM_CLASSES).to(device),
                                        False, device))
        probe, probe_flops = matmul_probe(device)
        rates: list[float] = []
        inputs = {c.name: words if c.name == "lstm/eager" else host if c.step is not None else on_device
                  for c in contenders}
        for c in contenders:  # warm-up, and every shape of the workload captured
            c.reset()
            c.train(inputs[c.name])
        synchronize(device)
        # A model whose step is not replayed (a top-down pass) runs eagerly: the eager row says it.
        contenders = [c for c in contenders if c.step is None or c.step.replayable]
        print(f"[E={E} B={B}] {len(host)} batches, {stats.trees} trees, {stats.nodes} nodes", flush=True)
        for rep in range(args.reps):
            shift = rep % len(contenders)
            for c in contenders[shift:] + contenders[:shift]:
                c.reset()
                c.times.append(timed(lambda c=c, batches=inputs[c.name]: c.train(batches), device))
            rates.append(probe_flops / timed(probe, device))
        today = _today(E, B)
        lstm = next(c for c in contenders if c.name == "lstm/eager")
        for c in contenders:
            model, mode = c.name.split("/")
            flops = forward_flops(model, stats, E)
            row: dict[str, Any] = dict(model=model, mode=mode, embedding=E, batch=B, trees=stats.trees,
                                       nodes=stats.nodes, train_s=median(c.times),
                                       train_trees_per_s=stats.trees / median(c.times),
                                       vs_lstm=median([b / a for a, b in zip(c.times, lstm.times)]),
                                       vs_bound=median([t * r / (3 * flops) for t, r in zip(c.times, rates)]))
            if model in today:
                row["vs_today"] = row["train_trees_per_s"] / today[model]
            if c.step is not None:
                s = c.step.stats
                row.update(replayed=c.step.replayable, shapes=len(s.shapes), captures=s.captures,
                           capture_s=s.capture_seconds, padding=s.padding)
            rows.append(row)
        print_rows([r for r in rows if r["batch"] == B])
        done(rows)
    return rows


def _today(E: int, B: int) -> dict[str, float]:
    """Eager GPU trees/s of the committed run, by model."""
    if not TODAY.is_file():
        return {}
    rows = json.loads(TODAY.read_text())["rows"]
    return {r["model"]: r["train_trees_per_s"] for r in rows if r["embedding"] == E and r["batch"] == B}


def print_rows(rows: list[dict]) -> None:
    print(f"{'model':<12}{'mode':<10}{'B':>5}{'trees/s':>10}{'×LSTM':>8}{'×today':>8}{'×bound':>8}{'shapes':>8}"
          f"{'pad':>6}")
    for r in rows:
        today = f"{r['vs_today']:.2f}" if "vs_today" in r else "-"
        shapes = str(r.get("shapes", "-"))
        pad = f"{r['padding']:.2f}" if "padding" in r else "-"
        mode = r["mode"] if r.get("replayed", True) else "eager*"
        print(f"{CELL_NAMES.get(r['model'], r['model']):<12}{mode:<10}{r['batch']:>5}{r['train_trees_per_s']:>10.0f}"
              f"{r['vs_lstm']:>8.2f}{today:>8}{r['vs_bound']:>8.1f}{shapes:>8}{pad:>6}")
    print(flush=True)


def epochs(args: argparse.Namespace, trees: list[Data], vocab_size: int, device: torch.device) -> list[dict]:
    """One shuffled SST epoch at batch 25 per model: replayed (first and second epoch) and, for N-ary, eager."""
    rows = []
    order = list(range(min(len(trees), args.epoch_trees or len(trees))))
    random.Random(0).shuffle(order)
    groups = [[trees[i] for i in order[k:k + args.epoch_batch]] for k in range(0, len(order), args.epoch_batch)]
    for cell in args.cells:
        if cell in ("top_down", "bicontree"):  # not replayed: their eager epoch is the eager rows' story
            continue
        for replay in (True, False) if cell == "nary" else (True,):
            torch.manual_seed(0)
            c = Contender(cell, tree_model(cell, args.embedding, vocab_size).to(device), replay, device)
            for epoch in (1, 2) if replay else (1,):
                synchronize(device)
                start = time.perf_counter()
                for group in groups:
                    batch = Batch.from_data_list(group)
                    c.train([batch] if replay else [batch.to(device)])
                synchronize(device)
                row = dict(model=cell, mode="replayed" if replay else "eager", epoch=epoch,
                           seconds=time.perf_counter() - start, trees=len(order), batch=args.epoch_batch)
                if c.step is not None:
                    s = c.step.stats
                    row.update(replayed=c.step.replayable, shapes=len(s.shapes), captures=s.captures,
                               capture_s=s.capture_seconds, padding=s.padding)
                rows.append(row)
                print(f"epoch {cell:<12} {row['mode']:<9} {epoch} {row['seconds']:7.2f} s "
                      f"{row.get('shapes', '-')} shapes, captures {row.get('capture_s', 0):.2f} s, "
                      f"padding {row.get('padding', float('nan')):.2f}", flush=True)
    return rows


CPU_NAMES = {"child_sum": "childsum", "lstm_rnn": "lstmrnn"}  # benchmarks/epoch.py's names of the same models


def tables(step: dict, epoch: dict | None, cpu_epoch: dict | None) -> str:
    """docs/performance.md's tables of a step results file, an epoch results file and the CPU's epoch
    (benchmarks/epoch.py)."""
    lines = [f"Training step on {step['machine'].get('gpu', step['machine']['device'])} (torch "
             f"{step['machine']['torch']}), {step['data']}, embeddings {step['rows'][0]['embedding']}, hidden "
             f"{HIDDEN} (`{step['command']}`). `× today`: trees/s over the eager rows of "
             f"`benchmarks/results/cuda-threads1.json`; `shapes`: the bucket shapes the workload's batches took; "
             "`padding`: rows run over the batches' nodes.", "",
             "| model | batch | mode | train trees/s | × nn.LSTM | × today | × FLOP bound | shapes | padding |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in step["rows"]:
        today = f"{r['vs_today']:.2f}" if "vs_today" in r else "—"
        shapes = str(r["shapes"]) if "shapes" in r else "—"
        padding = f"{r['padding']:.2f}" if "padding" in r else "—"
        lines.append(f"| {CELL_NAMES.get(r['model'], r['model'])} | {r['batch']} | {r['mode']} | "
                     f"{r['train_trees_per_s']:.0f} | {r['vs_lstm']:.2f} | {today} | {r['vs_bound']:.1f} | "
                     f"{shapes} | {padding} |")
    if epoch and epoch.get("epochs"):
        cpu = {}
        if cpu_epoch is not None:
            from epoch import timed_epochs
            cpu = {model: median for model, setup, _, _, median in timed_epochs(cpu_epoch) if setup == "1x2"}
        rows = epoch["epochs"]
        lines += ["", f"One SST training epoch ({rows[0]['trees']} trees, batch {rows[0]['batch']}, shuffled; "
                  f"`{epoch['command']}`), seconds, collation and schedules included; the CPU's epoch at two "
                  "threads from `benchmarks/results/epoch-cpu.json` (`experiments/sst.py`'s training epoch, "
                  "its own settings).", "",
                  "| model | GPU, first epoch | of which captures | GPU, later epoch | shapes | padding | "
                  "GPU eager | CPU, 2 threads |", "|---|---|---|---|---|---|---|---|"]
        for model in dict.fromkeys(r["model"] for r in rows):
            first = next(r for r in rows if r["model"] == model and r["mode"] == "replayed" and r["epoch"] == 1)
            later = next(r for r in rows if r["model"] == model and r["mode"] == "replayed" and r["epoch"] == 2)
            eager = next((r for r in rows if r["model"] == model and r["mode"] == "eager"), None)
            on_cpu = cpu.get(CPU_NAMES.get(model, model))
            lines.append(f"| {CELL_NAMES.get(model, model)} | {first['seconds']:.2f} | {first['capture_s']:.2f} | "
                         f"{later['seconds']:.2f} | {first['shapes']} | {first['padding']:.2f} | "
                         f"{'—' if eager is None else format(eager['seconds'], '.2f')} | "
                         f"{'—' if on_cpu is None else format(on_cpu, '.2f')} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--cells", type=lambda s: tuple(s.split(",")), default=CELLS)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[25, 256])
    parser.add_argument("--embedding", type=int, default=300)
    parser.add_argument("--workload", type=int, default=512, help="trees per timed epoch (default 512)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--epoch", action="store_true", help="also one SST epoch per model")
    parser.add_argument("--epoch-batch", type=int, default=25)
    parser.add_argument("--no-grid", action="store_true", help="only the epochs")
    parser.add_argument("--epoch-trees", type=int, default=None, help="the epoch's first trees only (a short run)")
    parser.add_argument("--sst", default=None, help="trainDevTestTrees_PTB.zip (default: where the experiments read "
                                                    "SST, $GRAPHTREE_MIRROR or ../shared/data beside the repository)")
    parser.add_argument("--out", default=None, help="results file (default: none written)")
    parser.add_argument("--table", nargs="+", metavar="RESULTS",
                        help="print docs/performance.md's tables of a step results file (and an epoch results "
                             "file) and exit")
    args = parser.parse_args(argv)
    args.sst = sst_archive() if args.sst is None else args.sst
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.table:
        step, *rest = [json.loads(Path(f).read_text()) for f in args.table]
        cpu_epoch = RESULTS / "epoch-cpu.json"
        print(tables(step, rest[0] if rest else None,
                     json.loads(cpu_epoch.read_text()) if cpu_epoch.is_file() else None))
        return
    device = torch.device(args.device)
    torch.set_num_threads(1)
    started = time.time()
    loaded = load_sst(Path(args.sst))
    trees, vocab_size = loaded if loaded is not None else random_trees(max(args.workload, 2000))
    data = f"SST train ({Path(args.sst).name})" if loaded is not None else "random trees with SST's lengths"
    print(f"{len(trees)} trees from {data}; buckets {Buckets()}", flush=True)

    def write(rows: list[dict], epoch_rows: list[dict]) -> None:
        if args.out:
            out = Path(args.out)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(dict(command="python benchmarks/gpu_step.py " + " ".join(sys.argv[1:]),
                                           data=data, machine=machine(device, 1), buckets=str(Buckets()),
                                           rows=rows, epochs=epoch_rows, seconds=time.time() - started), indent=1))

    rows = run_grid(args, trees, vocab_size, device, lambda rows: write(rows, [])) if not args.no_grid else []
    epoch_rows = epochs(args, trees, vocab_size, device) if args.epoch else []
    write(rows, epoch_rows)
    if args.out:
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
