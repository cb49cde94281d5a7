"""Tiny random checkpoints for the model-breadth tests: XLM-RoBERTa, EmbeddingGemma-like Gemma3,
SPLADE, bge-m3's sparse head, and sequence classifiers (cross-encoders and decoder rewards).

Kept apart from tiny_models.py (the BERT and decoder builders) so each file stays small; it
reuses that file's tokenizers. Every checkpoint is saved by transformers (and sentence-transformers
where a module pipeline applies), so the reference and our loader read the very same files.
"""

from __future__ import annotations

import os
from typing import Optional

import torch

from test.helpers.tiny_models import (
    WORDS,
    _decoder_classes,
    build_bpe_tokenizer,
    build_wordpiece_tokenizer,
    write_st_pooling,
)

ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # ids 0..4, as in XLM-R (pad 1)


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Every parameter random, norm weights near one: a bias or norm weight loaded into the wrong
    place (or not at all) changes the output."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            is_norm_weight = "norm" in name.lower() and name.endswith("weight")
            p.copy_(1.0 + 0.1 * noise if is_norm_weight else 0.2 * noise)


def build_roberta_tokenizer(out_dir: str) -> int:
    """A byte-level BPE tokenizer with XLM-R's special tokens and pair template
    (<s> A </s></s> B </s>), returning no token_type_ids, as XLMRobertaTokenizer. Returns the vocab size."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers, processors, trainers
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=ROBERTA_SPECIALS,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([" ".join(WORDS)] * 3 + WORDS, trainer)
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), add_prefix_space=True)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        sep_token="</s>",
        cls_token="<s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token="<mask>",
        model_input_names=["input_ids", "attention_mask"],
    )
    fast.save_pretrained(out_dir)
    return len(fast)


def build_tiny_xlm_roberta(
    out_dir: str,
    task: str = "model",
    seed: int = 0,
    st_pooling: Optional[str] = None,
    sparse_linear: bool = False,
    num_labels: int = 1,
    id2label: Optional[dict] = None,
) -> str:
    """A 2-layer random XLM-RoBERTa: `task` "model" (bge-m3 / multilingual-e5 shape), "seq_cls"
    (bge-reranker shape) or "mlm". `sparse_linear` adds bge-m3's sparse_linear.pt."""
    import transformers as tf

    os.makedirs(out_dir, exist_ok=True)
    vocab = build_roberta_tokenizer(out_dir)
    cfg = tf.XLMRobertaConfig(
        vocab_size=vocab,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=66,
        type_vocab_size=1,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        num_labels=num_labels,
        id2label=id2label,
    )
    model_cls = {
        "model": tf.XLMRobertaModel,
        "seq_cls": tf.XLMRobertaForSequenceClassification,
        "mlm": tf.XLMRobertaForMaskedLM,
    }[task]
    torch.manual_seed(seed)
    model = model_cls(cfg).eval()
    randomize(model, seed)
    model.save_pretrained(out_dir)
    if st_pooling:
        write_st_pooling(out_dir, cfg.hidden_size, st_pooling)
    if sparse_linear:
        write_sparse_linear(out_dir, cfg.hidden_size, seed)
    return out_dir


def write_sparse_linear(out_dir: str, hidden: int, seed: int = 0) -> str:
    """bge-m3's sparse head: torch.save of a Linear(hidden, 1) state dict, as FlagEmbedding saves it.
    The bias is shifted up so that most tokens get a positive weight."""
    gen = torch.Generator().manual_seed(seed + 1)
    linear = torch.nn.Linear(hidden, 1)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(linear.weight.shape, generator=gen) * 0.3)
        linear.bias.fill_(0.2)
    path = os.path.join(out_dir, "sparse_linear.pt")
    torch.save(linear.state_dict(), path)
    return path


