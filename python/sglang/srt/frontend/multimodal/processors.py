"""Images -> model inputs for Qwen2-VL: pixel patches, pad-token expansion, M-RoPE positions.

Resizing and normalization are transformers' own Qwen2VLImageProcessor, loaded from the checkpoint's
preprocessor_config.json (min/max pixels from there unless --mm-min-pixels / --mm-max-pixels say
otherwise), so a served image becomes the very patches the reference implementation sees. The
rest is bookkeeping on token ids in numpy: one `<|image_pad|>` becomes one token per merged
patch block, and every token gets its (temporal, height, width) M-RoPE position.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from sglang.srt.errors import ConfigError
from sglang.srt.frontend.multimodal.image_cost import PreprocessCost, resize_cost


class Qwen2VLImages:
    """Thread-safe wrapper around the checkpoint's image processor (call it off the event loop)."""

    def __init__(self, model_dir: str, min_pixels: Optional[int] = None, max_pixels: Optional[int] = None) -> None:
        from transformers import AutoImageProcessor

        overrides = {k: v for k, v in (("min_pixels", min_pixels), ("max_pixels", max_pixels)) if v is not None}
        try:
            self.processor = AutoImageProcessor.from_pretrained(model_dir, **overrides)
        except (OSError, ValueError) as e:
            raise ConfigError(
                f"Could not load the image processor (preprocessor_config.json) in {model_dir}: "
                f"{str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}"
            ) from e
        for attr in ("patch_size", "merge_size", "temporal_patch_size"):
            if not hasattr(self.processor, attr):
                raise ConfigError(
                    f"The image processor in {model_dir} ({type(self.processor).__name__}) is not "
                    "a Qwen2-VL one (it has no patch_size / merge_size / temporal_patch_size)"
                )
        self.merge_size = int(self.processor.merge_size)
        self.temporal_patch_size = int(self.processor.temporal_patch_size)
        self.resize_factor = int(self.processor.patch_size) * self.merge_size
        self.min_pixels, self.max_pixels = _pixel_range(self.processor)
        if self.min_pixels > self.max_pixels:
            raise ConfigError(f"--mm-min-pixels {self.min_pixels} is above --mm-max-pixels {self.max_pixels}")
        self._smart_resize = _find_smart_resize()

    def target_size(self, height: int, width: int) -> tuple[int, int]:
        """(height, width) the processor resizes an image of this size to (ValueError if it cannot)."""
        return self._smart_resize(
            height, width, factor=self.resize_factor, min_pixels=self.min_pixels, max_pixels=self.max_pixels
        )

    def preprocess_cost(self, height: int, width: int) -> PreprocessCost:
        """What preprocessing an RGB image of this size allocates (image_cost.py): the resized
        image and its float patches, repeated over the temporal patch (ValueError if it cannot)."""
        th, tw = self.target_size(height, width)
        return resize_cost((height, width), (th, tw), th * tw, output_copies=self.temporal_patch_size)

    def __call__(self, image) -> tuple[np.ndarray, np.ndarray]:
        """An RGB PIL image -> (pixel_values float32 [patches, C * T * P * P], grid_thw int64 [1, 3])."""
        out = self.processor(images=[image], return_tensors="np")
        pixels = np.ascontiguousarray(out["pixel_values"], dtype=np.float32)
        return pixels, np.asarray(out["image_grid_thw"], dtype=np.int64).reshape(-1, 3)


def _find_smart_resize():
    """transformers' own Qwen2-VL resize rule (its module moved between releases)."""
    import importlib

    for module in (
        "transformers.models.qwen2_vl.image_processing_pil_qwen2_vl",
        "transformers.models.qwen2_vl.image_processing_qwen2_vl",
    ):
        try:
            return importlib.import_module(module).smart_resize
        except (ImportError, AttributeError):
            continue
    raise ConfigError("this transformers release has no Qwen2-VL smart_resize; install transformers>=4.45")


def _pixel_range(processor) -> tuple[int, int]:
    """(min, max) resized image area: `size` holds them as shortest/longest_edge (a SizeDict in
    transformers 5, a dict before), older processors as min_pixels / max_pixels."""
    size = processor.size
    get = size.get if isinstance(size, dict) else (lambda key: getattr(size, key, None))
    low = get("shortest_edge") or get("min_pixels") or getattr(processor, "min_pixels", None)
    high = get("longest_edge") or get("max_pixels") or getattr(processor, "max_pixels", None)
    return int(low), int(high)


def num_image_tokens(grid_thw: np.ndarray, merge_size: int) -> int:
    """Language-model tokens of one image: its patches, merge_size x merge_size blocks merged."""
    t, h, w = (int(x) for x in np.asarray(grid_thw).reshape(3))
    return t * h * w // (merge_size * merge_size)


def expand_image_tokens(ids: np.ndarray, image_token_id: int, counts: Sequence[int]) -> np.ndarray:
    """Repeat the i-th `image_token_id` of `ids` counts[i] times (one token per merged patch)."""
    where = np.flatnonzero(ids == image_token_id)
    if len(where) != len(counts):
        raise ValueError(f"{len(where)} image placeholders for {len(counts)} images")
    if not len(counts):
        return ids
    repeats = np.ones(len(ids), dtype=np.int64)
    repeats[where] = np.asarray(counts, dtype=np.int64)
    return np.repeat(ids, repeats)


def mrope_positions(ids: np.ndarray, image_token_id: int, grids: Sequence[np.ndarray], merge_size: int) -> np.ndarray:
    """int64 [3, n] M-RoPE positions, as transformers' Qwen2VLModel.get_rope_index computes them.

    Text tokens count up on all three rows. A run of an image's tokens sits on a (t, h, w) grid
    starting at the next free position; text after it continues from that start plus the grid's
    larger spatial side, so positions grow more slowly than token indices.
    """
    n = len(ids)
    out = np.empty((3, n), dtype=np.int64)
    is_image = ids == image_token_id
    # Starts of runs of image tokens, paired with the images in order.
    run_starts = np.flatnonzero(is_image & ~np.concatenate([[False], is_image[:-1]]))
    if len(run_starts) != len(grids):
        raise ValueError(f"{len(run_starts)} runs of image tokens for {len(grids)} images")
    cursor = pos = 0
    for start, grid in zip(run_starts.tolist(), grids):
        text = start - cursor
        out[:, cursor:start] = pos + np.arange(text)
        pos += text
        t, h, w = (int(x) for x in np.asarray(grid).reshape(3))
        gh, gw = h // merge_size, w // merge_size
        tt, hh, ww = np.meshgrid(np.arange(t), np.arange(gh), np.arange(gw), indexing="ij")
        count = t * gh * gw
        if not is_image[start : start + count].all() or (start + count < n and is_image[start + count]):
            raise ValueError(f"an image of {count} tokens does not match its run of image tokens at {start}")
        out[:, start : start + count] = np.stack([tt.reshape(-1), hh.reshape(-1), ww.reshape(-1)]) + pos
        pos += max(gh, gw)
        cursor = start + count
    out[:, cursor:] = pos + np.arange(n - cursor)
    return out
