"""Exceptions raised by graphtree.

Every error graphtree raises for bad input or misuse is a :class:`GraphtreeError`,
so ``except GraphtreeError`` catches them all. Each is also the built-in type it
would be without graphtree: an error about malformed input a :class:`ValueError`
(as :class:`GraphtreeError` itself is), one about code that runs wrong a
:class:`RuntimeError` (:class:`SlotLeakError`, :class:`HostValueError`), so code
that guards against those keeps working. Each says what is wrong and where (a
character offset, a token index, a line number, a node).

The general kinds, each a :class:`GraphtreeError` and the built-in type named:

- :class:`InvalidArgumentError` (:class:`ValueError`): an argument, setting or
  value out of its range or choices (``n_ary=0``, an unknown ``direction``, an
  ``edge_index`` of the wrong shape, a cell's ``update`` returning the wrong states).
- :class:`InvalidTypeError` (:class:`TypeError`): a value of the wrong type (a
  string where token lists go, integer node features, a cell class that overrides
  what the engine never calls).
- :class:`OutOfRangeError` (:class:`IndexError`): an index past what it indexes.
- :class:`MissingFileError` (:class:`FileNotFoundError`): a file graphtree was
  told to read, or needs, is not there.
- :class:`MissingDependencyError` (:class:`ImportError`): an optional package a
  feature needs (spaCy and its model, the packaged GloVe vectors) is not installed.
- :class:`UsageError` (:class:`RuntimeError`): an operation called in a state
  where it cannot run (a second backward through one pass, a dense-only optimizer
  given sparse gradients).
- :class:`KernelBuildError` (:class:`RuntimeError`): the C++ kernels were asked
  for (``GRAPHTREE_NATIVE=1``) and could not be built or loaded.

The specific ones (:class:`TreeFormatError`, :class:`ScheduleError`, the datasets'
``DatasetError`` and ``StoreError``, ...) say more where they apply.
"""

from __future__ import annotations

__all__ = ["CycleError", "GraphtreeError", "HostValueError", "InvalidArgumentError", "InvalidTypeError",
           "KernelBuildError", "MissingDependencyError", "MissingFileError", "OutOfRangeError", "ScheduleError",
           "SlotLeakError", "TreeFormatError", "UsageError"]


class GraphtreeError(ValueError):
    """Base class of every error graphtree raises for bad input or misuse (``tests/test_errors.py`` walks the
    package's exception classes to keep it so)."""


class InvalidArgumentError(GraphtreeError):
    """An argument, setting or value is outside its range or its choices (a :class:`ValueError`, as every
    :class:`GraphtreeError` is): the message names it, what it may be and what it got."""


class InvalidTypeError(GraphtreeError, TypeError):
    """A value is of a type graphtree cannot take there (a :class:`TypeError` too): the message names the
    type it got and the one it takes."""


class OutOfRangeError(GraphtreeError, IndexError):
    """An index lies outside what it indexes (an :class:`IndexError` too, so sequence protocols that stop at
    one keep stopping): the message names the index and the range."""


class MissingFileError(GraphtreeError, FileNotFoundError):
    """A file graphtree was told to read, or needs, is not there (a :class:`FileNotFoundError` too)."""


class MissingDependencyError(GraphtreeError, ImportError):
    """An optional package a feature needs is not installed (an :class:`ImportError` too): the message says
    what to install."""


class UsageError(GraphtreeError, RuntimeError):
    """graphtree was called in a way or a state it cannot run in, not with a malformed value (a
    :class:`RuntimeError` too): a second backward through one pass, a dense-only optimizer given sparse
    gradients, a cell's compiled kernel that returns the wrong number of gradients."""


class KernelBuildError(GraphtreeError, RuntimeError):
    """The C++ kernels were required (``GRAPHTREE_NATIVE=1``) and could not be built or loaded (a
    :class:`RuntimeError` too); without that setting graphtree warns and runs the PyTorch path instead."""


class TreeFormatError(GraphtreeError):
    """A tree or graph description is malformed.

    Attributes:
        position: Character offset (PTB strings) or token index (parent
            arrays) where the problem was found, or ``None``.
        line: 1-based line number when the input came from a file, else ``None``.
    """

    def __init__(self, message: str, position: int | None = None, line: int | None = None):
        self.reason = message
        self.position = position
        self.line = line
        super().__init__(self._format())

    def _format(self) -> str:
        where = []
        if self.line is not None:
            where.append(f"line {self.line}")
        if self.position is not None:
            where.append(f"position {self.position}")
        return f"{self.reason} (at {', '.join(where)})" if where else self.reason

    def at_line(self, line: int) -> TreeFormatError:
        """Return a copy of this error that also names the input line."""
        err = type(self).__new__(type(self))
        TreeFormatError.__init__(err, self.reason, self.position, line)
        for key, value in self.__dict__.items():
            err.__dict__.setdefault(key, value)
        return err


class CycleError(TreeFormatError):
    """The graph has a directed cycle, so it has no topological levels.

    Attributes:
        nodes: Node indices that lie on one cycle, in cycle order.
    """

    def __init__(self, nodes: list, message: str | None = None, line: int | None = None):
        self.nodes = list(nodes)
        shown = " -> ".join(str(n) for n in self.nodes[:20])
        if len(self.nodes) > 20:
            shown += " -> ..."
        super().__init__(message or f"graph has a cycle through nodes {shown}", line=line)


class ScheduleError(GraphtreeError):
    """A layer was given a batch it cannot run on (no levels, wrong sizes, too many children)."""


class SlotLeakError(GraphtreeError, RuntimeError):
    """A cell's ``update`` lets its empty slots into a node's result, so that a node's states depend on the
    other graphs of its batch (not malformed input: the cell's code is wrong, hence a :class:`RuntimeError`
    too). Raised by the engine's slot check (:mod:`graphtree.engine.slot_check`), naming the cell, the level
    and a node."""


class HostValueError(GraphtreeError, RuntimeError):
    """A pass asked for host values that a static-shape plan does not hold: a padded plan, whose tensors are
    refilled for every batch of its shape (:mod:`graphtree.replay`), knows no per-batch counts but those its
    shape fixes (a padded top-down plan's ``Children.position_counts``); a padded batch made without its
    top-down plan has none (a :class:`RuntimeError` too). :class:`graphtree.replay.ReplayError` is one."""
