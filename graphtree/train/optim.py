"""Optimizers as the sentiment papers define them.

Every paper minimizes the summed node cross-entropy of a minibatch plus an L2
term. :class:`PaperOptimizer` follows Tai et al.'s formulation, which the
others leave implicit: the loss of a minibatch is its summed node loss divided
by the number of sentences, and an L2 term :math:`\\frac{\\lambda}{2}\\|\\theta\\|^2`
is added **per minibatch** (its gradient :math:`\\lambda\\theta` is added to every
non-embedding parameter before each step). Word embeddings are updated by an
optimizer of their own, with their own learning rate and without L2.

Presets (:data:`PRESETS`), with where each number comes from:

``"tai"`` (Tai et al. 2015, §5.3)
    AdaGrad, learning rate 0.05, minibatch 25, per-minibatch L2 1e-4. The
    embeddings are "updated during training with a learning rate of 0.1"; the
    authors' released code does this with plain SGD (``w -= 0.1 * grad``),
    outside AdaGrad, which is what ``embedding="sgd"`` reproduces.
``"zhu"`` (Zhu et al. 2015, §5)
    AdaGrad, learning rate 0.1, minibatch 10, embeddings trained by the same
    AdaGrad. The paper tunes but does not report λ; we use Tai's 1e-4.
``"le_zuidema"`` (Le & Zuidema 2015, §5.2)
    AdaGrad, learning rate 0.05, λ = 1e-3, minibatch 5, embeddings by the same AdaGrad.
``"teng"`` (Teng & Zhang 2017, §6)
    Adam with DyNet's AdamTrainer defaults (α = 0.001, β = (0.9, 0.999),
    ε = 1e-8), no gradient clipping. The paper writes λ in eq 17 but gives no
    value and no minibatch size; we use λ = 0 (DyNet's default has no weight
    decay) and minibatch 25.
``"teng_code"`` (the update of Teng & Zhang's released DyNet code)
    Adam with the same defaults after **every sentence** (minibatch 1); the
    embeddings by lazy Adam (DyNet updates, and keeps moments for, only the
    lookup rows a sentence used: ``torch.optim.SparseAdam``); DyNet's Trainer
    λ = 1e-6 as a decoupled decay of the non-embedding parameters at every
    update (θ ← θ − λθ + Δ). Two details are not reproduced: DyNet also decays
    the lookup rows it updates (by 1e-6 per use), and its step counter grows
    once per parameter rather than once per update, which switches Adam's bias
    correction off after the first update.

AdaGrad is PyTorch's, which with its defaults (no learning-rate decay, zero
initial accumulator, ε = 1e-10 added to the square root) is the update of
Torch7's ``optim.adagrad`` used by Tai's code.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

import torch
from torch import Tensor

from ..errors import InvalidArgumentError, UsageError

# The presets and their record need no torch: they live apart, for the scripts' flags.
from .presets import _EMBEDDING_OPTIMIZERS, _OPTIMIZERS, PRESETS, SPARSE_EXACT, OptimizerSpec  # noqa: F401

__all__ = ["PRESETS", "CapturableAdagrad", "OptimizerSpec", "PaperOptimizer", "RowAdagrad", "make_optimizer"]


# Devices with a fused update of each optimizer. PyTorch checks the device only at the first step, so the
# choice is made here, where the unfused update is still an option.
_FUSED_DEVICES = {"adagrad": ("cpu",), "adam": ("cpu", "cuda"), "sgd": ("cpu", "cuda")}


class RowAdagrad(torch.optim.Adagrad):
    r"""``torch.optim.Adagrad`` that updates the rows of a sparse gradient with row operations.

    Its step is Adagrad's, bit for bit: per parameter, the gradient's duplicate
    rows summed (``coalesce``), then for its rows :math:`r` with values :math:`g`,
    :math:`s_r \mathrel{+}= g^2`, :math:`\theta_r \mathrel{-}= \eta_t\, g / (\sqrt{s_r} + \epsilon)`
    with :math:`\eta_t = \eta / (1 + (t - 1)\,\text{lr\_decay})`. PyTorch makes that
    update through two sparse tensors and a sparse mask, whose bookkeeping cost
    more than the arithmetic on a word embedding's few rows (LSTM-RNN's five
    sentences a minibatch): here the same operations run on the rows
    directly (``index_add_``, ``index_select``). Dense gradients, and settings
    the row update leaves to PyTorch (``maximize``, ``differentiable``, a tensor
    learning rate, complex parameters, a closure), take ``Adagrad.step``
    itself. State and checkpoints are Adagrad's (``sum`` and ``step`` per
    parameter).
    """

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        if closure is not None or not self._rows_only():
            return super().step(closure)
        for group in self.param_groups:
            lr, lr_decay, eps = group["lr"], group["lr_decay"], group["eps"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                state["step"] += 1
                clr = lr / (1 + (state["step"].item() - 1) * lr_decay)
                grad = param.grad.coalesce()
                rows, values = grad._indices()[0], grad._values()
                state["sum"].index_add_(0, rows, values.pow(2))
                std = state["sum"].index_select(0, rows).sqrt_().add_(eps)
                param.index_add_(0, rows, values / std, alpha=-clr)
        return None

    def _rows_only(self) -> bool:
        """Whether every gradient is a sparse one with one sparse dimension, under settings the row update
        makes exactly as Adagrad does."""
        for group in self.param_groups:
            if (group["maximize"] or group["differentiable"] or group["weight_decay"] != 0
                    or isinstance(group["lr"], Tensor)):
                return False
            for param in group["params"]:
                grad = param.grad
                if grad is not None and (not grad.is_sparse or grad.sparse_dim() != 1 or param.is_complex()):
                    return False
        return True


def make_optimizer(name: str, params: list[Tensor], lr: float, dense: bool = True,
                   capturable: bool = False, weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """``"adagrad"``, ``"adam"`` (DyNet's defaults), ``"sparse_adam"``, ``"sgd"`` or ``"adamw"`` (with
    ``weight_decay`` on the matrices only) over ``params``, fused where PyTorch can.

    The fused update is the same arithmetic in one pass over all parameters
    instead of several operators per parameter; at minibatch 25 the
    per-parameter loop is a visible share of a step
    (``python benchmarks/optimizer_step.py``). ``dense=False`` (gradients that
    may be sparse, which have no fused path), floating-point parameters on a
    device without a fused kernel, and PyTorch older than 2.4 get the unfused
    one. ``"sparse_adam"`` (``torch.optim.SparseAdam``) needs sparse gradients.

    ``capturable=True``: an update that asks the host for nothing, so that a CUDA graph can capture it
    (:class:`graphtree.replay.ReplayedStep`): :class:`CapturableAdagrad`, or Adam with ``capturable=True``
    where the parameters are on a GPU. Dense gradients only.
    """
    if capturable:
        if name == "adagrad":
            return CapturableAdagrad(params, lr=lr)
        if name == "adam":
            on_gpu = all(p.is_cuda for p in params)
            return torch.optim.Adam(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, capturable=on_gpu, foreach=True)
        if name == "sgd":
            return torch.optim.SGD(params, lr=lr, foreach=True)
        raise InvalidArgumentError(f"no capturable {name!r}: choose adagrad, adam or sgd")
    if name == "sparse_adam":
        return torch.optim.SparseAdam(params, lr=lr, betas=(0.9, 0.999), eps=1e-8)
    if name == "adamw":  # the fine-tuning recipe: matrices decayed, biases and normalization weights not
        groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
                  {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
        fused = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
        return torch.optim.AdamW([g for g in groups if g["params"]], lr=lr, betas=(0.9, 0.999), eps=1e-8,
                                 fused=fused or None)
    if name == "adagrad" and not dense:
        return RowAdagrad(params, lr=lr)
    make, settings = {"adagrad": (torch.optim.Adagrad, {}),
                      "adam": (torch.optim.Adam, dict(betas=(0.9, 0.999), eps=1e-8)),
                      "sgd": (torch.optim.SGD, {})}[name]
    if dense and all(p.is_floating_point() and p.device.type in _FUSED_DEVICES[name] for p in params):
        try:
            return make(params, lr=lr, fused=True, **settings)
        except (TypeError, RuntimeError):  # PyTorch < 2.4: no fused update for this optimizer
            pass
    return make(params, lr=lr, **settings)


class CapturableAdagrad(torch.optim.Optimizer):
    """AdaGrad as ``torch.optim.Adagrad`` computes it with its defaults (no learning-rate decay, a zero initial
    accumulator, ``eps`` added to the square root), in operations that never ask the host for a value, so that
    a CUDA graph can capture the step. PyTorch's own reads its step counter on the host at every step (for the
    learning-rate decay), which a capture refuses. The accumulators are made here, before any capture.

    Args:
        params: The parameters (dense gradients).
        lr: Learning rate.
        eps: Added to the accumulators' square root.
        weight_decay: L2 penalty added to the gradients.
    """

    host_free_step: ClassVar[bool] = True  # its step asks the host for nothing: graphtree.replay accepts it

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-2, eps: float = 1e-10,
                 weight_decay: float = 0.0) -> None:
        super().__init__(params, dict(lr=lr, eps=eps, weight_decay=weight_decay))
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p]["sum"] = torch.zeros_like(p, memory_format=torch.preserve_format)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            if any(p.grad.is_sparse for p in params):
                raise UsageError("CapturableAdagrad takes dense gradients; use RowAdagrad for sparse ones")
            grads = [p.grad for p in params]
            if group["weight_decay"]:
                grads = torch._foreach_add(grads, params, alpha=group["weight_decay"])
            sums = [self.state[p]["sum"] for p in params]
            torch._foreach_addcmul_(sums, grads, grads, value=1)  # the accumulator: sum of squared gradients
            std = torch._foreach_sqrt(sums)
            torch._foreach_add_(std, group["eps"])
            torch._foreach_addcdiv_(params, grads, std, value=-group["lr"])
        return loss


class PaperOptimizer:
    """The update of one of the papers: one optimizer for the model, one for the embeddings, L2 per minibatch.

    Args:
        params: The non-embedding parameters (those with ``requires_grad``).
        embedding_params: The word-embedding parameters (may be empty, or frozen).
        spec: The settings, e.g. ``PRESETS["tai"]``.
    """

    def __init__(self, params: Iterable[Tensor], embedding_params: Iterable[Tensor], spec: OptimizerSpec,
                 capturable: bool = False) -> None:
        self.spec, self.capturable = spec, capturable
        self.params = [p for p in params if p.requires_grad]
        self.embedding_params = [p for p in embedding_params if p.requires_grad]
        if not self.params:
            raise InvalidArgumentError("PaperOptimizer got no trainable parameters")
        shared = {id(p) for p in self.params} & {id(p) for p in self.embedding_params}
        if shared:
            raise InvalidArgumentError("a parameter is both a model and an embedding parameter; pass each once")
        if capturable and spec.embedding == "sparse_adam" and self.embedding_params and spec.embedding_lr > 0:
            raise InvalidArgumentError(
                "lazy Adam (sparse_adam) moves only the rows a minibatch used, which no update of "
                "fixed shape can do: it has no capturable form")
        if capturable and "adamw" in (spec.name, spec.embedding):
            raise InvalidArgumentError("AdamW (the fine-tuning recipe) has no capturable form here; replay='off'")
        self.model_optimizer = make_optimizer(spec.name, self.params, spec.lr, capturable=capturable,
                                              weight_decay=spec.weight_decay)
        self.updates = 0  # updates made so far (the learning-rate schedule's position)
        self.total_updates: int | None = None  # the run's, set by the trainer (plan_updates) for a schedule
        # AdaGrad, SGD and lazy-Adam embeddings may get sparse gradients (for_model); Adam's are always dense.
        # A capturable update takes dense gradients: AdaGrad and SGD move a row without gradient by exactly 0.
        self.embedding_optimizer = (make_optimizer(spec.embedding, self.embedding_params, spec.embedding_lr,
                                                   dense=capturable or spec.embedding not in SPARSE_EXACT,
                                                   capturable=capturable, weight_decay=spec.weight_decay)
                                    if self.embedding_params and spec.embedding_lr > 0 else None)

    @classmethod
    def for_model(cls, model: torch.nn.Module, embedding: torch.nn.Module | None, spec: OptimizerSpec,
                  sparse_embeddings: bool = True, capturable: bool = False) -> PaperOptimizer:
        """Split ``model``'s parameters into ``embedding``'s and the rest.

        With ``sparse_embeddings`` and an AdaGrad, SGD or lazy-Adam embedding update, the
        ``torch.nn.Embedding`` modules inside ``embedding`` are switched to
        sparse gradients. The update is the same up to rounding (under either
        rule a row without gradient does not move), but a step then costs the
        rows of the minibatch instead of the whole vocabulary
        (``python benchmarks/embedding_update.py`` times both).
        Adam moves every row at every step (its moments decay), so its
        embeddings stay dense. Lazy Adam (``"sparse_adam"``) works on sparse
        gradients only, so its embeddings always get them.

        ``capturable=True``: both updates in a form a CUDA graph can hold (:func:`make_optimizer`'s), for a
        replayed step (:mod:`graphtree.train.replaying`); the embeddings keep dense gradients (a sparse one's
        size follows the batch), and lazy Adam, which has no such form, is refused (``ValueError``).
        """
        if capturable:
            sparse_embeddings = False
        elif spec.embedding == "sparse_adam":
            sparse_embeddings = True
        if sparse_embeddings and embedding is not None and spec.embedding in SPARSE_EXACT and spec.embedding_lr > 0:
            for module in embedding.modules():
                if isinstance(module, torch.nn.Embedding):
                    module.sparse = True
        emb = list(embedding.parameters()) if embedding is not None else []
        emb_ids = {id(p) for p in emb}
        return cls([p for p in model.parameters() if id(p) not in emb_ids], emb, spec, capturable=capturable)

    def zero_grad(self) -> None:
        for p in self.params + self.embedding_params:
            p.grad = None

    def plan_updates(self, total: int) -> None:
        """The number of updates the run makes, which a warm-up or a decay (``spec.schedule``) is laid over."""
        self.total_updates = total

    def _schedule(self) -> None:
        """Set both learning rates for the next update from the spec's schedule."""
        self.updates += 1
        if not self.spec.scheduled:
            return
        if self.total_updates is None:
            raise InvalidArgumentError("a learning-rate schedule needs the run's number of updates: call plan_updates "
                                       "(the Trainer does)")
        factor = self.spec.lr_factor(self.updates, self.total_updates)
        for optimizer, lr in ((self.model_optimizer, self.spec.lr), (self.embedding_optimizer, self.spec.embedding_lr)):
            if optimizer is not None:
                for group in optimizer.param_groups:
                    group["lr"] = lr * factor

    def l2_penalty(self) -> float:
        """:math:`\\frac{\\lambda}{2}\\|\\theta\\|^2` over the non-embedding parameters (for the reported loss)."""
        if self.spec.l2 == 0:
            return 0.0
        with torch.no_grad():
            return 0.5 * self.spec.l2 * float(sum((p * p).sum() for p in self.params))

    def step(self) -> None:
        """Add λθ to the gradients of the non-embedding parameters, decay them, then step both optimizers
        (:meth:`step_model`, then :meth:`step_embeddings`)."""
        self.step_model()
        self.step_embeddings()

    @torch.no_grad()
    def step_model(self) -> None:
        """The update of the non-embedding parameters: decay, λθ added to their gradients, the optimizer's step."""
        self._schedule()
        if self.spec.decay:
            torch._foreach_mul_(self.params, 1.0 - self.spec.decay)
        if self.spec.l2:
            for p in self.params:
                if p.grad is None:
                    p.grad = self.spec.l2 * p.detach().clone()
                else:
                    p.grad.add_(p, alpha=self.spec.l2)
        self.model_optimizer.step()

    @torch.no_grad()
    def step_embeddings(self) -> None:
        """The update of the word embeddings (nothing where they are frozen or absent)."""
        if self.embedding_optimizer is not None:
            # The sparse tensors in the update are PyTorch's own (valid by construction); opting out of the
            # invariant checks explicitly is what keeps torch from warning on every run that it did so implicitly.
            with torch.sparse.check_sparse_tensor_invariants(enable=False):
                self.embedding_optimizer.step()

    def state_dict(self) -> dict[str, Any]:
        return {"spec": self.spec.as_dict(), "model": self.model_optimizer.state_dict(),
                "embedding": self.embedding_optimizer.state_dict() if self.embedding_optimizer else None,
                "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = {"decay": 0.0, **state["spec"]}  # saved before OptimizerSpec had a decay
        if saved != self.spec.as_dict():
            raise InvalidArgumentError(f"optimizer state was saved with {state['spec']}, not {self.spec.as_dict()}")
        self.model_optimizer.load_state_dict(state["model"])
        self.updates = state.get("updates", 0)
        if self.embedding_optimizer is not None:
            self.embedding_optimizer.load_state_dict(state["embedding"])
