"""What the file readers of :mod:`graphtree.data` share: a record read from a file with its graph label as written
(:class:`FileRecord`), errors naming file, line and field (:func:`located_error`), label text, and the tokens and
named token fields of the nodes.

The readers (:func:`~graphtree.data.conllu.conllu_records`, :func:`~graphtree.data.jsonl.jsonl_records`,
:func:`~graphtree.data.ptb.ptb_records`) turn a file's lines into records; :class:`~graphtree.datasets.GraphFiles`
decides the graph labels' kind across the whole file, checks what spans records, and caches the graphs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch_geometric.data import Data

from ..errors import CycleError, TreeFormatError
from .subtokens import split_subtokens
from .tree import NO_WORD, Vocabulary, lookup_words

__all__ = ["SUBTOKENS", "FileRecord", "attach_fields", "attach_tokens", "located_error", "parse_number",
           "set_text_label", "split_tokens"]

SUBTOKENS = "subtokens"
"""The field :func:`split_tokens` fills: each node's token split by
:func:`~graphtree.data.subtokens.split_subtokens`."""

_INT_TEXT = re.compile(r"[+-]?[0-9]+")  # ASCII digits only, as the converters: int() also takes '٣'
_FLOAT_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


@dataclass

@dataclass
class FileRecord:
    """One graph read from a file, with its graph label as written (checked once the whole file is read)."""

    data: Data
    line: int
    label: int | float | None = None
    label_is_int: bool = False
    label_at: tuple[str, int, str] | None = None  # (file, line, field) of the label, for errors
    fields: list[dict[str, list[str]]] | None = None  # JSON Lines: each node's named token lists



def located_error(path: str, line: int, field: str, reason: str, position: int | None = None,
            cycle: list | None = None) -> TreeFormatError:
    """A :class:`TreeFormatError` (a :class:`CycleError` with ``cycle``) naming file, line and field.

    The message reads ``<path>: <field>: <reason> (at line <line>)``; the error
    also carries ``path`` and ``field`` as attributes.
    """
    message = f"{path}: {field}: {reason}"
    err = CycleError(cycle, message, line=line) if cycle is not None else TreeFormatError(message, position, line)
    err.path = path
    err.field = field
    return err


def parse_number(text: str) -> tuple[int | float, bool] | None:
    """A label written as text: ``(value, written_as_integer)``, or ``None`` if it is not a finite number."""
    text = text.strip()
    if _INT_TEXT.fullmatch(text) and len(text) <= 400:  # int() refuses over 4300 digits; no label is that long
        return int(text), True
    if _FLOAT_TEXT.fullmatch(text):
        value = float(text)
        return (value, False) if math.isfinite(value) else None
    return None


def set_text_label(record: FileRecord, text: str, path: str, line: int, field: str) -> None:
    """Set ``record``'s graph label from text (``_`` = unlabelled)."""
    if text.strip() == "_":
        return
    parsed = parse_number(text)
    if parsed is None:
        raise located_error(path, line, field, f"label {text.strip()!r} is not a number (an integer class or a "
                      "regression target; _ for none)")
    record.label, record.label_is_int = parsed
    record.label_at = (path, line, field)


def attach_tokens(data: Data, tokens: Sequence[str | None], vocab: Vocabulary | None) -> None:
    """``tokens`` (nodes that have one, in node order), ``word_pos`` and, with a vocab, ``word``."""
    words, word_pos = [], []
    for token in tokens:
        word_pos.append(len(words) if token is not None else NO_WORD)
        if token is not None:
            words.append(token)
    data.word_pos = torch.tensor(word_pos, dtype=torch.long)
    data.tokens = words
    if vocab is not None:
        data.word = lookup_words(words, word_pos, vocab)


def attach_fields(records: list[FileRecord]) -> None:
    """Every field named by any node of the file, on every graph: ``<name>_tokens`` (the tokens, node by node)
    and ``<name>_index`` (the node of each; PyG's batching offsets it), empty where a graph's nodes have none."""
    names = sorted({name for r in records for node in r.fields or () for name in node})
    for record in records:
        for name in names:
            pairs = [(k, t) for k, node in enumerate(record.fields or ()) for t in node.get(name, ())]
            record.data[f"{name}_tokens"] = [t for _, t in pairs]
            record.data[f"{name}_index"] = torch.tensor([k for k, _ in pairs], dtype=torch.long)


def split_tokens(records: list[FileRecord], path: str) -> None:
    """Give every node the field :data:`SUBTOKENS`: its token's sub-tokens (none for a node without a token), for
    :class:`~graphtree.models.NodeFields` to embed beside the token.

    Raises:
        TreeFormatError: a record's nodes have a field of that name already.
    """
    for record in records:
        tokens, word_pos = record.data.tokens, record.data.word_pos.tolist()
        fields = record.fields if record.fields is not None else [{} for _ in word_pos]
        if any(SUBTOKENS in node for node in fields):
            raise located_error(path, record.line, f"fields.{SUBTOKENS}", f"the nodes have a field {SUBTOKENS!r} "
                                "already, and splitting the tokens would fill it again; rename the field, or do "
                                "not split")
        record.fields = [{**node, SUBTOKENS: split_subtokens(tokens[p]) if p >= 0 else []}
                         for node, p in zip(fields, word_pos)]
