"""Speed of graphtree's tree cells against a per-node recursive Tree-LSTM and ``torch.nn.LSTM``.

For every cell, embedding size and batch size it times, on the first sentences
of the SST training split in file order (random trees of SST's size
distribution when the treebank is absent):

* training: forward, backward and an optimizer step, every node classified and
  the loss summed over nodes; inference: forward only, without autograd;
* on the same sentences and in the same repetitions, three references: the plain
  recursive Tree-LSTM of ``recursive_reference.py`` (one tree at a time, one
  node at a time), the same N-ary model as the plainest level loop of
  ``plain_level_loop.py`` (one ``index_select``, one ``addmm`` and the gate math
  per level, autograd for the rest: what each specialization must beat), and
  ``torch.nn.LSTM`` over the words (a padded batch, a classifier on every time
  step);
* the essential matmul FLOPs of each model (formulas in :func:`forward_flops`)
  against the measured rate of one large matmul, i.e. how far a row is from the
  FLOP bound.

Then, for the N-ary cell: time and peak memory of a training step on batches
of about 1k, 10k and 100k nodes, and the time per level of a chain (a tree of
one-child nodes) 1k, 5k and 10k deep.

Run from the repository root::

    python benchmarks/tree_lstm.py            # full run
    python benchmarks/tree_lstm.py --quick    # under two minutes

The shared machines this runs on are noisy, so every repetition times all
contenders back to back (in a rotating order), ratios are taken within a
repetition and the median over repetitions is reported.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lab_path  # noqa: F401  (the lab, not installed)
import torch
import torch.nn.functional as F
from lab.provenance import code_state, processor_name
from lab.runs import corpus_file
from plain_level_loop import PlainLevelTreeLSTM
from recursive_reference import RecursiveTreeLSTM, tree_from_data
from torch import Tensor, nn
from torch_geometric.data import Batch, Data

from graphtree.backend import native
from graphtree.data import NO_WORD, from_ptb
from graphtree.data.tree import tree_data
from graphtree.datasets import SST
from graphtree.engine import schedule_of
from graphtree.models import BiTreeLSTM, NodeEmbedding, TreeClassifier, node_loss
from graphtree.nn import LSTMRNN, SLSTM, ChildSumTreeLSTM, NaryTreeLSTM
from graphtree.schedule import Schedule
from graphtree.train import make_optimizer

# --------------------------------------------------------------------------- configuration

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"   # the committed results files, written only when --out names one

HIDDEN = 150
NUM_CLASSES = 5  # SST fine-grained labels, on every node
MLP = 128  # BiTreeLSTM's classifier layer (Teng & Zhang's sentiment setting)
# Adagrad (Tai et al.'s optimizer) with a small step: every repetition restores the initial weights anyway
# (see Trainer), and a small step keeps the gates away from saturation within one epoch.
LEARNING_RATE = 1e-3

CELLS = ("nary", "child_sum", "slstm", "lstm_rnn", "contree_lex", "top_down", "bicontree")
CELL_NAMES = {"nary": "N-ary", "child_sum": "Child-Sum", "slstm": "S-LSTM", "lstm_rnn": "LSTM-RNN",
              "contree_lex": "ConTree+Lex", "top_down": "top-down", "bicontree": "BiConTree",
              "lstm": "nn.LSTM", "recursive": "recursive", "plain": "plain loop"}

FULL = dict(embeddings=(300, 50), batch_sizes=(25, 100, 256), workload=256, reference_trees=50, reps=5,
            warmup=1, scale_nodes=(1_000, 10_000, 100_000), scale_reps=7, scale_processes=3,
            chain_depths=(1_000, 5_000, 10_000),
            chain_reps=3, cells=CELLS)
QUICK = dict(embeddings=(300,), batch_sizes=(25,), workload=50, reference_trees=25, reps=3, warmup=1,
             scale_nodes=(1_000, 10_000, 100_000), scale_reps=1, scale_processes=1, chain_depths=(1_000, 10_000),
             chain_reps=1,
             cells=CELLS)

# Targets of the issue, for the N-ary cell at hidden 150, embeddings 300, batch 25, 2 threads.
TARGET_SETTING = dict(embedding=300, batch=25, threads=2)
TARGETS = dict(train_vs_lstm=1.0, train_vs_recursive=40.0, infer_vs_lstm=1.0, cell_vs_nary=1.5,
               bicontree_vs_nary=2.5, bound_256=3.0, linear=1.3)

# Fallback sentence lengths: SST train deciles of the number of words (min, 10%, ..., max).
SST_LENGTH_DECILES = (2, 7, 11, 13, 16, 18, 21, 24, 27, 32, 52)
# Left spans drawn as u**SKEW of the span make random bracketings about as deep as SST's (mean height ~10).
SPLIT_SKEW = 4.0


# --------------------------------------------------------------------------- data

def load_sst(path: Path, limit: int | None = None) -> tuple[list[Data], int] | None:
    """Training trees in file order (first ``limit``) and the vocabulary size, or ``None`` without the data."""
    if not path.is_file():
        return None
    with zipfile.ZipFile(path) as archive:
        lines = archive.read("trees/train.txt").decode("utf-8").splitlines()
    vocab: dict[str, int] = {}

    def word_id(token: str) -> int:
        return vocab.setdefault(token, len(vocab))

    trees = [_slim(from_ptb(line, vocab=word_id)) for line in lines[:limit] if line.strip()]
    return trees, len(vocab)


def random_trees(count: int, seed: int = 0, vocab_size: int = 20_000) -> tuple[list[Data], int]:
    """Random binary trees whose sentence lengths follow SST's training split."""
    rng = random.Random(seed)
    trees = []
    for _ in range(count):
        k = rng.randrange(len(SST_LENGTH_DECILES) - 1)
        lo, hi = SST_LENGTH_DECILES[k], SST_LENGTH_DECILES[k + 1]
        trees.append(_random_tree(rng.randint(lo, hi), rng, vocab_size))
    return trees, vocab_size


def _random_tree(num_words: int, rng: random.Random, vocab_size: int) -> Data:
    parent, child_pos, word_pos = [], [], []
    stack = [(0, num_words, -1, -1)]  # (span start, span end, parent node, position under it)
    while stack:  # pre-order, like from_ptb
        start, end, up, pos = stack.pop()
        node = len(parent)
        parent.append(up)
        child_pos.append(pos)
        if end - start == 1:
            word_pos.append(start)
            continue
        word_pos.append(-1)
        split = start + 1 + min(int((end - start - 1) * rng.random() ** SPLIT_SKEW), end - start - 2)
        stack.append((split, end, node, 1))
        stack.append((start, split, node, 0))
    tokens = [str(rng.randrange(vocab_size)) for _ in range(num_words)]
    labels = [rng.randrange(NUM_CLASSES) for _ in parent]
    return _slim(tree_data(parent, child_pos, labels, word_pos, tokens, vocab=int))


