"""A plain per-node recursive binary Tree-LSTM, the baseline of the speed benchmark.

This is written the way most published Tree-LSTM code is: a Python tree object,
one ``nn.Linear`` per gate and child, and a recursive function that visits one
node at a time, classifies it and adds its loss. One tree is processed at a
time; gradients of the trees of a batch accumulate and the optimizer steps once
per batch. It computes the same function as graphtree's
``NaryTreeLSTM(in, hidden, n_ary=2)`` in its default constituency setting (a
leaf unit on the words, gates from the two children's states at inner nodes),
so :meth:`RecursiveTreeLSTM.load_from` can copy that cell's weights and the
benchmark checks that both give the same logits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["RecursiveTreeLSTM", "Tree", "tree_from_data"]


@dataclass
class Tree:
    """One node of a sentence tree: ``children`` left to right; leaves carry a word position."""

    label: int
    word_pos: int = -1
    children: list[Tree] = field(default_factory=list)


def tree_from_data(data) -> tuple[Tree, Tensor]:
    """The :class:`Tree` of a graphtree ``Data`` sentence, and its word ids in sentence order.

    Conversion happens once, before any timing, as a data loader would do it.
    """
    num_nodes = data.num_nodes
    nodes = [Tree(int(y), int(p)) for y, p in zip(data.y.tolist(), data.word_pos.tolist())]
    child, parent = data.edge_index.tolist()
    # Attach children in their position order so that "left" and "right" match edge_pos.
    for _, c, p in sorted(zip(data.edge_pos.tolist(), child, parent)):
        nodes[p].children.append(nodes[c])
    has_parent = torch.zeros(num_nodes, dtype=torch.bool)
    has_parent[data.edge_index[0]] = True
    root = nodes[int((~has_parent).nonzero()[0])]
    leaf = data.word_pos >= 0
    order = torch.argsort(data.word_pos[leaf])
    words = data.word[leaf][order]
    return root, words


class RecursiveTreeLSTM(nn.Module):
    """Constituency Tree-LSTM evaluated node by node, with a softmax classifier on every node.

    Args:
        num_embeddings: Vocabulary size.
        embedding_dim: Word vector size.
        hidden: Memory size.
        num_classes: Number of labels.
        freeze_embeddings: Keep the word vectors fixed (the benchmark does, for every model).
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, hidden: int, num_classes: int,
                 freeze_embeddings: bool = True) -> None:
        super().__init__()
        self.embedding = nn.Embedding(num_embeddings, embedding_dim)
        self.embedding.weight.requires_grad_(not freeze_embeddings)
        # Leaf unit.
        self.cx = nn.Linear(embedding_dim, hidden)
        self.ox = nn.Linear(embedding_dim, hidden)
        # Composer: one map per gate and child.
        self.ilh, self.irh = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.lflh, self.lfrh = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.rflh, self.rfrh = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.ulh, self.urh = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.olh, self.orh = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.output = nn.Linear(hidden, num_classes)
        self.hidden = hidden

    def leaf(self, x: Tensor) -> tuple[Tensor, Tensor]:
        c = self.cx(x)
        h = torch.sigmoid(self.ox(x)) * torch.tanh(c)
        return c, h

    def compose(self, lc: Tensor, lh: Tensor, rc: Tensor, rh: Tensor) -> tuple[Tensor, Tensor]:
        i = torch.sigmoid(self.ilh(lh) + self.irh(rh))
        lf = torch.sigmoid(self.lflh(lh) + self.lfrh(rh))
        rf = torch.sigmoid(self.rflh(lh) + self.rfrh(rh))
        u = torch.tanh(self.ulh(lh) + self.urh(rh))
        c = i * u + lf * lc + rf * rc
        h = torch.sigmoid(self.olh(lh) + self.orh(rh)) * torch.tanh(c)
        return c, h

    def node(self, tree: Tree, inputs: Tensor, outputs: list[Tensor] | None) -> tuple[Tensor, Tensor, Tensor]:
        """States of ``tree``'s root and the summed loss of its subtree (logits go to ``outputs``)."""
        if not tree.children:
            c, h = self.leaf(inputs[tree.word_pos].unsqueeze(0))
            loss = torch.zeros((), device=inputs.device)
        else:
            lc, lh, loss = self.node(tree.children[0], inputs, outputs)
            if len(tree.children) > 1:
                rc, rh, right_loss = self.node(tree.children[1], inputs, outputs)
                loss = loss + right_loss
            else:  # a unary node: the missing right child has zero states
                rc, rh = torch.zeros_like(lc), torch.zeros_like(lh)
            c, h = self.compose(lc, lh, rc, rh)
        logits = self.output(h)
        if outputs is not None:
            outputs.append(logits)
        if tree.label >= 0:
            loss = loss + F.cross_entropy(logits, torch.tensor([tree.label], device=logits.device), reduction="sum")
        return c, h, loss

    def forward(self, tree: Tree, words: Tensor, outputs: list[Tensor] | None = None) -> Tensor:
        """Summed node loss of one sentence."""
        inputs = self.embedding(words)
        return self.node(tree, inputs, outputs)[2]

    @torch.no_grad()
    def load_from(self, embedding: nn.Embedding, cell: nn.Module, classifier: nn.Linear) -> None:
        """Copy the weights of a graphtree ``NaryTreeLSTM(n_ary=2)`` (constituency) and its classifier."""
        d = self.hidden
        self.embedding.weight.copy_(embedding.weight)
        self.cx.weight.copy_(cell.W_leaf.weight[:d])
        self.cx.bias.copy_(cell.W_leaf.bias[:d])
        self.ox.weight.copy_(cell.W_leaf.weight[d:])
        self.ox.bias.copy_(cell.W_leaf.bias[d:])
        # The cell's U stacks gate rows i, o, u, f_left, f_right over child column blocks left, right.
        rows = {"i": 0, "o": 1, "u": 2, "lf": 3, "rf": 4}
        for gate, r in rows.items():
            for side, k in (("l", 0), ("r", 1)):
                linear = getattr(self, f"{gate}{side}h")
                linear.weight.copy_(cell.U[r * d:(r + 1) * d, k * d:(k + 1) * d])
                linear.bias.copy_(cell.b_U[k, r * d:(r + 1) * d])
        self.output.load_state_dict(classifier.state_dict())
