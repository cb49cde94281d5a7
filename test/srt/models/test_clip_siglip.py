"""Our CLIP, SigLIP and SigLIP 2 towers against transformers' get_text_features /
get_image_features on tiny random checkpoints (test/helpers/tiny_image_text.py).

Inputs go through our real request path (frontend/multimodal/: the checkpoint's tokenizer and image
processor) into ModelRunner.run_requests, texts of mixed lengths and images of different sizes
in one batch; float32, relative error <= 1e-4 per normalized vector; each input alone equals
itself in the batch within 1e-5.
"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from sglang.srt.model_executor.forward_batch import ForwardBatch
from sglang.srt.model_executor.image_text_batch import pad_texts
from sglang.srt.server_args import ServerArgs
from sglang.srt.wire.io_struct import MultimodalItem
from test.helpers.images import gradient_image
from test.helpers.parity import MIXED_TEXTS, make_runner, prepare_requests, relative_error_rows, served
from test.helpers.tiny_image_text import (
    build_tiny_clip,
    build_tiny_siglip,
    load_reference,
    reference_images,
    reference_text,
)

FAMILIES = {
    "clip": (build_tiny_clip, {}, "CLIPModel"),
    "siglip": (build_tiny_siglip, {"version": 1}, "SiglipModel"),
    "siglip2": (build_tiny_siglip, {"version": 2}, "Siglip2Model"),
}
# (width, height): aspect ratios that SigLIP 2 turns into different patch grids.
IMAGES = {"wide": (100, 60, 1), "square": (50, 50, 2), "tall": (30, 90, 3)}


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("images")
    for name, (w, h, seed) in IMAGES.items():
        gradient_image(w, h, seed).save(d / f"{name}.png")
    return str(d)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(name, attention backend) -> (model_dir, architecture, our runner, the reference); each
    checkpoint built and each runner made once per module."""
    checkpoints: dict = {}
    runners: dict = {}

    def get(name: str, backend: str = "cpu_varlen"):
        if name not in checkpoints:
            build, kwargs, arch = FAMILIES[name]
            model_dir = build(str(tmp_path_factory.mktemp(name)), **kwargs)
            checkpoints[name] = (model_dir, arch, load_reference(model_dir))
        model_dir, arch, ref = checkpoints[name]
        if (name, backend) not in runners:
            runners[name, backend] = make_runner(model_dir, attention_backend=backend)
        return model_dir, arch, runners[name, backend], ref

    return get


# The CPU backends: the compiled varlen kernel (what auto picks) and torch_native (SDPA).
@pytest.fixture(params=[(f, b) for b in ("cpu_varlen", "torch_native") for f in FAMILIES], ids=lambda p: "-".join(p))
def family(request, built):
    name, backend = request.param
    return (name, *built(name, backend))


def prepare(model_dir: str, runner, items: list[MultimodalItem], image_dir: str) -> list:
    return prepare_requests(ServerArgs(model_path=model_dir, allowed_local_media_path=image_dir), runner, items)