def chain_tree(depth: int) -> Data:
    """A tree of ``depth`` nodes, each with one child: the deepest possible tree of that size."""
    parent = [-1, *range(depth - 1)]
    child_pos = [-1] + [0] * (depth - 1)
    word_pos = [-1] * (depth - 1) + [0]
    return _slim(tree_data(parent, child_pos, [0] * depth, word_pos, ["0"], vocab=int))


def _slim(data: Data) -> Data:
    """Only what the models and the schedule read, so collation costs what a training loader would pay."""
    return Data(edge_index=data.edge_index, edge_pos=data.edge_pos, num_nodes=data.num_nodes, y=data.y,
                word=data.word, word_pos=data.word_pos, height=data.height, depth=data.depth)


def take_nodes(trees: list[Data], nodes: int) -> list[Data]:
    """The first trees holding at least ``nodes`` nodes together."""
    out, total = [], 0
    for tree in trees:
        if total >= nodes:
            break
        out.append(tree)
        total += tree.num_nodes
    return out


def sentences(args: argparse.Namespace, needed_nodes: int = 0, needed_trees: int = 0) -> tuple[list[Data], int, str]:
    """Trees for the benchmark, the vocabulary size, and where they came from."""
    # A probe needs only enough trees for its batch (SST averages 37 nodes a tree).
    limit = needed_nodes // 25 + 50 if args.memory_probe is not None else None
    loaded = load_sst(Path(args.sst), limit)
    if loaded is not None:
        return loaded[0], loaded[1], f"SST train ({Path(args.sst).name})"
    count = max(needed_trees, needed_nodes // 30 + 100)
    trees, vocab_size = random_trees(count)
    return trees, vocab_size, "random trees with SST's length distribution (SST not found)"


# --------------------------------------------------------------------------- models

class ProjectedEmbedding(nn.Module):
    """Word vectors projected to the hidden size.

    LSTM-RNN's leaves output their input vector, so its input width must be the
    hidden size; projecting keeps the benchmark's embedding sizes meaningful.
    Only words are projected: the cell reads no input at inner nodes.
    """

    def __init__(self, embedding: NodeEmbedding, channels: int) -> None:
        super().__init__()
        self.embedding = embedding
        self.project = nn.Linear(embedding.embedding_dim, channels)
        self.embedding_dim = channels

    def forward(self, word: Tensor) -> Tensor:
        # Every node projected, then the non-words zeroed: the same rows as projecting the words alone, with no
        # shape that depends on the data (a replayed step may not ask the GPU how many words there are).
        is_word = (word != NO_WORD).unsqueeze(-1).to(self.project.weight.dtype)
        return self.project(self.embedding(word)) * is_word


class BiTreeClassifier(nn.Module):
    """Word ids to :class:`BiTreeLSTM` node logits (the model itself takes node vectors)."""

    def __init__(self, embedding: NodeEmbedding, model: BiTreeLSTM) -> None:
        super().__init__()
        self.embedding, self.model = embedding, model

    def forward(self, batch: Batch) -> Tensor:
        return self.model(self.embedding(batch.word), batch)


class SequenceLSTM(nn.Module):
    """``torch.nn.LSTM`` over a padded batch of sentences with a classifier on every time step."""

    def __init__(self, vocab_size: int, embedding_dim: int, hidden: int, num_classes: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.embedding.weight.requires_grad_(False)
        self.lstm = nn.LSTM(embedding_dim, hidden)
        self.classifier = nn.Linear(hidden, num_classes)

    def forward(self, words: Tensor) -> Tensor:
        return self.classifier(self.lstm(self.embedding(words))[0])


def tree_model(cell: str, embedding_dim: int, vocab_size: int) -> nn.Module:
    """A node classifier around ``cell``; word vectors are frozen in every model (see README)."""
    embedding = NodeEmbedding(vocab_size, embedding_dim, freeze=True)
    E, d, C = embedding_dim, HIDDEN, NUM_CLASSES
    if cell == "nary":
        return TreeClassifier(embedding, NaryTreeLSTM(E, d), C, dropout=0.0)
    if cell == "child_sum":
        return TreeClassifier(embedding, ChildSumTreeLSTM(E, d), C, dropout=0.0)
    if cell == "slstm":  # "embedding" leaves would need E == d
        return TreeClassifier(embedding, SLSTM(E, d, leaf="lstm"), C, dropout=0.0)
    if cell == "lstm_rnn":
        return TreeClassifier(ProjectedEmbedding(embedding, d), LSTMRNN(d, d), C, dropout=0.0)
    return BiTreeClassifier(embedding, BiTreeLSTM(E, d, C, mlp_channels=MLP, variant=cell))


# --------------------------------------------------------------------------- FLOP counts

@dataclass
class TreeStats:
    """Counts that the FLOP formulas need, summed over a set of sentences."""

    trees: int = 0
    nodes: int = 0
    leaves: int = 0  # = words
    internal: int = 0
    edges: int = 0  # child -> parent edges, = nodes - trees
    inner_edges: int = 0  # edges whose child is an internal node
    slots: int = 0  # children slots of internal nodes at arity 2 (= 2 * internal on binary trees)
    max_words: int = 0

    def add(self, data: Data) -> None:
        leaf = data.height == 0
        child = data.edge_index[0]
        self.trees += 1
        self.nodes += data.num_nodes
        self.leaves += int(leaf.sum())
        self.internal += int((~leaf).sum())
        self.edges += child.numel()
        self.inner_edges += int((~leaf[child]).sum())
        self.slots += 2 * int((~leaf).sum())
        self.max_words = max(self.max_words, int(leaf.sum()))


def forward_flops(model: str, s: TreeStats, E: int, d: int = HIDDEN, C: int = NUM_CLASSES) -> float:
    """Essential matmul FLOPs (2 per multiply-add) of one forward pass over ``s``'s sentences.

    Counted from each model's equations, for binary trees, not from what the
    implementation happens to compute: a product with a state that is zero by
    definition (a leaf's children, a root's parent) is not counted, a product
    shared by several gates is counted once. Training costs three times this
    (forward, gradient of the inputs, gradient of the weights).

    * N-ary (constituency) and the recursive reference: leaf unit ``2dE`` per
      leaf; ``U`` over both children, ``5d x 2d``, per internal node.
    * Child-Sum: ``W x``, ``4dE``, on every node (the cell gives every node an
      input); ``U_iou``, ``3d^2``, per internal node; ``U_f``, ``d^2``, per edge.
    * S-LSTM (``leaf="lstm"``): leaf unit ``2dE``; ``W_h`` ``5d x 2d``,
      ``W_c`` ``3d x 2d``, ``W_co`` ``d x d`` per internal node (``17d^2``).
    * LSTM-RNN: projection ``dE`` per leaf; per edge the child's output feeds
      six maps (i and f of both positions, c and o of its own), ``6d^2``, and an
      internal child's memory four peepholes, ``4d^2``; ``W_co`` per internal
      node (Le & Zuidema's ``17Nd^2`` for ``N`` leaves).
    * Head lexicalization (ConTree+Lex, top-down, BiConTree): ``W_zx``,
      ``E x 2E``, per internal node.
    * Lexicalized bottom-up: ``W_x``, ``4dE``, per node; ``W_h`` and ``W_c``
      (``16d^2``) per internal node; ``W_co`` per node.
    * Top-down: ``W_x``, ``4dE``, per node; ``W_h`` and ``W_c`` (``6d^2``) per
      non-root node; ``W_co`` per node.
    * Classifiers: ``dC`` per node; BiTreeLSTM's ``F x 128 + 128 x C`` with
      ``F = d``, ``2d`` (top-down) or ``3d`` (BiConTree).
    * nn.LSTM: ``4d(E + d)`` per word plus ``dC`` per word (padding excluded).
    """
    macs: float
    n = s.nodes
    heads = 2 * E * E * s.internal
    lexical_up = 4 * d * E * n + 16 * d * d * s.internal + d * d * n
    top_down = 4 * d * E * n + 6 * d * d * s.edges + d * d * n
    if model in ("nary", "recursive", "plain"):
        macs = 2 * d * E * s.leaves + 5 * d * 2 * d * s.internal + d * C * n
    elif model == "child_sum":
        macs = 4 * d * E * n + 3 * d * d * s.internal + d * d * s.edges + d * C * n
    elif model == "slstm":
        macs = 2 * d * E * s.leaves + 17 * d * d * s.internal + d * C * n
    elif model == "lstm_rnn":
        macs = d * E * s.leaves + 6 * d * d * s.edges + 4 * d * d * s.inner_edges + d * d * s.internal + d * C * n
    elif model == "contree_lex":
        macs = heads + lexical_up + (d * MLP + MLP * C) * n
    elif model == "top_down":
        macs = heads + top_down + (2 * d * MLP + MLP * C) * n
    elif model == "bicontree":
        macs = heads + lexical_up + top_down + (3 * d * MLP + MLP * C) * n
    elif model == "lstm":
        macs = 4 * d * (E + d) * s.leaves + d * C * s.leaves
    else:
        raise ValueError(model)
    return 2.0 * macs


# --------------------------------------------------------------------------- timing helpers

def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], Any], device: torch.device) -> float:
    """Wall time of ``fn()``; on CUDA the queue is drained before both clock reads."""
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def spread(values: list[float]) -> float:
    """(max - min) / median: how noisy a set of repetitions was."""
    return (max(values) - min(values)) / statistics.median(values) if len(values) > 1 else 0.0


