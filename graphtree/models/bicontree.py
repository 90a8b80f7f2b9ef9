"""Bidirectional head-lexicalized constituent Tree-LSTM classifier (Teng & Zhang, 2017)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch import Tensor
from torch.nn import Linear

from ..engine import Children, propagate_side_by_side, schedule_of
from ..errors import InvalidArgumentError
from ..nn.cell import TreeCell, first_state
from ..nn.functional import dropout
from ..nn.head_lexicalization import LEAF_SUM_MODE, HeadLexicalization
from ..nn.lexicalized import LexicalizedTreeLSTM
from ..nn.top_down import TopDownTreeLSTM

if TYPE_CHECKING:
    from ..schedule import LevelPlan

__all__ = ["BiTreeLSTM", "BiTreeOutput"]

VARIANTS = ("contree", "contree_lex", "top_down", "bicontree")


class BiTreeOutput(NamedTuple):
    """What :meth:`BiTreeLSTM.encode` computes; absent parts are ``None``.

    Attributes:
        head: Head vectors :math:`x_t` of every node.
        h_up: Bottom-up hidden states :math:`\\tilde h_\\uparrow`.
        h_down: Top-down hidden states :math:`\\tilde h_\\downarrow`.
        node: The node's phrase representation, ``h_up ⊕ h_down`` (whichever exist).
        features: The classifier input of every node (eq 15 at the roots).
    """

    head: Tensor | None
    h_up: Tensor | None
    h_down: Tensor | None
    node: Tensor
    features: Tensor


class BiTreeLSTM(torch.nn.Module):
    r"""The bidirectional head-lexicalized Tree-LSTM classifier (BiConTree) from
    `"Head-Lexicalized Bidirectional Tree LSTMs"
    <https://aclanthology.org/Q17-1012/>`_ (Teng & Zhang, TACL 2017),
    Section 5, and its ablations (Table 1).

    Head vectors :math:`x_t` come from :class:`~graphtree.nn.HeadLexicalization`
    (eqs 8-9), the bottom-up states from
    :class:`~graphtree.nn.LexicalizedTreeLSTM` (eqs 10-11) and the top-down
    states from :class:`~graphtree.nn.TopDownTreeLSTM` (eqs 13-14). A sentence
    is represented by (eq 15)

    .. math::
        h = \tilde{h}_{ROOT\uparrow} \oplus \tilde{h}_{ROOT\downarrow}
        \oplus \frac{1}{n} \sum_{i=1}^n \tilde{h}'_i

    (:math:`\tilde{h}'_i` the top-down states of the :math:`n` leaves) and
    classified by (eq 16)

    .. math::
        h_l = \mathrm{ReLU}(W_{hl} h + b_{hl}), \qquad
        P = \mathrm{softmax}(W_{lp} h_l + b_{lp}).

    The phrase representation of a node is its
    :math:`\tilde{h}_\uparrow \oplus \tilde{h}_\downarrow`. For phrase-level
    training every node is classified by the same eq 16 from eq 15 applied to
    its own subtree, :math:`\tilde{h}_\uparrow \oplus \tilde{h}_\downarrow
    \oplus` the mean top-down state of the leaves under it; at the root this is
    eq 15, and one classifier serves all nodes (as Table 4's count requires).
    On a DAG a leaf reachable along several paths counts once per path.

    ``variant`` selects the models of Table 1:

    ============== ================================ ===========================================
    variant        layers                           classifier input of a node
    ============== ================================ ===========================================
    "contree"      unlexicalized bottom-up          :math:`\tilde h_\uparrow`
    "contree_lex"  heads + lexicalized bottom-up    :math:`\tilde h_\uparrow`
    "top_down"     heads + top-down                 :math:`\tilde h_\downarrow \oplus` leaf mean
    "bicontree"    heads + bottom-up + top-down     :math:`\tilde h_\uparrow \oplus \tilde h_\downarrow
                                                    \oplus` leaf mean
    ============== ================================ ===========================================

    **Parameter counts (Table 4).** The paper counts everything but the word
    lookup table, i.e. the head gate, the Tree-LSTMs and the classifier, with
    300-dimensional GloVe inputs, 128 ReLU units and 5 classes. With those
    settings and :math:`|h| = 150`, ``contree`` has 538,223 and
    ``contree_lex`` 763,523 parameters, as in Table 4. ``bicontree`` has
    1,478,123 with eq 14's separate input maps and biases for
    :math:`\mathbf{U}_L` and :math:`\mathbf{U}_R`, and Table 4's 1,297,523 with
    ``share_input_weights=True`` (the 180,600 difference is one
    :math:`4 \cdot 150 \times 300` input map and its :math:`4 \cdot 150`
    biases); see :class:`~graphtree.nn.TopDownTreeLSTM`.

    The word embedding lookup is the caller's: the model takes node inputs.
    Dropout (§6: on the lexical inputs) is applied to them in training.

    Args:
        in_channels (int): Size :math:`D` of the word vectors.
        hidden_channels (int): Size :math:`|h|` of the Tree-LSTM states.
        num_classes (int): Number of labels.
        mlp_channels (int): Size of :math:`h_l` (default 128, the paper's
            sentiment setting; 64 for TREC).
        variant (str): ``"contree"``, ``"contree_lex"``, ``"top_down"`` or
            ``"bicontree"`` (default).
        head (str): Head lexicalization method: ``"gated"`` (default),
            ``"left"``, ``"right"`` or ``"average"`` (Table 5).
        share_input_weights (bool): Share the top-down input maps and biases
            between positions (Table 4's count). Default ``False``.
        dropout (float): Dropout probability on the inputs (the paper uses 0.5).

    Shapes:
        - **input:** word vectors :math:`(|\mathcal{V}|, D)` (rows of internal
          nodes are ignored), and the batch (a ``Data``/``Batch`` or its
          :class:`~graphtree.schedule.Schedule`).
        - **output:** logits :math:`(|\mathcal{V}|, C)` for every node; the
          roots' rows are the sentence predictions of eq 16.
    """

    def __init__(self, in_channels: int, hidden_channels: int, num_classes: int, mlp_channels: int = 128,
                 variant: str = "bicontree", head: str = "gated", share_input_weights: bool = False,
                 dropout: float = 0.0) -> None:
        super().__init__()
        if variant not in VARIANTS:
            raise InvalidArgumentError(f"variant must be one of {VARIANTS}, got {variant!r}")
        self.in_channels, self.hidden_channels, self.num_classes = in_channels, hidden_channels, num_classes
        self.variant, self.dropout = variant, dropout
        d = hidden_channels
        self.head = HeadLexicalization(in_channels, head) if variant != "contree" else None
        self.bottom_up = (LexicalizedTreeLSTM(in_channels, d, lexicalized=variant != "contree")
                          if variant != "top_down" else None)
        self.top_down = (TopDownTreeLSTM(in_channels, d, share_input_weights=share_input_weights)
                         if variant in ("top_down", "bicontree") else None)
        self.leaf_sum = _LeafSum(d) if self.top_down is not None else None
        feature_channels = (d if self.bottom_up is not None else 0) + (2 * d if self.top_down is not None else 0)
        self.W_hl = Linear(feature_channels, mlp_channels)
        self.W_lp = Linear(mlp_channels, num_classes)

    def reset_parameters(self) -> None:
        for module in (self.head, self.bottom_up, self.top_down, self.W_hl, self.W_lp):
            if module is not None:
                module.reset_parameters()

    def encode(self, x: Tensor, batch: Any) -> BiTreeOutput:
        """Head vectors, bottom-up and top-down states, and classifier inputs of every node."""
        x = dropout(x, self.dropout, self.training)
        batch = schedule_of(batch)  # built once (unless the batch carries it) for every pass below
        x_head = first_state(self.head(x, batch)) if self.head is not None else None
        lexical = x_head if x_head is not None else x
        if self.bottom_up is not None and self.top_down is not None:
            # Both directions read the head vectors only, not each other's states: their passes run side by side.
            (h_up, _), (h_down, _) = propagate_side_by_side([self.bottom_up.pass_of(batch, x=lexical),
                                                             self.top_down.pass_of(batch, x=lexical)])
        else:
            h_up = first_state(self.bottom_up(lexical, batch)) if self.bottom_up is not None else None
            h_down = first_state(self.top_down(lexical, batch)) if self.top_down is not None else None
        parts = [h_up] if h_up is not None else []
        if self.top_down is not None:
            parts.append(h_down)
            node = torch.cat(parts, dim=-1)
            leaf_sum, leaf_count = self.leaf_sum(h_down, batch)
            features = torch.cat([node, leaf_sum / leaf_count], dim=-1)
        else:
            node = features = h_up
        return BiTreeOutput(x_head, h_up, h_down, node, features)

    def forward(self, x: Tensor, batch: Any) -> Tensor:
        """Logits of every node (eq 16 before the softmax)."""
        features = self.encode(x, batch).features
        return self.W_lp(torch.relu(self.W_hl(features)))

    @staticmethod
    def roots(batch: Any) -> Tensor:
        """Indices of the root nodes of ``batch`` (one per tree, in graph order)."""
        return (schedule_of(batch).depth == 0).nonzero().view(-1)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.hidden_channels}, "
                f"num_classes={self.num_classes}, variant={self.variant!r})")


class _LeafSum(TreeCell):
    """Sum and number of the leaf rows below each node (a leaf counts itself), bottom-up."""

    def compiled_weights(self) -> tuple[Tensor, ...]:
        """``FixedCombinationLevels`` takes no weights (the cell has none)."""
        return ()

    def level_kernel(self, kernels: Any, plan: LevelPlan, weights: Sequence[Tensor]) -> Any:
        """The same sums in C++: ``FixedCombinationLevels`` (``csrc/head_level.cpp``) in its leaf-sum mode."""
        return kernels.FixedCombinationLevels(LEAF_SUM_MODE)

    def __init__(self, channels: int) -> None:
        super().__init__(state_channels=(channels, 1))

    def forward(self, x: Tensor, batch: Any) -> tuple[Tensor, Tensor]:
        return self.propagate(batch, x=x)

    def update(self, children: Children, x: Tensor) -> tuple[Tensor, Tensor]:
        total, count = children.states
        if total.size(1) == 0:  # a leaf: its own row, counted once
            return x, x.new_ones(x.size(0), 1)
        return children.sum(total), children.sum(count)
