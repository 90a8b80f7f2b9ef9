"""Node inputs from several fields: a type and a bag of sub-tokens per node (ASTs, parses with POS tags, ...)."""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import InvalidArgumentError

__all__ = ["NodeFields"]


class NodeFields(torch.nn.Module):
    r"""The input vector of each node from two fields: one categorical **type** and a variable-length **bag of
    sub-tokens** (e.g. an AST node's type and the words of its identifier, :class:`~graphtree.datasets.CodeTrees`):

    .. math::
        b_j = \frac{1}{\max(1, |W_j|)} \sum_{w \in W_j} E^{tok}_w, \qquad
        x_j = E^{type}_{t_j} + b_j \;\; (\text{combine="sum"}) \quad\text{or}\quad
        x_j = [E^{type}_{t_j}; b_j] \;\; (\text{combine="concat"})

    A node without sub-tokens has :math:`b_j = 0`. ``bag="sum"`` leaves out the
    division (a node's vector then grows with its number of sub-tokens).
    Summing keeps the cell's input size at ``channels``; concatenating keeps
    the two fields apart at twice the size.

    Args:
        num_types: Size of the type vocabulary.
        num_subtokens: Size of the sub-token vocabulary.
        channels: Size of each field's vectors.
        combine: ``"sum"`` or ``"concat"``.
        bag: ``"mean"`` or ``"sum"`` over a node's sub-tokens.

    Shapes:
        - **input:** ``node_type`` :math:`(N,)`, ``subtoken`` :math:`(T,)` and
          ``subtoken_index`` :math:`(T,)` (the node of each sub-token, in
          :math:`[0, N)`).
        - **output:** :math:`(N, F)`, :math:`F` = :attr:`out_channels`.
    """

    def __init__(self, num_types: int, num_subtokens: int, channels: int, combine: str = "sum",
                 bag: str = "mean") -> None:
        super().__init__()
        if combine not in ("sum", "concat"):
            raise InvalidArgumentError(f"combine must be 'sum' or 'concat', got {combine!r}")
        if bag not in ("mean", "sum"):
            raise InvalidArgumentError(f"bag must be 'mean' or 'sum', got {bag!r}")
        self.combine, self.bag = combine, bag
        self.types = torch.nn.Embedding(num_types, channels)
        self.subtokens = torch.nn.Embedding(num_subtokens, channels)
        self.out_channels = channels * (2 if combine == "concat" else 1)

    def forward(self, node_type: Tensor, subtoken: Tensor, subtoken_index: Tensor) -> Tensor:
        if subtoken.shape != subtoken_index.shape:
            raise InvalidArgumentError(
                f"subtoken {tuple(subtoken.shape)} and subtoken_index {tuple(subtoken_index.shape)} "
                "must have one node per sub-token")
        types = self.types(node_type)
        bag = types.new_zeros(types.shape).index_add_(0, subtoken_index, self.subtokens(subtoken))
        if self.bag == "mean":
            count = torch.bincount(subtoken_index, minlength=types.size(0)).clamp(min=1)
            bag = bag / count.unsqueeze(1).to(bag.dtype)
        return types + bag if self.combine == "sum" else torch.cat([types, bag], dim=1)
