"""A/B of one CPU choice over the whole model forward, the two sides alternated in one process.

    python benchmark/bench_cpu_ab.py prepack --dtype bfloat16 --batch-sizes 1,16,64 --rounds 4
    python benchmark/bench_cpu_ab.py attention --dtype bfloat16 --batch-sizes 1,32,64

`prepack`: oneDNN-prepacked linear weights (`prepack_cpu_linears`, what the server runs) against
plain ones. `attention`: the compiled varlen kernel (`--attention-backend cpu_varlen`, the CPU
default) against torch's SDPA (`torch_native`). Two ModelRunners of the same model take turns over
the corpus (test/data/texts.json, truncated to the model's context) so that machine noise hits
both. Batch size 1 reports ms per short text (<= 16 tokens, the latency case); larger batches
report tokens/s. Prints medians of the rounds and the largest difference between the two sides'
vectors.
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
    ap.add_argument("choice", choices=["prepack", "attention"])
    ap.add_argument("--model-path", default=None, help="default: the bundled all-MiniLM-L6-v2")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--batch-sizes", default="1,16,64")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--cpu-threads", type=int, default=None)
    args = ap.parse_args()

    from transformers import AutoTokenizer

    import sglang.srt.model_executor.model_runner as model_runner
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
        results: dict[str, list[float]] = {name: [] for name in names}
        for _ in range(args.rounds):
            for name, runner in zip(names, (ours, peer)):
                start = time.perf_counter()
                if batch == 1:
                    for x in short:
                        runner.embed([x])
                    results[name].append((time.perf_counter() - start) / len(short) * 1000)
                else:
                    for i in range(0, len(ids), batch):
                        runner.embed(ids[i : i + batch])
                    results[name].append(total_tokens / (time.perf_counter() - start))
        a, b = (statistics.median(results[name]) for name in names)
        unit, gain = ("ms per short text", b / a) if batch == 1 else ("tokens/s", a / b)
        print(f"batch {batch:>3}: {unit}: {names[0]} {a:,.1f}  {names[1]} {b:,.1f}  -> {gain:.2f}x")


if __name__ == "__main__":
    main()
