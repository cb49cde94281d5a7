"""What preprocessing an image costs, known from its size: the estimate of every image path (CLIP,
SigLIP, SigLIP 2, Qwen2-VL) covers the peak measured in a fresh process, and counts the resized
image a processor makes (CLIP's short-side resize before its crop: issue 27, item 1)."""

from __future__ import annotations

import pytest
from PIL import Image

from sglang.srt.frontend.multimodal.image_cost import BYTES_PER_IMAGE, PreprocessCost
from sglang.srt.frontend.multimodal.image_loader import preprocess_cost_of
from sglang.srt.frontend.multimodal.processors import Qwen2VLImages
from sglang.srt.frontend.multimodal.tower_images import TowerImages
from test.helpers.preprocess_peak import measure
from test.helpers.tiny_image_text import build_tiny_towers

pytestmark = pytest.mark.slow  # builds models; measures in subprocesses

MB = 1024 * 1024


@pytest.fixture(scope="module")
def dirs(tmp_path_factory, gme_dir) -> dict[str, str]:
    return {**build_tiny_towers(str(tmp_path_factory.mktemp("towers"))), "qwen2vl": gme_dir}


def _tower(path: str, kind: str) -> TowerImages:
    return TowerImages(path, 8, class_token=kind == "clip")


# (width, height) of RGB images each path is given: large ones, tall and wide thin ones, and
# CLIP's both sides of its direct crop (aspect 3.9: the processor's own path; 1 x 200,000: direct).
SIZES = {
    "clip": [(2000, 1500), (400, 1560), (1560, 400), (1, 200_000), (200_000, 1), (2000, 9000)],
    "siglip": [(2000, 1500), (1, 200_000), (200_000, 1)],
    "siglip2": [(2000, 1500), (1, 200_000), (200_000, 1)],
    "qwen2vl": [(2000, 1500), (1000, 1000), (100, 5000)],
}


@pytest.mark.parametrize("kind", sorted(SIZES))
def test_estimate_covers_the_measured_peak(dirs, kind):
    """Measured peak <= estimate (the reservation is never short), and estimate <= 3 x measured
    + 2 MB (it does not make the budget refuse what would fit)."""
    max_pixels = 4_000_000 if kind == "qwen2vl" else None  # GME's real range, not the tiny one's
    rows = measure(kind, dirs[kind], SIZES[kind], max_pixels=max_pixels)
    for row in rows:
        measured, estimate = row["measured"], row["estimate"]
        assert measured <= estimate, row
        assert estimate <= 3 * measured + 2 * MB, row


def test_clip_counts_and_bounds_its_resized_image(dirs):
    clip = _tower(dirs["clip"], "clip")
    # 1 x 200,000: the processor's resize would be 32 x 6,400,000; the direct crop makes 32 x 32
    # from a few source pixels.
    thin = clip.preprocess_cost(200_000, 1)
    assert thin.pixels <= 32 * 32 and thin.nbytes < BYTES_PER_IMAGE + MB
    # Aspect 4: the processor's own path, its 32 x 128 resize counted.
    assert clip.preprocess_cost(1600, 400).pixels == 32 * 128
    # A filter the direct crop does not reproduce: the whole resize is counted, so the pixel cap
    # refuses the image from its header.
    clip.processor.resample = Image.Resampling.BOX
    assert clip.preprocess_cost(200_000, 1).pixels == 6_400_000 * 32


def test_siglip_sizes_are_bounded_by_the_tower(dirs):
    siglip = _tower(dirs["siglip"], "siglip")
    assert siglip.preprocess_cost(200_000, 1).pixels == 32 * 32
    siglip2 = _tower(dirs["siglip2"], "siglip2")
    assert siglip2.preprocess_cost(200_000, 1).pixels == siglip2.max_pixels == 16 * 8 * 8


def test_qwen2vl_cost_follows_its_resize(dirs):
    images = Qwen2VLImages(dirs["qwen2vl"], max_pixels=1_000_000)
    cost = images.preprocess_cost(3000, 2000)
    th, tw = images.target_size(3000, 2000)
    assert cost.pixels == th * tw <= 1_000_000
    with pytest.raises(ValueError, match="aspect ratio"):
        images.preprocess_cost(1, 201)


def test_a_preprocessor_without_its_own_cost_is_estimated_from_its_resize():
    class Square:
        max_pixels = 64 * 64

        def target_size(self, height: int, width: int) -> tuple[int, int]:
            return 64, 64

        def __call__(self, image):  # not called here
            raise AssertionError

    cost = preprocess_cost_of(Square())(1000, 10)
    assert isinstance(cost, PreprocessCost) and cost.pixels == 64 * 64
    assert cost.nbytes > BYTES_PER_IMAGE + 1000 * 10 * 3  # the processor's copies of the input
