"""Tree-structured recurrent cells, all run by the shared level engine."""

from .cell import TreeCell, first_state
from .child_sum import ChildSumTreeLSTM
from .head_lexicalization import HeadLexicalization, head_leaves, head_words
from .lexicalized import LexicalizedTreeLSTM
from .lstm_rnn import LSTMRNN
from .nary import NaryTreeLSTM
from .slstm import SLSTM
from .top_down import TopDownTreeLSTM

__all__ = [
    "LSTMRNN",
    "SLSTM",
    "ChildSumTreeLSTM",
    "HeadLexicalization",
    "LexicalizedTreeLSTM",
    "NaryTreeLSTM",
    "TopDownTreeLSTM",
    "TreeCell",
    "first_state",
    "head_leaves",
    "head_words",
]
