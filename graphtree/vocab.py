"""A word vocabulary built from training data, with Teng & Zhang's unknown-word handling.

:class:`Vocab` is a ``Mapping`` from token to id, so it can be passed as the
``vocab`` argument of every converter in :mod:`graphtree.data` and of the
datasets. Id 0 is the unknown word. Looking up a token tries, in order
(Teng & Zhang 2017, §6):

1. the token itself (lowercased first when the vocabulary is lowercased),
2. its lowercase form,
3. the unknown word ``<unk>``.

With ``pretrained=`` (a table of word vectors), :meth:`Vocab.build` also keeps
only training words that have a pretrained vector, either as written or in
lowercase; a word found only in lowercase is replaced by its lowercase form,
and a word found in neither form is left out, so it maps to ``<unk>``, whose
vector :func:`graphtree.embeddings.embedding_matrix` sets to the mean of all
pretrained vectors.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Container, Iterable, Iterator, Mapping
from typing import Any

from .data.ptb import ptb_unescape
from .errors import InvalidArgumentError, InvalidTypeError

__all__ = ["UNK", "Vocab", "lookup_forms"]

UNK = "<unk>"
"""The unknown-word token, always id 0."""


def lookup_forms(token: str) -> list[str]:
    """The forms under which a token is looked up in a table of word vectors, best first.

    Teng & Zhang try the word, then its lowercase. Treebank escapes are undone
    as well, because SST writes ``(`` as ``-LRB-`` and ``/`` as ``\\/`` while
    GloVe stores the plain characters: ``-LRB-`` -> ``-LRB-``, ``-lrb-``, ``(``
    (``-lrb-``, from a lowercased vocabulary, is undone too).

    Args:
        token: A token as written in a corpus.

    Returns:
        Distinct candidate forms: the token, its lowercase, its unescaped form
        and that form's lowercase.
    """
    plain = _unescaped(token)
    forms = [token, token.lower(), plain, plain.lower()]
    return list(dict.fromkeys(forms))


class Vocab(Mapping[str, int]):
    """Token -> id mapping with id 0 for unknown words.

    Unlike a plain ``dict``, ``vocab[token]`` never raises: an unknown token
    gets :attr:`unk_index` after the lowercase fallback. ``token in vocab`` is
    exact (after the vocabulary's own lowercasing), so it tells whether the
    token has an entry of its own.

    Args:
        tokens: The entries, in id order (duplicates and ``<unk>`` are skipped).
        lowercase: Lowercase every token, at construction and at lookup.
        unk_token: Name of the unknown word (id 0).
    """

    def __init__(self, tokens: Iterable[str] = (), *, lowercase: bool = False, unk_token: str = UNK) -> None:
        self.lowercase = bool(lowercase)
        self.unk_token = unk_token
        self._itos: list[str] = [unk_token]
        self._stoi: dict[str, int] = {unk_token: 0}
        for token in tokens:
            key = self._normalize(token)
            if key not in self._stoi:
                self._stoi[key] = len(self._itos)
                self._itos.append(key)

    @classmethod
    def build(cls, sentences: Iterable[Any], *, min_count: int = 1, lowercase: bool = False,
              max_size: int | None = None, pretrained: Container[str] | None = None,
              unk_token: str = UNK) -> Vocab:
        """Build a vocabulary from training sentences.

        Args:
            sentences: Token lists, or graphs carrying ``tokens`` (a ``Data``
                from :mod:`graphtree.data`, a dataset of them), or sentence pairs
                carrying ``tokens_a``/``tokens_b`` (SICK).
            min_count: Keep words seen at least this many times.
            lowercase: Lowercase all words (counts of "The" and "the" merge).
            max_size: Keep at most this many words (the most frequent), ``<unk>`` aside.
            pretrained: Optional table of word vectors (anything supporting
                ``in``, e.g. :class:`~graphtree.embeddings.WordVectors`): keep only
                words found in it under one of their :func:`lookup_forms`, as
                Teng & Zhang do; a word found only in lowercase enters in lowercase.

        Returns:
            The vocabulary; words are ordered by decreasing count, then alphabetically.

        Raises:
            ValueError: ``min_count`` below 1 or ``max_size`` negative.
            TypeError: an item of ``sentences`` is neither a token list nor a graph with tokens.
        """
        if min_count < 1:
            raise InvalidArgumentError(f"min_count must be at least 1, got {min_count}")
        if max_size is not None and max_size < 0:
            raise InvalidArgumentError(f"max_size must be non-negative, got {max_size}")
        seen: Counter[str] = Counter()
        for tokens in _token_lists(sentences):
            seen.update(tokens)
        counts: Counter[str] = Counter()
        for token, count in seen.items():  # each distinct token once: the pretrained lookup is the slow part
            key = token.lower() if lowercase else token
            if pretrained is not None:
                key = _pretrained_key(key, pretrained)
                if key is None:
                    continue
            counts[key] += count
        kept = sorted((t for t, c in counts.items() if c >= min_count and t != unk_token),
                      key=lambda t: (-counts[t], t))
        if max_size is not None:
            kept = kept[:max_size]
        return cls(kept, lowercase=lowercase, unk_token=unk_token)

    def _normalize(self, token: str) -> str:
        return token.lower() if self.lowercase else token

    @property
    def unk_index(self) -> int:
        """Id of the unknown word (0)."""
        return 0

    @property
    def itos(self) -> list[str]:
        """The entries in id order (a copy); ``itos[0]`` is the unknown word."""
        return list(self._itos)

    def __getitem__(self, token: str) -> int:
        key = self._normalize(token)
        index = self._stoi.get(key)
        if index is None:
            index = self._stoi.get(key.lower(), 0)
        return index

    def __contains__(self, token: object) -> bool:
        return isinstance(token, str) and self._normalize(token) in self._stoi

    def __iter__(self) -> Iterator[str]:
        return iter(self._itos)

    def __len__(self) -> int:
        return len(self._itos)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocab):
            return NotImplemented
        return self._itos == other._itos and self.lowercase == other.lowercase

    __hash__ = None  # type: ignore[assignment]  # mutable-looking Mapping: equality by content

    def token(self, index: int) -> str:
        """The entry with id ``index``."""
        return self._itos[index]

    def __repr__(self) -> str:
        return f"Vocab({len(self)} entries, lowercase={self.lowercase}, fingerprint={self.fingerprint})"

    @property
    def fingerprint(self) -> str:
        """A short hash of the entries and options; datasets name their processed files with it."""
        digest = hashlib.sha256()
        digest.update(json.dumps([self.lowercase, self._itos], ensure_ascii=False).encode())
        return digest.hexdigest()[:12]

    def save(self, path: str | os.PathLike) -> None:
        """Write the vocabulary as JSON (entries and options)."""
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"lowercase": self.lowercase, "unk_token": self.unk_token, "itos": self._itos},
                      handle, ensure_ascii=False)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Vocab:
        """Read a vocabulary written by :meth:`save`.

        Raises:
            ValueError: the file is not a saved vocabulary.
        """
        with open(path, encoding="utf-8") as handle:
            state = json.load(handle)
        if not isinstance(state, dict) or not {"lowercase", "unk_token", "itos"} <= state.keys():
            raise InvalidArgumentError(f"{path} is not a vocabulary written by Vocab.save")
        return cls(state["itos"][1:], lowercase=state["lowercase"], unk_token=state["unk_token"])


def _unescaped(token: str) -> str:
    plain = ptb_unescape(token)
    if plain == token and token.startswith("-") and token.endswith("-"):
        plain = ptb_unescape(token.upper())  # a lowercased vocabulary holds "-lrb-"
    return plain


def _pretrained_key(token: str, table: Container[str]) -> str | None:
    # Found as written (escapes undone if needed): the token keeps its entry; found only in
    # lowercase: Teng & Zhang replace the word by its lowercase form.
    plain = _unescaped(token)
    if token in table or plain in table:
        return token
    if token.lower() in table or plain.lower() in table:
        return token.lower()
    return None


def _token_lists(sentences: Iterable[Any]) -> Iterator[list[str]]:
    for item in sentences:
        if isinstance(item, str):
            raise InvalidTypeError("Vocab.build expects token lists, not strings; split the sentences first")
        tokens = getattr(item, "tokens", None)
        if tokens is not None:
            yield tokens
            continue
        if getattr(item, "tokens_a", None) is not None:
            yield item.tokens_a
            yield item.tokens_b
            continue
        if isinstance(item, Iterable):
            tokens = list(item)
            if all(isinstance(t, str) for t in tokens):
                yield tokens
                continue
        raise InvalidTypeError(f"Vocab.build cannot read tokens from a {type(item).__name__}; pass token lists or "
                               f"graphs with a 'tokens' attribute")
