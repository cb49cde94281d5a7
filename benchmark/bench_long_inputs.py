"""What a long input costs with chunked processing (--max-embed-len, docs/long_inputs.md).

    python benchmark/bench_long_inputs.py                    # bundled MiniLM, 1 thread
    python benchmark/bench_long_inputs.py --lengths 256,1000,4000 --repeats 5

Each input of --lengths tokens ([CLS] random ids [SEP]) is cut as the server cuts it
(frontend/chunking.ChunkPlan, chunks of the model's context) and its chunks run as one batch
through our ModelRunner, as the scheduler would run them. Reported: the chunks, the tokens the
model ran (billed as usage.prompt_tokens), CPU seconds of the forward pass (min over --repeats;
steadier than wall time on a shared machine) and per token. Inputs that fit MiniLM's 512 position
table are also run as one unchunked sequence, for the cost of attention over the whole input.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from sglang.srt.frontend.chunking import ChunkPlan  # noqa: E402
from sglang.srt.model_executor.model_runner import ModelRunner  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402


def cpu_seconds(fn, repeats: int) -> float:
    fn()  # warm-up (oneDNN primitives for the shapes)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", default="256,512,702,1000,2000")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    runner = ModelRunner(ServerArgs(cpu_threads=a.threads))
    context = runner.model_config.context_length
    positions = int(runner.model_config.hf_config.max_position_embeddings)
    plan = ChunkPlan(context, 1 << 30)
    rng = np.random.default_rng(0)
    print(f"model context {context}, {a.threads} thread(s), min of {a.repeats}")
    print("| input tokens | chunks | tokens run | CPU ms | CPU ms / token | one sequence, CPU ms |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n in (int(x) for x in a.lengths.split(",")):
        ids = np.concatenate([[101], rng.integers(2000, 20000, n - 2), [102]]).astype(np.int32)
        cut, lens = plan.split(ids, [101], [102])
        chunks = [cut] if lens is None else np.split(cut, np.cumsum(lens)[:-1])
        ran = sum(len(c) for c in chunks)
        t = cpu_seconds(lambda: runner.embed(chunks), a.repeats)
        whole = f"{cpu_seconds(lambda: runner.embed([ids]), a.repeats) * 1000:.0f}" if n <= positions else "-"
        print(f"| {n} | {len(chunks)} | {ran} | {t * 1000:.0f} | {t * 1000 / ran:.2f} | {whole} |", flush=True)


if __name__ == "__main__":
    main()
