"""CUDA-graph buckets, padding and replay.

On CPU: the bucket schedule, padding plans, the static buffers, and the whole capture/replay flow
with a graph that re-runs its function (and the FlashInfer stand-in in its CUDA-graph mode), checked
against the eager model. On a GPU: real graphs and FlashInfer against eager and torch_native.
"""

from __future__ import annotations

import copy
import types

import numpy as np
import pytest
import torch
from torch import nn

from sglang.srt.layers.attention.layer import AttentionLayer
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from sglang.srt.model_executor.cuda_graph_runner import CudaGraphRunner, StaticBatches
from sglang.srt.model_executor.forward_batch import ForwardBatch
from sglang.srt.model_executor.graph_padding import (
    MAX_PADDING_RATIO,
    GraphBucket,
    PaddingPlan,
    choose_bucket,
    graph_buckets,
    token_buckets,
)
from test.helpers import fake_flashinfer
from test.helpers.parity import cosine_rows, make_runner
from test.helpers.tiny_models import build_tiny_bert, build_tiny_qwen3

MIXED = [[7], [3, 9, 1], [16], [5, 5, 5, 5], [40], [2, 30], [1], [12, 1, 1]]


def _ids(seq_lens, seed=0, vocab=60):
    rng = np.random.default_rng(seed)
    return [rng.integers(5, vocab, size=n).astype(np.int64) for n in seq_lens]


# ----- bucket schedule and padding plans -----
def test_token_buckets_schedule():
    assert token_buckets(4096)[:9] == [1, 2, 4, 8, 16, 24, 32, 48, 64]
    assert token_buckets(4096)[-3:] == [2048, 3072, 4096]
    assert token_buckets(100) == [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 100]
    assert token_buckets(5) == [1, 2, 4, 5] and token_buckets(1) == [1]
    for max_tokens in (1, 7, 16, 100, 1000, 4096, 5000):
        b = token_buckets(max_tokens)
        assert b == sorted(set(b)) and b[-1] == max_tokens
        ratios = [hi / lo for lo, hi in zip(b, b[1:])]
        assert max(ratios, default=1) <= 2
        assert all(r <= 1.5 for lo, r in zip(b, ratios) if lo >= 16)
    with pytest.raises(ValueError):
        token_buckets(0)


def test_graph_buckets_bound_sequences_per_bucket():
    buckets = graph_buckets(64, max_seqs=8)
    assert [(b.num_tokens, b.num_seqs) for b in buckets[:5]] == [(1, 2), (2, 3), (4, 5), (8, 9), (16, 9)]
    assert all(b.max_real_seqs == min(8, b.num_tokens) for b in buckets)


def test_choose_bucket_pads_with_one_dummy_sequence():
    buckets = graph_buckets(64, max_seqs=4)
    plan = choose_bucket([5, 9, 3], buckets)
    assert plan == PaddingPlan(GraphBucket(24, 5), 17, 3)
    assert plan.pad_tokens == 7
    assert plan.padded_seq_lens([5, 9, 3]) == [5, 9, 3, 7, 0]
    exact = choose_bucket([10, 6], buckets)  # fills the bucket: the dummy sequence is empty
    assert exact.bucket.num_tokens == 16 and exact.padded_seq_lens([10, 6]) == [10, 6, 0, 0, 0]
    single = choose_bucket([1], buckets)
    assert single.bucket == GraphBucket(1, 2) and single.padded_seq_lens([1]) == [1, 0]


