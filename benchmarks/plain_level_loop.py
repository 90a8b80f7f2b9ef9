"""The plainest level-by-level Constituency Tree-LSTM, the baseline every graphtree specialization must beat.

The same model as graphtree's ``NaryTreeLSTM(in, hidden)`` (constituency
setting, two children) with a classifier on every node, written as anyone
would in plain PyTorch: nodes grouped by height once per batch, then one loop
over the heights with one ``index_select`` of the children's states, one
``addmm`` and the gate math per level, and autograd for the backward pass. No
custom autograd function, no compiled kernel, no cached schedule beyond the
per-batch level lists. :meth:`PlainLevelTreeLSTM.load_from` copies a graphtree
model's weights, and the benchmark checks that both give the same logits.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["PlainLevelTreeLSTM", "plain_levels"]


def plain_levels(batch) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
    """The leaves, and per height above 0 the nodes and their ``[n, 2]`` children (``num_nodes``: no child)."""
    height, (child, parent), N = batch.height, batch.edge_index, batch.num_nodes
    children = torch.full((N, 2), N, dtype=torch.long, device=height.device)
    children[parent, batch.edge_pos] = child
    levels = []
    for level in range(1, int(height.max()) + 1):
        nodes = (height == level).nonzero().view(-1)
        levels.append((nodes, children[nodes].view(-1)))
    return (height == 0).nonzero().view(-1), levels


class PlainLevelTreeLSTM(nn.Module):
    """Tai et al.'s Constituency Tree-LSTM (eqs 9-14, leaf unit of their code), one level at a time."""

    def __init__(self, num_embeddings: int, embedding_dim: int, hidden: int, num_classes: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(num_embeddings, embedding_dim)
        self.embedding.weight.requires_grad_(False)  # frozen, as in every model of the benchmark
        self.W_leaf = nn.Linear(embedding_dim, 2 * hidden)  # c, o of the leaf unit
        self.U = nn.Linear(2 * hidden, 5 * hidden)  # gates i, o, u, f_left, f_right from [h_left, h_right]
        self.output = nn.Linear(hidden, num_classes)
        self.hidden = hidden

    def forward(self, batch) -> Tensor:
        """Logits of every node of ``batch``."""
        if "_plain_levels" not in batch.__dict__:  # built once per batch, as a loader would
            batch.__dict__["_plain_levels"] = plain_levels(batch)
        leaves, levels = batch.__dict__["_plain_levels"]
        d, N = self.hidden, batch.num_nodes
        h = self.U.weight.new_zeros(N + 1, d)  # row N: the zero state of a missing child
        c = self.U.weight.new_zeros(N + 1, d)
        c_leaf, z_o = self.W_leaf(self.embedding(batch.word[leaves])).split(d, dim=1)
        h[leaves], c[leaves] = torch.sigmoid(z_o) * torch.tanh(c_leaf), c_leaf
        for nodes, children in levels:
            n = nodes.numel()
            gates = self.U(h.index_select(0, children).view(n, 2 * d))
            i, o, u, f_left, f_right = gates.split(d, dim=1)
            c_children = c.index_select(0, children).view(n, 2, d)
            c_new = (torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(f_left) * c_children[:, 0]
                     + torch.sigmoid(f_right) * c_children[:, 1])
            h[nodes], c[nodes] = torch.sigmoid(o) * torch.tanh(c_new), c_new
        return self.output(h[:N])

    def loss(self, batch) -> Tensor:
        return F.cross_entropy(self(batch), batch.y, ignore_index=-1, reduction="sum")

    @torch.no_grad()
    def load_from(self, embedding: nn.Embedding, cell: nn.Module, classifier: nn.Linear) -> None:
        """Copy the weights of a graphtree ``NaryTreeLSTM`` (constituency, two children) and its classifier."""
        self.embedding.weight.copy_(embedding.weight)
        self.W_leaf.load_state_dict(cell.W_leaf.state_dict())
        self.U.weight.copy_(cell.U)  # rows i, o, u, f_1, f_2 over column blocks child 1, child 2
        self.U.bias.copy_(cell.b_U.sum(0))  # each child's map carries a bias; they add up
        self.output.load_state_dict(classifier.state_dict())
