"""A tiny random Qwen3-Reranker and the model card's scoring recipe, run with transformers.

The checkpoint is a Qwen3ForCausalLM saved by transformers (tied embeddings by default, as in
Qwen3-0.6B, the 0.6B reranker's base) with a byte-level BPE tokenizer that knows the prompt's chat tokens and
has "yes" and "no" as ordinary tokens. The reference below writes the prompt out from the model
card itself (not from our configs), so a wrong character in our template fails the tests.
"""

from __future__ import annotations

import functools
import os
from typing import Optional

import numpy as np
import torch

from test.helpers.tiny_models import WORDS, build_tiny_qwen3

# From the Qwen3-Reranker model card.
CARD_PREFIX = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the "
    'Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n'
)
CARD_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
CARD_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
CHAT_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
PROMPT_WORDS = (
    "Judge whether Document meets requirements based Query Instruct provided Note answer can only "
    "system user assistant Given web search query retrieve relevant passages that yes no"
).split()

QUERY = "where does the river meet the city"
DOCUMENTS = [
    "the river runs through the city",
    "a green tree",
    "music and light in the dark house by the water",
    "the city is by the mountain and the river meets the city at the blue bridge",
    "one two three",
]


def reranker_tokenizer():
    """A byte-level BPE tokenizer (PreTrainedTokenizerFast) that adds no special tokens of its own."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers, trainers
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=420,
        special_tokens=CHAT_TOKENS,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    words = WORDS + PROMPT_WORDS
    tok.train_from_iterator([" ".join(words)] * 3 + words + ["yes", "no"] * 20, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    for word in ("yes", "no"):
        assert fast.convert_tokens_to_ids(word) not in (None, fast.unk_token_id), word
    return fast


def build_tiny_qwen3_reranker(out_dir: str, seed: int = 0, tie_word_embeddings: bool = True) -> str:
    """A 2-layer random Qwen3ForCausalLM; name `out_dir` with "Qwen3-Reranker" for detection."""
    tokenizer = reranker_tokenizer()
    build_tiny_qwen3(
        out_dir,
        seed=seed,
        vocab_size=len(tokenizer),
        tie_word_embeddings=tie_word_embeddings,
        max_position_embeddings=512,
    )
    tokenizer.save_pretrained(out_dir)  # over the generic tokenizer build_tiny_qwen3 wrote
    return out_dir


def card_input_ids(tokenizer, query: str, documents: list[str], instruction: Optional[str] = None) -> list[list[int]]:
    """The model card's process_inputs: prefix + tokenizer(format_instruction(...)) + suffix."""
    instruction = CARD_INSTRUCTION if instruction is None else instruction
    prefix = tokenizer.encode(CARD_PREFIX, add_special_tokens=False)
    suffix = tokenizer.encode(CARD_SUFFIX, add_special_tokens=False)
    texts = [f"<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}" for doc in documents]
    enc = tokenizer(texts, padding=False, truncation="longest_first", return_attention_mask=False, max_length=8192)
    return [prefix + list(ids) + suffix for ids in enc["input_ids"]]


@functools.lru_cache(maxsize=4)
def _card_model(model_dir: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    return tokenizer, AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


def card_scores(model_dir: str, query: str, documents: list[str], instruction: Optional[str] = None) -> np.ndarray:
    """exp(log_softmax([logit("no"), logit("yes")]))[yes] at the last token, each pair unpadded."""
    tokenizer, model = _card_model(model_dir)
    no, yes = tokenizer.convert_tokens_to_ids("no"), tokenizer.convert_tokens_to_ids("yes")
    scores = []
    with torch.no_grad():
        for ids in card_input_ids(tokenizer, query, documents, instruction):
            logits = model(input_ids=torch.tensor([ids])).logits[:, -1, :]
            pair = torch.stack([logits[:, no], logits[:, yes]], dim=1)
            scores.append(torch.nn.functional.log_softmax(pair, dim=1)[:, 1].exp().item())
    return np.array(scores)


def build_converted_seq_cls(src_dir: str, out_dir: str) -> str:
    """The reranker of `src_dir` converted as tomaarsen/Qwen3-Reranker-0.6B-seq-cls is: a
    Qwen3ForSequenceClassification whose one-row score is lm_head["yes"] - lm_head["no"]."""
    import shutil

    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen3ForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(src_dir)
    causal = AutoModelForCausalLM.from_pretrained(src_dir, dtype=torch.float32).eval()
    config = causal.config
    config.num_labels, config.architectures = 1, ["Qwen3ForSequenceClassification"]
    model = Qwen3ForSequenceClassification(config).eval()
    model.model.load_state_dict(causal.model.state_dict())
    head = causal.get_output_embeddings().weight
    yes, no = tokenizer.convert_tokens_to_ids("yes"), tokenizer.convert_tokens_to_ids("no")
    with torch.no_grad():
        model.score.weight.copy_((head[yes] - head[no]).unsqueeze(0))
    model.save_pretrained(out_dir)
    for name in os.listdir(src_dir):
        if name.startswith("tokenizer") or name == "special_tokens_map.json":
            shutil.copy(os.path.join(src_dir, name), out_dir)
    return out_dir