def test_choose_bucket_runs_eagerly_when_it_must():
    buckets = graph_buckets(64, max_seqs=4)
    assert choose_bucket([60, 5], buckets) is None  # more tokens than the largest bucket
    assert choose_bucket([1] * 5, buckets) is None  # more inputs than any bucket takes
    assert choose_bucket([], buckets) is None
    # Three one-token inputs need 4 slots: bucket 4 (5 slots), padding 4/3.
    assert choose_bucket([1, 1, 1], buckets).bucket.num_tokens == 4
    # Seven short inputs with few slots per bucket would need a bucket more than twice their size.
    sparse = [GraphBucket(8, 3), GraphBucket(64, 9)]
    assert choose_bucket([1] * 7, sparse) is None
    assert choose_bucket([4] * 7, sparse) is None  # 28 tokens: 64 is more than twice that
    assert choose_bucket([5] * 7, sparse).bucket.num_tokens == 64
    for seq_lens in MIXED:
        plan = choose_bucket(seq_lens, graph_buckets(64, 4))
        if plan is not None:
            assert plan.bucket.num_tokens <= MAX_PADDING_RATIO * sum(seq_lens)
            assert sum(plan.padded_seq_lens(seq_lens)) == plan.bucket.num_tokens


def test_gpu_flags_parse_and_validate():
    import argparse

    from sglang.srt.errors import ConfigError
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    args = ServerArgs.from_cli_args(
        parser.parse_args(
            [
                "--cuda-graph-max-tokens",
                "512",
                "--cuda-graph-max-seqs",
                "8",
                "--mem-fraction-static",
                "0.5",
                "--disable-cuda-graph",
            ]
        )
    )
    assert (args.cuda_graph_max_tokens, args.cuda_graph_max_seqs, args.mem_fraction_static) == (512, 8, 0.5)
    assert args.disable_cuda_graph
    for bad in (
        {"mem_fraction_static": 0.0},
        {"mem_fraction_static": 1.5},
        {"cuda_graph_max_seqs": 0},
        {"cuda_graph_max_tokens": 0},
    ):
        with pytest.raises(ConfigError):
            ServerArgs(**bad)


# ----- static buffers -----
def test_static_batches_load_pads_in_place():
    buckets = graph_buckets(32, max_seqs=4)
    static = StaticBatches(buckets, 6, torch.float32, torch.device("cpu"), TorchNativeAttnBackend())
    fb = ForwardBatch.from_token_lists(_ids([3, 2]), "cpu")
    hidden = torch.randn(5, 6)
    static.hidden.fill_(7.0)  # stale values from an earlier replay
    plan = choose_bucket([3, 2], buckets)
    sfb = static.load(fb, hidden, plan)
    assert plan.bucket.num_tokens == 8 and sfb is static.batches[8]
    assert sfb.input_ids.data_ptr() == static.input_ids.data_ptr()  # views of the shared buffers
    assert torch.equal(static.hidden[:5], hidden) and not static.hidden[5:8].any()
    assert sfb.positions.tolist() == [0, 1, 2, 0, 1, 0, 0, 0]
    assert sfb.seq_ids.tolist() == [0, 0, 0, 1, 1, 2, 2, 2]
    assert sfb.seq_lens.tolist() == [3, 2, 3, 0, 0] and sfb.seq_lens_cpu == [3, 2, 3, 0, 0]
    assert sfb.cu_seqlens.tolist() == [0, 3, 5, 8, 8, 8] and sfb.max_seqlen == 3
    assert sfb.input_ids[:5].tolist() == fb.input_ids.tolist()


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    return build_tiny_bert(str(tmp_path_factory.mktemp("bert")), st_pooling="mean")


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory):
    return build_tiny_qwen3(str(tmp_path_factory.mktemp("qwen3")))


def _runner(path: str, **kwargs):
    kwargs.setdefault("is_embedding", "qwen3" in path)
    return make_runner(path, **kwargs)


@pytest.mark.parametrize("model", ["tiny_bert", "tiny_qwen3"])
def test_padding_never_changes_real_rows(model, request):
    """run_layers on the padded static batch, sliced back, equals run_layers on the real batch."""
    runner = _runner(request.getfixturevalue(model))
    buckets = graph_buckets(64, max_seqs=4)
    backend = runner.attn_backend
    static = StaticBatches(buckets, runner.model_config.hidden_size, torch.float32, torch.device("cpu"), backend)
    with torch.inference_mode():
        for i, seq_lens in enumerate(MIXED):
            plan = choose_bucket(seq_lens, buckets)
            if plan is None:
                continue
            fb = runner.build_batch(_ids(seq_lens, seed=i))
            backend.init_forward_metadata(fb)
            hidden = runner.model.embed(fb)
            expected = runner.model.run_layers(hidden, fb)
            sfb = static.load(fb, hidden, plan)
            backend.init_forward_metadata(sfb)
            padded = runner.model.run_layers(static.hidden_for(plan.bucket), sfb)
            assert padded.shape[0] == plan.bucket.num_tokens
            assert torch.allclose(padded[: plan.num_real_tokens], expected, atol=1e-5), seq_lens


