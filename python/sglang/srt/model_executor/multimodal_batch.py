"""Build the ForwardBatch of a batch that holds images: M-RoPE positions, pixels, scatter rows.

Text-only batches never come here (ModelRunner keeps them on ForwardBatch.from_token_lists). A
batch mixing image and text inputs runs as one: text inputs get three equal position rows, which
is what M-RoPE reduces to for text.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch

from sglang.srt.configs.model_info import ImagePath, VisionInfo
from sglang.srt.model_executor.forward_batch import ForwardBatch
from sglang.srt.model_executor.forward_io import ForwardInput


def has_images(reqs: Sequence[ForwardInput]) -> bool:
    """Whether a batch needs the multimodal path (any input with 3-D positions)."""
    return any(r.mrope_positions is not None for r in reqs)


def build_multimodal_batch(
    reqs: Sequence[ForwardInput], device: torch.device | str, image_token_id: int, pixel_dtype: torch.dtype
) -> ForwardBatch:
    """One packed batch: every image of every input for one vision forward, every token for one
    language-model forward. The rows an input's `image_token_id` tokens occupy in the packed batch
    receive its image features, input by input, in order (so a text input that happens to contain
    that token id is left alone)."""
    fb = ForwardBatch.from_token_lists([r.input_ids for r in reqs], device, [r.token_type_ids for r in reqs])
    positions, pixels, grids, rows = [], [], [], []
    offset = 0
    for r in reqs:
        n = r.num_tokens
        if r.mrope_positions is None:
            positions.append(np.broadcast_to(np.arange(n, dtype=np.int64), (3, n)))
        else:
            if r.mrope_positions.shape != (3, n):
                raise ValueError(f"mrope_positions of {r.rid} has shape {r.mrope_positions.shape}, expected (3, {n})")
            positions.append(r.mrope_positions)
        if r.pixel_values is not None:
            pixels.append(r.pixel_values)
            grids.append(r.image_grid_thw)
            rows.append(offset + np.flatnonzero(r.input_ids == image_token_id))
        offset += n
    fb.positions = torch.from_numpy(np.concatenate(positions, axis=1).astype(np.int64)).to(device, non_blocking=True)
    if pixels:
        pv = torch.from_numpy(np.concatenate(pixels)).to(device, non_blocking=True)
        fb.pixel_values = pv.to(pixel_dtype)
        fb.image_grid_thw = np.concatenate(grids).astype(np.int64)
        fb.image_token_index = torch.from_numpy(np.concatenate(rows).astype(np.int64)).to(device, non_blocking=True)
    return fb


def vision_info(model_config, path: Optional[ImagePath]) -> Optional[VisionInfo]:
    """What the tokenizer side needs to turn images into tokens (None: the model takes no images),
    for the image path ModelRunner decided (configs/model_info.image_path_of); ModelRunner.model_info()
    carries it to the HTTP processes."""
    if path is None:
        return None
    cfg = model_config.hf_config
    if path is ImagePath.TOWER:  # CLIP / SigLIP: the image tower's patches (models/clip.py, models/siglip.py)
        vision = cfg.vision_config
        class_token = model_config.architecture == "CLIPModel"
        size = getattr(vision, "image_size", None)  # SigLIP 2 (NaFlex) has none: sizes vary
        return VisionInfo(
            model_dir=model_config.model_path,
            kind=ImagePath.TOWER,
            patch_size=int(vision.patch_size),
            class_token=class_token,
            image_tokens=(int(size) // int(vision.patch_size)) ** 2 + class_token if size else None,
        )
    return VisionInfo(
        model_dir=model_config.model_path,
        image_token_id=int(cfg.image_token_id),
        spatial_merge_size=int(cfg.vision_config.spatial_merge_size),
    )
