"""Training steps replayed as CUDA graphs: one launch per step instead of hundreds.

On a GPU the level loop is host-bound: each level issues a few small kernels
from Python and autograd, each a few microseconds of GPU work behind tens of
microseconds of host work. A CUDA graph records a whole step (forward, backward
and optimizer step) once and replays it with one launch; what it needs is
static shapes and no host synchronization inside the step.

Static shapes come from **buckets**. A batch's bottom-up levels are padded to
widths from a short list (:class:`Buckets`): the number of levels is rounded up
to a multiple of ``level_step``, the levels are cut into dyadic segments (level
0, level 1, levels 2-3, 4-7, 8-15, ...), and every level of a segment gets the
segment's widest level rounded up to the grid ``exact_below * growth**k``. A
batch's :class:`BucketShape` (those widths and the slots per node) names the
graph that serves it, so a handful of graphs serve a whole epoch
(``benchmarks/gpu_step.py`` reports how many, and the padding they cost).

Padding changes nothing. A padded row of a level is a **replica** of a real
node of that level (its first one; past the batch's top level, a node of its
top level): the same inputs and the same children, so it computes a copy of
that node's states from valid numbers, never from empty rows (no cell sees a
node at a level above 0 without children). Nothing reads a replica's states: no
node has it as a child, and the loss weighs it 0 (``node_weight``), so the
gradients it sends back are exact zeros. The model runs on the padded node set
(:class:`PaddedBatch`), its per-node attributes gathered from the nodes each row
copies, except what would count a replica as a node of its source's graph: a
replica is never a root (``is_root``), and it belongs to a graph of its own,
``num_graphs``, one past the batch's (``batch``), so that pooling per graph
gives the batch's graphs first and the replicas' row last. Graph attributes
(``graph_y``) come as they are.

A loss that counts replicas anyway (a mean over all rows, a pooling that keeps
the replicas' row) would train on other numbers than the batch's, silently, so
:class:`ReplayedStep` checks once, on its first batch, that the loss of the
padded batch is the loss of the batch itself, and names what the loss read if
not.

The cell's math is its ``update``, run by the engine's definition pass
(:func:`graphtree.engine.propagate`) on the padded plan: no copy of any cell's
equations lives here, and a cell of the user's own replays as the paper cells
do. What the padded pass cannot give is data-dependent host values.

A top-down pass groups its rows by their position under the parent, with
counts read on the host (``Children.position_counts``: the top-down Tree-LSTM
runs each position's rows with that position's weights). So a model with a
top-down pass gets a **padded top-down plan** too (:func:`padded_batch` with
``top_down=True``; :class:`ReplayedStep` asks for it where a module of the
model runs top-down): rows of its own, level by level by depth, where each
level's filled slots at each position are rounded on the segments and grid of
the widths (:meth:`Buckets.top_down`) and belong to the shape, as the widths
do, so the counts a cell reads are host numbers fixed per graph. Its replicas
run a node of their level once more, from that node's first parent, at the
position their block needs; no row reads them, and every padded row returns
the top-down states of the node it copies (:mod:`graphtree.replay.padding`). A model
whose top-down pass no module declares (a bottom-up cell run top-down through
the engine) finds no top-down plan on its padded batch: it raises
:class:`~graphtree.errors.HostValueError` on its first step, and
:class:`ReplayedStep` runs it eagerly, with a warning.

On the CPU (and with ``graphs=False``) :class:`ReplayedStep` runs the padded
step eagerly: the tests compare it there with the plain step, and check that
it asks the host for nothing. It refuses an optimizer that a graph could not
hold there too, so that a step that runs on the CPU replays on a GPU.

The package's rooms: :mod:`~graphtree.replay.buckets` (the bucket policy: shapes from counts),
:mod:`~graphtree.replay.padding` (a batch laid out on its shape, the top-down rows included),
:mod:`~graphtree.replay.batch` (the padded batch a model sees, and the weighted node loss),
:mod:`~graphtree.replay.static` (static-shape plans, :class:`StaticSchedule`, a bucket's fixed tensors),
:mod:`~graphtree.replay.capture` (the capture loop both passes share), :mod:`~graphtree.replay.check` (the
loss check), :mod:`~graphtree.replay.step` (the training step) and :mod:`~graphtree.replay.forward` (the
evaluation pass).
"""

from __future__ import annotations

from .batch import PaddedBatch, weighted_node_loss
from .buckets import Buckets, BucketShape, ReplayError
from .capture import Replayer, has_top_down_pass
from .forward import ReplayedForward
from .padding import pad, padded_batch
from .static import Bucket, StaticSchedule, static_plan
from .step import ReplayedStep, ReplayStats

__all__ = ["Bucket", "BucketShape", "Buckets", "PaddedBatch", "ReplayError", "ReplayStats", "ReplayedForward",
           "ReplayedStep", "Replayer", "StaticSchedule", "has_top_down_pass", "pad", "padded_batch", "static_plan",
           "weighted_node_loss"]
