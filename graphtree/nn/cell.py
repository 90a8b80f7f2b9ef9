"""Base class of graphtree's tree cells."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor
from torch_geometric.nn import MessagePassing

from ..engine import Children, Pass, propagate, schedule_of
from ..errors import InvalidArgumentError, InvalidTypeError, ScheduleError
from ..schedule import SPLIT_COST_SLOTS, LevelPlan

__all__ = ["TreeCell", "first_state"]


class TreeCell(MessagePassing):
    r"""A recurrent cell that runs level by level over a tree or DAG: a PyG
    :class:`~torch_geometric.nn.conv.MessagePassing` layer whose nodes wait for
    their predecessors.

    PyG's layers compute every node from its neighbours' current features at
    once. In a tree cell a node reads its children's *new* states, so the
    engine (:func:`graphtree.engine.propagate`) runs the nodes level by level,
    leaves first (``direction="bottom_up"``; ``"top_down"`` runs roots first
    and reads parents), and at each level takes PyG's three steps:

    1. **message**: each child sends its states (e.g. :math:`(h_k, c_k)`);
    2. **aggregate**: the messages are gathered into slots by the child's
       position (``edge_pos``), a :class:`~graphtree.engine.Children` of
       ``[n, K, d]`` tensors with zeros in empty slots. A cell sums them or
       reads them by position in its ``update``, as some gates need each child
       apart (Child-Sum's forget gates);
    3. **update**: ``update(children, **inputs)`` returns the level's new
       states from the aggregated children and the nodes' own inputs, as in
       PyG, where ``update`` receives the aggregation and the arguments given
       to :meth:`propagate`.

    **What a cell defines** (see README, "Your own cell"):

    * ``state_channels``: the width of each state component, e.g.
      ``(hidden, hidden)`` for :math:`(h, c)`, given to ``__init__``;
    * ``update(self, children, x)``: one level, in plain PyTorch (autograd
      differentiates it), returning a tuple of ``[n, d]`` states (a single
      tensor is read as a tuple of one). ``children`` is a
      :class:`~graphtree.engine.Children`: at the leaves its slots are empty,
      ``K = 0``; elsewhere a level has as many slots as its widest node has
      children, so reduce over them with ``children.sum(t)``, ``.mean(t)``,
      ``.max(t)`` or ``.attend(scores, t)``, which take any ``[n, K, ...]``
      tensor computed from the slots and leave the empty ones out (torch's
      ``t.sum(dim=1)`` would add what a biased layer makes of each empty slot,
      and a node's result would depend on its batch), and transform each
      child with ``children.map(layer)``. The engine checks a cell's first pass
      for such leaks (:mod:`graphtree.engine.slot_check`);
      :func:`graphtree.testing.check_cell` checks a cell outright. In a
      top-down pass the slots hold each node's parents.

    The default ``forward(x, edge_index)`` runs ``update`` over the graph and
    returns the tuple of states, as :meth:`propagate` does. A cell whose
    ``update`` takes other inputs than ``x`` defines ``forward`` and calls
    ``self.propagate(edge_index, name=tensor, ...)``. A state of the wrong
    width, inputs passed to ``propagate`` by position, or an override of
    ``message`` or ``aggregate`` (which a tree cell never calls) is an error
    naming the cell.

    Optional: ``max_children`` (a fixed arity: exactly that many slots; a node
    with more children is an error naming it), ``level_cost_slots`` (what one
    more level costs the cell, in slots: where a level's nodes differ much in
    how many predecessors they have, the engine runs them as several levels of
    their own widths if that saves more slots, see
    :meth:`graphtree.schedule.Schedule.plan`), ``direction`` and
    ``output_states`` (how many leading state components :meth:`propagate`
    returns; the rest are internal to the pass).

    The paper cells also hold a compiled form of their ``update``, each beside
    its definition: ``level_kernel`` makes the cell's C++ kernel (its name,
    and the weights in the kernel's layout) from the weights that
    ``compiled_weights`` declares. The engine chooses it where the cell's class
    implements it for the very ``update`` that runs, as PyG's
    ``MessagePassing`` chooses a layer's ``message_and_aggregate``, and runs it
    instead (:func:`graphtree.backend.dispatch.bound_kernel`); a subclass that
    overrides ``update`` runs its own ``update``. A cell without one never
    builds the compiled kernels.
    """

    direction: str = "bottom_up"
    max_children: int | None = None
    level_cost_slots: int = SPLIT_COST_SLOTS  # 1,024; more for a cell that computes on filled slots only
    state_channels: tuple[int, ...] = ()
    output_states: int | None = None  # None: every state component is returned

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in ("message", "aggregate", "message_and_aggregate"):
            if name in cls.__dict__:
                raise InvalidTypeError(f"{cls.__name__} overrides {name}, which a tree cell never calls: the engine "
                                       "gathers each node's children's states into slots itself; compute from "
                                       "children.states (reduced with children.sum/mean/max/attend) in update")
        if "level_kernel" in cls.__dict__:
            # The kernel is the compiled form of this very update: a subclass that replaces update loses it (and
            # level_kernel = None turns an inherited one off).
            has_kernel = cls.__dict__["level_kernel"] is not None
            cls._compiled_update = cls.__dict__.get("update", cls.update) if has_kernel else None
            if has_kernel and cls.compiled_weights is TreeCell.compiled_weights:
                raise InvalidTypeError(f"{cls.__name__} has a compiled kernel (level_kernel) but does not declare the "
                                       "weights it takes: define compiled_weights")

    def __init__(self, state_channels: tuple[int, ...] | None = None, *, max_children: int | None = None,
                 direction: str | None = None, output_states: int | None = None) -> None:
        super().__init__(aggr=None)
        if state_channels is not None:
            self.state_channels = tuple(int(d) for d in state_channels)
        if max_children is not None:
            self.max_children = max_children
        if direction is not None:
            if direction not in ("bottom_up", "top_down"):
                raise InvalidArgumentError(f"direction must be 'bottom_up' or 'top_down', got {direction!r}")
            self.direction = direction
        if output_states is not None:
            self.output_states = output_states

    def _set_jittable_templates(self, raise_on_error: bool = False) -> None:
        # PyG compiles a propagate() from its message/aggregate/update template for each layer class; a tree
        # cell's propagate runs the level engine instead, so there is nothing to compile.
        pass

    def reset_parameters(self) -> None:
        """Each layer inside the cell by its own ``reset_parameters`` (``torch.nn.Linear``'s, say), and the
        parameters the cell holds itself uniform in :math:`\\pm 1/\\sqrt{d}` (``d``: the first state's
        width), as ``torch.nn.LSTM`` initializes. The paper cells override this (each docstring says how)."""
        for module in self.modules():
            if module is not self and callable(getattr(module, "reset_parameters", None)):
                module.reset_parameters()
        bound = 1.0 / math.sqrt(self.state_channels[0])
        for param in self._parameters.values():
            if param is not None:
                torch.nn.init.uniform_(param, -bound, bound)

    def _uniform_everywhere(self, channels: int) -> None:
        """Every parameter, the layers' inside the cell too, uniform in :math:`\\pm 1/\\sqrt{d}`, as
        ``torch.nn.LSTM`` initializes its weights and biases: the paper cells' initialization."""
        bound = 1.0 / math.sqrt(channels)
        for param in self.parameters():
            torch.nn.init.uniform_(param, -bound, bound)

    def compiled_weights(self) -> tuple[Tensor, ...]:
        """The weights the cell's compiled kernel (:meth:`level_kernel`) takes, in the kernel's order.

        The one declared layout of a cell's weights for its fast path: :meth:`level_kernel` receives them
        (detached), and the compiled pass hands their gradients back in this order. A parameter not listed (an
        input projection applied before the pass) gets its gradient from autograd. A cell that defines
        :meth:`level_kernel` must define it; a cell without a kernel never calls it.

        :meta private:
        """
        return ()

    def level_kernel(self, kernels: Any, plan: LevelPlan, weights: Sequence[Tensor]) -> Any | None:
        """The fast path of one pass: this cell's ``update`` as a compiled kernel, or ``None`` where no kernel
        covers the cell's setting or the batch (the engine then runs ``update``).

        ``kernels``: the loaded operators (``torch.ops.graphtree``), which make each kernel by its C++ name
        (``kernels.ChildSumLevels(...)``); ``plan``: the pass's bottom-up or top-down plan; ``weights``:
        :meth:`compiled_weights`, detached, which the kernel takes in its own layout (transposed, say) and
        whose gradients it returns in that order. The base class has none; a cell that defines one is run on
        it only for the very ``update`` it was written for.

        :meta private:
        """
        return None

    def forward(self, x: Tensor, edge_index: Any, edge_pos: Tensor | None = None) -> tuple[Tensor, ...]:
        """The states of every node, one ``[num_nodes, d]`` tensor per returned state component, with ``x``
        handed to :meth:`update` as ``x``. ``edge_index``: child -> parent edges (with ``edge_pos``, each
        child's position) or the ``Data``/``Batch``. A cell whose ``update`` takes other inputs defines its own
        ``forward``, which calls ``self.propagate(edge_index, name=tensor, ...)``."""
        self._check_features(x, None, edge_index)
        return self.propagate(edge_index, x=x, edge_pos=edge_pos)

    def propagate(self, edge_index: Any, size: None = None, *, edge_pos: Tensor | None = None,
                  **inputs: Tensor) -> tuple[Tensor, ...]:
        """Run :meth:`update` over every level of the graph; the states of every node.

        Args:
            edge_index: ``[2, E]`` child -> parent edges, or a ``Data``/``Batch``
                (which may carry its ``schedule``), or a
                :class:`~graphtree.schedule.Schedule`: passing one built once
                spares each call the build.
            size: Must be ``None``: a tree cell maps one node set onto itself.
            edge_pos: Each edge's child position under its parent, with a bare
                ``edge_index`` (a ``Data`` carries its own); by default children
                are numbered in edge order.
            **inputs: Per-node tensors (first dimension: the nodes), handed to
                :meth:`update` by name, sliced to each level's nodes.

        Returns:
            One ``[num_nodes, d]`` tensor per returned state component.
        """
        if isinstance(size, Tensor):
            raise InvalidTypeError(
                f"{type(self).__name__}.propagate takes update's inputs by name, as PyG's layers do: "
                "self.propagate(edge_index, x=x)")
        if size is not None:
            raise InvalidArgumentError(f"{type(self).__name__} maps a graph's nodes onto themselves; size must be None")
        return propagate(*self.pass_of(edge_index, edge_pos=edge_pos, **inputs))

    def pass_of(self, edge_index: Any, *, edge_pos: Tensor | None = None, **inputs: Tensor) -> Pass:
        """The pass :meth:`propagate` runs, not yet run: for
        :func:`~graphtree.engine.propagate_side_by_side`, which runs independent passes at the same time."""
        if not inputs:
            raise InvalidArgumentError(f"{type(self).__name__}.propagate needs the per-node inputs of update, by name")
        num_nodes = next(iter(inputs.values())).size(0)
        schedule = schedule_of(edge_index, num_nodes=num_nodes, edge_pos=edge_pos)
        return Pass(self, inputs, schedule, self.direction)

    def update(self, children: Children, **inputs: Tensor) -> tuple[Tensor, ...]:
        """The new states of one level's nodes from their children's (see the class docstring)."""
        raise NotImplementedError(f"{type(self).__name__} must define update(self, children, **inputs)")

    def _check_features(self, x: Tensor, channels: int | None, graph: Any = None) -> None:
        """``x`` must be ``[num_nodes, channels]`` floats of the cell's own dtype, with one row per node of
        ``graph`` where it says how many nodes it has: each mismatch named here, where the user passed ``x``,
        rather than as a dtype or broadcast error from inside a layer or as an error naming an internal input.
        Under autocast the layers choose their own dtypes, so another float dtype is let through."""
        name = type(self).__name__
        if not isinstance(x, Tensor) or x.dim() != 2 or (channels is not None and x.size(-1) != channels):
            shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise InvalidArgumentError(f"{name} expects node features of shape [num_nodes, {channels or 'channels'}], "
                                       f"got {shape}")
        if not x.is_floating_point():
            raise InvalidTypeError(f"{name} expects floating-point node features, got {x.dtype}; convert them with "
                                   ".float() (integer ids go through an embedding first)")
        own = next((p.dtype for p in self.parameters() if p.is_floating_point()), None)
        if own is not None and x.dtype != own and not torch.is_autocast_enabled(x.device.type):
            raise InvalidTypeError(f"{name} has {own} parameters but got node features of dtype {x.dtype}; convert "
                                   f"one to the other (x.to({own}) or cell.to({x.dtype}))")
        num_nodes = getattr(graph, "num_nodes", None) if graph is not None and not isinstance(graph, Tensor) \
            else None
        if isinstance(num_nodes, int) and x.size(0) != num_nodes:
            raise ScheduleError(f"{name} got node features x of {x.size(0)} rows for a graph of {num_nodes} nodes "
                                "(one row per node)")

    def __repr__(self) -> str:
        extra = f", max_children={self.max_children}" if self.max_children is not None else ""
        extra += f", direction={self.direction!r}" if self.direction != "bottom_up" else ""
        return f"{type(self).__name__}(state_channels={self.state_channels}{extra})"


def first_state(states: Tensor | tuple[Tensor, ...]) -> Tensor:
    """The first state component of what a cell returned: ``h`` of ``(h, c, ...)``, or a single tensor itself
    (taking ``[0]`` of a bare ``[n, d]`` tensor would silently give the first node's row)."""
    return states if isinstance(states, Tensor) else states[0]
