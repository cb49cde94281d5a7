"""GPU tokens/s and latency: our engine with CUDA graphs, without, and transformers' AutoModel.

All three run in one process on the same weights and the same random token ids, so the ratios are
what to read. Models: the bundled all-MiniLM-L6-v2, and a random-weight model at
Qwen3-Embedding-0.6B's real shape (28 layers, hidden 1024, 16 q / 8 kv heads of 128). Workloads:
short (~32 tokens), long (~512) and mixed (8..512) inputs at several batch sizes. Each measurement
is the whole call a scheduler makes (token lists in, float32 vectors on the host out); for
transformers that is: pad, forward, pool, normalize, copy back.

    python benchmark/bench_gpu.py --out DIR            # table on stdout, DIR/bench_gpu.json
    python benchmark/bench_gpu.py precompile           # build FlashInfer's JIT kernels in parallel

benchmark/gpu_check.sh runs both on a GPU machine; docs/benchmarks.md keeps the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from typing import Callable

import numpy as np
import torch

sys.path[:0] = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")]

WORKLOADS = [  # (name, min length, max length, batch sizes)
    ("short", 24, 40, (1, 4, 8, 32, 128)),
    ("long", 448, 512, (1, 4, 8, 32)),
    ("mixed", 8, 512, (8, 32, 64)),
]
TARGET_GRAPH_OVER_EAGER = 2.0  # short inputs, batch <= 8
TARGET_OVER_HF_MIXED = 1.5

# Qwen3-Embedding-0.6B's config.json, minus the weights.
QWEN3_0_6B = dict(
    vocab_size=151669,
    hidden_size=1024,
    intermediate_size=3072,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    max_position_embeddings=32768,
    rms_norm_eps=1e-6,
    rope_theta=1000000.0,
    tie_word_embeddings=True,
    hidden_act="silu",
)
# (head_dim, causal window) of each FlashInfer kernel the GPU tests and this benchmark use.
JIT_VARIANTS = [(64, False), (64, True), (128, False)]


# ----- FlashInfer JIT warm-up -----
def _compile_variant(head_dim: int, window: bool) -> None:
    import flashinfer

    ws = torch.empty(16 << 20, dtype=torch.uint8, device="cuda")
    wrapper = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD", backend="fa2")
    indptr = torch.tensor([0, 4], dtype=torch.int32)
    wrapper.plan(
        indptr,
        indptr,
        1,
        1,
        head_dim,
        causal=window,
        window_left=1 if window else -1,
        q_data_type=torch.bfloat16,
        kv_data_type=torch.bfloat16,
    )
    x = torch.randn(4, 1, head_dim, dtype=torch.bfloat16, device="cuda")
    wrapper.run(x, x, x)
    if head_dim == 64 and not window:  # custom masks also need FlashInfer's bit-packing kernel
        flashinfer.segment_packbits(
            torch.ones(16, dtype=torch.bool, device="cuda"),
            torch.tensor([0, 16], dtype=torch.int32, device="cuda"),
            bitorder="little",
        )
    torch.cuda.synchronize()


def precompile() -> int:
    """Each variant in its own process, all at once: one module alone cannot keep 16 cores busy."""
    procs = [subprocess.Popen([sys.executable, __file__, "_compile", str(d), str(int(w))]) for d, w in JIT_VARIANTS]
    failed = [v for v, p in zip(JIT_VARIANTS, procs) if p.wait() != 0]
    print(f"precompiled {len(JIT_VARIANTS) - len(failed)}/{len(JIT_VARIANTS)} FlashInfer variants; failed: {failed}")
    return 1 if failed else 0


# ----- models -----
def build_qwen3_shape(out_dir: str, device: str = "cuda") -> torch.nn.Module:
    """Random Qwen3-0.6B-shaped weights saved the way Qwen3-Embedding ships them (bare Qwen3Model
    tensors, architectures ["Qwen3ForCausalLM"]); returns the transformers model for the baseline."""
    from transformers import Qwen3Config, Qwen3Model

    config = Qwen3Config(**QWEN3_0_6B)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3Model(config).to(torch.bfloat16).eval()
    model.config.architectures = ["Qwen3ForCausalLM"]
    model.save_pretrained(out_dir)
    return model


def hf_model(path: str) -> torch.nn.Module:
    from transformers import AutoModel

    return AutoModel.from_pretrained(path, dtype=torch.bfloat16, attn_implementation="sdpa").cuda().eval()


def hf_embed_fn(model: torch.nn.Module, pooling: str, pad_id: int) -> Callable[[list[np.ndarray]], np.ndarray]:
    """transformers on a right-padded batch, pooled and normalized like our engine."""

    @torch.inference_mode()
    def run(token_lists: list[np.ndarray]) -> np.ndarray:
        lens = torch.tensor([len(t) for t in token_lists])
        ids = torch.full((len(token_lists), int(lens.max())), pad_id, dtype=torch.long)
        for i, t in enumerate(token_lists):
            ids[i, : len(t)] = torch.from_numpy(t)
        mask = (torch.arange(ids.shape[1])[None, :] < lens[:, None]).long()
        hidden = model(input_ids=ids.cuda(), attention_mask=mask.cuda()).last_hidden_state
        if pooling == "mean":
            m = mask.cuda().unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * m).sum(1).float() / m.sum(1).float()
        else:  # lasttoken
            pooled = hidden[torch.arange(len(lens)), lens.cuda() - 1].float()
        return torch.nn.functional.normalize(pooled, dim=-1).cpu().numpy()

    return run


# ----- measurement -----
def batches(name: str, lo: int, hi: int, batch_size: int, vocab: int) -> list[np.ndarray]:
    rng = np.random.default_rng(zlib.crc32(f"{name}/{batch_size}".encode()))
    low = min(1000, vocab // 2)  # skip special tokens at the start of real vocabularies
    return [rng.integers(low, vocab, size=int(n)).astype(np.int64) for n in rng.integers(lo, hi + 1, size=batch_size)]


def timed(fn: Callable[[], object], budget_s: float = 0.3, max_iters: int = 50) -> float:
    """Median seconds per call after two warm-up calls."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < budget_s and len(times) < max_iters):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def cosine_min(a: np.ndarray, b: np.ndarray) -> float:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float((a * b).sum(1).min())


