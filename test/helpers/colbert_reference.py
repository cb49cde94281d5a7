"""An independent ColBERT reference, labelled as such: PyLate's / Stanford ColBERT's published
recipe written out in plain transformers + torch (PyLate itself is not a dependency).

Queries: tokenize and cut to query_length - 1, pad with [MASK] to that length (attention mask 0
on the padding unless the checkpoint attends to expansion tokens), insert the query marker after
[CLS]; documents: cut to document_length - 1, insert the document marker, drop the skiplist
tokens from the output. Every token vector: normalize(projection(hidden)).
bge-m3: normalize(colbert_linear(hidden[1:])) of the plain tokenization (FlagEmbedding).
"""

from __future__ import annotations

import json
import os

import numpy as np
import torch
import torch.nn.functional as F


def _projection(model_dir: str):
    from safetensors.torch import load_file

    dense = os.path.join(model_dir, "1_Dense", "model.safetensors")
    if os.path.isfile(dense):
        return load_file(dense)["linear.weight"], None
    return load_file(os.path.join(model_dir, "model.safetensors"))["linear.weight"], None


def colbert_reference(model_dir: str, texts: list[str], is_query: bool) -> list[tuple[np.ndarray, list[int]]]:
    """[(vectors [n, dim], token ids)] per text."""
    from transformers import AutoTokenizer, BertModel

    tok = AutoTokenizer.from_pretrained(model_dir)
    st_path = os.path.join(model_dir, "config_sentence_transformers.json")
    if os.path.isfile(st_path):
        st = json.load(open(st_path))
        marker = st["query_prefix" if is_query else "document_prefix"]
        length = st["query_length" if is_query else "document_length"]
        attend = st["attend_to_expansion_tokens"]
        skip_words = st["skiplist_words"]
        model = BertModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    else:
        meta = json.load(open(os.path.join(model_dir, "artifact.metadata")))
        marker = meta["query_token_id" if is_query else "doc_token_id"]
        length = meta["query_maxlen" if is_query else "doc_maxlen"]
        attend = meta["attend_to_mask_tokens"]
        import string

        skip_words = list(string.punctuation)
        from safetensors.torch import load_file
        from transformers import BertConfig

        cfg = BertConfig.from_pretrained(model_dir)
        model = BertModel(cfg, add_pooling_layer=False).eval()
        state = {k.removeprefix("bert."): v for k, v in load_file(f"{model_dir}/model.safetensors").items()}
        model.load_state_dict({k: v for k, v in state.items() if not k.startswith("linear.")})
    weight, _ = _projection(model_dir)
    marker_id = tok.convert_tokens_to_ids(marker)
    skip = {tok.convert_tokens_to_ids(w) for w in skip_words} - {tok.unk_token_id}
    out = []
    for text in texts:
        ids = tok(text, truncation=True, max_length=length - 1)["input_ids"]
        mask = [1] * len(ids)
        if is_query:
            pad = length - 1 - len(ids)
            ids, mask = ids + [tok.mask_token_id] * pad, mask + [1 if attend else 0] * pad
        ids, mask = ids[:1] + [marker_id] + ids[1:], mask[:1] + [1] + mask[1:]
        with torch.no_grad():
            hidden = model(input_ids=torch.tensor([ids]), attention_mask=torch.tensor([mask])).last_hidden_state[0]
        vectors = F.normalize(hidden @ weight.t(), dim=-1)
        keep = [i for i, t in enumerate(ids) if is_query or t not in skip]
        out.append((vectors[keep].numpy(), [ids[i] for i in keep]))
    return out


def bge_m3_colbert_reference(model_dir: str, texts: list[str]) -> list[tuple[np.ndarray, list[int]]]:
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    state = torch.load(os.path.join(model_dir, "colbert_linear.pt"), weights_only=True)
    out = []
    for text in texts:
        ids = tok(text)["input_ids"]
        with torch.no_grad():
            hidden = model(input_ids=torch.tensor([ids])).last_hidden_state[0]
        vectors = F.normalize(hidden[1:] @ state["weight"].t() + state["bias"], dim=-1)
        out.append((vectors.numpy(), ids[1:]))
    return out


def maxsim_reference(query: np.ndarray, doc: np.ndarray, reduction: str = "sum") -> float:
    scores = torch.from_numpy(query).double() @ torch.from_numpy(doc).double().t()
    best = scores.max(dim=1).values
    return float(best.mean() if reduction == "mean" else best.sum())
