"""Where the CPU forward's time goes, in CPU time: % of the GEMM ceiling and op shares per config.

    python benchmark/bench_cpu_profile.py [--configs float32,int8] [--batch 64] [--rounds 3] [--threads N]
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 SGLANG_KERNEL_ISA=x86-64-v3 \\
        python benchmark/bench_cpu_profile.py     # an AVX2 machine (no VNNI), emulated on an AVX-512 one

Made for a shared machine: every number is process CPU time (all threads), not wall time, so
other jobs on the cores move it much less than they move texts/s (at 2 threads a loaded machine
still adds OpenMP workers spinning at barriers while their peer waits for a core: --threads 1
gives the steadiest numbers there). Per config:

1. the GEMM peak through oneDNN (bench_cpu_int8.gemm_peaks' shape and ops) in FLOPs per
   CPU-second times the thread count;
2. the bundled model's forward (ModelRunner.embed, batches of corpus texts) in the same unit,
   by the model's FLOPs (bench_cpu_int8.model_flops), and so its share of that ceiling (what
   bench_cpu_int8 prints as "% of the ceiling" from wall time on a quiet machine);
3. with --ops, one pass at the same thread count with every aten op (and the C kernels' ctypes
   calls) timed in process CPU time, grouped: matmul, attention, LayerNorm, residual add, GELU,
   int8 quantize / dequantize, embeddings, other; "python" is the rest (glue, and the timer's
   own cost: compare shares within a run, not with item 2).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from typing import Callable

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# op name -> group; first matching prefix wins
GROUPS = (
    ("mkldnn::_linear_pointwise", "matmul"),
    ("onednn::qlinear_pointwise", "matmul"),
    ("aten::addmm", "matmul"),
    ("aten::mm", "matmul"),
    ("sgl::attention", "attention"),
    ("aten::_scaled_dot_product", "attention"),
    ("aten::scaled_dot_product", "attention"),
    ("aten::native_layer_norm", "layernorm"),
    ("aten::layer_norm", "layernorm"),
    ("aten::add", "residual add"),
    ("aten::gelu", "gelu"),
    ("sgl::int8_quantize", "int8 quantize"),
    ("sgl::int8_dequant", "int8 dequantize"),
    ("aten::embedding", "embeddings"),
)
CONFIGS = {"float32": {}, "int8": {"quantization": "int8"}, "bfloat16": {"dtype": "bfloat16"}}


def group(name: str) -> str:
    return next((g for prefix, g in GROUPS if name.startswith(prefix)), "other")


def cpu_rate(fn: Callable[[], object], flops: float, seconds: float) -> float:
    """FLOPs per process CPU-second x threads (what the threads would do with the cores to themselves)."""
    fn()
    n, cpu0, wall0 = 0, time.process_time(), time.perf_counter()
    while time.perf_counter() - wall0 < seconds:
        fn()
        n += 1
    return flops * n / (time.process_time() - cpu0) * torch.get_num_threads()


def gemm_peaks(seconds: float, m: int = 2048, k: int = 1024, n: int = 4096) -> dict[str, float]:
    from sglang.srt.layers.int8_linear import _PREPACK, _QLINEAR, int8_support

    flops, peaks = 2.0 * m * k * n, {}
    x, w = torch.randn(m, k), torch.randn(n, k)
    packed = torch.ops.mkldnn._reorder_linear_weight(w)
    peaks["float32"] = cpu_rate(
        lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], ""), flops, seconds
    )
    support = int8_support()
    if support.available:
        t = torch.randint(0, support.levels + 1, (m, k)).to(torch.uint8)
        pw = _PREPACK(torch.randint(-127, 128, (n, k), dtype=torch.int8), None)
        scales, zps = torch.ones(n), torch.zeros(n, dtype=torch.long)
        peaks["int8"] = cpu_rate(
            lambda: _QLINEAR(t, 1.0, 0, pw, scales, zps, None, 1.0, 0, torch.float32, "none", [], ""), flops, seconds
        )
    return peaks


def op_times(run: Callable[[], object]) -> dict[str, float]:
    """Process CPU seconds per op group over one call of `run`."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from sglang.srt.layers.attention import cpu_kernel_loader
    from sglang.srt.layers.int8_rows_kernel import Int8RowsKernel

    totals: collections.Counter = collections.Counter()

    class Timer(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            start = time.process_time()
            out = func(*args, **(kwargs or {}))
            totals[group(func._schema.name)] += time.process_time() - start
            return out

    patched = []
    for cls, attr, label in (
        (cpu_kernel_loader.VarlenAttentionKernel, "__call__", "sgl::attention"),
        (Int8RowsKernel, "quantize_rows", "sgl::int8_quantize"),
        (Int8RowsKernel, "dequant_rows", "sgl::int8_dequant"),
        (Int8RowsKernel, "dequant_quantize_rows", "sgl::int8_dequant"),  # + the next layer's quantize
    ):
        fn = getattr(cls, attr, None)
        if fn is None:  # an older tree, for A/B runs
            continue

        def timed(*a, _fn=fn, _label=label, **kw):
            start = time.process_time()
            out = _fn(*a, **kw)
            totals[group(_label)] += time.process_time() - start
            return out

        setattr(cls, attr, timed)
        patched.append((cls, attr, fn))
    try:
        start = time.process_time()
        with Timer():
            run()
        totals["python"] = time.process_time() - start - sum(totals.values())
    finally:
        for cls, attr, fn in patched:
            setattr(cls, attr, fn)
    return dict(totals)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default="float32,int8", help="comma-separated from: " + ", ".join(CONFIGS))
    ap.add_argument("--batch", type=int, default=64, help="texts per forward")
    ap.add_argument("--rounds", type=int, default=3, help="passes over the corpus (the median counts)")
    ap.add_argument("--peak-seconds", type=float, default=3.0)
    ap.add_argument("--ops", action="store_true", help="also time every op (one more pass)")
    ap.add_argument("--output-json", default=None)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's, the cores)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    import bench_cpu_int8
    import bench_serving

    from sglang.srt.frontend.tokenization import load_tokenizer
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.server_args import ServerArgs

    texts = bench_serving.load_texts(bench_serving.DEFAULT_TEXTS, None)
    tok = load_tokenizer(ServerArgs().tokenizer_path, False)
    ids = [np.asarray(x, dtype=np.int64) for x in tok(texts, truncation=True, max_length=256)["input_ids"]]
    batches = [ids[i : i + args.batch] for i in range(0, len(ids), args.batch)]
    env = {k: os.environ.get(k, "") for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "SGLANG_KERNEL_ISA")}
    out: dict = {
        "cpu_flags": bench_cpu_int8.cpu_flags(),
        "isa_env": env,
        "aten_isa": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "configs": {},
    }
    print(
        f"CPU flags: {' '.join(out['cpu_flags'])}; ATen ISA {out['aten_isa']}; "
        + " ".join(f"{k}={v or '(unset)'}" for k, v in env.items())
        + f"; {out['threads']} threads; batches of {args.batch} corpus texts"
    )
    peaks = gemm_peaks(args.peak_seconds)
    out["gemm_peak_gflops_per_cpu_s_x_threads"] = {k: v / 1e9 for k, v in peaks.items()}
    print("GEMM peak per CPU-second x threads: " + ", ".join(f"{k} {v / 1e9:.0f} G/s" for k, v in peaks.items()))
    for config in args.configs.split(","):
        runner = ModelRunner(ServerArgs(device="cpu", cpu_threads=args.threads, **CONFIGS[config]))

        def one_pass(runner=runner) -> None:
            for b in batches:
                runner.embed(b)

        one_pass()
        cpu, wall = [], []
        for _ in range(args.rounds):
            start, wall_start = time.process_time(), time.perf_counter()
            one_pass()
            cpu.append(time.process_time() - start)
            wall.append(time.perf_counter() - wall_start)
        cpu_s, wall_s = float(np.median(cpu)), float(np.median(wall))
        rate = bench_cpu_int8.model_flops(runner, ids) / cpu_s * torch.get_num_threads()
        peak = peaks.get("int8" if config == "int8" else config)
        row = {"cpu_s_per_pass": cpu_s, "wall_s_per_pass": wall_s, "gflops_per_cpu_s_x_threads": rate / 1e9}
        if peak:
            row["pct_of_gemm_peak"] = 100 * rate / peak
        line = f"\n{config}: {cpu_s:.2f} CPU-s ({wall_s:.2f} wall-s) per corpus pass, {rate / 1e9:.0f} G/s"
        print(line + (f" = {row['pct_of_gemm_peak']:.0f}% of its GEMM peak" if peak else ""))
        if args.ops:
            times = op_times(one_pass)
            total = sum(times.values())
            row["op_cpu_s"] = times
            for name, sec in sorted(times.items(), key=lambda kv: -kv[1]):
                print(f"  {name:<18} {100 * sec / total:5.1f}%  {sec:7.2f} CPU-s")
        out["configs"][config] = row
        del runner
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