def bench_model(label: str, runner, hf: Callable, vocab: int) -> list[dict]:
    rows = []
    graph_runner = runner.graph_runner
    for name, lo, hi, sizes in WORKLOADS:
        for bs in sizes:
            ids = batches(name, lo, hi, bs, vocab)
            tokens = int(sum(len(t) for t in ids))
            row = {
                "model": label,
                "workload": name,
                "batch": bs,
                "tokens": tokens,
                "graph_fits": graph_runner is not None and graph_runner.plan(runner.build_batch(ids)) is not None,
            }
            runner.graph_runner = graph_runner
            ours = runner.embed(ids)
            row["graph_s"] = timed(lambda: runner.embed(ids))
            runner.graph_runner = None
            row["eager_s"] = timed(lambda: runner.embed(ids))
            runner.graph_runner = graph_runner
            row["hf_s"] = timed(lambda: hf(ids))
            row["cos_vs_hf"] = cosine_min(ours, hf(ids))
            for mode in ("graph", "eager", "hf"):
                row[f"{mode}_tok_s"] = tokens / row[f"{mode}_s"]
            row["graph_over_eager"] = row["eager_s"] / row["graph_s"]
            row["graph_over_hf"] = row["hf_s"] / row["graph_s"]
            rows.append(row)
            print(format_row(row), flush=True)
    return rows


