"""CoNLL-U files (Universal Dependencies): one dependency tree per sentence, from ``HEAD``, labelled by a
``# label =`` comment (``docs/data-formats.md``)."""

from __future__ import annotations

import re

from torch_geometric.data import Data

from ..errors import CycleError, TreeFormatError
from .parents import from_heads
from .records import FileRecord, located_error, set_text_label
from .tree import Vocabulary

__all__ = ["COLUMNS", "conllu_records"]

COLUMNS = ("ID", "FORM", "LEMMA", "UPOS", "XPOS", "FEATS", "HEAD", "DEPREL", "DEPS", "MISC")
"""CoNLL-U's ten columns."""

_LABEL_COMMENT = re.compile(r"#\s*label\s*=(.*)")


def conllu_records(lines: list[str], path: str, vocab: Vocabulary | None = None,
                   first_line: int = 1) -> list[FileRecord]:
    """The sentences of CoNLL-U ``lines`` (the first being line ``first_line`` of ``path``), one record each.

    Raises:
        TreeFormatError: a malformed sentence, naming file, line and column.
    """
    records, block = [], []
    for number, line in enumerate(lines, start=first_line):
        if line.strip():
            block.append((number, line))
        elif block:
            records.extend(_conllu_sentence(block, path, vocab))
            block = []
    if block:
        records.extend(_conllu_sentence(block, path, vocab))
    return records


def _conllu_sentence(block: list[tuple[int, str]], path: str, vocab: Vocabulary | None) -> list[FileRecord]:
    record = FileRecord(Data(), block[0][0])
    label_text: tuple[int, str] | None = None
    forms, lemmas, upos, deprels, heads, token_lines = [], [], [], [], [], []
    for number, line in block:
        if line.startswith("#"):
            match = _LABEL_COMMENT.fullmatch(line.strip())
            if match:
                if label_text is not None:
                    raise located_error(path, number, "label", f"a second '# label =' comment (the first is at line "
                                  f"{label_text[0]})")
                label_text = (number, match.group(1))
            continue
        # Tabs as the format has it; a line with no tab at all is split at spaces, which is unambiguous
        # (a copy of an example from rendered docs has lost its tabs).
        fields = line.split("\t") if "\t" in line else line.split()
        if len(fields) != len(COLUMNS):
            raise located_error(path, number, "columns", f"{len(fields)} columns, expected 10 separated by tabs "
                          f"({' '.join(COLUMNS)})")
        token_id = fields[0]
        if re.fullmatch(r"[0-9]+-[0-9]+|[0-9]+\.[0-9]+", token_id):
            continue  # a multiword token (1-2) or an empty node (1.1): not a node of the basic tree
        if not re.fullmatch(r"[0-9]+", token_id) or int(token_id) != len(forms) + 1:
            raise located_error(path, number, "ID", f"ID {token_id!r} where {len(forms) + 1} was expected (IDs count "
                          "1, 2, 3... in each sentence)")
        head = fields[6]
        # from_heads reads -1 as "outside the tree", which CoNLL-U does not have: a negative HEAD is an error.
        if not re.fullmatch(r"[0-9]+", head):
            raise located_error(path, number, "HEAD",
                                f"HEAD {head!r} of token {token_id} is not a token ID or 0 (root)")
        forms.append(fields[1])
        lemmas.append(fields[2])
        upos.append(fields[3])
        heads.append(head)
        deprels.append(fields[7])
        token_lines.append(number)
    if not forms:
        if label_text is not None:
            raise located_error(path, label_text[0], "label", "a '# label =' comment with no sentence under it")
        return []  # comments only, e.g. '# newdoc' before a blank line
    for k, head in enumerate(heads):  # from_heads' own range, -1..n, admits the -1 that CoNLL-U does not have
        if int(head) > len(forms):
            raise located_error(path, token_lines[k], "HEAD",
                                f"HEAD {head} of token {k + 1} is outside 0..{len(forms)} "
                                f"(0 for the root, 1..{len(forms)} for the sentence's tokens)")
    try:
        data = from_heads(heads, forms, vocab=vocab)
    except CycleError as err:
        # The line of the cycle's first token in the file, the one a reader meets first.
        raise located_error(path, token_lines[min(err.nodes) - 1], "HEAD", err.reason, cycle=err.nodes) from None
    except TreeFormatError as err:
        # from_heads counts tokens from 1, as CoNLL-U IDs do: its position is the token ID.
        line = token_lines[err.position - 1] if err.position else token_lines[0]
        raise located_error(path, line, "HEAD", err.reason) from None
    data.lemmas, data.upos, data.deprel = lemmas, upos, deprels
    record.data = data
    if label_text is not None:
        set_text_label(record, label_text[1], path, label_text[0], "label")
    return [record]

