"""PTB-style s-expressions, as in the Stanford Sentiment Treebank: ``(3 (2 The) (2 Rock))``.

Grammar: ``node := "(" label ws (word | node (ws node)*) ")"``. A word runs up to
the closing bracket and may contain spaces (SST has ``(2 8 1\\/2)``); brackets
inside words are escaped (``-LRB-``), so a raw ``(`` inside a word is an error.
Nodes are numbered in pre-order, so the root is node 0 and words are numbered
left to right.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

from torch_geometric.data import Data

from ..errors import InvalidArgumentError, InvalidTypeError, TreeFormatError
from .records import FileRecord, located_error
from .tree import NO_LABEL, NO_WORD, Vocabulary, tree_data

__all__ = ["from_ptb", "ptb_records", "ptb_unescape", "read_ptb", "to_ptb"]

_WHITESPACE = " \t\r\n"
_ASCII_DIGITS = frozenset("0123456789")
_INT64_MAX = 2**63 - 1
_UNESCAPE = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}"}


def ptb_unescape(token: str) -> str:
    """Display form of a PTB token: ``-LRB-`` -> ``(``, ``\\/`` -> ``/``, ``\\*`` -> ``*``."""
    token = _UNESCAPE.get(token, token)
    return token.replace("\\/", "/").replace("\\*", "*")


def from_ptb(line: str, vocab: Vocabulary | None = None) -> Data:
    """Convert one PTB s-expression into a ``Data`` tree.

    Args:
        line: One tree, e.g. ``"(3 (2 The) (2 Rock))"``. Surrounding whitespace is ignored.
        vocab: Optional token -> id mapping; when given, ``data.word`` holds the ids.

    Returns:
        A ``Data`` with the attributes listed in :mod:`graphtree.data`; ``tokens``
        holds the words exactly as written, so :func:`to_ptb` can restore the line.

    Raises:
        TreeFormatError: empty input, unbalanced brackets, a label that is not
            ASCII digits (other scripts' digits included) or exceeds int64, a
            node without word or children, text after the tree; the error
            carries the character offset.
    """
    if not isinstance(line, str):
        raise InvalidTypeError(f"from_ptb expects a string, got {type(line).__name__}")
    n = len(line)
    pos = _skip(line, 0)
    if pos == n:
        raise TreeFormatError("empty tree string", position=0)

    parent: list[int] = []
    child_pos: list[int] = []
    labels: list[int] = []
    word_pos: list[int] = []
    tokens: list[str] = []
    num_children: list[int] = []
    stack: list[int] = []
    open_at: list[int] = []

    while True:
        pos = _skip(line, pos)
        if pos == n:
            if stack:
                raise TreeFormatError(
                    f"unbalanced brackets: {len(stack)} node(s) never closed, the innermost opened at "
                    f"position {open_at[-1]}", position=n)
            break
        char = line[pos]
        if char == "(":
            if not stack and parent:
                raise TreeFormatError("text after the end of the tree (one tree per string)", position=pos)
            node = len(parent)
            up = stack[-1] if stack else -1
            parent.append(up)
            child_pos.append(num_children[up] if up >= 0 else -1)
            if up >= 0:
                num_children[up] += 1
            num_children.append(0)
            pos = _read_label(line, pos + 1, labels)
            word_pos.append(NO_WORD)
            stack.append(node)
            open_at.append(pos)
            pos = _skip(line, pos)
            if pos < n and line[pos] not in "()":
                end = pos
                while end < n and line[end] not in "()":
                    end += 1
                if end < n and line[end] == "(":
                    raise TreeFormatError(
                        "unescaped '(' inside a word (write -LRB-) or a word before a child", position=end)
                word_pos[node] = len(tokens)
                tokens.append(line[pos:end])
                pos = end
            elif pos < n and line[pos] == ")":
                raise TreeFormatError("node has a label but neither a word nor children", position=pos)
        elif char == ")":
            if not stack:
                raise TreeFormatError("unbalanced brackets: ')' closes nothing", position=pos)
            stack.pop()
            open_at.pop()
            pos += 1
        elif not stack:
            raise TreeFormatError(
                f"expected '(' but found {char!r}" if not parent else "text after the end of the tree",
                position=pos)
        else:
            raise TreeFormatError(f"unexpected {char!r} between children", position=pos)

    return tree_data(parent, child_pos, labels, word_pos, tokens, vocab)


def _skip(line: str, pos: int) -> int:
    while pos < len(line) and line[pos] in _WHITESPACE:
        pos += 1
    return pos


def _read_label(line: str, pos: int, labels: list[int]) -> int:
    end = pos
    while end < len(line) and line[end] not in _WHITESPACE + "()":
        end += 1
    text = line[pos:end]
    if not text:
        raise TreeFormatError("missing label after '('", position=pos)
    # ASCII digits only: str.isdigit() and int() also take other scripts' digits ('٣', '３'), which would turn
    # a corrupt label into a valid-looking number, and isdigit() takes superscripts ('²') that int() refuses.
    if not (text.isascii() and text.isdigit()):  # both C-level: the common case stays as cheap as before
        bad = next(k for k, char in enumerate(text) if char not in _ASCII_DIGITS)
        # The error's position stays the label's start, as for every label error; the message adds the
        # offending character's own offset.
        raise TreeFormatError(f"label {text!r} is not a non-negative integer: {text[bad]!r} at position {pos + bad} "
                              "is not an ASCII digit 0-9; write labels like (3 word)", position=pos)
    # The labels become an int64 tensor. Length first: int() refuses strings of over 4300 digits on its own.
    if len(text.lstrip("0")) > len(str(_INT64_MAX)) or int(text) > _INT64_MAX:
        raise TreeFormatError(f"label {text} is larger than the int64 maximum {_INT64_MAX}", position=pos)
    labels.append(int(text))
    return end


def to_ptb(data: Data) -> str:
    """Write a tree made by :func:`from_ptb` back as the identical s-expression.

    Raises:
        ValueError: if a node is unlabelled or the graph is not a tree.
    """
    num_nodes = data.num_nodes
    labels = data.y.tolist()
    word_pos = data.word_pos.tolist()
    tokens = data.tokens
    children: list[list[tuple[int, int]]] = [[] for _ in range(num_nodes)]
    has_parent = [False] * num_nodes
    for child, parent, slot in zip(data.edge_index[0].tolist(), data.edge_index[1].tolist(), data.edge_pos.tolist()):
        if has_parent[child]:
            raise InvalidArgumentError(f"node {child} has several parents: not a tree, cannot write PTB")
        has_parent[child] = True
        children[parent].append((slot, child))
    roots = [i for i in range(num_nodes) if not has_parent[i]]
    if len(roots) != 1:
        raise InvalidArgumentError(f"a PTB string holds one tree, but the graph has {len(roots)} roots")
    unlabelled = [i for i, y in enumerate(labels) if y < 0]
    if unlabelled:
        raise InvalidArgumentError(f"node {unlabelled[0]} has no label; PTB strings need a label on every node")

    out: list[str] = []
    # Iterative pre-order walk (deep trees must not hit the recursion limit).
    # Stack entries: (node, is_first_child); node None closes a bracket.
    stack: list[tuple[int | None, bool]] = [(roots[0], True)]
    while stack:
        node, first = stack.pop()
        if node is None:
            out.append(")")
            continue
        if not first:
            out.append(" ")
        out.append(f"({labels[node]} ")
        if word_pos[node] >= 0:
            out.append(f"{tokens[word_pos[node]]})")
            continue
        stack.append((None, True))
        ordered = [child for _, child in sorted(children[node])]
        stack.extend((child, k == 0) for k, child in reversed(list(enumerate(ordered))))
    return "".join(out)


def read_ptb(source: str | os.PathLike | Iterable[str], vocab: Vocabulary | None = None) -> Iterator[Data]:
    """Yield one ``Data`` per non-empty line of a PTB file (or any iterable of lines).

    Errors name the 1-based line number as well as the character offset.
    """
    lines: Iterable[str]
    if isinstance(source, (str, os.PathLike)):
        with open(source, encoding="utf-8") as handle:
            lines = handle.readlines()
    else:
        lines = source
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield from_ptb(line, vocab)
        except TreeFormatError as err:
            raise err.at_line(number) from None


# --------------------------------------------------------------------------- a file of trees, line by line


def ptb_records(lines: list[str], path: str, vocab: Vocabulary | None = None,
                first_line: int = 1) -> list[FileRecord]:
    """The trees of a PTB file's ``lines``, one per non-blank line (the first being line ``first_line`` of
    ``path``); a label ``_`` reads ``NO_LABEL``.

    Raises:
        TreeFormatError: a malformed tree, naming file, line and character.
    """
    records = []
    for number, line in enumerate(lines, start=first_line):
        if not line.strip():
            continue
        text, unlabelled = _blank_labels(line)
        try:
            data = from_ptb(text, vocab)
        except TreeFormatError as err:
            raise located_error(path, number, "tree", err.reason, err.position) from None
        if unlabelled:
            data.y[unlabelled] = NO_LABEL
        records.append(FileRecord(data, number))
    return records


def _blank_labels(line: str) -> tuple[str, list[int]]:
    """Replace each ``_`` label by ``0`` for :func:`from_ptb`, returning the pre-order nodes that had one.

    Every ``(`` opens a node (a raw ``(`` inside a word is an error from_ptb reports), so the ``k``-th ``(``
    is node ``k``; the replacement has the same length, so from_ptb's character positions stay right.
    """
    chars = list(line)
    unlabelled = []
    node = 0
    for i, char in enumerate(line):
        if char != "(":
            continue
        if line[i + 1:i + 2] == "_" and (i + 2 == len(line) or line[i + 2] in " \t\r\n()"):
            chars[i + 1] = "0"
            unlabelled.append(node)
        node += 1
    return ("".join(chars), unlabelled) if unlabelled else (line, [])

