"""What a model's image processor allocates for one image, known from the image's size alone.

The header gives width x height before anything is decoded; from it and the processor's resize
rule this module counts the working set the image loader reserves (image_budget.ImageMemory) and
the largest image the processor makes (checked against --mm-max-image-pixels). Counting only the
header is not enough: CLIP's processor scales the short side up to the tower's size, so a 1 x
200,000 image becomes 32 x 6,400,000 pixels (2 GB) before its centre crop. tower_images.py never
makes that intermediate image; the estimate here counts what the processor really makes.

The per-pixel constants were measured (peak RSS of transformers' PIL-backend processors,
test/srt/frontend/multimodal/test_image_cost.py checks the estimate covers it):
- the processor's copies of the decoded RGB image: a numpy array (made through a bytes copy),
  a channels-last copy and a PIL image again for its resize, about 16 bytes a pixel at their
  peak;
- Pillow's resampling weights: one table per axis, about 2 x the filter's support doubles per
  source pixel of that side (a 1 x 200,000 image's weights are bigger than its pixels);
- the resized image: a PIL image (4 bytes a pixel), its bytes copy and numpy array (3 + 3);
- float32 arrays of the model's input (rescaled, normalized, stacked: 12 bytes a pixel each,
  and twice that for Qwen2-VL, whose patches repeat the image over 2 temporal frames);
- 1 MiB an image besides (Python objects, small buffers, allocator slack).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

# The processor's numpy and PIL copies of the decoded RGB image it is given.
BYTES_PER_INPUT_PIXEL = 16
# Pillow's resampling weights, per source pixel of a side: 2 x support (Lanczos: 3) doubles.
BYTES_PER_INPUT_LINE = 48
# A PIL RGB image (stored 32 bits a pixel).
PIL_BYTES_PER_PIXEL = 4
# Whatever the image's size: Python objects, small buffers, allocator slack.
BYTES_PER_IMAGE = 1024 * 1024
# The resized image: PIL's (4 bytes a pixel), its bytes copy and its numpy array (3 each).
BYTES_PER_RESIZED_PIXEL = 10
# float32 RGB arrays of the model's input alive at once (rescaled, normalized, stacked): 3 x 12.
BYTES_PER_OUTPUT_PIXEL = 36


@dataclass(frozen=True)
class PreprocessCost:
    """One image's preprocessing: the largest image made and the bytes alive at the peak."""

    pixels: int  # the largest image the processor makes (the resized one, before any crop)
    nbytes: int  # its working set beside the decoded image (which the decode counts itself)


# (height, width) of the image the processor is given -> its cost (ValueError if it cannot take it)
CostOf = Callable[[int, int], PreprocessCost]


def resize_cost(
    seen: tuple[int, int], resized: tuple[int, int], output_pixels: int, output_copies: int = 1
) -> PreprocessCost:
    """An image of `seen` (h, w) resized to `resized` (h, w), then made into `output_pixels`
    float32 RGB pixels (`output_copies` times over: Qwen2-VL's temporal frames)."""
    seen_px = seen[0] * seen[1]
    resized_px = resized[0] * resized[1]
    nbytes = (
        BYTES_PER_IMAGE
        + seen_px * BYTES_PER_INPUT_PIXEL
        + (seen[0] + seen[1]) * BYTES_PER_INPUT_LINE
        + resized_px * BYTES_PER_RESIZED_PIXEL
        + output_pixels * output_copies * BYTES_PER_OUTPUT_PIXEL
    )
    return PreprocessCost(max(resized_px, output_pixels), nbytes)


def direct_crop_cost(window: tuple[int, int], crop: tuple[int, int]) -> PreprocessCost:
    """tower_images' direct crop (resized_crop.py): a PIL copy of the source `window` (h, w), its
    horizontal pass (window rows x crop width) and their weights, then the processor on the
    ready `crop` (h, w)."""
    rows, cols = window
    ch, cw = crop
    own = (rows * cols + rows * cw) * PIL_BYTES_PER_PIXEL + (rows + cols) * BYTES_PER_INPUT_LINE
    processor = resize_cost(crop, crop, ch * cw)
    return PreprocessCost(max(rows * cols, processor.pixels), own + processor.nbytes)


def cost_from_target(target: Callable[[int, int], tuple[int, int]]) -> CostOf:
    """The cost of a processor known only by its resize rule: it resizes to `target` and makes
    float arrays of that size (the estimate for an ImagePreprocessor without `preprocess_cost`)."""

    def cost(height: int, width: int) -> PreprocessCost:
        th, tw = target(height, width)
        return resize_cost((height, width), (th, tw), th * tw)

    return cost


def aspect_ratio(width: int, height: int) -> float:
    """Long side over short side (1 for a square)."""
    return max(width, height) / max(1, min(width, height))
