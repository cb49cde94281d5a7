"""Run our ModelRunner on a checkpoint directory and compare with a reference, vector by vector."""

from __future__ import annotations

import numpy as np
import torch

# Mixed lengths (1 to ~20 tokens) over the tiny tokenizers' vocabulary.
MIXED_TEXTS = [
    "the cat",
    "a fast embedding server returns one vector for every query and document",
    "river",
    "the dog and the cat in the house by the river with a green tree and red light",
    "three blue books",
]


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(1)


def relative_error_rows(ours: np.ndarray, ref: np.ndarray) -> np.ndarray:
    return np.linalg.norm(ours - ref, axis=1) / np.maximum(np.linalg.norm(ref, axis=1), 1e-12)


def served(runner, reqs: list) -> np.ndarray:
    """run_requests' pooled rows as the server answers them by default: normalized when the
    checkpoint says so (the renderer's step, wire/matryoshka.shape_rows)."""
    from sglang.srt.wire.matryoshka import shape_rows

    return shape_rows(runner.run_requests(reqs).embeddings, None, runner.model_config.normalize)


def make_runner(model_dir: str, **kwargs):
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.server_args import ServerArgs

    kwargs.setdefault("device", "cpu")
    return ModelRunner(ServerArgs(model_path=model_dir, **kwargs))


def prepare_requests(args, runner, items: list) -> list:
    """Our request path for `{"text", "image"}` items: MultimodalPreparer (tokenizer, chat
    template, image fetching and processing) -> TokenizedEmbeddingReqInput with images attached."""
    import asyncio

    from transformers import AutoTokenizer

    from sglang.srt.frontend.multimodal.preparer import MultimodalPreparer, attach
    from sglang.srt.wire.io_struct import TokenizedEmbeddingReqInput

    prep = MultimodalPreparer(args, runner.model_info(), AutoTokenizer.from_pretrained(args.model_path))
    try:
        prepared = asyncio.run(prep.prepare(items))
    finally:
        prep.close()
    reqs = [TokenizedEmbeddingReqInput(rid=str(i), worker_id=0, input_ids=p.input_ids) for i, p in enumerate(prepared)]
    attach(reqs, prepared)
    return reqs


def hf_pool(hidden: torch.Tensor, mask: torch.Tensor, method: str) -> torch.Tensor:
    """Reference pooling over a padded [B, L, H] batch (cls assumes right padding)."""
    if method == "cls":
        return hidden[:, 0]
    if method == "lasttoken":
        # The last real token, wherever the padding is (left or right).
        positions = torch.arange(mask.shape[1], device=mask.device)
        last = (mask.long() * (positions + 1)).argmax(1)
        return hidden[torch.arange(hidden.shape[0]), last]
    if method == "mean":
        m = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * m).sum(1) / m.sum(1)
    raise ValueError(method)


def hf_decoder_embeddings(model_dir: str, texts: list[str], padding_side: str = "right") -> np.ndarray:
    """transformers' AutoModel (eager attention, float32): last hidden state at each text's last
    real token, L2-normalized. Position ids follow the mask so left padding is handled too."""
    import torch.nn.functional as F
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = padding_side
    model = AutoModel.from_pretrained(model_dir, attn_implementation="eager", dtype=torch.float32).eval()
    enc = tok(texts, padding=True, return_tensors="pt")
    mask = enc["attention_mask"]
    position_ids = (mask.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        hidden = model(input_ids=enc["input_ids"], attention_mask=mask, position_ids=position_ids).last_hidden_state
    return F.normalize(hf_pool(hidden, mask, "lasttoken"), dim=-1).numpy()


def tokenize_for_runner(model_dir: str, texts: list[str]) -> list[np.ndarray]:
    from transformers import AutoTokenizer

    return [np.asarray(x, dtype=np.int32) for x in AutoTokenizer.from_pretrained(model_dir)(texts)["input_ids"]]
