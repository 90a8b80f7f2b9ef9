"""A tiny Hugging Face encoder built here (a two-layer BERT of width 16, random weights, a WordPiece tokenizer
over 30 pieces, float64), so that tests of the contextual leaves and the short forms of README's ``--encoder``
commands need no downloaded weights."""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
import transformers

PIECES = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "film", "is", "good", "bad", "un", "##believ", "##ably", "(",
          ")", '"', "it", "##s", "a", "/", "no", "not", "very", "funny", "##ny", "fun", "at", "all", "[", "]", "*"]


def tiny_tokenizer() -> transformers.PreTrainedTokenizerFast:
    """A fast WordPiece tokenizer over :data:`PIECES`, BERT's normalizer and ``[CLS] ... [SEP]``."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    vocab = {w: i for i, w in enumerate(PIECES)}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                       special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                                cls_token="[CLS]", sep_token="[SEP]", model_max_length=64)


def tiny_encoder(seed: int = 0) -> transformers.BertModel:
    """A two-layer BERT of width 16 with random weights (from ``seed``), in float64, without dropout."""
    config = transformers.BertConfig(vocab_size=len(PIECES), hidden_size=16, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=32, max_position_embeddings=64,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(seed)
    return transformers.BertModel(config).double().eval()



def tiny_encoder_folder(folder: Path | None = None) -> Path:
    """The tiny encoder and its tokenizer saved as a Hugging Face folder (float32, as a user's would be)."""
    folder = Path(folder or tempfile.mkdtemp(prefix="tiny-encoder-"))
    tiny_encoder().float().save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder
