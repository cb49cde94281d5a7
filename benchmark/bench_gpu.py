"""GPU throughput and latency: our engine with breakable graphs, full graphs and eagerly, and
transformers' AutoModel, in one process on the same weights and random token ids.

Models: the bundled all-MiniLM-L6-v2, and random weights at BERT-base's shape (12 layers of 12
heads of 64) and Qwen3-Embedding-0.6B's (28 layers, 16 q / 8 kv heads of 128). Workloads: short
(16-32 tokens) and long (512 tokens) inputs at several batch sizes. Each measurement is the whole
call a scheduler makes (token lists in, float32 vectors on the host out): median seconds per call
(the p50 latency of a batch), tokens/s and inputs/s. Also: GPU memory after each model's capture.

Targets it prints against (docs/gpu.md): BERT-base 512-token inputs >= 600k tokens/s on an H200;
short inputs >= 3,200 requests/s on the Qwen3-0.6B shape; graphs >= 2x eager for batches of under
64 short inputs. Parity is the parity stage's job (gpu_parity.py); this one fails on errors.

    python benchmark/bench_gpu.py bench --out DIR [--device cuda|cpu] [--small]
    python benchmark/bench_gpu.py precompile [--device cuda|cpu]   # FlashInfer's JIT variants

benchmark/gpu_check.sh runs both; --device cpu --small is its rehearsal (FlashInfer's stand-in).
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
from typing import Callable, Optional

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "python"), os.path.join(HERE, ".."), HERE]

WORKLOADS = [("short", 16, 32, (1, 8, 32, 128)), ("long", 512, 512, (1, 8, 32))]  # name, min, max len, batches
SMALL_WORKLOADS = [("short", 16, 32, (1, 4)), ("long", 128, 128, (1, 2))]
TARGETS = {
    "bert_base_long_tok_s": 600_000,  # BERT-base shape, 512-token inputs, best batch
    "qwen3_short_req_s": 3_200,  # Qwen3-0.6B shape, 16-32 tokens, best batch
    "graphs_over_eager_short_lt_64": 2.0,  # every short batch of under 64 inputs
}
BERT_BASE = dict(
    hidden_size=768,
    intermediate_size=3072,
    num_hidden_layers=12,
    num_attention_heads=12,
    vocab_size=30522,
    max_position_embeddings=512,
)
# (head_dim as planned, sliding window via window_left) of each FlashInfer prefill module the engine
# builds: MiniLM's 32 is padded to 64, BERT-base 64, Qwen3 128, EmbeddingGemma 256; causal windows
# (Mistral, Qwen2) use window_left; bidirectional windows (EmbeddingGemma, ModernBERT) use a
# custom mask, which every module includes (mask mode is a run-time choice inside one module).
JIT_VARIANTS = [(64, False), (64, True), (128, False), (128, True), (256, False)]


# ----- FlashInfer JIT warm-up -----
def _compile_variant(head_dim: int, window: bool, device: str) -> None:
    """Plan and run the variant once: on CUDA that compiles it; on CPU the stand-in checks the call."""
    import flashinfer

    ws = torch.empty(16 << 20 if device == "cuda" else 8, dtype=torch.uint8, device=device)
    wrapper = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD", backend="fa2")
    indptr = torch.tensor([0, 4], dtype=torch.int32)
    kinds = [{"causal": window, "window_left": 1 if window else -1}]
    if not window:  # the custom-mask path (bit-packed on the GPU) of bidirectional windows
        kinds.append({"custom_mask": torch.ones(16, dtype=torch.bool, device=device)})
    for kw in kinds:
        if "custom_mask" in kw:
            indptr = indptr.to(device)
        wrapper.plan(indptr, indptr, 3, 1, head_dim, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16, **kw)
        q = torch.randn(4, 3, head_dim, dtype=torch.bfloat16, device=device)
        kv = torch.randn(4, 1, head_dim, dtype=torch.bfloat16, device=device)
        assert wrapper.run(q, kv, kv).shape == q.shape
    if device == "cuda":
        torch.cuda.synchronize()


def precompile(device: str) -> int:
    """Each variant in its own process, all at once: one module alone cannot keep 16 cores busy."""
    env = {**os.environ, "MAX_JOBS": os.environ.get("MAX_JOBS", str(max(2, (os.cpu_count() or 8) // 5)))}
    cmd = [sys.executable, __file__, "_compile", "--device", device]
    procs = [subprocess.Popen([*cmd, str(d), str(int(w))], env=env) for d, w in JIT_VARIANTS]
    failed = [v for v, p in zip(JIT_VARIANTS, procs) if p.wait() != 0]
    print(f"precompiled {len(JIT_VARIANTS) - len(failed)}/{len(JIT_VARIANTS)} FlashInfer variants; failed: {failed}")
    return 1 if failed else 0


# ----- models -----
def build_bert_base(out_dir: str, small: bool) -> str:
    from transformers import BertConfig, BertModel

    shape = {**BERT_BASE, **(dict(num_hidden_layers=2, vocab_size=2000) if small else {})}
    torch.manual_seed(0)
    model = BertModel(BertConfig(**shape), add_pooling_layer=False).eval()
    model.config.architectures = ["BertModel"]
    model.save_pretrained(out_dir)
    return out_dir


def hf_embed_fn(path: str, pooling: str, device: str, dtype: torch.dtype) -> Callable[[list[np.ndarray]], np.ndarray]:
    """transformers on a right-padded batch (SDPA), pooled and normalized like our engine."""
    from transformers import AutoModel

    model = AutoModel.from_pretrained(path, dtype=dtype, attn_implementation="sdpa").to(device).eval()

    @torch.inference_mode()
    def run(token_lists: list[np.ndarray]) -> np.ndarray:
        lens = torch.tensor([len(t) for t in token_lists])
        ids = torch.zeros((len(token_lists), int(lens.max())), dtype=torch.long)
        for i, t in enumerate(token_lists):
            ids[i, : len(t)] = torch.from_numpy(t)
        mask = (torch.arange(ids.shape[1])[None, :] < lens[:, None]).long().to(device)
        hidden = model(input_ids=ids.to(device), attention_mask=mask).last_hidden_state
        if pooling == "lasttoken":
            pooled = hidden[torch.arange(len(lens)), lens.to(device) - 1].float()
        else:
            m = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * m).sum(1).float() / m.sum(1).float()
        return torch.nn.functional.normalize(pooled, dim=-1).cpu().numpy()

    return run


# ----- measurement -----
def batch_of(name: str, lo: int, hi: int, batch_size: int, vocab: int) -> list[np.ndarray]:
    rng = np.random.default_rng(zlib.crc32(f"{name}/{batch_size}".encode()))
    low = min(1000, vocab // 2)  # skip special tokens at the start of real vocabularies
    return [rng.integers(low, vocab, size=int(n)).astype(np.int64) for n in rng.integers(lo, hi + 1, size=batch_size)]


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn: Callable[[], object], device: str, budget_s: float, max_iters: int = 50) -> float:
    """Median seconds per call (the p50 latency of this batch) after two warm-up calls."""
    for _ in range(2):
        fn()
    sync(device)
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < budget_s and len(times) < max_iters):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_model(label: str, runner, modes: dict, hf: Callable, device: str, small: bool) -> list[dict]:
    rows = []
    vocab = runner.model_config.vocab_size
    for name, lo, hi, sizes in SMALL_WORKLOADS if small else WORKLOADS:
        for bs in sizes:
            ids = batch_of(name, lo, hi, bs, vocab)
            tokens = int(sum(len(t) for t in ids))
            row: dict = {"model": label, "workload": name, "batch": bs, "tokens": tokens}
            for mode, graphs in {**modes, "hf": None}.items():
                runner.graph_runner = graphs
                fn = (lambda: hf(ids)) if mode == "hf" else (lambda: runner.embed(ids))
                if graphs is not None:
                    row[f"{mode}_replays"] = graphs.plan(runner.build_batch(ids)) is not None
                secs = timed(fn, device, budget_s=0.05 if small else 0.3)
                row[mode] = {"p50_ms": secs * 1e3, "tok_s": tokens / secs, "req_s": bs / secs}
            row["graphs_over_eager"] = row["off"]["p50_ms"] / row["breakable"]["p50_ms"]
            rows.append(row)
            print(format_row(row), flush=True)
    return rows


def format_row(r: dict) -> str:
    parts = [f"{r['model']:<16}{r['workload']:<6}{r['batch']:>4}{r['tokens']:>7}"]
    for mode in ("breakable", "full", "off", "hf"):
        if mode in r:
            parts.append(
                f"{mode} {r[mode]['p50_ms']:8.2f} ms {r[mode]['tok_s']:>10,.0f} tok/s {r[mode]['req_s']:>8,.0f} req/s"
            )
    return " | ".join(parts) + f" | graphs/eager {r['graphs_over_eager']:.2f}x"


def best(rows: list[dict], model: str, workload: str, key: str) -> Optional[float]:
    vals = [
        r[m][key]
        for r in rows
        if r["model"] == model and r["workload"] == workload
        for m in ("breakable", "full")
        if m in r
    ]
    return max(vals, default=None)


def targets(rows: list[dict]) -> dict:
    bert = best(rows, "bert-base-shape", "long", "tok_s")
    qwen = best(rows, "qwen3-0.6b-shape", "short", "req_s")
    ratio = min((r["graphs_over_eager"] for r in rows if r["workload"] == "short" and r["batch"] < 64), default=None)
    out = {}
    for key, value in (
        ("bert_base_long_tok_s", bert),
        ("qwen3_short_req_s", qwen),
        ("graphs_over_eager_short_lt_64", ratio),
    ):
        out[key] = {"measured": value, "target": TARGETS[key], "met": value is not None and value >= TARGETS[key]}
    return out


def main_bench(out_dir: str, device: str, small: bool, models_dir: Optional[str]) -> int:
    from gpu_parity import build_random, graph_runners

    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.server_args import ServerArgs, default_model_path

    os.makedirs(out_dir, exist_ok=True)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu (rehearsal)"
    result: dict = {"device": name, "torch": torch.__version__, "rows": [], "errors": {}, "memory_after_capture": {}}
    tmp = models_dir or tempfile.mkdtemp(prefix="bench-gpu-")
    max_tokens = 4096 if device == "cuda" else 256

    def run(label: str, path: str, **extra) -> None:
        try:
            start = time.perf_counter()
            args = ServerArgs(
                model_path=path,
                device=device,
                dtype=str(dtype).split(".")[-1],
                cuda_graph_max_tokens=max_tokens,
                **extra,
            )
            runner = ModelRunner(args)
            modes = graph_runners(runner, device, max_tokens, args.cuda_graph_max_seqs)
            if device == "cuda":
                torch.cuda.synchronize()
                result["memory_after_capture"][label] = {
                    "allocated_gib": torch.cuda.memory_allocated() / 2**30,
                    "reserved_gib": torch.cuda.memory_reserved() / 2**30,
                }
            result.setdefault("startup_s", {})[label] = time.perf_counter() - start
            hf = hf_embed_fn(path, runner.model_config.pooling, device, dtype)
            result["rows"] += bench_model(label, runner, modes, hf, device, small)
            del runner, modes, hf
            if device == "cuda":
                torch.cuda.empty_cache()
        except Exception as e:  # one model failing must not lose the others' numbers
            result["errors"][label] = f"{type(e).__name__}: {e}"
            print(f"{label}: FAILED: {result['errors'][label]}", flush=True)

    run("all-MiniLM-L6", default_model_path())
    run("bert-base-shape", build_bert_base(os.path.join(tmp, "bert-small" if small else "bert"), small))
    run(
        "qwen3-0.6b-shape",
        build_random("qwen3", os.path.join(tmp, "qwen3-small" if small else "qwen3"), small),
        is_embedding=True,
    )
    result["targets"] = targets(result["rows"])
    if device == "cuda":
        result["max_memory_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
    path = os.path.join(out_dir, "bench_gpu.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({"targets": result["targets"], "memory_after_capture": result["memory_after_capture"]}, indent=1))
    print(f"wrote {path}")
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_compile":
        _compile_variant(int(sys.argv[4]), bool(int(sys.argv[5])), sys.argv[3])
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", default="bench", choices=["bench", "precompile"])
    parser.add_argument("--out", default="benchmark/results", help="directory for bench_gpu.json")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--small", action="store_true", help="2-layer models, short runs (the rehearsal)")
    parser.add_argument("--models-dir", help="where the random models are built (and reused); default: a temp dir")
    args = parser.parse_args()
    sys.exit(
        precompile(args.device)
        if args.command == "precompile"
        else main_bench(args.out, args.device, args.small, args.models_dir)
    )
