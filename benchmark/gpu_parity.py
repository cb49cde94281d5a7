"""The GPU check's parity stage: fails (exit 1) unless our engine agrees with itself and transformers.

For each model (the bundled MiniLM; random weights at Qwen3-Embedding-0.6B's shape; random weights
at EmbeddingGemma-300M's shape: head_dim 256, 3 query heads per kv head, bidirectional sliding
window 512 on five layers of six), and for every CUDA-graph token bucket up to 4,096, a batch of
random lengths that lands in that bucket runs with breakable graphs, full graphs and eagerly:
each pair's cosine must be >= 0.9999 (bf16). The first batches of each model also run through
transformers (float32, SDPA, padded): cosine >= 0.995 to ours. OUT/parity.json keeps the minima.

On CPU (--device cpu, the rehearsal) graphs are the test suite's recording stand-in for the
breakable runner (full graphs need CUDA), the models are small with the same head dims, and the
precision is float32.

    python benchmark/gpu_parity.py --model MINILM_DIR --out DIR [--device cuda|cpu] [--small]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np
import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path[:0] = [os.path.join(ROOT, "python"), ROOT]

MIN_COS_MODES = 0.9999
MIN_COS_HF = 0.995
HF_BATCHES = 3  # per model: transformers pads, so only the first few buckets' batches
MAX_TOKENS, MAX_SEQS = 4096, 64

QWEN3_SHAPE = dict(
    hidden_size=1024,
    intermediate_size=3072,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    vocab_size=151669,
    max_position_embeddings=32768,
)
GEMMA_SHAPE = dict(
    hidden_size=768,
    intermediate_size=1152,
    num_hidden_layers=24,
    num_attention_heads=3,
    num_key_value_heads=1,
    head_dim=256,
    query_pre_attn_scalar=256,
    sliding_window=512,
    vocab_size=262144,
    max_position_embeddings=2048,
)
SMALL = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, vocab_size=2000, max_position_embeddings=512)


def build_random(kind: str, out_dir: str, small: bool) -> str:
    """A random-weight checkpoint at the real shape (or a 2-layer one with the same heads), built on
    the GPU when there is one and saved in bf16 (half the bytes to write and read back); reused
    when out_dir already holds one (the parity and bench stages share Qwen3's)."""
    from transformers import Gemma3TextConfig, Gemma3TextModel, Qwen3Config, Qwen3Model

    if os.path.exists(os.path.join(out_dir, "config.json")):
        return out_dir
    if kind == "qwen3":
        shape = {**QWEN3_SHAPE, **(SMALL if small else {})}
        config, cls, arch = Qwen3Config(**shape, rms_norm_eps=1e-6, rope_theta=1e6), Qwen3Model, "Qwen3ForCausalLM"
    else:
        shape = {**GEMMA_SHAPE, **(SMALL if small else {})}
        if small:  # 3 heads of 256 as at the real shape; a window shorter than most inputs below
            shape.update(hidden_size=192, sliding_window=48)
        layers = shape["num_hidden_layers"]
        types = [
            ("full_attention" if (i + 1) % 6 == 0 or i == layers - 1 else "sliding_attention") for i in range(layers)
        ]
        config = Gemma3TextConfig(**shape, layer_types=types, use_bidirectional_attention=True)
        cls, arch = Gemma3TextModel, "Gemma3TextModel"
    torch.manual_seed(0)
    cuda = torch.cuda.is_available()
    with torch.device("cuda" if cuda else "cpu"):
        model = cls(config).to(torch.bfloat16 if cuda else torch.float32).eval()
    model.config.architectures = [arch]
    model.save_pretrained(out_dir)
    del model
    return out_dir


def hf_model(model_dir: str, device: str) -> torch.nn.Module:
    from transformers import AutoModel

    return AutoModel.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa").to(device).eval()


def hf_embed(model: torch.nn.Module, ids: list[np.ndarray], pooling: str, device: str) -> np.ndarray:
    from test.helpers.parity import hf_pool

    out = []
    with torch.inference_mode():
        for t in ids:  # one at a time: no padding question, and 4,096-token batches fit
            x = torch.from_numpy(t.astype(np.int64))[None].to(device)
            hidden = model(input_ids=x, attention_mask=torch.ones_like(x)).last_hidden_state
            out.append(hf_pool(hidden, torch.ones_like(x), pooling).float().cpu())
    return torch.nn.functional.normalize(torch.cat(out), dim=-1).numpy()


def cosine_min(a: np.ndarray, b: np.ndarray) -> float:
    from test.helpers.parity import cosine_rows

    return float(cosine_rows(a, b).min())


def graph_runners(runner, device: str, max_tokens: int, max_seqs: int) -> dict:
    """mode -> graph runner (None: eager), built on this one ModelRunner's weights."""
    if device == "cpu":
        from sglang.srt.model_executor.breakable_graph_runner import BreakableGraphRunner
        from test.helpers.recorded_graph import RecordingCapture

        mc = runner.model_config
        bcg = BreakableGraphRunner(
            runner.model,
            mc.hidden_size,
            mc.dtype,
            torch.device("cpu"),
            max_tokens,
            max_seqs,
            warm_backend=runner.attn_backend,
            capture=RecordingCapture(),
            show_progress=False,
        )
        return {"breakable": bcg, "off": None}
    modes = {"breakable": runner.graph_runner, "off": None}
    runner.server_args.cuda_graph_mode = "full"
    modes["full"] = runner._capture_cuda_graphs()
    assert modes["breakable"].mode == "breakable" and modes["full"].mode == "full", modes
    return modes


def bucket_batches(buckets: list[int], context: int, max_seqs: int, vocab: int, seed: int) -> list[list[np.ndarray]]:
    """For each bucket, random lengths (each within the context) whose total lands in that bucket."""
    rng = np.random.default_rng(seed)
    batches, lower = [], 0
    for b in buckets:
        total = int(rng.integers(max(lower + 1, (b + 1) // 2), b + 1))
        lens: list[int] = []
        while sum(lens) < total:
            room = min(context, total - sum(lens))
            if len(lens) == max_seqs - 1:
                if room < total - sum(lens):
                    break  # cannot reach the total within max_seqs: take what fits
                lens.append(room)
                break
            lens.append(int(rng.integers(1, room + 1)))
        batches.append([rng.integers(1000 if vocab > 4000 else 5, vocab - 1, size=n) for n in lens])
        lower = b
    return batches


def check_model(label: str, path: str, device: str, extra: dict, result: dict) -> list[str]:
    from sglang.srt.model_executor.graph_padding import token_buckets
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.server_args import ServerArgs

    dtype = "bfloat16" if device == "cuda" else "float32"
    max_tokens = MAX_TOKENS if device == "cuda" else 256
    args = ServerArgs(
        model_path=path,
        device=device,
        dtype=dtype,
        cuda_graph_max_tokens=max_tokens,
        cuda_graph_max_seqs=MAX_SEQS,
        **extra,
    )
    start = time.perf_counter()
    runner = ModelRunner(args)
    mc = runner.model_config
    modes = graph_runners(runner, device, max_tokens, MAX_SEQS)
    buckets = token_buckets(max_tokens)
    batches = bucket_batches(buckets, mc.context_length, MAX_SEQS, mc.vocab_size, seed=len(label))
    from sglang.srt.layers.attention.layer import AttentionLayer

    heads = sorted({m.head_dim for m in runner.model.modules() if isinstance(m, AttentionLayer)})
    row: dict = {"buckets": len(buckets), "head_dims": heads, "context": mc.context_length}
    problems, worst_modes, hf_cos, hf = [], 1.0, [], None
    for bucket, ids in zip(buckets, batches):
        outs = {}
        for mode, graphs in modes.items():
            runner.graph_runner = graphs
            if graphs is not None and graphs.plan(runner.build_batch(ids)) is None:
                problems.append(f"{label}: bucket {bucket} did not replay in {mode} mode")
            outs[mode] = runner.embed(ids)
        for mode in modes:
            if mode != "off":
                cos = cosine_min(outs[mode], outs["off"])
                worst_modes = min(worst_modes, cos)
                if cos < MIN_COS_MODES:
                    problems.append(f"{label}: bucket {bucket}: {mode} vs eager cosine {cos:.6f} < {MIN_COS_MODES}")
        if len(hf_cos) < HF_BATCHES or bucket == buckets[-1]:
            hf = hf or hf_model(path, device)
            cos = cosine_min(outs["off"], hf_embed(hf, ids, mc.pooling, device))
            hf_cos.append(cos)
            if cos < MIN_COS_HF:
                problems.append(f"{label}: bucket {bucket}: ours vs transformers cosine {cos:.5f} < {MIN_COS_HF}")
    row.update(
        modes=list(modes), cos_modes_min=worst_modes, cos_hf_min=min(hf_cos), seconds=time.perf_counter() - start
    )
    result[label] = row
    print(label, json.dumps(row), flush=True)
    del runner, modes, hf
    if device == "cuda":
        torch.cuda.empty_cache()
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="the bundled MiniLM")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--small", action="store_true", help="2-layer random models (the rehearsal)")
    ap.add_argument("--models-dir", help="where the random models are built (and reused); default: a temp dir")
    args = ap.parse_args()
    tmp = args.models_dir or tempfile.mkdtemp(prefix="gpu-parity-")
    result: dict = {"device": args.device, "thresholds": {"modes": MIN_COS_MODES, "transformers": MIN_COS_HF}}
    problems: list[str] = []
    cases = [
        ("all-MiniLM-L6", lambda: args.model, {}),
        (
            "qwen3-0.6b-shape",
            lambda: build_random("qwen3", os.path.join(tmp, "qwen3-small" if args.small else "qwen3"), args.small),
            {"is_embedding": True},
        ),
        (
            "embeddinggemma-shape",
            lambda: build_random("gemma", os.path.join(tmp, "gemma-small" if args.small else "gemma"), args.small),
            {},
        ),
    ]
    for label, build, extra in cases:
        try:
            problems += check_model(label, build(), args.device, extra, result)
        except Exception as e:  # one model failing must not hide the others' results
            problems.append(f"{label}: {type(e).__name__}: {e}")
    result["problems"] = problems
    with open(os.path.join(args.out, "parity.json"), "w") as f:
        json.dump(result, f, indent=1)
    for p in problems:
        print("PARITY FAILED:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
