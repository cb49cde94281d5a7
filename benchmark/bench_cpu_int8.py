"""int8 on CPU in one run: GEMM peaks, the model's ceiling, in-process and served throughput,
and ONNX Runtime (fp32 with its BERT fusions, and its int8 dynamic quantization) as the peer.

    python benchmark/bench_cpu_int8.py [--configs float32,int8] [--onnx] [--output-json out.json]

1. CPU flags that decide the int8 and bf16 paths (avx2, avx512_vnni, avx_vnni, amx_int8,
   avx512_bf16, amx_bf16) and the activation bits our probe chose (8 with VNNI/AMX, 7 without).
2. Peak GEMM rate of this CPU through oneDNN at the scheduler's thread count: float32 and bfloat16
   (`mkldnn._linear_pointwise`, prepacked) and int8 (`onednn.qlinear_pointwise`), large shapes.
3. The bundled model's FLOPs over the corpus (linear layers + attention), so each throughput is
   also printed as a fraction of what the model's FLOPs allow at that dtype's peak.
4. In-process texts/s (ModelRunner.embed, batches of 64 corpus texts) per config.
5. Served: 64 concurrent clients (corpus texts) and one client sending short texts (p50), per
   config, with bench_serving's lean client, as bench_cpu_targets does.
6. `--onnx` (pip install "sglang-embed[bench]"): the model exported by this script with
   torch.onnx, optimized with onnxruntime.transformers (BERT fusions), and that graph quantized
   with onnxruntime.quantization.quantize_dynamic; offline texts/s at batch 32 and cosine to ours.

The target of issue 18: served int8 >= 2x served float32 at 64 clients on a VNNI machine, and
int8 p50 at one client no worse than float32. Printed as ratios; run it on the machine in question.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Any

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_cpu_targets  # noqa: E402
import bench_serving  # noqa: E402

# --device cpu: this benchmark is about the CPU, also on a host whose default device is a GPU.
CONFIGS = {
    "float32": "--device cpu",
    "int8": "--device cpu --quantization int8",
    "bfloat16": "--device cpu --dtype bfloat16",
}
FLAGS = bench_serving.CPU_FLAGS
cpu_flags = bench_serving.cpu_flags


def _rate(fn, flops: float, seconds: float = 1.5) -> float:
    fn()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        n += 1
    return flops * n / (time.perf_counter() - start) / 1e9


def gemm_peaks(m: int = 2048, k: int = 1024, n: int = 4096) -> dict[str, float]:
    """GFLOP/s (GOP/s for int8) of one large prepacked matmul per dtype."""
    from sglang.srt.layers.int8_linear import _PREPACK, _QLINEAR, int8_support

    flops = 2.0 * m * k * n
    w = torch.randn(n, k)
    peaks = {}
    for dtype in (torch.float32, torch.bfloat16):
        x, wd = torch.randn(m, k, dtype=dtype), w.to(dtype)
        try:
            packed = torch.ops.mkldnn._reorder_linear_weight(wd)
            peaks[str(dtype).replace("torch.", "")] = _rate(
                lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], ""), flops
            )
        except RuntimeError:  # no bf16 primitives on this CPU: what torch does instead
            peaks[str(dtype).replace("torch.", "")] = _rate(lambda: torch.nn.functional.linear(x, wd), flops)
    support = int8_support()
    if support.available:
        t = torch.randint(support.low, support.low + support.levels, (m, k)).to(
            torch.int8 if support.low < 0 else torch.uint8
        )
        pw = _PREPACK(torch.randint(-127, 128, (n, k), dtype=torch.int8), None)
        scales, zps = torch.ones(n), torch.zeros(n, dtype=torch.long)
        peaks["int8"] = _rate(
            lambda: _QLINEAR(t, 1.0, 0, pw, scales, zps, None, 1.0, 0, torch.float32, "none", [], ""), flops
        )
    return peaks


def model_flops(runner, ids: list[np.ndarray]) -> float:
    """Multiply-adds x 2 of one pass over `ids`: every Linear, plus q.k and p.v per layer."""
    from sglang.srt.layers.linear import Linear

    linear_per_token = sum(m.in_features * m.out_features for m in runner.model.modules() if isinstance(m, Linear))
    cfg = runner.model_config.hf_config
    layers, hidden = cfg.num_hidden_layers, cfg.hidden_size
    tokens = sum(len(x) for x in ids)
    attention = sum(2 * len(x) ** 2 * hidden for x in ids) * layers
    return 2.0 * (linear_per_token * tokens + attention)


def in_process(config: str, ids: list[np.ndarray], seconds: float) -> tuple[float, Any]:
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.server_args import ServerArgs

    kwargs = {"float32": {}, "int8": {"quantization": "int8"}, "bfloat16": {"dtype": "bfloat16"}}[config]
    runner = ModelRunner(ServerArgs(device="cpu", **kwargs))
    runner.embed(ids[:64])
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for i in range(0, len(ids), 64):
            runner.embed(ids[i : i + 64])
        done += len(ids)
    return done / (time.perf_counter() - start), runner


def onnx_peer(texts: list[str], ours: np.ndarray, seconds: float) -> dict[str, dict[str, float]]:
    """ONNX Runtime on the bundled model: fp32 + BERT fusions, and int8 dynamic quantization."""
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers.optimizer import optimize_model
    from transformers import AutoModel, AutoTokenizer

    from sglang.srt.server_args import default_model_path

    path = default_model_path()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).eval()
    cfg = model.config
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        raw, fused, quant = (os.path.join(tmp, n) for n in ("model.onnx", "fused.onnx", "int8.onnx"))
        sample = tok(["a sample text", "another one"], padding=True, return_tensors="pt")
        names = ["input_ids", "attention_mask", "token_type_ids"]
        dyn = {n: {0: "batch", 1: "seq"} for n in names}

        class Encoder(torch.nn.Module):  # positional inputs, one output: what the exporter wants
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, input_ids, attention_mask, token_type_ids):
                return self.model(
                    input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
                ).last_hidden_state

        torch.onnx.export(
            Encoder(),
            (sample["input_ids"], sample["attention_mask"], sample["token_type_ids"]),
            raw,
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes={**dyn, "last_hidden_state": {0: "batch", 1: "seq"}},
            opset_version=17,
            dynamo=False,
        )
        optimize_model(
            raw, model_type="bert", num_heads=cfg.num_attention_heads, hidden_size=cfg.hidden_size
        ).save_model_to_file(fused)
        # The fused graph's com.microsoft ops defeat ONNX shape inference; tell the quantizer
        # their outputs are float (it refuses to guess in onnxruntime >= 1.20).
        quantize_dynamic(
            fused, quant, weight_type=QuantType.QInt8, extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT}
        )
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = torch.get_num_threads()
        for name, file in (("onnxruntime fp32 (BERT fusions)", fused), ("onnxruntime int8 dynamic", quant)):
            sess = ort.InferenceSession(file, opts, providers=["CPUExecutionProvider"])

            def encode(batch: list[str]) -> np.ndarray:
                enc = tok(batch, padding=True, truncation=True, max_length=256, return_tensors="np")
                feed = {n: enc[n].astype(np.int64) for n in names}
                hidden = sess.run(None, feed)[0]
                mask = enc["attention_mask"][..., None].astype(np.float32)
                pooled = (hidden * mask).sum(1) / mask.sum(1)
                return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)

            vecs = np.concatenate([encode(texts[i : i + 32]) for i in range(0, len(texts), 32)])
            done, start = 0, time.perf_counter()
            while time.perf_counter() - start < seconds:
                for i in range(0, len(texts), 32):
                    encode(texts[i : i + 32])
                done += len(texts)
            results[name] = {
                "texts_per_s": done / (time.perf_counter() - start),
                "min_cosine_to_ours_fp32": float((vecs * ours).sum(1).min()),
            }
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default="float32,int8", help="comma-separated from: " + ", ".join(CONFIGS))
    ap.add_argument("--seconds", type=float, default=10.0, help="per in-process / ONNX Runtime measurement")
    ap.add_argument("--requests", type=int, default=600, help="requests per served concurrency level")
    ap.add_argument("--no-serve", action="store_true", help="skip the served measurements")
    ap.add_argument("--onnx", action="store_true", help="add ONNX Runtime (needs the bench extra)")
    ap.add_argument("--output-json", default=None)
    args = ap.parse_args()

    from sglang.srt.frontend.tokenization import load_tokenizer
    from sglang.srt.layers.int8_linear import int8_support
    from sglang.srt.server_args import ServerArgs

    configs = args.configs.split(",")
    texts = bench_serving.load_texts(bench_serving.DEFAULT_TEXTS, None)
    tok = load_tokenizer(ServerArgs().tokenizer_path, False)
    ids = [np.asarray(x, dtype=np.int64) for x in tok(texts, truncation=True, max_length=256)["input_ids"]]
    support = int8_support()
    out: dict[str, Any] = {
        "machine": bench_serving.machine_info(),
        "cpu_flags": cpu_flags(),
        "threads": torch.get_num_threads(),
        "command": " ".join(sys.argv),
        "int8_activation_bits": support.act_bits if support.available else None,
    }
    print(
        f"CPU flags: {' '.join(out['cpu_flags']) or '(none of ' + ', '.join(FLAGS) + ')'}; "
        f"torch threads {out['threads']}; int8 activations: {out['int8_activation_bits']} bits"
    )
    peaks = gemm_peaks()
    out["gemm_peak_gflops"] = peaks
    print("GEMM peak (oneDNN, 2048x1024 @ 1024x4096): " + ", ".join(f"{k} {v:.0f} G/s" for k, v in peaks.items()))

    rows, ours_fp32 = {}, None
    for config in configs:
        tps, runner = in_process(config, ids, args.seconds)
        flops = model_flops(runner, ids)
        peak = peaks.get("int8" if config == "int8" else config)
        ceiling = peak * 1e9 / (flops / len(ids)) if peak else None
        rows[config] = {"in_process_texts_per_s": tps, "ceiling_texts_per_s": ceiling}
        if config == "float32":
            ours_fp32 = np.concatenate([runner.embed(ids[i : i + 64]) for i in range(0, len(ids), 64)])
        del runner
    if not args.no_serve:
        for config in configs:
            levels = bench_cpu_targets.serve_and_load(CONFIGS[config], args.requests, "base64", "lean")
            rows[config].update(
                served_c64_texts_per_s=levels["c=64"]["texts_per_s"], c1_short_p50_ms=levels["c=1 short"]["p50_ms"]
            )
    out["configs"] = rows
    if args.onnx:
        if ours_fp32 is None:
            sys.exit("--onnx compares against our float32 vectors: include float32 in --configs")
        out["onnxruntime"] = onnx_peer(texts, ours_fp32, args.seconds)

    print(
        f"\n{'config':<34} {'in-process':>10} {'% ceiling':>9} {'served c=64':>11} {'% ceiling':>9} {'c=1 p50 ms':>10}"
    )
    for config, r in rows.items():
        ceil = r["ceiling_texts_per_s"]
        served = r.get("served_c64_texts_per_s")
        print(
            f"{config:<34} {r['in_process_texts_per_s']:>10.1f} "
            f"{100 * r['in_process_texts_per_s'] / ceil if ceil else float('nan'):>8.0f}% "
            f"{served if served else float('nan'):>11.1f} "
            f"{100 * served / ceil if served and ceil else float('nan'):>8.0f}% "
            f"{r.get('c1_short_p50_ms', float('nan')):>10.1f}"
        )
    for name, r in out.get("onnxruntime", {}).items():
        print(
            f"{name:<34} {r['texts_per_s']:>10.1f}   (offline, batch 32; min cosine to ours "
            f"{r['min_cosine_to_ours_fp32']:.4f})"
        )
    if "float32" in rows and "int8" in rows:
        f, i = rows["float32"], rows["int8"]
        print(f"\nint8 / float32 in-process: {i['in_process_texts_per_s'] / f['in_process_texts_per_s']:.2f}x")
        if "served_c64_texts_per_s" in i:
            ratio = i["served_c64_texts_per_s"] / f["served_c64_texts_per_s"]
            print(
                f"int8 / float32 served at 64 clients: {ratio:.2f}x (target >= 2 on a VNNI machine); "
                f"c=1 p50 {i['c1_short_p50_ms']:.1f} vs {f['c1_short_p50_ms']:.1f} ms (target: no worse)"
            )
    if args.output_json:
        with open(args.output_json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