HEADER = (
    f"{'model':<14}{'load':<7}{'bs':>4}{'tokens':>8}{'graph':>6} {'graph ms':>9}{'eager ms':>9}"
    f"{'hf ms':>9} {'graph tok/s':>12}{'eager tok/s':>12}{'hf tok/s':>12} {'g/eager':>8}{'g/hf':>6}{'cos':>8}"
)


def format_row(r: dict) -> str:
    return (
        f"{r['model']:<14}{r['workload']:<7}{r['batch']:>4}{r['tokens']:>8}{'yes' if r['graph_fits'] else 'no':>6} "
        f"{r['graph_s'] * 1e3:>9.2f}{r['eager_s'] * 1e3:>9.2f}{r['hf_s'] * 1e3:>9.2f} "
        f"{r['graph_tok_s']:>12,.0f}{r['eager_tok_s']:>12,.0f}{r['hf_tok_s']:>12,.0f} "
        f"{r['graph_over_eager']:>7.2f}x{r['graph_over_hf']:>5.2f}x{r['cos_vs_hf']:>8.4f}"
    )


def targets(rows: list[dict]) -> dict:
    out = {}
    for model in dict.fromkeys(r["model"] for r in rows):
        short = [
            r["graph_over_eager"] for r in rows if r["model"] == model and r["workload"] == "short" and r["batch"] <= 8
        ]
        mixed = [r["graph_over_hf"] for r in rows if r["model"] == model and r["workload"] == "mixed"]
        out[model] = {
            "graph_over_eager_short_bs_le_8_min": min(short, default=None),
            "graph_over_eager_target": TARGET_GRAPH_OVER_EAGER,
            "graph_over_eager_met": bool(short) and min(short) >= TARGET_GRAPH_OVER_EAGER,
            "over_hf_mixed_min": min(mixed, default=None),
            "over_hf_target": TARGET_OVER_HF_MIXED,
            "over_hf_met": bool(mixed) and min(mixed) >= TARGET_OVER_HF_MIXED,
        }
    return out


def main_bench(out_dir: str) -> int:
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.server_args import ServerArgs

    os.makedirs(out_dir, exist_ok=True)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": [], "errors": {}}
    print(HEADER, flush=True)

    def run(label: str, make: Callable[[], tuple]) -> None:
        try:
            start = time.perf_counter()
            runner, hf, vocab = make()
            result.setdefault("startup_s", {})[label] = time.perf_counter() - start
            result["rows"] += bench_model(label, runner, hf, vocab)
            del runner, hf
            torch.cuda.empty_cache()
        except Exception as e:  # one model failing must not lose the other's numbers
            result["errors"][label] = f"{type(e).__name__}: {e}"
            print(f"{label}: FAILED: {result['errors'][label]}", flush=True)

    def minilm():
        runner = ModelRunner(ServerArgs(device="cuda", dtype="bfloat16"))
        model = hf_model(runner.model_config.model_path)
        return runner, hf_embed_fn(model, runner.model_config.pooling, 0), runner.model_config.vocab_size

    def qwen3():
        path = tempfile.mkdtemp(prefix="qwen3-0.6b-shape-")
        model = build_qwen3_shape(path)
        runner = ModelRunner(
            ServerArgs(model_path=path, is_embedding=True, dtype="bfloat16", device="cuda", context_length=2048)
        )
        return runner, hf_embed_fn(model, "lasttoken", 0), QWEN3_0_6B["vocab_size"]

    run("all-MiniLM-L6", minilm)
    run("qwen3-0.6b-rand", qwen3)
    result["targets"] = targets(result["rows"])
    result["max_memory_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
    path = os.path.join(out_dir, "bench_gpu.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result["targets"], indent=1))
    print(f"wrote {path}")
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_compile":
        _compile_variant(int(sys.argv[2]), bool(int(sys.argv[3])))
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", default="bench", choices=["bench", "precompile"])
    parser.add_argument("--out", default="benchmark/results", help="directory for bench_gpu.json")
    args = parser.parse_args()
    sys.exit(precompile() if args.command == "precompile" else main_bench(args.out))