def matmul_probe(device: torch.device) -> tuple[Callable[[], None], float]:
    """One large float32 matmul (the machine's practical peak at this thread count) and its FLOPs."""
    n = 2048 if device.type == "cpu" else 8192
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)

    def run() -> None:
        a @ b

    run()  # the first call loads kernels and warms caches
    return run, 2.0 * n ** 3


def matmul_rate(device: torch.device, reps: int = 5) -> float:
    """Median FLOP/s of the matmul probe."""
    run, flops = matmul_probe(device)
    return flops / median([timed(run, device) for _ in range(reps)])


def build_schedule(batch: Batch) -> Schedule:
    """A batch's schedule with both directions' plans, as a data loader would prepare it."""
    schedule = Schedule.from_data(batch)
    schedule.plan("bottom_up")
    schedule.plan("top_down")
    return schedule


def attach_schedule(batch: Batch) -> float:
    """Time ``batch``'s schedule and attach it, as a loader does; returns the median seconds of three builds."""
    seconds = [timed(lambda: build_schedule(batch), torch.device("cpu")) for _ in range(3)]
    batch.schedule = build_schedule(batch)  # carried by the batch: the timed runs use it
    return median(seconds)


# --------------------------------------------------------------------------- contenders

class Trainer:
    """A model, its optimizer, and a way back to their initial state.

    Repetitions must do identical work. Left to train on the same few batches,
    the weights drift until gates saturate and gradients turn denormal, and
    float32 arithmetic on denormals is an order of magnitude slower on x86: a
    step on 1k nodes went from 0.05 s to 1.3 s after one step on 100k nodes.
    So every repetition starts from the same weights and optimizer state,
    restored outside the timed region.
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        # The library's AdaGrad, fused where PyTorch has it, as the experiments train.
        self.optimizer = make_optimizer("adagrad", [p for p in model.parameters() if p.requires_grad], LEARNING_RATE)
        self._model_state = copy.deepcopy(model.state_dict())
        self._optimizer_state = copy.deepcopy(self.optimizer.state_dict())

    def reset(self) -> None:
        self.model.load_state_dict(self._model_state)
        # A copy each time: load_state_dict may keep the given tensors, which step() then updates in place.
        self.optimizer.load_state_dict(copy.deepcopy(self._optimizer_state))

    def step(self, batch: Batch) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        node_loss(self.model(batch), batch.y).backward()
        self.optimizer.step()


@dataclass
class Contender:
    """One model on one workload: closures that run a training epoch and an inference epoch over it."""

    name: str
    train: Callable[[], None]
    infer: Callable[[], None]
    stats: TreeStats
    reset: Callable[[], None] = lambda: None
    times: dict[str, list[float]] = field(default_factory=lambda: {"train": [], "infer": []})


def tree_contender(name: str, model: nn.Module, batches: list[Batch], stats: TreeStats) -> Contender:
    trainer = Trainer(model)

    def train() -> None:
        model.train()
        for batch in batches:
            trainer.step(batch)

    def infer() -> None:
        model.eval()
        with torch.no_grad():
            for batch in batches:
                model(batch)

    return Contender(name, train, infer, stats, trainer.reset)


def padded_words(trees: list[Data], device: torch.device) -> tuple[Tensor, Tensor]:
    """``[T, B]`` word ids and word labels (``-1`` on padding), words in sentence order."""
    length = max(int((t.height == 0).sum()) for t in trees)
    words = torch.zeros(length, len(trees), dtype=torch.long)
    labels = torch.full((length, len(trees)), -1, dtype=torch.long)
    for k, tree in enumerate(trees):
        leaf = tree.word_pos >= 0
        order = torch.argsort(tree.word_pos[leaf])
        words[:order.numel(), k] = tree.word[leaf][order]
        labels[:order.numel(), k] = tree.y[leaf][order]
    return words.to(device), labels.to(device)


def lstm_contender(model: SequenceLSTM, groups: list[list[Data]], stats: TreeStats,
                   device: torch.device) -> Contender:
    padded = [padded_words(group, device) for group in groups]
    trainer = Trainer(model)
    optimizer = trainer.optimizer

    def train() -> None:
        model.train()
        for words, labels in padded:
            optimizer.zero_grad(set_to_none=True)
            logits = model(words)
            F.cross_entropy(logits.view(-1, NUM_CLASSES), labels.view(-1), ignore_index=-1,
                            reduction="sum").backward()
            optimizer.step()

    def infer() -> None:
        model.eval()
        with torch.no_grad():
            for words, _ in padded:
                model(words)

    return Contender("lstm", train, infer, stats, trainer.reset)


def recursive_contender(model: RecursiveTreeLSTM, trees: list[Data], batch_size: int, stats: TreeStats,
                        device: torch.device) -> Contender:
    converted = [tree_from_data(tree) for tree in trees]
    converted = [(root, words.to(device)) for root, words in converted]
    trainer = Trainer(model)
    optimizer = trainer.optimizer

    def train() -> None:
        model.train()
        for start in range(0, len(converted), batch_size):
            optimizer.zero_grad(set_to_none=True)
            for root, words in converted[start:start + batch_size]:
                model(root, words).backward()  # one tree at a time; gradients add up over the batch
            optimizer.step()

    def infer() -> None:
        model.eval()
        with torch.no_grad():
            for root, words in converted:
                model(root, words)

    return Contender("recursive", train, infer, stats, trainer.reset)


def check_reference(vocab_size: int, trees: list[Data], device: torch.device) -> float:
    """Largest logit difference between ``NaryTreeLSTM`` and either reference (recursive, plain level loop) with
    the same weights."""
    torch.manual_seed(0)
    nary = tree_model("nary", 50, vocab_size).to(device).eval()
    reference = RecursiveTreeLSTM(vocab_size, 50, HIDDEN, NUM_CLASSES).to(device).eval()
    reference.load_from(nary.embedding.embedding, nary.cell, nary.classifier)
    plain = PlainLevelTreeLSTM(vocab_size, 50, HIDDEN, NUM_CLASSES).to(device).eval()
    plain.load_from(nary.embedding.embedding, nary.cell, nary.classifier)
    worst = 0.0
    with torch.no_grad():
        five = Batch.from_data_list(trees[:5]).to(device)
        worst = float((plain(five) - nary(five)).abs().max())
        for tree in trees[:5]:
            graph = Batch.from_data_list([tree]).to(device)
            expected = nary(graph)
            root, words = tree_from_data(tree)
            outputs: list[Tensor] = []
            reference(root, words.to(device), outputs)
            # The recursion emits logits in post-order; match them to nodes by recomputing that order.
            order = _post_order(tree)
            worst = max(worst, float((torch.cat(outputs) - expected[order]).abs().max()))
    return worst


def _post_order(tree: Data) -> list[int]:
    children: dict[int, list[tuple[int, int]]] = {}
    for c, p, pos in zip(*tree.edge_index.tolist(), tree.edge_pos.tolist()):
        children.setdefault(p, []).append((pos, c))
    root = int((tree.depth == 0).nonzero()[0])
    order: list[int] = []
    stack: list[tuple[int, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        stack.append((node, True))
        stack.extend((c, False) for _, c in sorted(children.get(node, []), reverse=True))
    return order


# --------------------------------------------------------------------------- the cell grid

def run_grid(config: dict, trees: list[Data], vocab_size: int, device: torch.device) -> list[dict]:
    """Every cell and both references at every embedding and batch size; one result row per model."""
    rows = []
    for E in config["embeddings"]:
        torch.manual_seed(0)
        # Built once per embedding size and reused across batch sizes; repetitions restore their initial state.
        tree_models = {cell: tree_model(cell, E, vocab_size).to(device) for cell in config["cells"]}
        lstm = SequenceLSTM(vocab_size, E, HIDDEN, NUM_CLASSES).to(device)
        reference = RecursiveTreeLSTM(vocab_size, E, HIDDEN, NUM_CLASSES).to(device)
        for B in config["batch_sizes"]:
            count = math.ceil(config["workload"] / B) * B
            workload = trees[:count]
            groups = [workload[k:k + B] for k in range(0, count, B)]
            collate = [timed(lambda g=group: Batch.from_data_list(g), torch.device("cpu")) for group in groups]
            batches = [Batch.from_data_list(group) for group in groups]
            schedule_seconds = [attach_schedule(batch) for batch in batches]
            batches = [batch.to(device) for batch in batches]
            stats = TreeStats()
            for tree in workload:
                stats.add(tree)
            ref_trees = workload[:config["reference_trees"]]
            ref_stats = TreeStats()
            for tree in ref_trees:
                ref_stats.add(tree)
            contenders = [tree_contender(cell, tree_models[cell], batches, stats) for cell in config["cells"]]
            if "nary" in tree_models:  # the plainest level loop of the same model, from the same weights
                plain = PlainLevelTreeLSTM(vocab_size, E, HIDDEN, NUM_CLASSES).to(device)
                plain.load_from(tree_models["nary"].embedding.embedding, tree_models["nary"].cell,
                                tree_models["nary"].classifier)
                contenders.append(tree_contender("plain", plain, batches, stats))
            contenders.append(lstm_contender(lstm, groups, stats, device))
            contenders.append(recursive_contender(reference, ref_trees, B, ref_stats, device))
            # The matmul rate is sampled inside every repetition too, so FLOP-bound ratios are pairwise as well.
            probe, probe_flops = matmul_probe(device)
            contenders.append(Contender("matmul", probe, probe, TreeStats()))
            print(f"[E={E} B={B}] {len(batches)} batches, {stats.trees} trees, {stats.nodes} nodes, levels per "
                  f"batch {median([schedule_of(b).bottom_up.num_levels for b in batches]):.0f}; "
                  f"recursive reference on the first {ref_stats.trees} trees", flush=True)
            for rep in range(config["warmup"] + config["reps"]):
                shift = rep % len(contenders)  # rotate so that no model always runs right after another
                for contender in contenders[shift:] + contenders[:shift]:
                    contender.reset()
                    train_s = timed(contender.train, device)
                    infer_s = timed(contender.infer, device)
                    if rep >= config["warmup"]:
                        contender.times["train"].append(train_s)
                        contender.times["infer"].append(infer_s)
            block = summarize(contenders, E, B, probe_flops, median(schedule_seconds), median(collate))
            rows.extend(block)
            print_block(block)
    return rows


def summarize(contenders: list[Contender], E: int, B: int, probe_flops: float, schedule_s: float,
              collate_s: float) -> list[dict]:
    """Per-model medians and the pairwise (same repetition) ratios."""
    by_name = {c.name: c for c in contenders}
    lstm, ref, nary = by_name["lstm"], by_name["recursive"], by_name.get("nary")
    rates = [probe_flops / t for t in by_name["matmul"].times["train"]]
    rows = []
    for c in contenders:
        if c.name == "matmul":
            continue
        row: dict[str, Any] = dict(model=c.name, embedding=E, batch=B, trees=c.stats.trees, nodes=c.stats.nodes)
        for mode in ("train", "infer"):
            t = c.times[mode]
            row[f"{mode}_s"] = median(t)
            row[f"{mode}_spread"] = spread(t)
            row[f"{mode}_trees_per_s"] = c.stats.trees / median(t)
            # Throughput ratios, rep by rep: the models of one repetition ran seconds apart.
            row[f"{mode}_vs_lstm"] = median([(c.stats.trees / a) / (lstm.stats.trees / b)
                                             for a, b in zip(t, lstm.times[mode])])
            # The reference runs on a prefix of the sentences, so compare node throughputs.
            row[f"{mode}_vs_recursive"] = median([(c.stats.nodes / a) / (ref.stats.nodes / b)
                                                  for a, b in zip(t, ref.times[mode])])
            if nary is not None and c.stats is nary.stats:
                row[f"{mode}_time_vs_nary"] = median([a / b for a, b in zip(t, nary.times[mode])])
        flops = forward_flops(c.name, c.stats, E)
        row["forward_gflop"] = flops / 1e9
        row["matmul_gflops"] = median(rates) / 1e9
        row["train_bound_s"] = 3 * flops / median(rates)
        # Time over the time the essential FLOPs would take at the matmul rate of the same repetition.
        row["train_vs_bound"] = median([t * r / (3 * flops) for t, r in zip(c.times["train"], rates)])
        row["infer_vs_bound"] = median([t * r / flops for t, r in zip(c.times["infer"], rates)])
        if c.name not in ("lstm", "recursive", "plain"):
            batches = math.ceil(c.stats.trees / B)
            row["schedule_ms_per_batch"] = 1e3 * schedule_s
            row["collate_ms_per_batch"] = 1e3 * collate_s
            row["schedule_share_of_train"] = schedule_s * batches / row["train_s"]
        rows.append(row)
    return rows


HEADER = (f"{'model':<12}{'E':>4}{'B':>5} {'train/s':>8} {'infer/s':>8} {'tr×LSTM':>8} {'in×LSTM':>8} "
          f"{'tr×rec':>7} {'in×rec':>7} {'tr×Nary':>8} {'tr×bound':>9} {'sched ms':>9} {'noise':>6}")


def print_block(rows: list[dict]) -> None:
    print(HEADER)
    for r in rows:
        nary = f"{r['train_time_vs_nary']:.2f}" if "train_time_vs_nary" in r else "-"
        sched = f"{r['schedule_ms_per_batch']:.1f}" if "schedule_ms_per_batch" in r else "-"
        print(f"{CELL_NAMES[r['model']]:<12}{r['embedding']:>4}{r['batch']:>5} {r['train_trees_per_s']:>8.0f} "
              f"{r['infer_trees_per_s']:>8.0f} {r['train_vs_lstm']:>8.2f} {r['infer_vs_lstm']:>8.2f} "
              f"{r['train_vs_recursive']:>7.1f} {r['infer_vs_recursive']:>7.1f} {nary:>8} "
              f"{r['train_vs_bound']:>9.1f} {sched:>9} {r['train_spread']:>6.2f}")
    print(flush=True)


# --------------------------------------------------------------------------- scaling: nodes, memory, depth

def node_scaling(config: dict, trees: list[Data], vocab_size: int, device: torch.device) -> list[dict]:
    """Training-step time of the N-ary cell (E=300) on batches of ~1k, 10k and 100k nodes, interleaved."""
    torch.manual_seed(0)
    trainer = Trainer(tree_model("nary", 300, vocab_size).to(device))
    batches = []
    for nodes in config["scale_nodes"]:
        batch = Batch.from_data_list(take_nodes(trees, nodes))
        attach_schedule(batch)
        batches.append(batch.to(device))
    times: list[list[float]] = [[] for _ in batches]
    for rep in range(1 + config["scale_reps"]):
        for k, batch in enumerate(batches):
            trainer.reset()
            seconds = timed(lambda b=batch: trainer.step(b), device)
            if rep > 0:
                times[k].append(seconds)
    return [dict(target_nodes=n, nodes=b.num_nodes, levels=schedule_of(b).bottom_up.num_levels,
                 train_s=median(t), us_per_node=1e6 * median(t) / b.num_nodes)
            for n, b, t in zip(config["scale_nodes"], batches, times)]


def scaling_probe(args: argparse.Namespace, config: dict) -> None:
    """Child-process entry: :func:`node_scaling` in a fresh process; prints its rows as one JSON line."""
    torch.set_num_threads(args.threads)
    trees, vocab_size, _ = sentences(args, needed_nodes=max(config["scale_nodes"]))
    print(json.dumps(node_scaling(config, trees, vocab_size, torch.device(args.device))))


def node_scaling_in_children(args: argparse.Namespace, config: dict) -> list[dict]:
    """:func:`node_scaling` in ``config["scale_processes"]`` fresh child processes; the median of each size.

    Within one process a 1k-node step times the same to a few percent from
    repetition to repetition, but not always from one process to the next
    (the 10k- and 100k-node steps far less so), and after the grid, in the
    grid's process, it read slower still. The arithmetic is the
    same in every process; where its tensors land in memory is the likely
    difference, and it weighs most on the shortest step. So each process times
    the sizes interleaved, as :func:`node_scaling` does, and the result is the
    median over processes; every process's times are kept (``per_process_s``).
    """
    command = [sys.executable, str(Path(__file__).resolve()), "--scaling-probe", "--threads", str(args.threads),
               "--device", args.device, "--sst", str(args.sst), *(["--quick"] if args.quick else [])]
    runs = []
    for _ in range(config["scale_processes"]):
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(f"node-scaling probe failed:\n{done.stderr[-2000:]}", file=sys.stderr)
            continue
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    if not runs:
        return []
    rows = []
    for k, first in enumerate(runs[0]):
        seconds = [run[k]["train_s"] for run in runs]
        rows.append(dict(first, train_s=median(seconds), us_per_node=1e6 * median(seconds) / first["nodes"],
                         per_process_s=seconds))
    return rows


def workload_batches(config: dict, trees: list[Data], B: int) -> tuple[list[list[Data]], list[Batch]]:
    """The first ``workload`` trees (rounded up to whole batches) in groups of ``B``, and those groups collated
    with their schedules attached (on the host)."""
    count = math.ceil(config["workload"] / B) * B
    groups = [trees[k:k + B] for k in range(0, count, B)]
    batches = [Batch.from_data_list(group) for group in groups]
    for batch in batches:
        attach_schedule(batch)
    return groups, batches


def native_kernels_ab(config: dict, trees: list[Data], vocab_size: int, device: torch.device) -> list[dict]:
    """Training and inference (E=300) of every cell, with and without its compiled level kernels.

    The kernels (``graphtree/csrc``, :mod:`graphtree.backend.dispatch`) replace a
    cell's ``update`` and the engine's level loop; this is what they are worth here, at
    each batch size of the grid, as time ratios within one repetition.
    """
    if device.type != "cpu" or native.native_kernels(torch.zeros(1)) is None:
        return []
    rows = []
    for cell, B in [(cell, B) for cell in config["cells"] for B in config["batch_sizes"]]:
        torch.manual_seed(0)
        groups, batches = workload_batches(config, trees, B)
        stats = TreeStats()
        contender = tree_contender(cell, tree_model(cell, 300, vocab_size), batches, stats)
        lstm = lstm_contender(SequenceLSTM(vocab_size, 300, HIDDEN, NUM_CLASSES).to(device), groups, stats, device)
        times: dict[str, list[float]] = {}
        for rep in range(config["warmup"] + config["reps"]):
            runs = [("native", True), ("pytorch", False)]
            for name, enabled in (runs if rep % 2 == 0 else runs[::-1]):
                with native.use_native(enabled):
                    for mode in ("train", "infer"):
                        contender.reset()
                        seconds = timed(getattr(contender, mode), device)
                        if rep >= config["warmup"]:
                            times.setdefault(f"{name}_{mode}", []).append(seconds)
            for mode in ("train", "infer"):
                seconds = timed(getattr(lstm, mode), device)
                if rep >= config["warmup"]:
                    times.setdefault(f"lstm_{mode}", []).append(seconds)
        row = dict(model=cell, batch=B, **{f"{k}_s": median(v) for k, v in times.items()})
        for mode in ("train", "infer"):
            row[f"{mode}_speedup"] = median([a / b for a, b in zip(times[f"pytorch_{mode}"],
                                                                   times[f"native_{mode}"])])
            for name in ("native", "pytorch"):
                row[f"{name}_{mode}_vs_lstm"] = median([a / b for a, b in zip(times[f"lstm_{mode}"],
                                                                              times[f"{name}_{mode}"])])
        rows.append(row)
        print(f"  {CELL_NAMES[cell]:<10} B={B:<4} training: kernels {row['native_train_s'] * 1e3:7.1f} ms, PyTorch "
              f"{row['pytorch_train_s'] * 1e3:7.1f} ms, speedup {row['train_speedup']:.2f}, ×LSTM "
              f"{row['pytorch_train_vs_lstm']:.2f} -> {row['native_train_vs_lstm']:.2f}; inference: speedup "
              f"{row['infer_speedup']:.2f}, ×LSTM {row['pytorch_infer_vs_lstm']:.2f} -> "
              f"{row['native_infer_vs_lstm']:.2f}")
    return rows


def memory_probe(args: argparse.Namespace) -> None:
    """Child-process entry: peak memory of one N-ary training step on ~``args.memory_probe`` nodes.

    Prints one JSON line. On CPU the peak is the rise of the resident set's
    high-water mark (``VmHWM``, reset through ``/proc/self/clear_refs``, or
    ``ru_maxrss`` where that is missing) over the resident size just before the
    step; the parent starts this process with glibc's mmap threshold lowered so
    that freed tensors go back to the system rather than to a reused heap. On
    CUDA it is ``torch.cuda.max_memory_allocated``.
    """
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    trees, vocab_size, _ = sentences(args, needed_nodes=args.memory_probe)
    batch = Batch.from_data_list(take_nodes(trees, args.memory_probe))
    warm = Batch.from_data_list(trees[:2])
    del trees
    for b in (batch, warm):
        attach_schedule(b)
    batch, warm = batch.to(device), warm.to(device)
    torch.manual_seed(0)
    trainer = Trainer(tree_model("nary", 300, vocab_size).to(device))
    trainer.step(warm)  # one-time allocations (kernels, thread pools, optimizer state)
    trainer.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        trainer.step(batch)
        torch.cuda.synchronize(device)
        peak, method = torch.cuda.max_memory_allocated(device) - base, "torch.cuda.max_memory_allocated"
    else:
        reset = _reset_peak_rss()
        base = _rss_bytes()[0] if reset else _maxrss_bytes()
        trainer.step(batch)
        peak = (_rss_bytes()[1] if reset else _maxrss_bytes()) - base
        method = "VmHWM - VmRSS (clear_refs)" if reset else "ru_maxrss delta"
    print(json.dumps(dict(target_nodes=args.memory_probe, nodes=batch.num_nodes, peak_bytes=peak, method=method)))


def _rss_bytes() -> tuple[int, int]:
    """Current and peak resident set size from ``/proc/self/status``."""
    fields = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            fields[key] = value
    return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")  # 5 resets the high-water mark to the current RSS
        return True
    except OSError:
        return False


def _maxrss_bytes() -> int:
    import resource

    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def memory_scaling(args: argparse.Namespace, config: dict) -> list[dict]:
    results = []
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0")
    for nodes in config["scale_nodes"]:
        command = [sys.executable, str(Path(__file__).resolve()), "--memory-probe", str(nodes),
                   "--threads", str(args.threads), "--device", args.device, "--sst", str(args.sst)]
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            print(f"memory probe for {nodes} nodes failed:\n{done.stderr[-2000:]}", file=sys.stderr)
            continue
        result = json.loads(done.stdout.strip().splitlines()[-1])
        result["bytes_per_node"] = result["peak_bytes"] / result["nodes"]
        results.append(result)
    return results


def chain_scaling(config: dict, device: torch.device) -> list[dict]:
    """Training and inference time per level of N-ary chains (one node per level)."""
    torch.manual_seed(0)
    model = tree_model("nary", 300, 1).to(device)
    trainer = Trainer(model)
    results = []
    warm = Batch.from_data_list([chain_tree(100)])
    attach_schedule(warm)
    warm = warm.to(device)
    trainer.step(warm)
    for depth in config["chain_depths"]:
        batch = Batch.from_data_list([chain_tree(depth)])
        schedule_s = attach_schedule(batch)
        batch = batch.to(device)
        train, infer = [], []
        for _ in range(config["chain_reps"]):
            trainer.reset()
            train.append(timed(lambda b=batch: trainer.step(b), device))
            with torch.no_grad():
                infer.append(timed(lambda b=batch: model.eval()(b), device))
            model.train()
        results.append(dict(depth=depth, train_s=median(train), infer_s=median(infer), schedule_s=schedule_s,
                            train_ms_per_level=1e3 * median(train) / depth,
                            infer_ms_per_level=1e3 * median(infer) / depth))
    return results


# --------------------------------------------------------------------------- targets

def check_targets(rows: list[dict], nodes: list[dict], memory: list[dict], chain: list[dict],
                  threads: int) -> list[dict]:
    """The issue's targets beside the measured values (at the issue's setting where the run has it)."""
    def row(model: str, E: int, B: int) -> dict | None:
        return next((r for r in rows if r["model"] == model and r["embedding"] == E and r["batch"] == B), None)

    E, B = TARGET_SETTING["embedding"], TARGET_SETTING["batch"]
    checks = []

    def add(name: str, value: float | None, target: float, at_most: bool = False) -> None:
        if value is None:
            checks.append(dict(target=name, goal=target, measured=None, met=None, at_most=at_most))
            return
        met = value <= target if at_most else value >= target
        checks.append(dict(target=name, goal=target, measured=value, met=met, at_most=at_most))

    nary = row("nary", E, B)
    add("N-ary training × nn.LSTM", nary and nary["train_vs_lstm"], TARGETS["train_vs_lstm"])
    add("N-ary training × recursive", nary and nary["train_vs_recursive"], TARGETS["train_vs_recursive"])
    add("N-ary inference × nn.LSTM", nary and nary["infer_vs_lstm"], TARGETS["infer_vs_lstm"])
    for cell in CELLS[1:]:
        r = row(cell, E, B)
        limit = TARGETS["bicontree_vs_nary"] if cell == "bicontree" else TARGETS["cell_vs_nary"]
        add(f"{CELL_NAMES[cell]} training time / N-ary", r and r.get("train_time_vs_nary"), limit, at_most=True)
    wide = row("nary", E, 256)
    add("N-ary batch 256 training / FLOP bound", wide and wide["train_vs_bound"], TARGETS["bound_256"], at_most=True)
    if len(nodes) >= 2:
        ratio = nodes[-1]["us_per_node"] / nodes[0]["us_per_node"]
        add(f"time per node {nodes[-1]['nodes']} / {nodes[0]['nodes']} nodes (grows by)", ratio, TARGETS["linear"],
            at_most=True)
        add("  ... and shrinks by (1k/100k, two-sided reading)", 1 / ratio, TARGETS["linear"], at_most=True)
    if len(memory) >= 2:
        ratio = memory[-1]["bytes_per_node"] / memory[0]["bytes_per_node"]
        add(f"memory per node {memory[-1]['nodes']} / {memory[0]['nodes']} nodes", ratio, TARGETS["linear"],
            at_most=True)
    if len(chain) >= 2:
        ratio = chain[-1]["train_ms_per_level"] / chain[0]["train_ms_per_level"]
        add(f"chain training time per level, depth {chain[-1]['depth']} / {chain[0]['depth']}", ratio,
            TARGETS["linear"], at_most=True)
    if threads != TARGET_SETTING["threads"]:
        print(f"note: the targets are set at {TARGET_SETTING['threads']} threads; this run used {threads}")
    return checks


def print_targets(checks: list[dict]) -> None:
    print(f"Targets (N-ary, hidden {HIDDEN}, embeddings {TARGET_SETTING['embedding']}, batch "
          f"{TARGET_SETTING['batch']}, {TARGET_SETTING['threads']} threads):")
    for c in checks:
        goal = f"{'<=' if c.get('at_most') else '>='} {c['goal']:g}"
        measured = "not measured" if c["measured"] is None else f"{c['measured']:.2f}"
        verdict = "" if c["met"] is None else ("met" if c["met"] else "NOT met")
        print(f"  {c['target']:<58} target {goal:<8} measured {measured:>8}  {verdict}")
    print()


# --------------------------------------------------------------------------- profile

def profile_cell(cell: str, trees: list[Data], vocab_size: int, device: torch.device) -> None:
    """torch.profiler table of one cell's training at E=300, B=25 (the issue's target setting)."""
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    model = tree_model(cell, 300, vocab_size).to(device)
    groups = [trees[k:k + 25] for k in range(0, 250, 25)]
    batches = []
    for group in groups:
        batch = Batch.from_data_list(group)
        attach_schedule(batch)
        batches.append(batch.to(device))
    contender = tree_contender(cell, model, batches, TreeStats())
    contender.train()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        contender.train()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))


def count_operator_calls(trees: list[Data], vocab_size: int, device: torch.device) -> list[dict]:
    """ATen operator calls of one training step and one inference pass, per model, on the first batch (E=300, B=25).

    The per-level cost that no batch size amortizes is mostly operator calls
    issued from Python, a few microseconds each whatever their size: this
    counts them (views and slices included), so that the chain's time per
    level can be read against them. Counted with a ``TorchDispatchMode``, one
    step, no timing: the machine may be busy.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counter(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.calls += 1
            return func(*args, **(kwargs or {}))

    def calls_of(run: Callable[[], None]) -> int:
        run()  # warm-up: caches (schedules, slot indices, packed weights) are built outside the count
        counter = Counter()
        # One thread: a dispatch mode sees only its own thread's calls, and with two threads BiConTree runs
        # its top-down pass on a pool thread (graphtree.engine.propagate_side_by_side).
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            with counter:
                run()
        finally:
            torch.set_num_threads(threads)
        return counter.calls

    torch.manual_seed(0)
    group = trees[:25]
    batch = Batch.from_data_list(group)
    attach_schedule(batch)
    batch = batch.to(device)
    levels = schedule_of(batch).bottom_up.num_levels
    stats = TreeStats()
    for tree in group:
        stats.add(tree)
    rows = []
    for cell in CELLS:
        contender = tree_contender(cell, tree_model(cell, 300, vocab_size).to(device), [batch], stats)
        rows.append(dict(model=cell, levels=levels, train_calls=calls_of(contender.train),
                         infer_calls=calls_of(contender.infer)))
    lstm = lstm_contender(SequenceLSTM(vocab_size, 300, HIDDEN, NUM_CLASSES).to(device), [group], stats, device)
    rows.append(dict(model="lstm", levels=stats.max_words, train_calls=calls_of(lstm.train),
                     infer_calls=calls_of(lstm.infer)))
    print(f"ATen operator calls, first batch of 25 sentences ({levels} bottom-up levels, {stats.max_words} "
          "words in the longest sentence), E=300:")
    print(f"{'model':<12} {'train':>7} {'infer':>7} {'train/level':>12} {'infer/level':>12}")
    for r in rows:
        r["train_calls_per_level"] = r["train_calls"] / r["levels"]
        r["infer_calls_per_level"] = r["infer_calls"] / r["levels"]
        print(f"{CELL_NAMES[r['model']]:<12} {r['train_calls']:>7} {r['infer_calls']:>7} "
              f"{r['train_calls_per_level']:>12.1f} {r['infer_calls_per_level']:>12.1f}")
    print("(per level: over the batch's bottom-up levels; nn.LSTM: over its time steps)")
    return rows


# --------------------------------------------------------------------------- main

def machine(device: torch.device, threads: int) -> dict:
    info = dict(torch=torch.__version__, python=platform.python_version(), platform=platform.platform(),
                processor=processor_name(), cpu_count=os.cpu_count(), torch_threads=torch.get_num_threads(),
                torch_interop_threads=torch.get_num_interop_threads(), requested_threads=threads,
                device=str(device), cpu_capability=torch.backends.cpu.get_cpu_capability())
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    info["commit"], info["dirty"] = code_state()  # the code the figures come from, as it was at the start
    return info


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer settings and repetitions (under two minutes)")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--sst", default=None,
                        help="trainDevTestTrees_PTB.zip (default: where the experiments read SST, $GRAPHTREE_MIRROR "
                             "or ../shared/data beside the repository; random trees without it)")
    parser.add_argument("--out", default=None,
                        help="write the results JSON here, e.g. benchmarks/results/cpu.json (default: no file, the "
                             "tables on stdout only)")
    parser.add_argument("--reps", type=int, default=None, help="timed repetitions per setting")
    parser.add_argument("--cells", default=None, help=f"comma-separated subset of {','.join(CELLS)}")
    parser.add_argument("--embeddings", type=int, nargs="+", default=None,
                        help="embedding sizes of the grid (default 300 50; README's tables read 300)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=None,
                        help="batch sizes of the grid (default 25 100 256; README's tables read 25 and 256)")
    parser.add_argument("--skip-scaling", action="store_true", help="only the cell grid")
    parser.add_argument("--profile", nargs="?", const="nary", default=None, choices=CELLS, metavar="CELL",
                        help="print a torch.profiler table of one cell's training (default: nary)")
    parser.add_argument("--count-ops", action="store_true",
                        help="count ATen operator calls per batch and level of every model (no timing); "
                             "--out benchmarks/results/operator-calls.json writes the committed file")
    parser.add_argument("--native-ab", action="store_true",
                        help="only time the cells with and without their compiled level kernels (and nn.LSTM); "
                             "--out benchmarks/results/native-kernels.json writes the committed file")
    parser.add_argument("--memory-probe", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--scaling-probe", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.sst = sst_archive() if args.sst is None else args.sst  # once here: the probes get the same file
    return args


def sst_archive() -> str:
    """SST's archive where the experiments read it (:func:`lab.runs.corpus_file`); "" without one."""
    found = corpus_file(SST.ARCHIVE, REPO)
    return str(found) if found is not None else ""


def write_results(out: str | None, text: str) -> None:
    """The results JSON to ``--out``; without it nothing is written (the committed files change only when asked)."""
    if out is None:
        print("results file not written (--out FILE writes one)", file=sys.stderr)
        return
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"wrote {path.resolve().relative_to(REPO) if path.resolve().is_relative_to(REPO) else path}")


