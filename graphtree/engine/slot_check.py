"""The slot check: does a cell's ``update`` leave its empty slots out of its result?

A level has as many slots as its widest node has predecessors, so how many
of a node's slots are empty depends on the other graphs of its batch. A cell
that reduces with :class:`~graphtree.engine.Children`'s reductions never sees
them; one that transforms the slots and then sums them with torch
(``self.U(children.states[0]).sum(dim=1)`` with a biased layer) counts the
empty ones too, and a node's states then change with its batch, silently.

The check asks exactly that question of one level: it runs the level's
``update`` twice more, outside autograd and from the same random state, once
on the children as they are and once with :data:`EXTRA_SLOTS` more empty
slots, as if a wider node had joined the level. A node whose states differ
between the two depends on its batch, and
:class:`~graphtree.errors.SlotLeakError` names the cell, the level and the
node. (Filling the empty slots with NaN instead would also flag correct cells:
empty slots hold zeros by contract, and a layer without a bias, or a weight of
zero, may rely on it.)

It is the engine's anomaly mode. The ``slot_check`` setting
(:mod:`graphtree.settings`) runs it on each cell's first pass (``"first"``,
the default: a cell of one's own is caught at its first call), on every pass
(``"always"``, or inside :func:`detect_slot_leaks`), or never (``"off"``).
graphtree's own cells are proven by its tests and are checked only under
``"always"``. Levels without slots (the leaves bottom-up, the roots top-down)
have no predecessors to leak, and fixed-arity cells (``max_children``) are not
checked bottom-up: their slots are their positions, always ``max_children`` of
them, and a missing child's zero state is part of their definition (Tai et
al.'s N-ary Tree-LSTM), the same in every batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import settings
from ..errors import SlotLeakError
from ..schedule import LevelPlan
from .layout import Children

__all__ = ["EXTRA_SLOTS", "check_level", "detect_slot_leaks", "wanted"]

EXTRA_SLOTS = 2  # the empty slots a check adds to a level

_CHECKED = "_graphtree_slots_checked"  # set on a cell once a pass of it was checked on a level with empty slots


@contextmanager
def detect_slot_leaks(enabled: bool = True) -> Iterator[None]:
    """Check every pass inside the ``with`` block (``enabled=False``: none), as
    ``torch.autograd.detect_anomaly`` checks every backward: a cell whose ``update`` lets an empty slot into a
    node's result raises :class:`~graphtree.errors.SlotLeakError` naming the node. Passes inside run the
    cell's ``update``, never a compiled kernel, each level three times."""
    with settings.overridden(slot_check="always" if enabled else "off"):
        yield


def always() -> bool:
    """Whether every pass is checked (then the engine runs each cell's ``update``, not its compiled kernel)."""
    return settings.current().slot_check == "always"


def wanted(cell: torch.nn.Module, plan: LevelPlan) -> bool:
    """Whether a pass of ``cell`` over ``plan`` checks its levels (see the module docstring)."""
    mode = settings.current().slot_check
    if mode == "off" or (plan.direction == "bottom_up" and getattr(cell, "max_children", None) is not None):
        return False
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        return False  # a captured step cannot ask the GPU whether a slot is empty; its eager first step did
    if mode == "always":
        return True
    update = getattr(type(cell), "update", None)
    if getattr(update, "__module__", "").startswith("graphtree."):
        return False
    return not getattr(cell, _CHECKED, False)


def check_level(call: Callable[[Children, Sequence[Tensor]], tuple[Tensor, ...]], cell: torch.nn.Module,
                children: Children, inputs: Sequence[Tensor], plan: LevelPlan, level: int,
                describe: Callable[[int], str]) -> None:
    """Raise :class:`~graphtree.errors.SlotLeakError` if ``call`` (the cell's ``update`` on level ``level``) gives
    any node other states once the level has :data:`EXTRA_SLOTS` more empty slots."""
    mask = children.mask
    if mask.size(1) == 0:
        return  # no slots, no predecessors: nothing to leak, and such a level is never widened by a batch
    wider = Children(tuple(F.pad(state, (0, 0, 0, EXTRA_SLOTS)) for state in children.states),
                     F.pad(mask, (0, EXTRA_SLOTS), value=False), F.pad(children.position, (0, EXTRA_SLOTS), value=-1),
                     children.host_position_counts)
    device = mask.device
    with torch.no_grad():
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            as_is = call(children, inputs)
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            widened = call(wider, inputs)
    setattr(cell, _CHECKED, True)
    for k, (expected, got) in enumerate(zip(as_is, widened)):
        # Not bit for bit: a product over more rows may take another blocking and round otherwise.
        tolerance = (1e-10 if expected.dtype == torch.float64 else 1e-4) * (1 + expected.abs())
        same = ((expected - got).abs() <= tolerance) | (expected.isnan() & got.isnan())
        rows = (~same).reshape(same.size(0), -1).any(dim=1)
        if bool(rows.any()):
            row = int(rows.nonzero()[0])
            node = int(plan.order[plan.ptr[level] + row])
            difference = float((expected[row] - got[row]).abs().max())
            raise SlotLeakError(
                f"{type(cell).__name__}.update lets empty slots into its result: state {k} of {describe(node)} "
                f"(level {level} of the {plan.direction.replace('_', '-')} pass, {int(mask[row].sum())} of its "
                f"{mask.size(1)} slots filled) changes by {difference:.3g} when the level has {EXTRA_SLOTS} more "
                "empty slots, as it would in a batch with a wider node. Reduce over the slots with "
                "children.sum(t), .mean(t), .max(t) or .attend(scores, t), which take any [n, K, ...] tensor "
                "computed from the slots and leave the empty ones out (not t.sum(dim=1), which adds what a "
                "biased layer or a sigmoid makes of an empty slot), and apply a layer to the slots with "
                "children.map(layer); graphtree.testing.check_cell checks a cell this way")
