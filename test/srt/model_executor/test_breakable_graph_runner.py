"""Breakable CUDA graphs (--cuda-graph-mode breakable).

On CPU the runner captures through RecordingCapture (every op recorded, re-run at replay on the
captured tensors), so the piece/buffer wiring is checked against eager for every bucket, random
paddings, float32 and bfloat16 and three model families. On a GPU: real CUDA graphs and FlashInfer,
breakable vs eager vs full, up to 4,096 tokens.
"""

from __future__ import annotations

import argparse
import types

import numpy as np
import pytest
import torch

from sglang.srt.errors import ConfigError
from sglang.srt.layers.attention.base import AttentionBackend
from sglang.srt.layers.attention.layer import AttentionLayer
from sglang.srt.model_executor.breakable_graph_runner import BreakableGraphRunner
from sglang.srt.model_executor.cuda_graph_runner import StaticBatches
from sglang.srt.model_executor.graph_padding import choose_bucket, token_buckets
from sglang.srt.server_args import ServerArgs
from test.helpers.parity import cosine_rows, make_runner
from test.helpers.recorded_graph import RecordingCapture
from test.helpers.tiny_models import build_tiny_bert, build_tiny_qwen3
from test.helpers.tiny_task_models import build_tiny_gemma3

MAX_TOKENS, MAX_SEQS = 64, 6


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("bcg")
    return {
        "bert": (build_tiny_bert(str(root / "bert"), st_pooling="mean"), {}),
        "qwen3": (build_tiny_qwen3(str(root / "qwen3")), {"is_embedding": True}),
        # window 6 < most lengths below: the sliding layer's mask matters
        "gemma3": (build_tiny_gemma3(str(root / "gemma3"), sliding_window=6), {}),
    }


def _breakable(runner, max_tokens=MAX_TOKENS, max_seqs=MAX_SEQS):
    capture = RecordingCapture()
    graphs = BreakableGraphRunner(
        runner.model,
        runner.model_config.hidden_size,
        runner.model_config.dtype,
        torch.device("cpu"),
        max_tokens,
        max_seqs,
        warm_backend=runner.attn_backend,
        capture=capture,
        show_progress=False,
    )
    return graphs, capture


def _ids(seq_lens, rng, vocab):
    return [rng.integers(5, vocab - 1, size=n).astype(np.int64) for n in seq_lens]