def test_texts_and_images_in_one_batch_match_transformers(family, image_dir):
    name, model_dir, arch, runner, ref = family
    mc = runner.model_config
    # Detected from the checkpoint, no flags: the model pools, vectors are normalized.
    assert mc.architecture == arch and mc.pooling == "model" and mc.normalize
    assert mc.embedding_dim == (24 if name == "clip" else 32)
    texts = MIXED_TEXTS[:4]
    items = [MultimodalItem(text=texts[0]), MultimodalItem(image=f"{image_dir}/wide.png")]
    items += [MultimodalItem(text=t) for t in texts[1:3]]
    items += [MultimodalItem(image=f"{image_dir}/{k}.png") for k in ("tall", "square")]
    items.append(MultimodalItem(text=texts[3]))
    reqs = prepare(model_dir, runner, items, image_dir)
    got = served(runner, reqs)
    text_ref = reference_text(ref, texts)
    image_ref = {k: reference_images(ref, [Image.open(f"{image_dir}/{k}.png").convert("RGB")])[0] for k in IMAGES}
    expected = np.stack(
        [text_ref[0], image_ref["wide"], text_ref[1], text_ref[2], image_ref["tall"], image_ref["square"], text_ref[3]]
    )
    assert got.shape == expected.shape
    assert relative_error_rows(got, expected).max() <= 1e-4
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    # Image sequences: CLIP 1 class token + 16 patches, SigLIP 16 patches, SigLIP 2 its own grid.
    image_lens = sorted({r.num_tokens for r in reqs if r.pixel_values is not None})
    assert image_lens == {"clip": [17], "siglip": [16], "siglip2": [12, 15, 16]}[name]
    # Each input alone gives the vector it got in the mixed batch.
    alone = np.concatenate([served(runner, [r]) for r in reqs])
    assert np.abs(alone - got).max() <= 1e-5
    # Plain string inputs (the text path every model has) give the {"text"} item's vector.
    plain = served(runner, [reqs[2]])
    np.testing.assert_allclose(plain[0], got[2], atol=1e-6)


def test_siglip_text_padding_is_what_makes_it_match(built, image_dir):
    """A control: without padding to the model's positions the SigLIP text vector is far off, so
    the parity above depends on the padding convention (pad token, padding side, length)."""
    model_dir, _, runner, ref = built("siglip")
    reqs = prepare(model_dir, runner, [MultimodalItem(text="the cat")], image_dir)
    padded = served(runner, reqs)
    runner.image_text.pad_to = None
    try:
        unpadded = served(runner, reqs)
    finally:
        runner.image_text.pad_to = runner.model.text_padding
    expected = reference_text(ref, ["the cat"])
    assert runner.model.text_padding == 32  # the checkpoint's text max_position_embeddings, not a fixed 64
    assert relative_error_rows(padded, expected).max() <= 1e-4 < relative_error_rows(unpadded, expected).max()


def test_pad_texts_sides():
    ids = [np.array([5, 6], dtype=np.int32), np.array([1, 2, 3, 4], dtype=np.int32)]
    right = pad_texts(ids, 4, 0)
    left = pad_texts(ids, 4, 9, "left")
    assert [r.tolist() for r in right] == [[5, 6, 0, 0], [1, 2, 3, 4]]
    assert [x.tolist() for x in left] == [[9, 9, 5, 6], [1, 2, 3, 4]]


def test_clip_pools_first_end_token_or_highest_id_for_old_configs():
    """transformers' rule: the first eos_token_id of each sequence; configs with eos_token_id 2
    (before transformers#24773) take the highest token id instead."""
    from types import SimpleNamespace

    from sglang.srt.models.clip import ClipTextTransformer

    cfg = SimpleNamespace(
        vocab_size=50,
        hidden_size=8,
        max_position_embeddings=8,
        num_hidden_layers=0,
        num_attention_heads=2,
        intermediate_size=8,
        hidden_act="quick_gelu",
        layer_norm_eps=1e-5,
        eos_token_id=7,
    )
    tower = ClipTextTransformer(cfg)
    seqs = [np.array([1, 9, 7, 7]), np.array([3, 40, 2]), np.array([4, 5])]
    fb = ForwardBatch.from_token_lists(seqs, "cpu")
    assert tower.pooled_rows(fb).tolist() == [2, 4, 7]  # no end token: its first token, as argmax of zeros
    tower.eos_token_id = 2
    assert tower.pooled_rows(fb).tolist() == [1, 5, 8]


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(FAMILIES))
def test_gpu_matches_transformers_and_flashinfer_graphs_match(name, tmp_path, image_dir):
    """float32 torch_native on the GPU against transformers (<= 1e-4); the default GPU set-up
    (FlashInfer, CUDA graphs for the text tower, bf16) against it by cosine."""
    from test.helpers.parity import cosine_rows

    build, kwargs, _ = FAMILIES[name]
    model_dir = build(str(tmp_path / name), **kwargs)
    ref = load_reference(model_dir)
    exact = make_runner(model_dir, device="cuda", dtype="float32", attention_backend="torch_native")
    fast = make_runner(model_dir, device="cuda", attention_backend="flashinfer", cuda_graph_max_tokens=256)
    assert fast.graph_runner is not None
    items = [MultimodalItem(text=t) for t in MIXED_TEXTS[:3]]
    items += [MultimodalItem(image=f"{image_dir}/{k}.png") for k in IMAGES]
    reqs = prepare(model_dir, exact, items, image_dir)
    got = served(exact, reqs)
    images = [Image.open(f"{image_dir}/{k}.png").convert("RGB") for k in IMAGES]
    expected = np.concatenate([reference_text(ref, MIXED_TEXTS[:3]), *[reference_images(ref, [i]) for i in images]])
    assert relative_error_rows(got, expected).max() <= 1e-4
    assert cosine_rows(served(fast, reqs), got).min() >= 0.999
    texts = reqs[:3]  # a text-only batch: the graph path
    assert cosine_rows(served(fast, texts), got[:3]).min() >= 0.999