def build_tiny_bert_task(
    out_dir: str, task: str, seed: int = 0, num_labels: int = 1, id2label: Optional[dict] = None
) -> str:
    """A 2-layer random BertForSequenceClassification ("seq_cls") or BertForMaskedLM ("mlm")."""
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM, BertForSequenceClassification

    os.makedirs(out_dir, exist_ok=True)
    vocab = build_wordpiece_tokenizer(out_dir)
    # As BertTokenizer(Fast): pairs come back with token_type_ids.
    names = ["input_ids", "token_type_ids", "attention_mask"]
    AutoTokenizer.from_pretrained(out_dir, model_input_names=names).save_pretrained(out_dir)
    cfg = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=128,
        type_vocab_size=2,
        hidden_act="gelu",
        num_labels=num_labels,
        id2label=id2label,
    )
    torch.manual_seed(seed)
    model = (BertForSequenceClassification if task == "seq_cls" else BertForMaskedLM)(cfg).eval()
    randomize(model, seed)
    model.save_pretrained(out_dir)
    return out_dir


def build_tiny_splade(out_dir: str, seed: int = 0, pooling_strategy: str = "max") -> str:
    """A random BertForMaskedLM saved as a sentence-transformers SparseEncoder (Transformer with
    the fill-mask task + SpladePooling), as naver/splade-* checkpoints are published today."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    hf_dir = build_tiny_bert_task(out_dir + "-hf", "mlm", seed)
    modules = [Transformer(hf_dir, transformer_task="fill-mask"), SpladePooling(pooling_strategy)]
    SparseEncoder(modules=modules, device="cpu").save(out_dir)
    return out_dir


def build_tiny_gemma3(
    out_dir: str, seed: int = 0, bidirectional: bool = True, st_modules: bool = True, sliding_window: int = 6
) -> str:
    """A 2-layer random Gemma3TextModel shaped like EmbeddingGemma (3 heads, 1 kv head, head_dim 24
    != hidden / heads, query_pre_attn_scalar 20, a sliding layer then a full one). With
    `st_modules` it is saved by sentence-transformers as EmbeddingGemma is: mean Pooling, 2_Dense
    (48 -> 96, no bias, Identity), 3_Dense (96 -> 48, bias, Tanh), Normalize."""
    from transformers import Gemma3TextConfig, Gemma3TextModel

    hf_dir = out_dir + "-hf" if st_modules else out_dir
    os.makedirs(hf_dir, exist_ok=True)
    vocab, end_id = build_bpe_tokenizer(hf_dir)
    cfg = Gemma3TextConfig(
        vocab_size=vocab,
        hidden_size=48,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=3,
        num_key_value_heads=1,
        head_dim=24,
        query_pre_attn_scalar=20,
        sliding_window=sliding_window,
        layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=128,
        use_bidirectional_attention=bidirectional,
        pad_token_id=end_id,
        bos_token_id=end_id,
        eos_token_id=end_id,
    )
    torch.manual_seed(seed)
    model = Gemma3TextModel(cfg).eval()
    randomize(model, seed)
    model.save_pretrained(hf_dir)
    if not st_modules:
        return out_dir
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    dense2 = Dense(48, 96, bias=False, activation_function=torch.nn.Identity())
    dense3 = Dense(96, 48, bias=True, activation_function=torch.nn.Tanh())
    randomize(dense2, seed + 1)
    randomize(dense3, seed + 2)
    modules = [Transformer(hf_dir), Pooling(48, "mean"), dense2, dense3, Normalize()]
    SentenceTransformer(modules=modules, device="cpu").save(out_dir)
    return out_dir


def build_tiny_decoder_classifier(
    out_dir: str, family: str = "qwen2", seed: int = 0, num_labels: int = 3, id2label: Optional[dict] = None
) -> str:
    """A 2-layer random *ForSequenceClassification decoder (reward / classifier shape) with the BPE
    tokenizer, whose end token doubles as the pad token (the score head skips trailing pads)."""
    import transformers as tf

    config_cls, _ = _decoder_classes(family)
    model_cls = {"qwen2": tf.Qwen2ForSequenceClassification, "llama": tf.LlamaForSequenceClassification}[family]
    os.makedirs(out_dir, exist_ok=True)
    vocab, end_id = build_bpe_tokenizer(out_dir)
    cfg = config_cls(
        vocab_size=vocab,
        hidden_size=64,
        head_dim=16,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
        bos_token_id=end_id,
        eos_token_id=end_id,
        pad_token_id=end_id,
        num_labels=num_labels,
        id2label=id2label,
    )
    torch.manual_seed(seed)
    model = model_cls(cfg).eval()
    randomize(model, seed)
    model.save_pretrained(out_dir)
    return out_dir
