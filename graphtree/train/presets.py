"""The papers' optimizer settings (:data:`PRESETS`) and their record (:class:`OptimizerSpec`), apart from the
optimizers of :mod:`graphtree.train.optim` so that a script reads them for its flags without importing torch.
The sources of each preset are in :mod:`graphtree.train.optim`'s docstring."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..errors import InvalidArgumentError

__all__ = ["PRESETS", "OptimizerSpec"]

_OPTIMIZERS = ("adagrad", "adam", "sgd", "adamw")
SCHEDULES = ("constant", "linear")
_EMBEDDING_OPTIMIZERS = _OPTIMIZERS + ("sparse_adam",)
SPARSE_EXACT = ("adagrad", "sgd", "sparse_adam")  # updates that leave a row without gradient where it is


@dataclass(frozen=True)
class OptimizerSpec:
    """How the parameters are updated.

    Attributes:
        name: Optimizer of the non-embedding parameters: ``"adagrad"``, ``"adam"`` or ``"sgd"``.
        lr: Its learning rate.
        embedding: Optimizer of the word embeddings (the same choices, or ``"sparse_adam"``: lazy Adam,
            which moves only the rows a minibatch used).
        embedding_lr: Its learning rate.
        l2: Per-minibatch L2 strength λ on the non-embedding parameters (added to their gradients).
        batch_size: Sentences per minibatch (the paper's).
        decay: Decoupled weight decay of the non-embedding parameters, applied at every update
            (θ ← (1 − decay)·θ, then the optimizer's step), as DyNet's trainers apply their λ.
        weight_decay: AdamW's decoupled weight decay (``"adamw"`` only), of both optimizers' matrices; biases
            and normalization weights (the parameters of fewer than two dimensions) are not decayed, as in
            BERT's fine-tuning recipe.
        warmup: Fraction of the run's updates over which both learning rates rise linearly from 0.
        schedule: ``"constant"`` (after the warm-up) or ``"linear"`` (then down to 0 at the last update).
    """

    name: str
    lr: float
    embedding: str
    embedding_lr: float
    l2: float
    batch_size: int
    decay: float = 0.0
    weight_decay: float = 0.0
    warmup: float = 0.0
    schedule: str = "constant"

    def __post_init__(self) -> None:
        if self.name not in _OPTIMIZERS:
            raise InvalidArgumentError(f"OptimizerSpec.name must be one of {_OPTIMIZERS}, got {self.name!r}")
        if self.embedding not in _EMBEDDING_OPTIMIZERS:
            raise InvalidArgumentError(f"OptimizerSpec.embedding must be one of {_EMBEDDING_OPTIMIZERS}, "
                                       f"got {self.embedding!r}")
        if self.schedule not in SCHEDULES:
            raise InvalidArgumentError(f"OptimizerSpec.schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.weight_decay and "adamw" not in (self.name, self.embedding):
            raise InvalidArgumentError("OptimizerSpec.weight_decay is AdamW's: use name='adamw'")
        if (self.lr <= 0 or self.embedding_lr < 0 or self.l2 < 0 or self.batch_size < 1
                or not 0 <= self.decay < 1 or self.weight_decay < 0 or not 0 <= self.warmup < 1):
            raise InvalidArgumentError(f"invalid optimizer settings: {self}")

    @property
    def scheduled(self) -> bool:
        """Whether the learning rates change over the run (a warm-up or a decay)."""
        return self.warmup > 0 or self.schedule != "constant"

    def lr_factor(self, step: int, total_steps: int) -> float:
        """The multiplier of both learning rates at update ``step`` (1-based) of ``total_steps``."""
        warm = self.warmup * total_steps
        if step <= warm:
            return step / warm
        if self.schedule == "linear":
            return max(0.0, (total_steps - step) / max(1.0, total_steps - warm))
        return 1.0

    def as_dict(self) -> dict[str, Any]:
        """The settings as a dict; those added for fine-tuning (``weight_decay``, ``warmup``, ``schedule``) only
        where they are not their defaults, so that the record of a run made before them is unchanged."""
        record = asdict(self)
        for key, default in (("weight_decay", 0.0), ("warmup", 0.0), ("schedule", "constant")):
            if record[key] == default:
                del record[key]
        return record


PRESETS: dict[str, OptimizerSpec] = {
    "tai": OptimizerSpec("adagrad", 0.05, "sgd", 0.1, 1e-4, 25),
    "zhu": OptimizerSpec("adagrad", 0.1, "adagrad", 0.1, 1e-4, 10),
    "le_zuidema": OptimizerSpec("adagrad", 0.05, "adagrad", 0.05, 1e-3, 5),
    "teng": OptimizerSpec("adam", 1e-3, "adam", 1e-3, 0.0, 25),
    "teng_code": OptimizerSpec("adam", 1e-3, "sparse_adam", 1e-3, 0.0, 1, decay=1e-6),
}
"""The papers' optimizer settings (see the module docstring for sources)."""