def main(argv: list[str] | None = None) -> None:
    code_state()  # the commit measured: the work tree's when the benchmark starts
    args = parse_args(argv)
    if args.memory_probe is not None:
        memory_probe(args)
        return
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda given but no GPU is available")
    config = dict(QUICK if args.quick else FULL)
    if args.reps is not None:
        config["reps"] = args.reps
    if args.cells:
        config["cells"] = tuple(c for c in CELLS if c in args.cells.split(","))
    if args.embeddings:
        config["embeddings"] = tuple(args.embeddings)
    if args.batch_sizes:
        config["batch_sizes"] = tuple(args.batch_sizes)
    if args.scaling_probe:
        scaling_probe(args, config)
        return
    started = time.perf_counter()

    trees, vocab_size, source = sentences(args, needed_nodes=max(config["scale_nodes"]),
                                          needed_trees=max(config["workload"], 300))
    print(f"data: {source}, {len(trees)} trees, vocabulary {vocab_size}")
    if args.profile:
        profile_cell(args.profile, trees, vocab_size, device)
        return
    if args.count_ops:
        rows = count_operator_calls(trees, vocab_size, device)
        command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
        write_results(args.out, json.dumps(dict(command=command, data=source, torch=torch.__version__, rows=rows),
                                           indent=1) + "\n")
        return
    info = machine(device, args.threads)
    if args.native_ab:
        print(f"E=300, with the compiled level kernels vs the PyTorch operators, {args.threads} threads:")
        rows = native_kernels_ab(config, trees, vocab_size, device)
        if not rows:
            raise SystemExit("the native kernels are not available here (see graphtree.backend.native)")
        write_results(args.out, json.dumps(dict(command=" ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
                                                data=source, machine=info,
                                                config={k: list(v) if isinstance(v, tuple) else v
                                                        for k, v in config.items()}, rows=rows), indent=1))
        return
    print(f"torch {info['torch']}, {info['torch_threads']} threads (interop {info['torch_interop_threads']}), "
          f"{info['device']}, {info['processor']}")
    difference = check_reference(vocab_size, trees, device)
    print(f"recursive reference and plain level loop vs NaryTreeLSTM with the same weights: max |logit "
          f"difference| {difference:.1e}")
    rate = matmul_rate(device)
    print(f"matmul rate (float32, one large matmul): {rate / 1e9:.1f} GFLOP/s before the grid; the grid samples "
          "it again in every repetition\n")
    print("columns: trees/s for a training epoch (forward + backward + Adagrad step) and inference (no grad); "
          "×LSTM and ×rec: throughput ratios to nn.LSTM and to the recursive reference (>1 is faster); "
          "×Nary: training time over N-ary's; ×bound: training time over the essential matmul FLOPs at the measured "
          "matmul rate; sched: schedule "
          "build per batch (not in the timed region); noise: (max-min)/median of the training times\n")

    rows = run_grid(config, trees, vocab_size, device)
    print(f"[{time.perf_counter() - started:.0f} s]")

    nodes, memory, chain, kernels = [], [], [], []
    if not args.skip_scaling:
        nodes = node_scaling_in_children(args, config)
        print(f"N-ary (E=300) training step by batch size in nodes (median of {config['scale_processes']} "
              "processes):")
        for r in nodes:
            each = ", ".join(f"{t * 1e3:.1f}" for t in r["per_process_s"])
            print(f"  {r['nodes']:>7} nodes, {r['levels']:>3} levels: {r['train_s'] * 1e3:8.1f} ms, "
                  f"{r['us_per_node']:6.2f} µs/node (processes: {each} ms)")
        print(f"[{time.perf_counter() - started:.0f} s]")
        memory = memory_scaling(args, config)
        print("N-ary (E=300) peak memory of a training step:")
        for r in memory:
            print(f"  {r['nodes']:>7} nodes: {r['peak_bytes'] / 2 ** 20:8.1f} MiB, {r['bytes_per_node']:8.0f} B/node "
                  f"({r['method']})")
        print(f"[{time.perf_counter() - started:.0f} s]")
        chain = chain_scaling(config, device)
        print("N-ary (E=300) chain, one node per level:")
        for r in chain:
            print(f"  depth {r['depth']:>6}: training {r['train_ms_per_level']:.3f} ms/level, inference "
                  f"{r['infer_ms_per_level']:.3f} ms/level (schedule {r['schedule_s'] * 1e3:.0f} ms)")
        print()
        print("E=300, with the compiled level kernels vs the PyTorch operators:")
        kernels = native_kernels_ab(config, trees, vocab_size, device)
        print(f"[{time.perf_counter() - started:.0f} s]")

    checks = check_targets(rows, nodes, memory, chain, args.threads)
    print_targets(checks)
    if device.type == "cpu":
        print("GPU speed: not measured in this run (use --device cuda on a machine with a GPU).")

    config_out = {k: list(v) if isinstance(v, tuple) else v for k, v in config.items()}
    # A pinned GRAPHTREE_NATIVE changes which kernels run: it is part of the command.
    pinned = {k: os.environ[k] for k in ("GRAPHTREE_NATIVE",) if k in os.environ}
    result = dict(command=" ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), environment=pinned, data=source,
                  machine=info,
                  hidden=HIDDEN, num_classes=NUM_CLASSES, config=config_out, matmul_gflops=rate / 1e9,
                  reference_max_logit_difference=difference, rows=rows, node_scaling=nodes, memory=memory,
                  chain=chain, native_kernels=kernels, targets=checks,
                  seconds=time.perf_counter() - started)
    write_results(args.out, json.dumps(result, indent=1))
    print(f"[{time.perf_counter() - started:.0f} s]")


if __name__ == "__main__":
    main()
