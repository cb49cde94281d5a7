"""Images -> image-tower inputs for CLIP, SigLIP and SigLIP 2 (text-image models).

Resizing, cropping and normalization are transformers' own image processor from the checkpoint's
preprocessor_config.json (CLIPImageProcessor, SiglipImageProcessor, Siglip2ImageProcessor), so a
served image becomes the very pixels the reference implementation sees. An image is one sequence
of the image tower: 1 class token + patches for CLIP, patches for SigLIP; SigLIP 2 keeps the
image's aspect ratio, so its patch grid (and token count) varies per image.

CLIP's processor resizes the short side to the tower's size and then crops the centre: for a tall,
thin image the resized image before the crop is huge (1 x 200,000 -> 32 x 6,400,000 pixels, 2 GB)
though the crop is 32 x 32. When that intermediate would be over DIRECT_CROP_OVER times the crop,
this wrapper makes the crop itself from just the source region it covers (resized_crop.py: the
same sample positions and filter as the full resize), and the processor takes it as it is.
Ordinary images go through the processor untouched (exactly the reference's pixels).
`preprocess_cost` counts what each path allocates (image_cost.py).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
from PIL import Image

from sglang.srt.errors import ConfigError
from sglang.srt.frontend.multimodal.image_cost import PreprocessCost, direct_crop_cost, resize_cost
from sglang.srt.frontend.multimodal.resized_crop import resized_crop, source_window, supports

# CLIP: an image whose resized size (before the centre crop) is over this many times the crop's
# is cropped and resized in one step here (aspect ratios over about 4:1).
DIRECT_CROP_OVER = 4


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
        self._crop = self._crop_size()
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

    def _crop_size(self) -> Optional[tuple[int, int]]:
        """CLIP's centre crop (height, width) after its short-side resize, or None (no crop, or a
        resize rule other than the plain short side, which this wrapper leaves to the processor)."""
        crop = getattr(self.processor, "crop_size", None)
        if not (self._size("shortest_edge") and not self._size("longest_edge") and crop):
            return None
        if not (getattr(self.processor, "do_resize", True) and getattr(self.processor, "do_center_crop", False)):
            return None
        get = crop.get if isinstance(crop, dict) else (lambda key: getattr(crop, key, None))
        if not (get("height") and get("width")):
            return None
        return int(get("height")), int(get("width"))

    def _resized_size(self, height: int, width: int) -> tuple[int, int]:
        """(height, width) CLIP's processor resizes to: the short side to `shortest_edge`, the long
        side scaled and truncated as transformers' get_resize_output_image_size does."""
        edge = int(self._size("shortest_edge"))
        if width <= height:
            return int(edge * height / width), edge
        return edge, int(edge * width / height)

    def _direct_crop(self, height: int, width: int) -> Optional[tuple[tuple[int, int], tuple[int, int, int, int]]]:
        """((rh, rw) resized size, (top, left, ch, cw) crop) when CLIP's crop is to be made
        directly: resizing the whole image first would make over DIRECT_CROP_OVER times the crop.
        None: the processor's own path."""
        if self._crop is None or not supports(int(self.processor.resample)):
            return None
        rh, rw = self._resized_size(height, width)
        ch, cw = self._crop
        top, left = (rh - ch) // 2, (rw - cw) // 2  # transformers' center_crop
        if rh * rw <= DIRECT_CROP_OVER * ch * cw or top < 0 or left < 0:
            return None  # small enough, or the processor pads it (small either way)
        return (rh, rw), (top, left, ch, cw)

    def preprocess_cost(self, height: int, width: int) -> PreprocessCost:
        """What preprocessing an RGB image of this size allocates (image_cost.py)."""
        if self._crop is not None:
            ch, cw = self._crop
            direct = self._direct_crop(height, width)
            if direct is not None:
                window = source_window((width, height), *direct, int(self.processor.resample))
                return direct_crop_cost(window, (ch, cw))
            resized = self._resized_size(height, width)
            return resize_cost((height, width), resized, min(ch * cw, resized[0] * resized[1]))
        if self._size("height") and self._size("width"):  # SigLIP: a square resize, no crop
            side = int(self._size("height")), int(self._size("width"))
            return resize_cost((height, width), side, side[0] * side[1])
        if self._size("shortest_edge"):  # a short-side resize without a crop we model: its full size
            rh, rw = self._resized_size(height, width)
            return resize_cost((height, width), (rh, rw), rh * rw)
        # SigLIP 2: resized to at most max_num_patches patches, padded to exactly that many
        return resize_cost((height, width), (1, self.max_pixels), self.max_pixels)

    def num_tokens(self, grid: np.ndarray) -> int:
        """An image's sequence length in the image tower: its patches (+ CLIP's class token)."""
        _, rows, cols = (int(x) for x in np.asarray(grid).reshape(3))
        return rows * cols + int(self.class_token)

    def __call__(self, image) -> tuple[np.ndarray, np.ndarray]:
        """An RGB PIL image -> (pixel_values float32, grid int64 [1, 3] as (1, rows, columns) of
        patches). pixel_values is [C, H, W], or SigLIP 2's patches [rows * columns, P * P * C]
        without the processor's padding."""
        direct = self._direct_crop(image.height, image.width)
        if direct is None:
            out = self.processor(images=[image], return_tensors="np")
        else:  # the crop made directly: the processor neither resizes nor (in effect) crops it
            cropped = resized_crop(image, *direct, int(self.processor.resample))
            out = self.processor(images=[cropped], do_resize=False, return_tensors="np")
        pixels = np.asarray(out["pixel_values"], dtype=np.float32)[0]
        if "spatial_shapes" in out:  # NaFlex: patches padded to max_num_patches, the valid ones first
            rows, cols = (int(x) for x in np.asarray(out["spatial_shapes"])[0])
            pixels = pixels[: rows * cols]
        else:
            rows, cols = pixels.shape[-2] // self.patch_size, pixels.shape[-1] // self.patch_size
        grid = np.asarray([[1, rows, cols]], dtype=np.int64)
        return np.ascontiguousarray(pixels), grid
