"""graphtree's settings, in one place: read from the environment once, overridable in code.

===========================  ==============================  ==================================================
setting                      environment variable            meaning
===========================  ==============================  ==================================================
``native``                   ``GRAPHTREE_NATIVE``            ``"auto"`` (default: the compiled CPU kernels where
                                                             they build, else PyTorch), ``"1"`` (they must
                                                             build), ``"0"`` (PyTorch only)
``cache``                    ``GRAPHTREE_CACHE``             the cache folder (kernels, word vectors); default
                                                             ``$XDG_CACHE_HOME/graphtree`` or
                                                             ``~/.cache/graphtree``
``mirror``                   ``GRAPHTREE_MIRROR``            a folder or URL laid out like the data folder,
                                                             where the datasets are fetched from instead of
                                                             their official sites (``""``: none)
``flush_denormals``          ``GRAPHTREE_FLUSH_DENORMALS``   the experiment scripts flush subnormal floats to
                                                             zero for their run (default ``True``; ``0``
                                                             leaves the processor's setting alone;
                                                             ``experiments/lab/process.py``)
``slot_check``               ``GRAPHTREE_SLOT_CHECK``        whether a pass checks that a cell's ``update``
                                                             leaves empty slots out of its result
                                                             (:mod:`graphtree.engine.slot_check`):
                                                             ``"first"`` (default: each cell's first pass with
                                                             empty slots), ``"always"`` (every pass; what
                                                             :func:`~graphtree.engine.detect_slot_leaks` sets)
                                                             or ``"off"``
``width_classes``            ``GRAPHTREE_WIDTH_CLASSES``     cells that take any number of predecessors run on
                                                             levels split by width, so that a hub does not pad
                                                             its level (default ``True``; ``0``: one level per
                                                             height or depth, as wide as its widest node)
===========================  ==============================  ==================================================

The environment is read the first time a setting is asked for (:func:`current`). In code::

    from graphtree import settings

    with settings.overridden(native="0"):  # for the duration of the block
        ...
    settings.configure(mirror="/data/mirror")  # for the rest of the process
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from .errors import InvalidArgumentError, InvalidTypeError

__all__ = ["ENVIRONMENT", "Settings", "configure", "current", "overridden", "reload"]

# Each setting's environment variable.
ENVIRONMENT = {"native": "GRAPHTREE_NATIVE", "cache": "GRAPHTREE_CACHE", "mirror": "GRAPHTREE_MIRROR",
               "flush_denormals": "GRAPHTREE_FLUSH_DENORMALS", "slot_check": "GRAPHTREE_SLOT_CHECK",
               "width_classes": "GRAPHTREE_WIDTH_CLASSES"}
NATIVE_MODES = ("auto", "1", "0")
SLOT_CHECKS = ("first", "always", "off")


@dataclasses.dataclass(frozen=True)
class Settings:
    """One value of every setting (see the module's table)."""

    native: str = "auto"
    cache: Path = dataclasses.field(default_factory=lambda: _default_cache(os.environ))
    mirror: str = ""
    flush_denormals: bool = True
    slot_check: str = "first"
    width_classes: bool = True

    def __post_init__(self) -> None:
        native = str(self.native).strip().lower()
        if native not in NATIVE_MODES:
            raise InvalidArgumentError(f"native (${ENVIRONMENT['native']}) must be 0, 1 or auto, got {self.native!r}")
        object.__setattr__(self, "native", native)
        object.__setattr__(self, "cache", Path(self.cache).expanduser())
        object.__setattr__(self, "mirror", os.fspath(self.mirror))
        if not isinstance(self.flush_denormals, bool):
            raise InvalidTypeError(f"flush_denormals must be True or False, got {self.flush_denormals!r}")
        slot_check = str(self.slot_check).strip().lower()
        if slot_check not in SLOT_CHECKS:
            raise InvalidArgumentError(
                f"slot_check (${ENVIRONMENT['slot_check']}) must be one of {', '.join(SLOT_CHECKS)}, "
                f"got {self.slot_check!r}")
        object.__setattr__(self, "slot_check", slot_check)
        if not isinstance(self.width_classes, bool):
            raise InvalidTypeError(f"width_classes must be True or False, got {self.width_classes!r}")

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> Settings:
        """The settings that ``environ`` gives (the defaults where a variable is unset or empty)."""
        values: dict[str, object] = {}
        if environ.get(ENVIRONMENT["native"]):
            values["native"] = environ[ENVIRONMENT["native"]]
        values["cache"] = Path(environ[ENVIRONMENT["cache"]]) if environ.get(ENVIRONMENT["cache"]) else \
            _default_cache(environ)
        values["mirror"] = environ.get(ENVIRONMENT["mirror"], "")
        for name in ("flush_denormals", "width_classes"):  # switches, on unless set to 0
            flag = environ.get(ENVIRONMENT[name], "1").strip()
            if flag not in ("0", "1"):
                raise InvalidArgumentError(f"${ENVIRONMENT[name]} must be 0 or 1, got {flag!r}")
            values[name] = flag == "1"
        if environ.get(ENVIRONMENT["slot_check"]):
            values["slot_check"] = environ[ENVIRONMENT["slot_check"]]
        return cls(**values)


def _default_cache(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "graphtree"


_current: Settings | None = None


def current() -> Settings:
    """The settings in force: the environment's, read on the first call, with what code changed since."""
    global _current
    if _current is None:
        _current = Settings.from_environment()
    return _current


def configure(**changes: object) -> Settings:
    """Change settings for the rest of the process (e.g. ``configure(native="0")``); the new settings."""
    global _current
    _current = dataclasses.replace(current(), **changes)
    return _current


@contextmanager
def overridden(**changes: object) -> Iterator[Settings]:
    """Change settings for the duration of a ``with`` block, then put the previous ones back."""
    global _current
    previous = current()
    _current = dataclasses.replace(previous, **changes)
    try:
        yield _current
    finally:
        _current = previous


def reload() -> Settings:
    """Read the environment again (after changing it in the same process), dropping changes made in code."""
    global _current
    _current = Settings.from_environment()
    return _current
