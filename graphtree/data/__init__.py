r"""Trees and DAGs as PyTorch Geometric ``Data`` graphs.

Every converter (:func:`from_ptb`, :func:`from_parents`, :func:`from_heads`,
:func:`from_networkx`, :func:`from_spacy`, :func:`binarize`, and the file
readers :func:`conllu_records`, :func:`jsonl_records` and :func:`ptb_records`
that :class:`~graphtree.datasets.GraphFiles` reads files with) returns a
``torch_geometric.data.Data`` with the same attributes, laid out the same way,
so graphs from any of them batch together. A parent array is 0-based with
``-1`` at the root everywhere (:func:`from_parents`, JSON Lines' ``parents``);
CoNLL's 1-based heads, ``0`` at the root, are :func:`from_heads`'.
Edges point **child -> parent** (``edge_index[0]`` is the child), so the
default ``source_to_target`` flow of PyG carries information bottom-up.

Graph attributes:

=============== ========= ==============================================================
``edge_index``  [2, E]    child -> parent edges
``edge_pos``    [E]       the child's position among its parent's children (0 = leftmost)
``num_nodes``   int
``y``           [N] long  node label, ``NO_LABEL`` (-1) where unlabelled
``word_pos``    [N] long  index of the node's word in ``tokens``, ``NO_WORD`` (-1) for none
``word``        [N] long  vocabulary id of that word, ``NO_WORD`` for none (only with a vocab)
``tokens``      list[str] the sentence's words, exactly as written (empty for a graph without words)
``child_pos``   [N] long  position under its parent (the first one in a DAG), -1 at roots
``height``      [N] long  bottom-up level: leaves 0, a parent 1 + its highest child
``depth``       [N] long  top-down level: roots 0, a child 1 + its deepest parent
``is_root``     [N] bool  no parent
``is_leaf``     [N] bool  no children
=============== ========= ==============================================================

Beyond these, a graph carries only what its source gives: node attributes of
a networkx graph (``x``, say; ``y`` replaces the unlabelled default), its node
names with ``from_networkx(..., names=True)``, a vocabulary's ``word``, and
for a file's records their ``line`` and what the file holds (``x``,
``graph_y``, CoNLL-U's ``lemmas``, ``upos``, ``deprel``). Graphs batch
together when they carry the same attributes (PyG reads the first graph's
from every graph); to mix a file's records with other graphs, pass
``exclude_keys=["line"]``. :class:`TreeLoader` names an attribute that a
graph lacks where PyG raises a bare ``KeyError``.

Batching with PyG's ``Batch``/``DataLoader`` keeps all of these right: only
``edge_index`` is offset by the node count (levels and positions are not
indices), ``tokens`` becomes one list per graph, and ``batch`` maps nodes to graphs.
:class:`TreeLoader` is PyG's ``DataLoader`` that also builds each batch's level
schedule where the batch is built (in the worker processes, with ``num_workers``).
"""

from ..levels import topological_levels
from .conllu import conllu_records
from .jsonl import jsonl_records
from .loader import ScheduleCollater, TreeLoader, with_schedule
from .networkx import from_networkx
from .parents import from_heads, from_parents
from .ptb import from_ptb, ptb_records, ptb_unescape, read_ptb, to_ptb
from .spacy import binarize, from_spacy
from .subtokens import split_subtokens
from .tree import NO_LABEL, NO_WORD

__all__ = [
    "NO_LABEL",
    "NO_WORD",
    "ScheduleCollater",
    "TreeLoader",
    "binarize",
    "conllu_records",
    "from_heads",
    "from_networkx",
    "from_parents",
    "from_ptb",
    "from_spacy",
    "jsonl_records",
    "ptb_records",
    "ptb_unescape",
    "read_ptb",
    "split_subtokens",
    "to_ptb",
    "topological_levels",
    "with_schedule",
]
