r"""ListOps (Nangia & Bowman, 2018, "ListOps: A Diagnostic Dataset for Latent Tree Learning") as trees.

An example is a nested prefix list of operators over the digits 0-9, such as
``[MAX 2 9 [MIN 4 7 ] 0 ]``, whose value (here 9) is the label. The generator
here is the dataset: examples are drawn from a seeded ``random.Random``, so the
same settings give the same examples on every machine.
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch_geometric.data import Data

from ..data.parents import from_parents
from ..data.tree import NO_LABEL, NO_WORD, Vocabulary, lookup_words, tree_data
from ..errors import TreeFormatError
from ..vocab import Vocab
from .base import DEFAULT_ROOT, CorpusDataset, code_fingerprint, generated_split, split_sizes
from .download import DatasetError

__all__ = ["DIGITS", "END", "LISTOPS_VOCAB", "OPERATORS", "TOKENS", "TREES", "ListOps", "apply_operator",
           "generate_listops", "listops_tree"]

OPERATORS = ("[MIN", "[MAX", "[MED", "[SM")
"""The operator tokens: minimum, maximum, median, and sum modulo 10 (``SM``)."""

END = "]"
"""The token closing a list."""

DIGITS = tuple("0123456789")
"""The argument tokens."""

TOKENS = DIGITS + OPERATORS + (END,)
"""Every ListOps token."""

LISTOPS_VOCAB = Vocab(TOKENS)
"""The vocabulary :class:`ListOps` fills ``word`` and ``word_flat`` with (id 0, ``<unk>``, is never used)."""


def apply_operator(operator: str, args: Sequence[int]) -> int:
    """The value of ``operator`` (one of :data:`OPERATORS`) on digit values ``args``.

    ``[MED`` is the median rounded down (for an even count, the mean of the two
    middle values rounded down, as ``int(numpy.median(...))`` in the paper's
    generator); ``[SM`` is the sum modulo 10.

    Raises:
        ValueError: an unknown operator or no arguments.
    """
    if not args:
        raise DatasetError(f"{operator} needs at least one argument")
    if operator == "[MIN":
        return min(args)
    if operator == "[MAX":
        return max(args)
    if operator == "[MED":
        ordered = sorted(args)
        middle = len(ordered) // 2
        return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) // 2
    if operator == "[SM":
        return sum(args) % 10
    raise DatasetError(f"unknown ListOps operator {operator!r}; use one of {OPERATORS}")


TREES = ("paper", "flat")
"""The tree shapes :func:`listops_tree` builds: the paper's gold parse, or one node per list."""


def listops_tree(tokens: str | Sequence[str], vocab: Vocabulary | None = None, tree: str = "paper") -> Data:
    """The tree of one ListOps example, with the value of every complete list and digit as its label.

    ``tree="paper"`` (default) is the gold parse of Nangia & Bowman (2018,
    Figure 1): every token is a leaf (operators, digits and ``]``), and the
    parse is left-branching within each list, so each internal node is binary:
    a partial list on the left, the next argument (a digit or a whole nested
    list) or the closing ``]`` on the right. ``[MAX 2 9 ]`` is
    ``((([MAX 2) 9) ])``. Complete lists and digits are labelled with their
    value; partial lists, operators and ``]`` are unlabelled (``-1``).

    ``tree="flat"`` has one node per operator (internal, its arguments as
    children) and per digit (leaf); the ``]`` tokens are not nodes, and every
    node is labelled.

    Nodes are in pre-order (the root is node 0, children left to right).
    Attributes are those of :func:`graphtree.data.from_parents`, with:

    * ``y`` ``[N]``: node values 0-9, or ``-1`` (node-level supervision);
    * ``graph_y`` ``[1]``: the root's value, the example's label;
    * ``tokens``: the tokens the nodes' ``word_pos`` point into (``paper``:
      the whole sequence; ``flat``: the node tokens); ``word`` their ids with
      a vocab (``-1`` at the paper tree's internal nodes);
    * ``tokens_flat``: the whole sequence, brackets included, for sequence
      models (``word_flat`` its ids with a vocab);
    * ``list_depth`` ``[1]``: lists nested on the deepest path (``[MAX 1 2 ]`` is 1).

    Args:
        tokens: The example as a whitespace-separated string or a token list.
        vocab: Optional token -> id mapping (e.g. :data:`LISTOPS_VOCAB`).
        tree: ``"paper"`` or ``"flat"`` (see :data:`TREES`).

    Raises:
        TreeFormatError: an unknown token, a digit or ``]`` outside a list, an
            empty list, an unclosed list, text after the end (``position`` is
            the 0-based token index).
        ValueError: an unknown ``tree``.
    """
    if tree not in TREES:
        raise DatasetError(f"unknown ListOps tree {tree!r}; use one of {TREES}")
    seq = tokens.split() if isinstance(tokens, str) else list(tokens)
    root = _parse(seq)
    data = _paper_tree(root, seq, vocab) if tree == "paper" else _flat_tree(root, seq, vocab)
    data.graph_y = data.y[:1].clone()  # node 0 is the root
    data.tokens_flat = seq
    data.list_depth = torch.tensor([root.depth()])
    if vocab is not None:
        data.word_flat = lookup_words(seq, range(len(seq)), vocab)
    return data


class _List:
    """One parsed list: its operator's and ``]``'s token positions, its items (digit positions or lists), value."""

    __slots__ = ("begin", "end", "items", "value")

    def __init__(self, begin: int) -> None:
        self.begin, self.end, self.items, self.value = begin, -1, [], -1

    def depth(self) -> int:
        return 1 + max((item.depth() for item in self.items if isinstance(item, _List)), default=0)


def _parse(seq: list[str]) -> _List:
    """The example's outer list, every list's value computed; malformed text raises a located error."""
    if not seq:
        raise TreeFormatError("empty ListOps example")
    root: _List | None = None
    stack: list[_List] = []
    for pos, token in enumerate(seq):
        if root is not None and not stack:
            raise TreeFormatError(f"{token!r} after the end of the example (one list per example)", position=pos)
        if token in OPERATORS:
            opened = _List(pos)
            if stack:
                stack[-1].items.append(opened)
            else:
                root = opened
            stack.append(opened)
        elif token in DIGITS:
            if not stack:
                raise TreeFormatError(f"digit {token} outside any list; an example is a list like [MAX 1 2 ]",
                                      position=pos)
            stack[-1].items.append(pos)
        elif token == END:
            if not stack:
                raise TreeFormatError("']' closes no list", position=pos)
            closed = stack.pop()
            if not closed.items:
                raise TreeFormatError(f"{seq[closed.begin]} list has no arguments", position=pos)
            closed.end = pos
            closed.value = apply_operator(seq[closed.begin], [
                item.value if isinstance(item, _List) else int(seq[item]) for item in closed.items])
        else:
            raise TreeFormatError(f"unknown ListOps token {token!r}; tokens are {' '.join(TOKENS)}", position=pos)
    if stack:
        raise TreeFormatError(f"{len(stack)} list(s) never closed", position=len(seq))
    assert root is not None
    return root


def _paper_tree(root: _List, seq: list[str], vocab: Vocabulary | None) -> Data:
    parent: list[int] = []
    child_pos: list[int] = []
    labels: list[int] = []
    word_pos: list[int] = []

    def add(up: int, pos: int, label: int, word: int) -> int:
        parent.append(up)
        child_pos.append(pos)
        labels.append(label)
        word_pos.append(word)
        return len(parent) - 1

    def emit_list(lst: _List, up: int, pos: int) -> None:
        # The list's constituents, outermost first: the whole list, then the list without ``]``, then without
        # its last item ... down to the operator alone (a leaf). Pre-order visits each left child before the
        # right one, so the chain goes down the left spine first and the right children follow, innermost first.
        right = [*lst.items, None]  # None: the closing bracket
        spine = [add(up, pos, lst.value, NO_WORD)]
        for _ in range(len(lst.items)):
            spine.append(add(spine[-1], 0, NO_LABEL, NO_WORD))
        add(spine[-1], 0, NO_LABEL, lst.begin)  # the operator, leftmost leaf
        for node, item in zip(reversed(spine), right):
            if item is None:
                add(node, 1, NO_LABEL, lst.end)
            elif isinstance(item, _List):
                emit_list(item, node, 1)
            else:
                add(node, 1, int(seq[item]), item)

    emit_list(root, -1, -1)
    return tree_data(parent, child_pos, labels, word_pos, seq, vocab)


def _flat_tree(root: _List, seq: list[str], vocab: Vocabulary | None) -> Data:
    parents: list[int] = []  # 0-based parent of each node, -1 at the root, as from_parents takes them
    labels: list[int] = []
    node_tokens: list[str] = []

    def emit(lst: _List, parent: int) -> None:
        parents.append(parent)
        labels.append(lst.value)
        node_tokens.append(seq[lst.begin])
        me = len(parents) - 1
        for item in lst.items:
            if isinstance(item, _List):
                emit(item, me)
            else:
                parents.append(me)
                labels.append(int(seq[item]))
                node_tokens.append(seq[item])

    emit(root, -1)
    return from_parents(parents, node_tokens, labels, vocab)


class _TooLongError(Exception):
    """A drawn example passed ``max_length``: it is dropped and drawn again."""


def _draw(rng: random.Random, depth: int, settings: tuple[int, int, int, float, int], out: list[str]) -> None:
    max_depth, min_args, max_args, list_prob, max_length = settings
    out.append(rng.choice(OPERATORS))
    for _ in range(rng.randint(min_args, max_args)):
        if depth < max_depth and rng.random() < list_prob:
            _draw(rng, depth + 1, settings, out)
        else:
            out.append(rng.choice(DIGITS))
        if len(out) > max_length:  # stop early: with a large list_prob an example could grow without bound
            raise _TooLongError
    out.append(END)
    if len(out) > max_length:
        raise _TooLongError


def generate_listops(num: int, seed: int = 0, *, max_depth: int = 10, min_args: int = 2, max_args: int = 5,
                     list_prob: float = 0.25, max_length: int = 100,
                     exclude: set[str] | None = None) -> list[list[str]]:
    """Draw ``num`` distinct ListOps examples (token lists), the same ones for the same arguments.

    Each example is a list: an operator drawn uniformly from :data:`OPERATORS`
    and ``min_args..max_args`` arguments (uniform); each argument is itself a
    list with probability ``list_prob`` while fewer than ``max_depth`` lists
    enclose it, else a uniform digit. Examples longer than ``max_length``
    tokens and repeats are drawn again.

    Args:
        num: How many examples.
        seed: Seed of the ``random.Random`` stream.
        max_depth: Most lists nested on one path (the root list counts 1).
        min_args, max_args: Arguments per list.
        list_prob: Probability that an argument is a nested list.
        max_length: Most tokens per example, brackets included.
        exclude: Examples (space-joined) not to draw; the drawn ones are added
            to it, so successive calls on one set give disjoint examples.

    Raises:
        ValueError: settings out of range, or ``num`` distinct examples not
            found in a reasonable number of draws (the settings allow too few).
    """
    if min(max_depth, min_args) < 1 or max_args < min_args or not 0 <= list_prob <= 1 or max_length < 3:
        raise DatasetError(f"ListOps settings out of range: max_depth={max_depth}, args {min_args}..{max_args}, "
                           f"list_prob={list_prob}, max_length={max_length}")
    rng = random.Random(seed)
    seen = exclude if exclude is not None else set()
    settings = (max_depth, min_args, max_args, float(list_prob), max_length)
    out: list[list[str]] = []
    budget = 1000 + 100 * num
    while len(out) < num:
        budget -= 1
        if budget < 0:
            raise DatasetError(f"found only {len(out)} of {num} distinct ListOps examples with these settings; ask "
                               "for fewer, or allow longer or deeper ones")
        tokens: list[str] = []
        try:
            _draw(rng, 1, settings, tokens)
        except _TooLongError:
            continue
        key = " ".join(tokens)
        if key not in seen:
            seen.add(key)
            out.append(tokens)
    return out


class ListOps(CorpusDataset):
    r"""ListOps (Nangia & Bowman, 2018, "ListOps: A Diagnostic Dataset for Latent Tree Learning").

    Each example is a nested prefix list of ``MIN``, ``MAX``, ``MED`` (median)
    and ``SM`` (sum modulo 10) over the digits 0-9, e.g. ``[MAX 2 9 [MIN 4 7 ]
    0 ]`` = 9, and becomes the tree of :func:`listops_tree`: by default the
    paper's gold parse (every token a leaf, left-branching binary within each
    list), or with ``tree="flat"`` one node per operator and per digit; the
    values 0-9 of complete lists and digits in ``y``, the example's value in
    ``graph_y`` (and ``y[0]``, the root's), the flat sequence in
    ``tokens_flat``, the ids of both in ``word``/``word_flat``, and the
    nesting depth in ``list_depth``.
    A batch's ``word_flat`` concatenates the sequences (``DataLoader(...,
    follow_batch=["word_flat"])`` says which example each token belongs to).

    The generator (:func:`generate_listops`) follows the paper's settings: at
    most 10 nested lists, 2 to 5 arguments per operator, each argument a nested
    list with probability 0.25 until the maximum depth, sequences up to 100
    tokens. The paper has 90,000 training and 10,000 test examples, the
    defaults here (the dev split is ours, also 10,000). The splits come from
    ``seed``: test first, then dev, then train; no example is repeated within
    or across splits, and a smaller ``train_size`` keeps the same test set.
    Building the paper's sizes takes a minute or two on one core; the result
    is cached under ``<root>/listops/processed``, named by every setting.

    Args:
        root: Data root (default ``"datasets"``).
        split: ``"train"``, ``"dev"`` or ``"test"``.
        train_size, dev_size, test_size: Examples per split.
        max_depth, min_args, max_args, list_prob, max_length: As in :func:`generate_listops`.
        seed: Seed of the generator.
        tree: ``"paper"`` (the gold parse) or ``"flat"``, as in :func:`listops_tree`.
        vocab: Token -> id mapping filling ``word``/``word_flat`` (default :data:`LISTOPS_VOCAB`).
        transform, pre_transform, pre_filter, log, force_reload: As in
            :class:`torch_geometric.data.InMemoryDataset`.

    Raises:
        DatasetError: an unknown split or tree, settings out of range, an empty split.
    """

    name = "listops"
    num_classes = 10

    def __init__(self, root: str | os.PathLike | None = DEFAULT_ROOT, split: str = "train", *,
                 train_size: int = 90_000, dev_size: int = 10_000, test_size: int = 10_000, max_depth: int = 10,
                 min_args: int = 2, max_args: int = 5, list_prob: float = 0.25, max_length: int = 100,
                 seed: int = 0, tree: str = "paper", vocab: Any = LISTOPS_VOCAB, transform: Callable | None = None,
                 pre_transform: Callable | None = None, pre_filter: Callable | None = None, log: bool = True,
                 force_reload: bool = False) -> None:
        self.sizes = split_sizes(train_size, dev_size, test_size)
        self.settings = {"max_depth": int(max_depth), "min_args": int(min_args), "max_args": int(max_args),
                         "list_prob": float(list_prob), "max_length": int(max_length)}
        self.seed = int(seed)
        if tree not in TREES:
            raise DatasetError(f"unknown ListOps tree {tree!r}; use one of {', '.join(TREES)}")
        self.tree = tree
        try:
            generate_listops(0, **self.settings)  # checks the settings, draws nothing
        except ValueError as err:
            raise DatasetError(str(err)) from None
        super().__init__(root, split, vocab, None, transform, pre_transform, pre_filter, log, force_reload)

    def options_tag(self) -> str:
        s = self.settings
        return (f"code{code_fingerprint(sys.modules[__name__])}"
                f"-n{self.sizes['train']}-{self.sizes['dev']}-{self.sizes['test']}-depth{s['max_depth']}"
                f"-args{s['min_args']}-{s['max_args']}-p{s['list_prob']}-len{s['max_length']}-seed{self.seed}-{self.tree}")

    @property
    def raw_file_names(self) -> list[str]:
        return []  # nothing to fetch: the generator is the dataset

    def process(self) -> None:
        examples = generated_split(self.split, self.sizes, self.seed, lambda count, seed, seen: generate_listops(
            count, seed, exclude=seen, **self.settings))
        self.save_processed([listops_tree(tokens, self.vocab, self.tree) for tokens in examples])