def test_config_without_architectures_is_detected_by_model_type(built, tmp_path):
    """Some SigLIP 2 uploads' config.json has no `architectures`: model_type "siglip" says it all."""
    import json
    import shutil

    from sglang.srt.configs.model_config import ModelConfig

    model_dir = built("siglip")[0]
    d = tmp_path / "no_arch"
    shutil.copytree(model_dir, d)
    cfg = json.loads((d / "config.json").read_text())
    del cfg["architectures"]
    (d / "config.json").write_text(json.dumps(cfg))
    mc = ModelConfig.from_server_args(ServerArgs(model_path=str(d)), str(d), "cpu")
    assert mc.architecture == "SiglipModel" and mc.pooling == "model" and mc.embedding_dim == 32


def test_image_processor_that_does_not_fit_the_tower_fails_at_start(built):
    """A preprocessor_config.json whose crop size differs from the image tower's is a one-line
    ConfigError when the HTTP side starts, not a failing batch later."""
    from sglang.srt.errors import ConfigError
    from sglang.srt.frontend.multimodal.tower_images import TowerImages

    model_dir, _, runner, _ = built("clip")
    vision = runner.model_info().vision
    assert vision.image_tokens == 17
    TowerImages(model_dir, vision.patch_size, vision.class_token, vision.image_tokens)  # fits
    with pytest.raises(ConfigError, match=r"makes 32x32 images \(17 tokens\) but the model's image tower takes 50"):
        TowerImages(model_dir, vision.patch_size, vision.class_token, 50)


def test_request_normalize_false_returns_the_raw_projection(built, image_dir):
    """Text and image inputs alike leave the runner as raw projections; the renderer normalizes
    them per input as each spec says (`normalize: false` keeps one raw, its neighbours not)."""
    from sglang.srt.renderer.vector_render import render_vectors
    from sglang.srt.wire.output_spec import Format, OutputSpec

    model_dir, _, runner, _ = built("clip")
    items = [MultimodalItem(text="the cat"), MultimodalItem(image=f"{image_dir}/wide.png")]
    reqs = prepare(model_dir, runner, items, image_dir)
    normalized = served(runner, reqs)
    raw = runner.run_requests(reqs).embeddings
    norms = np.linalg.norm(raw, axis=1)
    assert abs(norms[0] - 1) > 1e-3 and abs(norms[1] - 1) > 1e-3
    specs = [OutputSpec(format=Format.ARRAY, normalize=f) for f in (False, True, True, False)]
    rendered = [render_vectors(row, spec) for row, spec in zip(np.concatenate([raw, raw]), specs)]
    np.testing.assert_array_equal(rendered[0], raw[0])
    np.testing.assert_allclose(rendered[1], normalized[1], atol=1e-6)
    np.testing.assert_allclose(rendered[2], normalized[0], atol=1e-6)
    np.testing.assert_array_equal(rendered[3], raw[1])
    np.testing.assert_allclose(raw / norms[:, None], normalized, atol=1e-6)
