"""Build tiny random-weight checkpoints (config + safetensors + tokenizer) for tests.

Every checkpoint is saved by `transformers` itself, so the reference implementation and our
loader read the very same files.
"""

from __future__ import annotations

import json
import os
from typing import Optional

import torch

WORDS = (
    "the a an of to and in is it for on with as was at by be this that from or are have not "
    "embedding model server fast vector token batch query document search result test cat dog "
    "house tree river mountain city music book water fire light dark red blue green one two three"
).split()


def build_wordpiece_tokenizer(out_dir: str, lowercase: bool = True) -> list[str]:
    """A BERT-style WordPiece tokenizer over a small fixed vocabulary, saved as a fast tokenizer."""
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    pieces = [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"] + list("abcdefghijklmnopqrstuvwxyz0123456789.,!?'")
    vocab_list = specials + WORDS + pieces
    vocab = {w: i for i, w in enumerate(dict.fromkeys(vocab_list))}
    tok = Tokenizer(WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
        sep_token="[SEP]", mask_token="[MASK]",
    )
    fast.save_pretrained(out_dir)
    return list(vocab)


def write_st_pooling(out_dir: str, dim: int, mode: str = "mean", normalize: bool = True,
                     max_seq_length: Optional[int] = None) -> None:
    """sentence-transformers module files declaring the pooling (and optional Normalize)."""
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    os.makedirs(os.path.join(out_dir, "1_Pooling"), exist_ok=True)
    with open(os.path.join(out_dir, "modules.json"), "w") as f:
        json.dump(modules, f)
    pooling = {
        "word_embedding_dimension": dim,
        "pooling_mode_cls_token": mode == "cls",
        "pooling_mode_mean_tokens": mode == "mean",
        "pooling_mode_max_tokens": mode == "max",
        "pooling_mode_lasttoken": mode == "lasttoken",
        "pooling_mode_mean_sqrt_len_tokens": False,
    }
    with open(os.path.join(out_dir, "1_Pooling", "config.json"), "w") as f:
        json.dump(pooling, f)
    if max_seq_length:
        with open(os.path.join(out_dir, "sentence_bert_config.json"), "w") as f:
            json.dump({"max_seq_length": max_seq_length, "do_lower_case": False}, f)


def build_tiny_bert(out_dir: str, seed: int = 0, st_pooling: Optional[str] = None,
                    safe_serialization: bool = True, **config_overrides) -> str:
    """A 2-layer random BertModel with a WordPiece tokenizer in `out_dir`."""
    from transformers import BertConfig, BertModel

    os.makedirs(out_dir, exist_ok=True)
    vocab = build_wordpiece_tokenizer(out_dir)
    cfg = dict(
        vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=128, type_vocab_size=2, hidden_act="gelu",
    )
    cfg.update(config_overrides)
    torch.manual_seed(seed)
    model = BertModel(BertConfig(**cfg)).eval()
    model.save_pretrained(out_dir, safe_serialization=safe_serialization)
    if st_pooling:
        write_st_pooling(out_dir, cfg["hidden_size"], st_pooling)
    return out_dir