# ----- capture and replay on CPU -----
class RerunGraph:
    """Stands in for torch.cuda.CUDAGraph: replay() re-runs the captured function and rewrites the
    output tensor captured at the start, which is what a real replay does to its static output."""

    def __init__(self, fn):
        self.fn, self.replays = fn, 0
        self.out = fn()

    def replay(self):
        self.out.copy_(self.fn())
        self.replays += 1


def rerun_capture(fn):
    graph = RerunGraph(fn)
    return graph, graph.out


def _graph_runner(monkeypatch, runner, max_tokens=64, max_seqs=4):
    fake_flashinfer.install(monkeypatch)
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend

    backend = FlashInferAttnBackend(types.SimpleNamespace(dtype=torch.float32), torch.device("cpu"))
    backend.bind_layers([m for m in runner.model.modules() if isinstance(m, AttentionLayer)])
    return CudaGraphRunner(
        runner.model,
        backend,
        runner.model_config.hidden_size,
        torch.float32,
        torch.device("cpu"),
        max_tokens,
        max_seqs,
        capture_fn=rerun_capture,
        show_progress=False,
    )


def _replays(graph_runner) -> int:
    return sum(g.replays for g in graph_runner.graphs.values())


@pytest.mark.parametrize("model", ["tiny_bert", "tiny_qwen3"])
def test_replay_matches_eager(monkeypatch, model, request):
    runner = _runner(request.getfixturevalue(model))
    graph_runner = _graph_runner(monkeypatch, runner)
    assert sorted(graph_runner.graphs) == token_buckets(64)
    for i, seq_lens in enumerate(MIXED + [[64], [33, 31]]):
        ids = _ids(seq_lens, seed=i)
        runner.graph_runner = None
        eager = runner.embed(ids)
        runner.graph_runner = graph_runner
        before = _replays(graph_runner)
        replayed = runner.embed(ids)
        assert _replays(graph_runner) == before + (graph_runner.plan(runner.build_batch(ids)) is not None)
        assert np.abs(replayed - eager).max() <= 1e-5, seq_lens
    assert _replays(graph_runner) >= len(MIXED)


def test_batches_that_do_not_fit_run_eagerly(monkeypatch, tiny_bert):
    runner = _runner(tiny_bert)
    graph_runner = _graph_runner(monkeypatch, runner, max_tokens=32, max_seqs=2)
    runner.graph_runner = None
    cases = {"larger than the largest bucket": [20, 20], "more inputs than slots": [2, 2, 2]}
    expected = {name: runner.embed(_ids(lens)) for name, lens in cases.items()}
    runner.graph_runner = graph_runner
    for name, lens in cases.items():
        assert graph_runner.plan(runner.build_batch(_ids(lens))) is None, name
        assert np.abs(runner.embed(_ids(lens)) - expected[name]).max() <= 1e-6, name
    assert _replays(graph_runner) == 0


