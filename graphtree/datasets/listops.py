r"""ListOps (Nangia & Bowman, 2018, "ListOps: A Diagnostic Dataset for Latent Tree Learning") as trees.

An example is a nested prefix list of operators over the digits 0-9, such as
``[MAX 2 9 [MIN 4 7 ] 0 ]``, whose value (here 9) is the label. The generator
here is the dataset: examples are drawn from a seeded ``random.Random``, so the
same settings give the same examples on every machine.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from typing import Any

from torch_geometric.data import Data

from ..data.parents import from_parents
from ..data.tree import Vocabulary, lookup_words
from ..errors import TreeFormatError
from ..vocab import Vocab
from .base import DEFAULT_ROOT, CorpusDataset, generated_split, split_sizes
from .download import DatasetError

__all__ = ["DIGITS", "END", "LISTOPS_VOCAB", "OPERATORS", "TOKENS", "ListOps", "apply_operator",
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

_VERSION = 1  # in the cache name: bump it when the generator changes what a seed draws


def apply_operator(operator: str, args: Sequence[int]) -> int:
    """The value of ``operator`` (one of :data:`OPERATORS`) on digit values ``args``.

    ``[MED`` is the median rounded down (for an even count, the mean of the two
    middle values rounded down, as ``int(numpy.median(...))`` in the paper's
    generator); ``[SM`` is the sum modulo 10.

    Raises:
        ValueError: an unknown operator or no arguments.
    """
    if not args:
        raise ValueError(f"{operator} needs at least one argument")
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
    raise ValueError(f"unknown ListOps operator {operator!r}; use one of {OPERATORS}")


def listops_tree(tokens: str | Sequence[str], vocab: Vocabulary | None = None) -> Data:
    """The tree of one ListOps example, with the value of every node as its label.

    One node per operator (internal) and per digit (leaf), in pre-order (the
    root is node 0, children left to right); the ``]`` tokens close lists and
    are not nodes. Attributes are those of :func:`graphtree.data.from_parents`, with:

    * ``y`` ``[N]``: every node's value 0-9 (node-level supervision);
    * ``graph_y`` ``[1]``: the root's value, the example's label;
    * ``tokens``: the node tokens (``[MAX``, ``2``...); ``word`` their ids with a vocab;
    * ``tokens_flat``: the whole sequence, brackets included, for sequence
      models (``word_flat`` its ids with a vocab).

    Args:
        tokens: The example as a whitespace-separated string or a token list.
        vocab: Optional token -> id mapping (e.g. :data:`LISTOPS_VOCAB`).

    Raises:
        TreeFormatError: an unknown token, a digit or ``]`` outside a list, an
            empty list, an unclosed list, text after the end (``position`` is
            the 0-based token index).
    """
    seq = tokens.split() if isinstance(tokens, str) else list(tokens)
    if not seq:
        raise TreeFormatError("empty ListOps example")
    heads: list[int] = []  # 1-based head of each node, 0 at the root, as from_parents takes them
    labels: list[int | None] = []
    node_tokens: list[str] = []
    stack: list[tuple[int, str, list[int]]] = []  # open lists: (node, operator, argument values)
    for pos, token in enumerate(seq):
        if heads and not stack:
            raise TreeFormatError(f"{token!r} after the end of the example (one list per example)", position=pos)
        if token in OPERATORS or token in DIGITS:
            if not stack and token in DIGITS:
                raise TreeFormatError(f"digit {token} outside any list; an example is a list like [MAX 1 2 ]",
                                      position=pos)
            heads.append(stack[-1][0] + 1 if stack else 0)
            node_tokens.append(token)
            if token in OPERATORS:
                labels.append(None)  # known when the list closes
                stack.append((len(heads) - 1, token, []))
            else:
                labels.append(int(token))
                stack[-1][2].append(int(token))
        elif token == END:
            if not stack:
                raise TreeFormatError("']' closes no list", position=pos)
            node, operator, args = stack.pop()
            if not args:
                raise TreeFormatError(f"{operator} list has no arguments", position=pos)
            labels[node] = apply_operator(operator, args)
            if stack:
                stack[-1][2].append(labels[node])
        else:
            raise TreeFormatError(f"unknown ListOps token {token!r}; tokens are {' '.join(TOKENS)}", position=pos)
    if stack:
        raise TreeFormatError(f"{len(stack)} list(s) never closed", position=len(seq))
    data = from_parents(heads, node_tokens, labels, vocab)
    data.graph_y = data.y[:1].clone()  # node 0 is the root
    data.tokens_flat = seq
    if vocab is not None:
        data.word_flat = lookup_words(seq, range(len(seq)), vocab)
    return data


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
        raise ValueError(f"ListOps settings out of range: max_depth={max_depth}, args {min_args}..{max_args}, "
                         f"list_prob={list_prob}, max_length={max_length}")
    rng = random.Random(seed)
    seen = exclude if exclude is not None else set()
    settings = (max_depth, min_args, max_args, float(list_prob), max_length)
    out: list[list[str]] = []
    budget = 1000 + 100 * num
    while len(out) < num:
        budget -= 1
        if budget < 0:
            raise ValueError(f"found only {len(out)} of {num} distinct ListOps examples with these settings; ask "
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
    0 ]`` = 9, and becomes the tree of :func:`listops_tree`: one node per
    operator and per digit, the value 0-9 of every node in ``y``, the
    example's value in ``graph_y`` (and ``y[0]``, the root's), the flat
    sequence in ``tokens_flat`` and the ids of both in ``word``/``word_flat``.
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
        vocab: Token -> id mapping filling ``word``/``word_flat`` (default :data:`LISTOPS_VOCAB`).
        transform, pre_transform, pre_filter, log, force_reload: As in
            :class:`torch_geometric.data.InMemoryDataset`.

    Raises:
        DatasetError: an unknown split, settings out of range, an empty split.
    """

    name = "listops"
    num_classes = 10

    def __init__(self, root: str | os.PathLike | None = DEFAULT_ROOT, split: str = "train", *,
                 train_size: int = 90_000, dev_size: int = 10_000, test_size: int = 10_000, max_depth: int = 10,
                 min_args: int = 2, max_args: int = 5, list_prob: float = 0.25, max_length: int = 100,
                 seed: int = 0, vocab: Any = LISTOPS_VOCAB, transform: Callable | None = None,
                 pre_transform: Callable | None = None, pre_filter: Callable | None = None, log: bool = True,
                 force_reload: bool = False) -> None:
        self.sizes = split_sizes(train_size, dev_size, test_size)
        self.settings = {"max_depth": int(max_depth), "min_args": int(min_args), "max_args": int(max_args),
                         "list_prob": float(list_prob), "max_length": int(max_length)}
        self.seed = int(seed)
        try:
            generate_listops(0, **self.settings)  # checks the settings, draws nothing
        except ValueError as err:
            raise DatasetError(str(err)) from None
        super().__init__(root, split, vocab, None, transform, pre_transform, pre_filter, log, force_reload)

    def options_tag(self) -> str:
        s = self.settings
        return (f"v{_VERSION}-n{self.sizes['train']}-{self.sizes['dev']}-{self.sizes['test']}-depth{s['max_depth']}"
                f"-args{s['min_args']}-{s['max_args']}-p{s['list_prob']}-len{s['max_length']}-seed{self.seed}")

    @property
    def raw_file_names(self) -> list[str]:
        return []  # nothing to fetch: the generator is the dataset

    def process(self) -> None:
        examples = generated_split(self.split, self.sizes, self.seed, lambda count, seed, seen: generate_listops(
            count, seed, exclude=seen, **self.settings))
        self.save_processed([listops_tree(tokens, self.vocab) for tokens in examples])
