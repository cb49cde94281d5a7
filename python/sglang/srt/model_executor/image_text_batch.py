"""Run a batch on a text-image model (CLIP, SigLIP): texts through the text tower, images through
the image tower, each tower once per batch over its packed sequences.

An input with `pixel_values` is an image: its `input_ids` are placeholders whose count is its
sequence length in the image tower (the tokenizer side made them, frontend/multimodal/), so the
scheduler's token budget weighs images by the work they cost. Every image of the batch goes
through one forward in which each attends only within itself (the images' cu_seqlens); texts go
through the text tower as any text model's batch does (a CUDA graph where one fits). The model
pools and projects (the output head calls its `pool_text`); the vectors are then L2-normalized
(as the checkpoint says, or per input as its request's `normalize` asks).

SigLIP texts are padded to `model.text_padding` tokens with the tokenizer's pad id, on the
tokenizer's padding side, exactly as the reference `padding="max_length"` does (models/siglip.py
says why it matters).
"""

from __future__ import annotations

from typing import Any, Optional, Protocol, Sequence

import numpy as np
import torch

from sglang.srt.model_executor.forward_batch import ForwardBatch
from sglang.srt.model_executor.forward_io import ForwardInput


def text_padding_of(server_args, hf_config) -> tuple[int, str]:
    """(pad id, side) as SigLIP's tokenizer pads with `padding="max_length"`: its pad token (else
    the config's) on its padding side (SigLIP's: right; transformers' Siglip2Tokenizer: left)."""
    from sglang.srt.utils.hf_tokenizer import load_tokenizer

    tokenizer = load_tokenizer(server_args.tokenizer_path, server_args.trust_remote_code)
    pad_id = tokenizer.pad_token_id
    if pad_id is None:
        pad_id = getattr(hf_config.text_config, "pad_token_id", None) or 0
    return int(pad_id), "left" if getattr(tokenizer, "padding_side", "right") == "left" else "right"


def pad_texts(token_lists: Sequence[np.ndarray], length: int, pad_id: int, side: str = "right") -> list[np.ndarray]:
    """Each list padded with `pad_id` to `length` tokens on `side` (longer ones are left as they
    are: the tokenizer side never lets a text exceed the context length)."""
    out = []
    for ids in token_lists:
        if len(ids) < length:
            pad = np.full(length - len(ids), pad_id, dtype=ids.dtype)
            ids = np.concatenate([pad, ids] if side == "left" else [ids, pad])
        out.append(ids)
    return out


def stack_pixels(reqs: Sequence[ForwardInput]) -> np.ndarray:
    """Images [C, H, W] stacked to [N, C, H, W]; pre-patchified ones [patches, D] concatenated."""
    arrays = [r.pixel_values for r in reqs]
    return np.stack(arrays) if arrays[0].ndim == 3 else np.concatenate(arrays)


class TextBatchRunner(Protocol):
    """What ImageTextRunner uses of its ModelRunner (named here, so neither module imports the other)."""

    model: Any
    device: torch.device
    model_config: Any
    server_args: Any

    def build_batch(self, token_lists: Sequence[np.ndarray]) -> ForwardBatch: ...

    def forward(self, fb: ForwardBatch) -> torch.Tensor: ...


class ImageTextRunner:
    def __init__(self, runner: TextBatchRunner) -> None:
        self.runner = runner
        self.model = runner.model
        self.pad_to: Optional[int] = getattr(self.model, "text_padding", None)
        self.pad_id, self.pad_side = (
            text_padding_of(runner.server_args, runner.model_config.hf_config) if self.pad_to else (0, "right")
        )

    def text_tokens(self, token_lists: Sequence[np.ndarray]) -> list[np.ndarray]:
        if not self.pad_to:
            return list(token_lists)
        return pad_texts(token_lists, self.pad_to, self.pad_id, self.pad_side)

    @torch.inference_mode()
    def run(self, reqs: Sequence[ForwardInput]) -> np.ndarray:
        """float32 [B, dim]: one vector per input, in order (normalized by the renderer)."""
        for r in reqs:
            if r.is_sparse or r.token_output is not None:
                raise ValueError("text-image models answer with one dense vector per input")
        images = [i for i, r in enumerate(reqs) if r.pixel_values is not None]
        texts = [i for i, r in enumerate(reqs) if r.pixel_values is None]
        rows: list[torch.Tensor] = []
        if texts:  # a text model's path: a CUDA graph where one fits, then the output head's pool_text
            fb = self.runner.build_batch(self.text_tokens([reqs[i].input_ids for i in texts]))
            rows.append(self.runner.forward(fb))
        if images:
            rows.append(self.encode_images([reqs[i] for i in images]).float())
        vectors = torch.cat(rows) if len(rows) > 1 else rows[0]
        order = texts + images
        if order != sorted(order):
            vectors = vectors.index_select(0, torch.as_tensor(np.argsort(order), device=vectors.device))
        return vectors.to("cpu").numpy()

    def encode_images(self, reqs: Sequence[ForwardInput]) -> torch.Tensor:
        runner = self.runner
        # One sequence per image, its length what the tokenizer side counted (1 + patches for CLIP).
        fb = runner.build_batch([r.input_ids for r in reqs])
        fb.attn_backend.init_forward_metadata(fb)
        pixels = torch.from_numpy(stack_pixels(reqs)).to(runner.device, non_blocking=True)
        grids = np.concatenate([np.asarray(r.image_grid_thw).reshape(-1, 3) for r in reqs]).astype(np.int64)
        return self.model.encode_images(fb, pixels.to(runner.model_config.dtype), grids)
