"""Images -> image-tower inputs for CLIP, SigLIP and SigLIP 2 (text-image models).

Resizing, cropping and normalization are transformers' own image processor from the checkpoint's
preprocessor_config.json (CLIPImageProcessor, SiglipImageProcessor, Siglip2ImageProcessor), so a
served image becomes the very pixels the reference implementation sees. An image is one sequence
of the image tower: 1 class token + patches for CLIP, patches for SigLIP; SigLIP 2 keeps the
image's aspect ratio, so its patch grid (and token count) varies per image.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
from PIL import Image

from sglang.srt.errors import ConfigError


class TowerImages:
    """Thread-safe wrapper around the checkpoint's image processor (call it off the event loop)."""

    def __init__(self, model_dir: str, patch_size: int, class_token: bool, image_tokens: Optional[int] = None) -> None:
        from transformers import AutoImageProcessor

        try:
            self.processor = AutoImageProcessor.from_pretrained(model_dir)
        except (OSError, ValueError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ConfigError(
                f"Could not load the image processor (preprocessor_config.json) in {model_dir}: {first}"
            ) from e
        self.patch_size = patch_size
        self.class_token = class_token
        size = self.processor.size
        self._size = size.get if isinstance(size, dict) else (lambda key: getattr(size, key, None))
        # The area the processor resizes to (the image loader's default pixel cap follows it).
        edge = self._size("shortest_edge")
        if edge:
            self.max_pixels = int(edge) ** 2
        elif self._size("height") and self._size("width"):
            self.max_pixels = int(self._size("height")) * int(self._size("width"))
        else:  # SigLIP 2: at most max_num_patches patches
            self.max_pixels = int(getattr(self.processor, "max_num_patches", 256)) * patch_size**2
        if image_tokens is not None:  # a fixed-size image tower: the processor must make that size
            _, grid = self(Image.new("RGB", (32, 24), (255, 255, 255)))
            tokens = self.num_tokens(grid)
            if tokens != image_tokens:
                rows, cols = int(grid[0, 1]) * patch_size, int(grid[0, 2]) * patch_size
                raise ConfigError(
                    f"The image processor in {model_dir} makes {rows}x{cols} images ({tokens} tokens) but the "
                    f"model's image tower takes {image_tokens} tokens per image"
                )

    def target_size(self, height: int, width: int) -> tuple[int, int]:
        """(height, width) the processor resizes an image of this size to, before any crop (the
        image loader decodes large JPEGs at a reduced scale that keeps twice this); SigLIP 2's
        aspect-preserving fit: the image's own size (no reduction)."""
        edge = self._size("shortest_edge")
        if edge:  # CLIP: the short side to `edge`, then a centre crop
            scale = int(edge) / min(height, width)
            return max(1, round(height * scale)), max(1, round(width * scale))
        if self._size("height") and self._size("width"):  # SigLIP: a square resize
            return int(self._size("height")), int(self._size("width"))
        return height, width

    def num_tokens(self, grid: np.ndarray) -> int:
        """An image's sequence length in the image tower: its patches (+ CLIP's class token)."""
        _, rows, cols = (int(x) for x in np.asarray(grid).reshape(3))
        return rows * cols + int(self.class_token)

    def __call__(self, image) -> tuple[np.ndarray, np.ndarray]:
        """An RGB PIL image -> (pixel_values float32, grid int64 [1, 3] as (1, rows, columns) of
        patches). pixel_values is [C, H, W], or SigLIP 2's patches [rows * columns, P * P * C]
        without the processor's padding."""
        out = self.processor(images=[image], return_tensors="np")
        pixels = np.asarray(out["pixel_values"], dtype=np.float32)[0]
        if "spatial_shapes" in out:  # NaFlex: patches padded to max_num_patches, the valid ones first
            rows, cols = (int(x) for x in np.asarray(out["spatial_shapes"])[0])
            pixels = pixels[: rows * cols]
        else:
            rows, cols = pixels.shape[-2] // self.patch_size, pixels.shape[-1] // self.patch_size
        grid = np.asarray([[1, rows, cols]], dtype=np.int64)
        return np.ascontiguousarray(pixels), grid