def _lengths_for(bucket_tokens: int, rng, max_tokens: int = MAX_TOKENS, max_seqs: int = MAX_SEQS) -> list[int]:
    """Random lengths whose batch lands in exactly this bucket (random padding inside it)."""
    buckets = token_buckets(max_tokens)
    lower = buckets[buckets.index(bucket_tokens) - 1] if bucket_tokens > 1 else 0
    total = int(rng.integers(max(lower + 1, (bucket_tokens + 1) // 2), bucket_tokens + 1))
    seqs = int(rng.integers(1, min(max_seqs, total) + 1))
    cuts = np.sort(rng.choice(np.arange(1, total), size=seqs - 1, replace=False)) if seqs > 1 else []
    return np.diff([0, *cuts, total]).astype(int).tolist()


def _eager_and_graph(runner, graphs, ids):
    runner.graph_runner = None
    eager = runner.embed(ids)
    runner.graph_runner = graphs
    return eager, runner.embed(ids)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("family", ["bert", "qwen3", "gemma3"])
def test_breakable_replay_matches_eager_in_every_bucket(models, family, dtype):
    path, kwargs = models[family]
    runner = make_runner(path, dtype=dtype, **kwargs)
    graphs, capture = _breakable(runner)
    layers = [m for m in runner.model.modules() if isinstance(m, AttentionLayer)]
    assert sorted(graphs.graphs) == token_buckets(MAX_TOKENS) and len(layers) >= 2
    for g in graphs.graphs.values():  # one break per attention layer, one more segment than breaks
        assert [b.layer for b in g.breaks] == layers and len(g.segments) == len(layers) + 1
    rng = np.random.default_rng(hash((family, dtype)) % 2**32)
    vocab = runner.model_config.vocab_size
    for bucket in token_buckets(MAX_TOKENS):
        for _ in range(2):  # two paddings per bucket; the second replays over the first's leftovers
            seq_lens = _lengths_for(bucket, rng)
            ids = _ids(seq_lens, rng, vocab)
            assert graphs.plan(runner.build_batch(ids)).bucket.num_tokens == bucket, seq_lens
            before = capture.replays
            eager, replayed = _eager_and_graph(runner, graphs, ids)
            assert capture.replays - before == len(graphs.graphs[bucket].segments), seq_lens
            if dtype == "float32":
                assert np.abs(replayed - eager).max() <= 1e-5, (bucket, seq_lens)
            else:
                assert cosine_rows(replayed, eager).min() >= 0.9999, (bucket, seq_lens)


class SpyBackend(AttentionBackend):
    """Wraps the runner's backend and records what each attention call saw."""

    name = "spy"

    def __init__(self, inner: AttentionBackend) -> None:
        self.inner, self.calls = inner, []

    def init_forward_metadata(self, forward_batch) -> None:
        self.inner.init_forward_metadata(forward_batch)

    def forward(self, q, k, v, layer, forward_batch, position_bias=None):
        self.calls.append((q.shape[0], k.shape[0], forward_batch.seq_lens_cpu, forward_batch.num_tokens))
        return self.inner.forward(q, k, v, layer, forward_batch)


def test_attention_sees_only_the_real_rows_and_layout(models):
    """No dummy sequence: each break attends the real batch's ragged layout over its rows only."""
    runner = make_runner(models["qwen3"][0], is_embedding=True)
    graphs, _ = _breakable(runner)
    spy = SpyBackend(runner.attn_backend)
    runner.graph_runner = graphs
    fb = runner.build_batch(_ids([5, 9, 3], np.random.default_rng(0), runner.model_config.vocab_size))
    fb.attn_backend = spy
    plan = graphs.plan(fb)
    assert plan.bucket.num_tokens == 24 and plan.pad_tokens == 7
    with torch.inference_mode():
        hidden = graphs.replay(fb, runner.model.embed(fb), plan)
    assert hidden.shape[0] == 17
    assert spy.calls == [(17, 17, [5, 9, 3], 17)] * len(graphs.graphs[24].breaks)


def test_padding_rows_never_reach_real_rows(models):
    """Poisoned padding (NaN hidden rows and attention outputs) leaves the real rows exact."""
    runner = make_runner(models["bert"][0])
    graphs, _ = _breakable(runner)
    ids = _ids([3, 4], np.random.default_rng(1), runner.model_config.vocab_size)
    eager, _ = _eager_and_graph(runner, graphs, ids)
    load = StaticBatches.load_tokens

    def poisoned(self, fb, hidden, plan):
        load(self, fb, hidden, plan)
        self.hidden[plan.num_real_tokens : plan.bucket.num_tokens] = float("nan")
        graphs.buffers.out.fill_(float("nan"))

    graphs.static.load_tokens = types.MethodType(poisoned, graphs.static)
    runner.graph_runner = graphs
    assert np.abs(runner.embed(ids) - eager).max() <= 1e-5


def test_the_stand_in_catches_wiring_bugs(models):
    """A replay that forgets to refill the static hidden rows gets the previous batch's vectors:
    the CPU stand-in really re-runs captured ops on captured tensors."""
    runner = make_runner(models["bert"][0])
    graphs, _ = _breakable(runner)
    rng = np.random.default_rng(2)
    first, second = (_ids([6, 2], rng, runner.model_config.vocab_size) for _ in range(2))
    _, ok = _eager_and_graph(runner, graphs, first)
    runner.graph_runner = None
    eager = runner.embed(second)

    def forgetful(self, fb, hidden, plan):
        self.positions[: plan.num_real_tokens].copy_(fb.positions)

    graphs.static.load_tokens = types.MethodType(forgetful, graphs.static)
    runner.graph_runner = graphs
    wrong = runner.embed(second)
    assert np.abs(wrong - eager).max() > 1e-2 and np.abs(wrong - ok).max() <= 1e-5


def test_a_host_sync_inside_a_segment_fails_capture(models):
    runner = make_runner(models["bert"][0])
    run_layers = runner.model.run_layers

    def syncing(hidden, fb):
        if float(hidden.sum()) > 1e30:  # reads a device value on the host: illegal in capture
            pass
        return run_layers(hidden, fb)

    runner.model.run_layers = syncing
    with pytest.raises(RuntimeError, match="not allowed while capturing"):
        _breakable(runner)


def test_batches_that_do_not_fit_run_eagerly(models):
    runner = make_runner(models["bert"][0])
    graphs, capture = _breakable(runner, max_tokens=32, max_seqs=2)
    rng = np.random.default_rng(3)
    for seq_lens in ([20, 20], [2, 2, 2], [40]):
        ids = _ids(seq_lens, rng, runner.model_config.vocab_size)
        assert graphs.plan(runner.build_batch(ids)) is None
        eager, replayed = _eager_and_graph(runner, graphs, ids)
        assert np.array_equal(eager, replayed)
    assert capture.replays == 0


# ----- mode selection and flags -----
def _parse(*argv: str) -> ServerArgs:
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return ServerArgs.from_cli_args(parser.parse_args(list(argv)))


def test_cuda_graph_mode_flag():
    assert _parse().cuda_graph_mode == "breakable" and not _parse().disable_cuda_graph
    assert _parse("--cuda-graph-mode", "full").cuda_graph_mode == "full"
    off = _parse("--cuda-graph-mode", "off")
    assert off.cuda_graph_mode == "off" and off.disable_cuda_graph
    for argv in (["--disable-cuda-graph"], ["--disable-cuda-graph", "--cuda-graph-mode", "full"]):
        assert _parse(*argv).cuda_graph_mode == "off"  # SGLang's spelling wins
    assert ServerArgs(disable_cuda_graph=True).cuda_graph_mode == "off"
    with pytest.raises(ConfigError, match="cuda-graph-mode"):
        ServerArgs(cuda_graph_mode="piecewise")
    with pytest.raises(SystemExit):
        _parse("--cuda-graph-mode", "piecewise")


def test_model_runner_picks_the_runner_of_each_mode(models, monkeypatch):
    """On a CUDA device: breakable (any backend), full (only a graph-capable backend), off."""
    import sglang.srt.model_executor.breakable_graph_runner as bgr
    import sglang.srt.model_executor.cuda_graph_runner as cgr

    made = []
    monkeypatch.setattr(bgr, "BreakableGraphRunner", lambda *a, **k: made.append(("breakable", a, k)) or "bcg")
    monkeypatch.setattr(cgr, "CudaGraphRunner", lambda *a, **k: made.append(("full", a, k)) or "full")
    runner = make_runner(models["bert"][0])
    assert runner.graph_runner is None  # CPU: always eager
    runner.device = torch.device("cuda")  # only compared, never allocated on
    cases = [
        ("breakable", True, "bcg"),
        ("breakable", False, "bcg"),
        ("full", True, "full"),
        ("full", False, None),
        ("off", True, None),
    ]
    for mode, capable, expected in cases:
        runner.server_args.cuda_graph_mode = mode
        monkeypatch.setattr(type(runner.attn_backend), "supports_cuda_graph", capable)
        assert runner._capture_cuda_graphs() == expected, (mode, capable)
    assert [m for m, _, _ in made] == ["breakable", "breakable", "full"]
    _, args, kwargs = made[0]
    assert kwargs["warm_backend"] is runner.attn_backend and kwargs["max_tokens"] == 4096


def test_mpnet_position_bias_runs_eagerly_in_breakable_mode(tmp_path):
    from test.helpers.tiny_encoders import build_tiny_mpnet

    runner = make_runner(build_tiny_mpnet(str(tmp_path / "mpnet")))
    runner.device = torch.device("cuda")
    runner.server_args.cuda_graph_mode = "breakable"
    assert runner._capture_cuda_graphs() is None


def test_breakable_capture_refuses_a_position_bias(tmp_path):
    from test.helpers.tiny_encoders import build_tiny_mpnet

    runner = make_runner(build_tiny_mpnet(str(tmp_path / "mpnet")))
    with pytest.raises(RuntimeError, match="score bias"):
        _breakable(runner, max_tokens=8)


# ----- on a GPU -----
def _gpu_runner(mode: str, **kwargs):
    kwargs = {"device": "cuda", "dtype": "bfloat16", "attention_backend": "flashinfer", **kwargs}
    return make_runner(kwargs.pop("model_path", None), cuda_graph_mode=mode, **kwargs)


def _random_batches(rng, max_tokens: int, count: int, max_len: int) -> list[list[int]]:
    """Random batches of 1 to `max_tokens` tokens in all (log-uniform: every bucket size range),
    inputs of 1 to `max_len` tokens (the model's context)."""
    out = []
    for _ in range(count):
        total = int(np.exp(rng.uniform(0, np.log(max_tokens))))
        lens: list[int] = []
        while sum(lens) < total:
            lens.append(min(int(rng.integers(1, max_len + 1)), total - sum(lens)))
        out.append(lens)
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("model", ["minilm", "qwen3"])
def test_gpu_breakable_vs_eager_vs_full(model, tmp_path):
    path = None if model == "minilm" else build_tiny_qwen3(str(tmp_path / "qwen3"))
    extra = {"model_path": path, "cuda_graph_max_tokens": 4096, "cuda_graph_max_seqs": 64}
    if model == "qwen3":
        extra["is_embedding"] = True
    bcg, full, eager = (_gpu_runner(m, **extra) for m in ("breakable", "full", "off"))
    assert bcg.graph_runner.mode == "breakable" and full.graph_runner.mode == "full" and eager.graph_runner is None
    rng = np.random.default_rng(0)
    seen = set()
    vocab = min(20000, bcg.model_config.vocab_size)
    ctx = bcg.model_config.context_length
    fixed = [[ctx] * (4096 // ctx), [ctx] * (4095 // ctx) + [4095 % ctx], [30], [1]]
    for seq_lens in _random_batches(rng, 4096, 60, ctx) + fixed:
        ids = _ids(seq_lens, rng, vocab)
        plan = bcg.graph_runner.plan(bcg.build_batch(ids))
        if plan is not None:
            seen.add(plan.bucket.num_tokens)
        a, b, c = bcg.embed(ids), eager.embed(ids), full.embed(ids)
        assert cosine_rows(a, b).min() >= 0.9999, seq_lens
        assert cosine_rows(c, b).min() >= 0.9999, seq_lens
    assert len(seen) >= 10 and 4096 in seen


@pytest.mark.gpu
def test_gpu_breakable_every_bucket_with_sliding_window(tmp_path):
    path = build_tiny_gemma3(str(tmp_path / "gemma3"), sliding_window=6)
    bcg = _gpu_runner("breakable", model_path=path, cuda_graph_max_tokens=128, cuda_graph_max_seqs=8)
    eager = _gpu_runner("off", model_path=path)
    rng = np.random.default_rng(1)
    for bucket in token_buckets(128):  # the tiny Gemma's context
        seq_lens = _lengths_for(bucket, rng, max_tokens=128, max_seqs=8)
        ids = _ids(seq_lens, rng, bcg.model_config.vocab_size)
        plan = choose_bucket(seq_lens, bcg.graph_runner.buckets)
        assert plan is not None and plan.bucket.num_tokens == bucket
        assert cosine_rows(bcg.embed(ids), eager.embed(ids)).min() >= 0.9999, seq_lens


def test_image_text_text_tower_replays_in_pieces(tmp_path):
    """SigLIP's text batches take the breakable path through the text tower (bucket 128: 4 x 32)."""
    from sglang.srt.wire.io_struct import TokenizedEmbeddingReqInput
    from test.helpers.tiny_image_text import build_tiny_siglip

    runner = make_runner(build_tiny_siglip(str(tmp_path / "siglip")))
    graphs, capture = _breakable(runner, max_tokens=128)
    rng = np.random.default_rng(4)
    reqs = [
        TokenizedEmbeddingReqInput(rid=str(i), worker_id=0, input_ids=ids.astype(np.int32))
        for i, ids in enumerate(_ids([3, 7, 2, 5], rng, runner.model_config.vocab_size))
    ]
    runner.graph_runner = None
    eager = runner.run_requests(reqs).embeddings
    runner.graph_runner = graphs
    replayed = runner.run_requests(reqs).embeddings
    assert capture.replays == len(graphs.graphs[128].segments)
    assert np.abs(replayed - eager).max() <= 1e-5


def test_a_batch_on_another_backend_replays_with_that_backend(models):
    """Breakable graphs run attention on the batch's own backend: a ColBERT query-expansion batch
    (key_lens, on SDPA) replays too, keys limited as eagerly."""
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

    runner = make_runner(models["bert"][0])
    graphs, capture = _breakable(runner)
    ids = _ids([6, 9], np.random.default_rng(5), runner.model_config.vocab_size)
    out = {}
    for name, graph_runner in (("eager", None), ("graph", graphs)):
        runner.graph_runner = graph_runner
        fb = runner.build_batch(ids, key_lens=[4, None])
        fb.attn_backend = TorchNativeAttnBackend()
        with torch.inference_mode():
            out[name] = runner.hidden_states(fb).clone()
    assert capture.replays == len(graphs.graphs[16].segments)
    assert torch.allclose(out["graph"], out["eager"], atol=1e-5)
    full_keys = runner.build_batch(ids)
    runner.graph_runner = None
    with torch.inference_mode():
        assert not torch.allclose(runner.hidden_states(full_keys)[:6], out["eager"][:6], atol=1e-3)


@pytest.mark.parametrize("family", ["modernbert", "nomic_bert", "gme_text"])
def test_more_families_replay_in_pieces(family, tmp_path, request):
    """ModernBERT (local windows mixed with global layers), NomicBERT (rotary, SwiGLU) and
    Qwen2-VL's language model on text-only batches: breakable vs eager, float32, sampled buckets."""
    from test.helpers.tiny_encoders import build_tiny_modernbert, build_tiny_nomic_bert

    if family == "gme_text":
        runner = make_runner(request.getfixturevalue("gme_dir"), is_embedding=True)
    else:
        build = build_tiny_modernbert if family == "modernbert" else build_tiny_nomic_bert
        runner = make_runner(build(str(tmp_path / family)))
    graphs, capture = _breakable(runner)
    rng = np.random.default_rng(6)
    vocab = runner.model_config.vocab_size
    for bucket in (1, 8, 24, 48, 64):
        seq_lens = _lengths_for(bucket, rng)
        ids = _ids(seq_lens, rng, min(vocab, 60))
        before = capture.replays
        eager, replayed = _eager_and_graph(runner, graphs, ids)
        assert capture.replays - before == len(graphs.graphs[bucket].segments), seq_lens
        assert np.abs(replayed - eager).max() <= 1e-5, (bucket, seq_lens)
