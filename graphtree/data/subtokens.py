"""Sub-tokens of identifiers: ``snake_case``, ``camelCase`` and digits split into lower-cased words.

Program tokens (``getHTTPResponse``, ``max_nodes2``) are mostly compounds of a
few common words; a model that reads the words shares what it learns about
``get`` across every ``get_*`` name. :func:`split_subtokens` is the split that
:class:`~graphtree.datasets.CodeTrees` gives its nodes and that
:class:`~graphtree.datasets.GraphFiles` gives any file's tokens with
``subtokens=True``.
"""

from __future__ import annotations

import re

__all__ = ["split_subtokens"]

# An upper-case run not followed by a lower-case letter (HTTP in parseHTTPResponse), a capitalised or lower-case
# word, or a run of digits; anything else (underscores, dots, spaces, punctuation) separates.
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def split_subtokens(text: str) -> list[str]:
    """The lower-cased sub-tokens of an identifier or a literal: split at anything not an ASCII letter or digit,
    at ``camelCase`` humps (an upper-case run stays one word: ``parseHTTPResponse`` -> ``parse http response``)
    and between letters and digits (``utf8`` -> ``utf 8``). ``""`` and ``"__"`` have none.

    >>> split_subtokens("parseHTTPResponse_v2")
    ['parse', 'http', 'response', 'v', '2']
    """
    return [w.lower() for w in _WORD.findall(text)]
