"""Head lexicalization of constituents (Teng & Zhang, 2017, eqs 8-9 and Table 5)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Parameter

from ..engine import Children, schedule_of
from ..errors import InvalidArgumentError
from .cell import TreeCell

if TYPE_CHECKING:
    from ..schedule import LevelPlan

__all__ = ["HeadLexicalization", "head_leaves", "head_words"]

# The modes of the compiled FixedCombinationLevels (csrc/head_level.cpp): the fixed heads of Teng & Zhang's
# Table 5, and the sums of the leaf rows below each node (BiConTree's span features).
FIXED_COMBINATION_MODES = {"left": 0, "right": 1, "average": 2}
LEAF_SUM_MODE = 3

METHODS = ("gated", "left", "right", "average")


class HeadLexicalization(TreeCell):
    r"""Bottom-up head lexicalization from `"Head-Lexicalized Bidirectional Tree
    LSTMs" <https://aclanthology.org/Q17-1012/>`_ (Teng & Zhang, TACL 2017),
    Section 4.1: every node gets a head lexicon vector :math:`x_t`. A leaf's is
    its word vector; an internal node's is a gated mix of its children's
    (``method="gated"``, eqs 8-9):

    .. math::
        z_t &= \sigma\left(W_{zx}^L x_{t-1}^L + W_{zx}^R x_{t-1}^R + b_z\right)

        x_t &= z_t \otimes x_{t-1}^L + (1 - z_t) \otimes x_{t-1}^R

    The gate reads only the children's head vectors, not their LSTM states, so
    the head vectors come from a pass of their own, before (and shared by) the
    bottom-up and the top-down Tree-LSTMs that take them as input.

    **More than two children.** With ``n_ary = N`` children at positions
    :math:`k = 0..N-1`, eq 8 is a softmax over the children, elementwise:

    .. math::
        a_k &= \sum_{\ell=0}^{N-1} W_{zx}^{(k, \ell)} x_{t-1}^{\ell} + b_z^{(k)}
        \quad (k < N - 1), \qquad a_{N-1} = 0

        x_t &= \sum_{k} \operatorname{softmax}_k(a)_k \otimes x_{t-1}^{k}

    where the softmax runs over the children the node actually has. For
    :math:`N = 2`, :math:`\operatorname{softmax}(a_0, 0) = (\sigma(a_0),
    1 - \sigma(a_0))`, which is eqs 8-9 exactly (:math:`W_{zx}^{(0, 0)} =
    W_{zx}^L`, :math:`W_{zx}^{(0, 1)} = W_{zx}^R`). A node with a single child
    (a unary node) takes that child's head vector unchanged.

    The baselines of Table 5 need no parameters: ``"left"`` takes the head
    vector of the leftmost child, ``"right"`` that of the rightmost, and
    ``"average"`` the mean over the children. They accept any number of
    children.

    Args:
        channels (int): Size :math:`D` of the word (and head) vectors.
        method (str): ``"gated"`` (G, eqs 8-9), ``"left"`` (L), ``"right"`` (R)
            or ``"average"`` (A).
        n_ary (int): Maximum number of children :math:`N` for ``"gated"``
            (default 2); a node with more is an error naming the node.

    Shapes:
        - **input:** word vectors :math:`(|\mathcal{V}|, D)` (the rows of
          internal nodes are ignored), edge indices
          :math:`(2, |\mathcal{E}|)` (child :math:`\to` parent) and positions
          :math:`(|\mathcal{E}|)`, or the ``Data``/``Batch`` (with its ``schedule``, if it carries one),
          or a :class:`~graphtree.schedule.Schedule`.
        - **output:** :math:`(x_{head},)`, the head vectors :math:`(|\mathcal{V}|, D)` of every node.
    """

    def __init__(self, channels: int, method: str = "gated", n_ary: int = 2) -> None:
        super().__init__(state_channels=(channels,), max_children=n_ary if method == "gated" else None)
        if method not in METHODS:
            raise InvalidArgumentError(f"method must be one of {METHODS}, got {method!r}")
        if n_ary < 1:
            raise InvalidArgumentError(f"n_ary must be at least 1, got {n_ary}")
        self.channels, self.method, self.n_ary = channels, method, n_ary
        if method == "gated":
            D, N = channels, n_ary
            # Row block k, column block l: W_zx^(k, l); for N = 2 the columns are [W_zx^L, W_zx^R].
            self.W_zx = Parameter(torch.empty((N - 1) * D, N * D))
            self.b_z = Parameter(torch.empty((N - 1) * D))
        self.reset_parameters()

    def compiled_weights(self) -> tuple[Tensor, ...]:
        """The weights of ``GatedHeadLevels``, in its order; none for the fixed methods."""
        return (self.W_zx, self.b_z) if self.method == "gated" else ()

    def level_kernel(self, kernels: Any, plan: LevelPlan, weights: Sequence[Tensor]) -> Any | None:
        """The fast path: the fixed methods (left, right, average) on ``FixedCombinationLevels``, the gated binary
        method on ``GatedHeadLevels`` (``csrc/head_level.cpp``), which takes the weights as they are."""
        if self.method in FIXED_COMBINATION_MODES:
            return kernels.FixedCombinationLevels(FIXED_COMBINATION_MODES[self.method])
        if self.n_ary != 2:
            return None
        return kernels.GatedHeadLevels(*weights)

    def reset_parameters(self) -> None:
        """Every parameter, weights and biases of the layers inside too, uniform in :math:`\\pm 1/\\sqrt{d}`
        (``d = channels``), as ``torch.nn.LSTM`` initializes."""
        self._uniform_everywhere(self.channels)

    def forward(self, x: Tensor, edge_index: Any, edge_pos: Tensor | None = None) -> tuple[Tensor]:
        """``(x_head,)``: the head vector of every node, its one state, returned as every cell returns its states;
        ``edge_index``: child -> parent edges (with ``edge_pos``, each child's position) or the ``Data``/``Batch``."""
        self._check_features(x, self.channels, edge_index)
        return self.propagate(edge_index, x=x, edge_pos=edge_pos)

    def update(self, children: Children, x: Tensor) -> tuple[Tensor]:
        """The head vectors of one level's nodes (eqs 8-9, or a Table 5 baseline)."""
        (x_child,) = children.states  # [n, K, D]: the children's head vectors
        if x_child.size(1) == 0:
            return (x,)  # a leaf: its word vector is its head
        mask = children.mask
        n, K, D = x_child.shape
        if self.method == "average":
            return (children.mean(x_child),)
        if self.method in ("left", "right"):
            slot = torch.arange(K, device=mask.device)
            if self.method == "left":
                pick = torch.where(mask, slot, K).min(dim=1).values
            else:
                pick = torch.where(mask, slot, -1).max(dim=1).values
            chosen = (slot == pick.unsqueeze(1)).unsqueeze(-1).to(x_child.dtype)  # [n, K, 1]: one child each
            return (children.sum(chosen * x_child),)
        if K == 1:
            return (x_child[:, 0],)  # n_ary = 1: a softmax over one child is 1
        a = F.linear(x_child.reshape(n, K * D), self.W_zx, self.b_z)  # W_zx^L x^L + W_zx^R x^R + b_z
        if K == 2:
            # Eqs 8-9: z = sigmoid(a). A unary node's logit goes to +inf (child 0 only) or -inf (child 1 only),
            # so that z is exactly 1 or 0 there; a level where every node has both children has none.
            if children.every_slot_filled:
                z = torch.sigmoid(a)  # eq 8
            else:
                side = torch.where(mask[:, 1:], torch.where(mask[:, :1], 0.0, -math.inf), math.inf).to(a.dtype)
                z = torch.sigmoid(a + side)  # eq 8
            return (torch.lerp(x_child[:, 1], x_child[:, 0], z),)  # eq 9: z x^L + (1 - z) x^R, exact at z = 0, 1
        a = torch.cat([a.view(n, K - 1, D), a.new_zeros(n, 1, D)], dim=1)  # the last child's logit is the constant 0
        weight = torch.softmax(a.masked_fill(~mask.unsqueeze(-1), -math.inf), dim=1)
        return ((weight * x_child).sum(dim=1),)

    def __repr__(self) -> str:
        extra = f", n_ary={self.n_ary}" if self.method == "gated" else ""
        return f"{self.__class__.__name__}({self.channels}, method={self.method!r}{extra})"


def head_leaves(x_head: Tensor, batch: Any) -> Tensor:
    r"""The head word of every node, read out as in Teng & Zhang (2017), §7.5.

    Each internal node passes the choice on to the child whose head vector is
    the most cosine-similar to its own (ties go to the leftmost child); the
    head word of a node is the leaf this chain of choices ends at.

    Args:
        x_head: Head vectors :math:`(|\mathcal{V}|, D)`, e.g. from
            :class:`HeadLexicalization`.
        batch: The ``Data``/``Batch`` (or its schedule) ``x_head`` belongs to.

    Returns:
        For every node, the index of its head leaf (a leaf is its own head).
    """
    schedule = schedule_of(batch)
    device = x_head.device
    child, parent = schedule.edge_index.to(device)
    num_nodes = schedule.num_nodes
    best_child = torch.arange(num_nodes, device=device)
    if child.numel():
        with torch.no_grad():
            sim = F.cosine_similarity(x_head[child], x_head[parent], dim=-1)
        # Stable sorts from the least to the most significant key: position, similarity, parent.
        order = torch.argsort(schedule.edge_pos.to(device), stable=True)
        order = order[torch.argsort(sim[order], descending=True, stable=True)]
        order = order[torch.argsort(parent[order], stable=True)]
        first = torch.ones_like(order, dtype=torch.bool)
        first[1:] = parent[order][1:] != parent[order][:-1]
        best_child[parent[order][first]] = child[order][first]
    head = torch.arange(num_nodes, device=device)
    height = schedule.height.to(device)
    # Children sit at lower heights, so one sweep upward resolves every chain.
    for level in range(1, int(height.max()) + 1 if num_nodes else 0):
        nodes = (height == level).nonzero().view(-1)
        head[nodes] = head[best_child[nodes]]
    return head


def head_words(x_head: Tensor, data: Any) -> list[str | None]:
    """The head word of every node as a token (:func:`head_leaves` resolved
    through ``data.word_pos`` and ``data.tokens``), for display.

    ``data`` is a ``Data`` or a ``Batch`` built by graphtree's converters; a
    node whose head leaf carries no word gets ``None``.
    """
    leaves = head_leaves(x_head, data).cpu()
    word_pos = data.word_pos.cpu()
    tokens = data.tokens
    graph = getattr(data, "batch", None)
    words: list[str | None] = []
    for node in range(leaves.numel()):
        leaf = int(leaves[node])
        pos = int(word_pos[leaf])
        if pos < 0:
            words.append(None)
        elif graph is not None and tokens and isinstance(tokens[0], list):
            words.append(tokens[int(graph[leaf])][pos])
        else:
            words.append(tokens[pos])
    return words
