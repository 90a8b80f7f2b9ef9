"""The models ``experiments/train.py --model`` offers, by name (:data:`MODELS`): apart from their code in
:mod:`~lab.own_data.models`, so that the script lists them in its flags without importing torch."""

from __future__ import annotations

__all__ = ["MODELS"]

MODELS = {
    "childsum": "Child-Sum Tree-LSTM (Tai et al. 2015): any number of children, inputs at every node",
    "nary": "N-ary Tree-LSTM (Tai et al. 2015), N = the most children of any node; the constituency form (inputs "
            "at leaves) where only leaves carry inputs, else the general form",
    "slstm": "S-LSTM (Zhu et al. 2015): binary, inputs at leaves",
    "lstmrnn": "LSTM-RNN (Le & Zuidema 2015): binary, inputs at leaves, memory size = input size",
    "contree": "bottom-up ConTree (Teng & Zhang 2017): binary, inputs at leaves",
    "topdown": "head-lexicalized top-down Tree-LSTM (Teng & Zhang 2017): binary, inputs at leaves",
    "bicontree": "BiConTree (Teng & Zhang 2017): binary, inputs at leaves",
    "bilstm": "baseline without structure: a bidirectional LSTM over the nodes in file order (pre-order for PTB "
              "and code trees, word order for CoNLL-U)",
    "tfidf": "baseline without structure or training loop: logistic regression (scikit-learn) on TF-IDF uni- and "
             "bigrams of the nodes' tokens and fields in file order; graph classes only",
}
"""The models ``experiments/train.py --model`` offers."""
