"""A/B of one CPU choice over the whole model forward, the two sides alternated in one process.

    python benchmark/bench_cpu_ab.py prepack --dtype bfloat16 --batch-sizes 1,16,64 --rounds 4
    python benchmark/bench_cpu_ab.py attention --dtype bfloat16 --batch-sizes 1,32,64
    python benchmark/bench_cpu_ab.py int8-prequantize --batch-sizes 1,64 --rounds 8

`prepack`: oneDNN-prepacked linear weights (`prepack_cpu_linears`, what the server runs) against
plain ones. `attention`: the compiled varlen kernel (`--attention-backend cpu_varlen`, the CPU
default) against torch's SDPA (`torch_native`). `int8-prequantize`: `--quantization int8` with each
dequantize pass also quantizing its rows for the next int8 layer (Linear.forward_gelu /
forward_add_norm_then with `then`, what the server runs) against every layer quantizing its own
input (the instances' `_feeds` answer None). Two ModelRunners of the same model take turns over
the corpus (test/data/texts.json, truncated to the model's context) so that machine noise hits
both. Batch size 1 reports ms per short text (<= 16 tokens, the latency case); larger batches
report tokens/s, each from wall time and from process CPU time (all threads: steadier on a shared
machine). Prints medians of the rounds and the largest difference between the two sides' vectors.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time

import numpy as np

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("choice", choices=["prepack", "attention", "int8-prequantize"])
    ap.add_argument("--model-path", default=None, help="default: the bundled all-MiniLM-L6-v2")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--batch-sizes", default="1,16,64")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--cpu-threads", type=int, default=None)
    args = ap.parse_args()

    from transformers import AutoTokenizer

    import sglang.srt.model_executor.model_runner as model_runner
    from sglang.srt.layers.linear import Linear
    from sglang.srt.server_args import ServerArgs, default_model_path

    path = args.model_path or default_model_path()
    server_args = ServerArgs(model_path=path, dtype=args.dtype, device="cpu", cpu_threads=args.cpu_threads)
    if args.choice == "prepack":
        names = ("prepacked", "plain")
        ours = model_runner.ModelRunner(server_args)
        real_prepack = model_runner.prepack_cpu_linears
        model_runner.prepack_cpu_linears = lambda model: 0
        try:
            peer = model_runner.ModelRunner(server_args)
        finally:
            model_runner.prepack_cpu_linears = real_prepack
    elif args.choice == "int8-prequantize":
        names = ("prequantized", "own quantize")
        server_args = dataclasses.replace(server_args, quantization="int8")
        ours, peer = model_runner.ModelRunner(server_args), model_runner.ModelRunner(server_args)
        for module in peer.model.modules():
            if isinstance(module, Linear):
                module._feeds = lambda x, then: None
    else:
        names = ("cpu_varlen", "torch_native")
        ours = model_runner.ModelRunner(dataclasses.replace(server_args, attention_backend="cpu_varlen"))
        peer = model_runner.ModelRunner(dataclasses.replace(server_args, attention_backend="torch_native"))

    tokenizer = AutoTokenizer.from_pretrained(path)
    limit = ours.model_config.context_length
    with open(os.path.join(ROOT, "test", "data", "texts.json")) as f:
        texts = json.load(f)
    ids = [np.asarray(tokenizer(t, truncation=True, max_length=limit)["input_ids"], dtype=np.int64) for t in texts]
    short = [x for x in ids if len(x) <= 16]
    total_tokens = sum(len(x) for x in ids)
    diff = float(np.abs(ours.embed(ids[:32]) - peer.embed(ids[:32])).max())
    print(
        f"{path} {args.dtype}: {len(ids)} texts, {total_tokens / len(ids):.1f} tokens mean; "
        f"{len(short)} short texts; largest vector difference {diff:.2e}"
    )

    for batch in (int(b) for b in args.batch_sizes.split(",")):
        results: dict[tuple[str, str], list[float]] = {(n, c): [] for n in names for c in ("wall", "CPU")}
        for _ in range(args.rounds):
            for name, runner in zip(names, (ours, peer)):
                start, cpu_start = time.perf_counter(), time.process_time()
                if batch == 1:
                    for x in short:
                        runner.embed([x])
                else:
                    for i in range(0, len(ids), batch):
                        runner.embed(ids[i : i + batch])
                for clock, spent in (("wall", time.perf_counter() - start), ("CPU", time.process_time() - cpu_start)):
                    per = spent / len(short) * 1000 if batch == 1 else total_tokens / spent
                    results[(name, clock)].append(per)
        for clock in ("wall", "CPU"):
            a, b = (statistics.median(results[(name, clock)]) for name in names)
            unit, gain = (f"{clock}-ms per short text", b / a) if batch == 1 else (f"tokens per {clock}-s", a / b)
            print(f"batch {batch:>3}: {unit}: {names[0]} {a:,.1f}  {names[1]} {b:,.1f}  -> {gain:.2f}x")


if __name__ == "__main__":
    main()
