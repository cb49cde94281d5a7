"""Our Qwen2-VL (GME) against transformers' Qwen2VLForConditionalGeneration on a tiny random checkpoint.

Inputs go through our real request path (chat template, image processor, pad expansion, M-RoPE
positions: frontend/multimodal/) into ModelRunner.run_requests; the reference builds its own
(test/helpers/gme_reference.py). float32, relative error <= 1e-4 per vector.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from sglang.srt.model_executor.multimodal_batch import has_images
from sglang.srt.server_args import ServerArgs
from sglang.srt.wire.io_struct import MultimodalItem, TokenizedEmbeddingReqInput
from test.helpers.gme_reference import hf_gme_embedding, load_hf_gme
from test.helpers.images import gradient_image
from test.helpers.parity import make_runner, prepare_requests, relative_error_rows, served


@pytest.fixture(scope="module")
def runner(gme_dir):
    return make_runner(gme_dir, is_embedding=True)


@pytest.fixture(scope="module")
def hf_model(gme_dir):
    return load_hf_gme(gme_dir)


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> dict[str, str]:
    """Two images whose grids differ (4x8 and 8x8 patches after resizing), as files."""
    d = tmp_path_factory.mktemp("images")
    out = {}
    for name, (w, h, seed) in {"wide": (100, 60, 1), "square": (200, 200, 2)}.items():
        out[name] = str(d / f"{name}.png")
        gradient_image(w, h, seed).save(out[name])
    return out


def ours(gme_dir, runner, items: list[MultimodalItem], image_dir: str) -> tuple[np.ndarray, list]:
    """Our request path: MultimodalPreparer -> TokenizedEmbeddingReqInput -> run_requests."""
    args = ServerArgs(
        model_path=gme_dir, is_embedding=True, chat_template="gme-qwen2-vl", allowed_local_media_path=image_dir
    )
    reqs = prepare_requests(args, runner, items)
    return served(runner, reqs), reqs


def test_detected_as_lasttoken_decoder_with_images(runner, gme_dir):
    mc = runner.model_config
    assert mc.architecture == "Qwen2VLForConditionalGeneration"
    assert mc.pooling == "lasttoken" and mc.normalize and mc.hidden_size == 64 and mc.context_length == 512
    info = runner.model_info().vision
    assert info.spatial_merge_size == 2 and info.model_dir == os.path.abspath(gme_dir)


def test_text_image_fused_and_two_image_sizes_in_one_batch(gme_dir, runner, hf_model, images):
    cases = [
        ("a cat by the river", None),
        (None, "wide"),
        ("the red house", "square"),
        (None, "square"),
        ("two blue books", "wide"),
    ]
    items = [MultimodalItem(text, images[img] if img else None) for text, img in cases]
    got, reqs = ours(gme_dir, runner, items, os.path.dirname(images["wide"]))
    refs = [hf_gme_embedding(gme_dir, hf_model, text, images[img] if img else None) for text, img in cases]
    for r, (_, ref_ids) in zip(reqs, refs):
        np.testing.assert_array_equal(r.input_ids, ref_ids)  # template and pad expansion as transformers
    grids = {tuple(r.image_grid_thw[0]) for r in reqs if r.image_grid_thw is not None}
    assert grids == {(1, 4, 8), (1, 8, 8)}  # two image sizes share the batch's one vision forward
    assert relative_error_rows(got, np.stack([v for v, _ in refs])).max() <= 1e-4
    # Each item alone gives the same vector as inside the mixed batch.
    alone = np.concatenate([served(runner, [r]) for r in reqs])
    assert np.abs(alone - got).max() <= 1e-5


def test_text_only_batch_keeps_the_plain_rope_path(gme_dir, runner, hf_model, images):
    texts = ["the cat", "a fast embedding server returns one vector for every query"]
    got, reqs = ours(gme_dir, runner, [MultimodalItem(t) for t in texts], os.path.dirname(images["wide"]))
    assert not has_images(reqs)  # 1-D positions: the same (CUDA-graph friendly) path as text models
    ref = np.stack([hf_gme_embedding(gme_dir, hf_model, t, None)[0] for t in texts])
    assert relative_error_rows(got, ref).max() <= 1e-4


def test_m_rope_positions_matter(gme_dir, runner, hf_model, images):
    """A control: with sequential instead of M-RoPE positions the image vector moves far off."""
    got, reqs = ours(gme_dir, runner, [MultimodalItem("a cat", images["wide"])], os.path.dirname(images["wide"]))
    n = reqs[0].num_tokens
    reqs[0].mrope_positions = np.broadcast_to(np.arange(n), (3, n)).copy()
    flat = served(runner, reqs)
    ref = hf_gme_embedding(gme_dir, hf_model, "a cat", images["wide"])[0][None]
    assert relative_error_rows(got, ref).max() <= 1e-4 < relative_error_rows(flat, ref).max()


def test_transformers5_checkpoint_layout_loads(gme_dir, runner, tmp_path, images):
    """`model.language_model.*` / `model.visual.*` names load into the same parameters."""
    import shutil

    from safetensors.torch import load_file, save_file

    d = str(tmp_path / "v5")
    shutil.copytree(gme_dir, d)
    state = load_file(os.path.join(gme_dir, "model.safetensors"))
    renamed = {
        (
            "model." + k
            if k.startswith("visual.")
            else k.replace("model.", "model.language_model.", 1)
            if k.startswith("model.")
            else k
        ): v
        for k, v in state.items()
    }
    assert any(k.startswith("model.language_model.layers.") for k in renamed)
    save_file(renamed, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    items = [MultimodalItem("the cat", images["square"])]
    want, _ = ours(gme_dir, runner, items, os.path.dirname(images["wide"]))
    got, _ = ours(d, make_runner(d, is_embedding=True), items, os.path.dirname(images["wide"]))
    np.testing.assert_array_equal(got, want)


def test_image_token_id_in_a_plain_input_is_left_alone(gme_dir, runner, images):
    """Features go to the image item's own pad rows, not to a token-id input that holds that id."""
    got, reqs = ours(gme_dir, runner, [MultimodalItem("a cat", images["wide"])], os.path.dirname(images["wide"]))
    pad = runner.model.image_token_id
    plain = TokenizedEmbeddingReqInput(rid="plain", worker_id=0, input_ids=np.array([pad, 7, pad, 9], np.int32))
    mixed = served(runner, [plain, reqs[0]])
    assert np.abs(mixed[1] - got[0]).max() <= 1e-5
    assert np.abs(mixed[0] - served(runner, [plain])[0]).max() <= 1e-5
