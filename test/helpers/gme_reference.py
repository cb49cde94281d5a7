"""transformers' reference for a GME item, with inputs built independently of our request path:
the GME prompt written out, `<|image_pad|>` repeated per transformers' processor rule
(grid.prod() // merge^2), transformers' image processor, and transformers' own M-RoPE positions
(from mm_token_type_ids). The vector is the last hidden state at the last token, normalized."""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

GME_PROMPT = (
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n{content}<|im_end|>\n"
    "<|im_start|>assistant\n<|endoftext|>"
)


def load_hf_gme(model_dir: str):
    from transformers import Qwen2VLForConditionalGeneration

    return Qwen2VLForConditionalGeneration.from_pretrained(
        model_dir, attn_implementation="eager", dtype=torch.float32
    ).eval()


def hf_gme_embedding(
    model_dir: str, hf_model, text: Optional[str], image_path: Optional[str]
) -> tuple[np.ndarray, np.ndarray]:
    """(normalized last-token vector [hidden], input ids [n]) for one text / image / fused item."""
    from PIL import Image
    from transformers import AutoImageProcessor, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    content = text or ""
    kwargs = {}
    if image_path is not None:
        proc = AutoImageProcessor.from_pretrained(model_dir)
        out = proc(images=[Image.open(image_path).convert("RGB")], return_tensors="pt")
        n = int(out["image_grid_thw"][0].prod()) // proc.merge_size**2
        content = "<|vision_start|>" + "<|image_pad|>" * n + "<|vision_end|>" + content
        kwargs = dict(pixel_values=out["pixel_values"], image_grid_thw=out["image_grid_thw"])
    ids = torch.tensor([tok(GME_PROMPT.replace("{content}", content))["input_ids"]])
    if kwargs:
        kwargs["mm_token_type_ids"] = (ids == hf_model.config.image_token_id).int()
    with torch.no_grad():
        hidden = hf_model.model(input_ids=ids, **kwargs).last_hidden_state[0, -1]
    return F.normalize(hidden, dim=-1).numpy(), ids[0].numpy()