class WindowedAttentionStack(nn.Module):
    """Attention-only layers with every mask kind one model may mix (as EmbeddingGemma does)."""

    def __init__(self, heads=2, head_dim=16, vocab=64):
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        self.embed_tokens = nn.Embedding(vocab, heads * head_dim)
        self.layers = nn.ModuleList(
            [
                AttentionLayer(heads, head_dim, causal=False),
                AttentionLayer(heads, head_dim, causal=False, sliding_window=3),
                AttentionLayer(heads, head_dim, heads // 2, causal=True, sliding_window=4),
                AttentionLayer(heads, head_dim, causal=False, sliding_window=6),
            ]
        )

    def embed(self, fb):
        return self.embed_tokens(fb.input_ids)

    def run_layers(self, hidden, fb):
        for layer in self.layers:
            kv = hidden[:, : layer.num_kv_heads * self.head_dim]
            hidden = hidden + layer(hidden, kv, kv.flip(-1), fb)
        return hidden

    def forward(self, fb):
        return self.run_layers(self.embed(fb), fb)


def _stack_forward(model, backend, seq_lens, seed, device="cpu"):
    fb = ForwardBatch.from_token_lists(_ids(seq_lens, seed), device, attn_backend=backend)
    return model(fb)


def test_replay_with_window_masks_matches_eager(monkeypatch):
    torch.manual_seed(0)
    model = WindowedAttentionStack().eval()
    fake_flashinfer.install(monkeypatch)
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend

    backend = FlashInferAttnBackend(types.SimpleNamespace(dtype=torch.float32), torch.device("cpu"))
    backend.bind_layers(list(model.layers))
    graph_runner = CudaGraphRunner(
        model, backend, 32, torch.float32, torch.device("cpu"), 64, 4, capture_fn=rerun_capture, show_progress=False
    )
    with torch.inference_mode():
        for i, seq_lens in enumerate(MIXED):
            eager = _stack_forward(model, TorchNativeAttnBackend(), seq_lens, i)
            fb = ForwardBatch.from_token_lists(_ids(seq_lens, i), "cpu")
            plan = graph_runner.plan(fb)
            if plan is None:
                continue
            replayed = graph_runner.replay(fb, model.embed(fb), plan)
            assert torch.allclose(replayed, eager, rtol=1e-5, atol=1e-4), seq_lens


# ----- on a GPU -----
def _gpu_runner(**kwargs):
    """These GPU tests are about the whole-graph runner: --cuda-graph-mode full (breakable, the
    default, is tested in test_breakable_graph_runner.py)."""
    kwargs = {"device": "cuda", "dtype": "bfloat16", "cuda_graph_mode": "full", **kwargs}
    return make_runner(kwargs.pop("model_path", None), **kwargs)


def _texts_ids(seq_lens, seed):
    return _ids(seq_lens, seed, vocab=20000)


@pytest.mark.gpu
def test_gpu_flashinfer_matches_torch_native_on_minilm():
    fi = _gpu_runner(attention_backend="flashinfer", disable_cuda_graph=True)
    tn = _gpu_runner(attention_backend="torch_native")
    assert fi.attn_backend.name == "flashinfer" and fi.graph_runner is None
    for i, seq_lens in enumerate([[12], [5, 40, 7, 128, 1], [256] * 4]):
        ids = _texts_ids(seq_lens, i)
        assert cosine_rows(fi.embed(ids), tn.embed(ids)).min() >= 0.9999, seq_lens


@pytest.mark.gpu
def test_gpu_graph_replay_matches_eager_on_minilm_mixed_batches():
    runner = _gpu_runner(attention_backend="flashinfer", cuda_graph_max_tokens=512, cuda_graph_max_seqs=16)
    graph_runner = runner.graph_runner
    assert graph_runner is not None
    for i, seq_lens in enumerate(MIXED + [[32] * 8, [100, 3, 250, 17]]):
        ids = _texts_ids(seq_lens, i)
        assert graph_runner.plan(runner.build_batch(ids)) is not None, seq_lens
        replayed = runner.embed(ids)
        runner.graph_runner = None
        eager = runner.embed(ids)
        runner.graph_runner = graph_runner
        assert np.array_equal(replayed, eager) or cosine_rows(replayed, eager).min() >= 0.99999, seq_lens


@pytest.mark.gpu
def test_gpu_batch_larger_than_biggest_bucket_runs_eagerly():
    runner = _gpu_runner(attention_backend="flashinfer", cuda_graph_max_tokens=64, cuda_graph_max_seqs=4)
    ref = _gpu_runner(attention_backend="torch_native")
    for seq_lens in ([100], [40, 40], [3] * 6):
        ids = _texts_ids(seq_lens, 1)
        assert runner.graph_runner.plan(runner.build_batch(ids)) is None
        assert cosine_rows(runner.embed(ids), ref.embed(ids)).min() >= 0.9999


@pytest.mark.gpu
def test_gpu_tiny_decoder_flashinfer_and_graphs(tiny_qwen3):
    fi = _gpu_runner(
        model_path=tiny_qwen3,
        is_embedding=True,
        attention_backend="flashinfer",
        cuda_graph_max_tokens=256,
        cuda_graph_max_seqs=8,
    )
    tn = _gpu_runner(model_path=tiny_qwen3, is_embedding=True, attention_backend="torch_native")
    graph_runner = fi.graph_runner
    for i, seq_lens in enumerate(MIXED):
        ids = _ids(seq_lens, i)
        replayed = fi.embed(ids)
        fi.graph_runner = None
        eager = fi.embed(ids)
        fi.graph_runner = graph_runner
        assert cosine_rows(eager, tn.embed(ids)).min() >= 0.9999, seq_lens
        assert np.array_equal(replayed, eager) or cosine_rows(replayed, eager).min() >= 0.99999, seq_lens


@pytest.mark.gpu
def test_gpu_window_masks_under_graphs():
    """Causal windows (window_left) and bidirectional windows (custom masks) in captured graphs."""
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend

    device = torch.device("cuda")
    torch.manual_seed(0)
    reference = WindowedAttentionStack(heads=4, head_dim=64).to(device).eval()
    model = copy.deepcopy(reference).to(torch.bfloat16)  # never converted after capture
    backend = FlashInferAttnBackend(types.SimpleNamespace(dtype=torch.bfloat16), device)
    backend.bind_layers(list(model.layers))
    graph_runner = CudaGraphRunner(model, backend, 256, torch.bfloat16, device, 128, 8, show_progress=False)
    with torch.inference_mode():
        for i, seq_lens in enumerate(MIXED):
            ref = _stack_forward(reference, TorchNativeAttnBackend(), seq_lens, i, device)
            fb = ForwardBatch.from_token_lists(_ids(seq_lens, i), device)
            eager_fb = ForwardBatch.from_token_lists(_ids(seq_lens, i), device, attn_backend=backend)
            eager = model(eager_fb).float()
            replayed = graph_runner.replay(fb, model.embed(fb), graph_runner.plan(fb)).float()
            assert torch.nn.functional.cosine_similarity(eager, ref, dim=-1).min() >= 0.999, seq_lens
            assert torch.nn.functional.cosine_similarity(replayed, eager, dim=-1).min() >= 0.9999, seq_lens


def test_image_text_models_replay_their_text_tower(monkeypatch, tmp_path):
    """SigLIP's text batches (padded to the text tower's positions) take the graph path of the
    text tower's run_layers and give the eager vectors (CLIP's text tower is the same code, causal)."""
    from sglang.srt.wire.io_struct import TokenizedEmbeddingReqInput
    from test.helpers.tiny_image_text import build_tiny_siglip

    path = build_tiny_siglip(str(tmp_path / "siglip"))
    runner = make_runner(path)
    graph_runner = _graph_runner(monkeypatch, runner, max_tokens=128)  # 4 SigLIP texts: 4 x 32 tokens
    reqs = [
        TokenizedEmbeddingReqInput(rid=str(i), worker_id=0, input_ids=ids.astype(np.int32))
        for i, ids in enumerate(_ids([3, 7, 2, 5], seed=1, vocab=runner.model_config.vocab_size))
    ]
    runner.graph_runner = None
    eager = runner.run_requests(reqs).embeddings
    runner.graph_runner = graph_runner
    replayed = runner.run_requests(reqs).embeddings
    assert _replays(graph_runner) == 1
    assert np.abs(replayed - eager).max() <= 1e-5
