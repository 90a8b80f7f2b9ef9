"""Benchmark corpora as PyTorch Geometric ``InMemoryDataset`` s: SST, SICK and TREC (and, read from any folder of
Python files, one abstract syntax tree per function: :class:`CodeTrees`).

Each dataset keeps its files under ``<root>/<corpus>/raw`` and its processed
cache under ``<root>/<corpus>/processed`` (``root`` defaults to ``datasets``),
one split per instance::

    from graphtree.datasets import SST
    from graphtree.vocab import Vocab

    vocab = Vocab.build(SST("datasets", "train"))
    train = SST("datasets", "train", fine_grained=False, vocab=vocab)

Files come from the official URLs, or from a mirror (``mirror=`` or
``$GRAPHTREE_MIRROR``: a folder or http(s) URL laid out like the data folder,
see :mod:`graphtree.datasets.download` and ``datasets/README.md``).
"""

from .base import DEFAULT_ROOT, CorpusDataset
from .circuits import BooleanCircuits
from .download import MIRROR_ENV, CorruptFileError, DatasetError, DownloadError, RemoteFile
from .files import GraphFiles
from .listops import ListOps
from .sick import SICK, PairData, pair_side, sick_target
from .sst import SST
from .trec import TREC

__all__ = [
    "DEFAULT_ROOT",
    "MIRROR_ENV",
    "SICK",
    "SST",
    "TREC",
    "BooleanCircuits",
    "CodeTrees",
    "CorpusDataset",
    "CorruptFileError",
    "DatasetError",
    "DownloadError",
    "GraphFiles",
    "ListOps",
    "PairData",
    "RemoteFile",
    "pair_side",
    "sick_target",
]


def __getattr__(name: str) -> object:
    # CodeTrees on first use (PEP 562): ``python -m graphtree.datasets.code`` then runs a module not imported yet.
    if name == "CodeTrees":
        from .code import CodeTrees

        return CodeTrees
    raise AttributeError(f"module 'graphtree.datasets' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), "CodeTrees"])
