"""Offline throughput: sglang.Engine.encode vs sentence-transformers on the same texts, in one run.

    python benchmark/bench_offline.py                        # float32 both sides, ~25 s per side
    python benchmark/bench_offline.py --repeat 1 --rounds 2  # quick look
    python benchmark/bench_offline.py --dtype bfloat16 --st-dtype bfloat16 --output-json offline.json
    python benchmark/bench_offline.py --batch-size all,32,8 --max-batch-size 64 --cpu-threads 2

Sides: ST is `SentenceTransformer(path).encode(texts, batch_size=32)` in this process, in float32
(the reference peer; `--st-dtype bfloat16` adds an ST side in bf16 via model.to(torch.bfloat16)).
Ours is `sglang.Engine(allow_auto_truncate=True).encode(chunk)` with `--batch-size` texts per call
("all": one pass of the corpus per call; the engine batches internally); the model runs in the
engine's scheduler process. Both truncate at the model's 256 tokens. Sides alternate (ST, ours, ST,
ours, ...) for --rounds rounds of --repeat passes each, and the report gives medians over rounds,
so machine noise hits every side alike. Ours includes turning embeddings into Python lists (the
Engine API); ST returns numpy arrays.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shlex
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_serving import DEFAULT_TEXTS, load_texts, machine_info  # noqa: E402

Pass = Callable[[], tuple[Any, int]]  # one pass over the corpus -> (embeddings, prompt tokens)


@dataclass
class Side:
    name: str
    dtype: str
    per_call: str
    run_pass: Pass
    is_st: bool = False
    rounds: list[dict[str, float]] = field(default_factory=list)  # seconds, texts, tokens per round
    first_pass: Any = None  # warm-up embeddings, for the agreement check
    warmup_s: float = 0.0

    @property
    def label(self) -> str:
        return f"{'ST' if self.is_st else 'ours'} {self.dtype} per call {self.per_call.split()[0]}"

    def median(self, key: str) -> float:
        return statistics.median(r[key] / r["seconds"] for r in self.rounds)


def st_pass(model: Any, texts: list[str], tokens: int) -> Pass:
    def run() -> tuple[Any, int]:
        return model.encode(texts, batch_size=32), tokens

    return run


def engine_pass(engine: Any, texts: list[str], batch: Optional[int]) -> Pass:
    step = batch or len(texts)

    def run() -> tuple[Any, int]:
        out = [r for i in range(0, len(texts), step) for r in engine.encode(texts[i : i + step])]
        return [r["embedding"] for r in out], sum(r["meta_info"]["prompt_tokens"] for r in out)

    return run


def timed_round(side: Side, repeat: int, n_texts: int) -> float:
    t0 = time.perf_counter()
    tokens = sum(side.run_pass()[1] for _ in range(repeat))
    seconds = time.perf_counter() - t0
    side.rounds.append({"seconds": seconds, "texts": repeat * n_texts, "tokens": tokens})
    return seconds


def min_cosine(a: Any, b: Any) -> float:
    import numpy as np

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return float(cos.min())


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--model-path", default=None, help="model directory (default: the bundled all-MiniLM-L6-v2)")
    p.add_argument("--dataset", default=DEFAULT_TEXTS, help="JSON list of texts")
    p.add_argument("--max-words", type=int, default=None, help="drop texts longer than this many words")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="our engine's dtype")
    p.add_argument(
        "--st-dtype",
        default="float32",
        choices=["float32", "bfloat16"],
        help="bfloat16 adds an ST side in bf16 (ST float32 always runs as the reference)",
    )
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="device of both sides")
    p.add_argument(
        "--batch-size", default="all,32", help="comma-separated texts per Engine.encode call; 'all' = one pass per call"
    )
    p.add_argument("--max-batch-size", type=int, default=None, help="passed to Engine (inputs per forward)")
    p.add_argument("--max-num-tokens", type=int, default=None, help="passed to Engine (tokens per forward)")
    p.add_argument("--cpu-threads", type=int, default=None, help="passed to Engine (default: all cores)")
    p.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="passes over the corpus per side per round (default: ST takes ~--target-seconds)",
    )
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians are reported")
    p.add_argument("--target-seconds", type=float, default=25.0, help="total ST time the default --repeat aims at")
    p.add_argument("--output-json", default=None, help="write the results, machine and command here")
    args = p.parse_args(argv)
    try:
        args.batch_sizes = [None if b.strip() == "all" else int(b) for b in args.batch_size.split(",")]
    except ValueError:
        p.error("--batch-size takes 'all' or positive integers, comma-separated")
    if any(b is not None and b < 1 for b in args.batch_sizes) or args.rounds < 1 or (args.repeat or 1) < 1:
        p.error("--batch-size, --rounds and --repeat must be positive")
    return args


def build_sides(args: argparse.Namespace, texts: list[str], engine: Any) -> tuple[list[Side], dict[str, Any]]:
    import torch
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(engine.server_args.model_path, device=None if args.device == "auto" else args.device)
    enc = st.tokenizer(texts, truncation=True, max_length=st.max_seq_length)
    st_tokens = sum(len(ids) for ids in enc["input_ids"])
    sides = [Side("sentence-transformers", "float32", "32", st_pass(st, texts, st_tokens), is_st=True)]
    if args.st_dtype == "bfloat16":
        st_bf16 = copy.deepcopy(st).to(torch.bfloat16)
        sides.append(Side("sentence-transformers", "bfloat16", "32", st_pass(st_bf16, texts, st_tokens), is_st=True))
    for b in args.batch_sizes:
        sides.append(Side("sglang.Engine", args.dtype, str(b or f"all ({len(texts)})"), engine_pass(engine, texts, b)))
    threads = {
        "st_device": str(st.device),
        "st_torch_threads": torch.get_num_threads(),
        "st_max_seq_length": st.max_seq_length,
        "engine_cpu_threads": engine.server_args.cpu_threads,
    }
    return sides, threads


def print_table(sides: list[Side]) -> list[dict[str, Any]]:
    refs = [s for s in sides if s.is_st]
    heads = (
        ["side", "dtype", "texts/call", "texts/s", "tokens/s"]
        + [f"x ST {r.dtype}" for r in refs]
        + ["per round texts/s"]
    )
    rows, cells = [], []
    for s in sides:
        tps, tok = s.median("texts"), s.median("tokens")
        ratios = {f"vs_st_{r.dtype}": tps / r.median("texts") for r in refs}
        rows.append(
            {
                "side": s.name,
                "dtype": s.dtype,
                "texts_per_call": s.per_call,
                "texts_per_s": tps,
                "tokens_per_s": tok,
                **ratios,
                "rounds": s.rounds,
            }
        )
        per_round = " ".join(f"{r['texts'] / r['seconds']:.1f}" for r in s.rounds)
        cells.append(
            [s.name, s.dtype, s.per_call, f"{tps:.1f}", f"{tok:.0f}", *(f"{v:.2f}" for v in ratios.values()), per_round]
        )
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]
    for line in [heads, *cells]:
        print("  ".join(x.ljust(w) if i < 3 else x.rjust(w) for i, (x, w) in enumerate(zip(line, widths))))
    return rows


def main(argv: Optional[list[str]] = None) -> None:
    args = parse_args(argv)
    texts = load_texts(args.dataset, args.max_words)
    import sglang

    kwargs = {
        "max_batch_size": args.max_batch_size,
        "max_num_tokens": args.max_num_tokens,
        "cpu_threads": args.cpu_threads,
    }
    print("starting sglang.Engine with allow_auto_truncate=True (texts over the model's limit are cut)")
    engine = sglang.Engine(
        model_path=args.model_path,
        dtype=args.dtype,
        device=args.device,
        allow_auto_truncate=True,
        log_level="warning",
        **{k: v for k, v in kwargs.items() if v is not None},
    )
    try:
        sides, threads = build_sides(args, texts, engine)
        machine = machine_info()
        print(
            f"machine: {machine['cpu']}, {machine['cores']} cores {' '.join(machine.get('gpus', []))}\n"
            f"ST: device {threads['st_device']}, torch.get_num_threads()={threads['st_torch_threads']} "
            f"(this process); Engine: --cpu-threads {threads['engine_cpu_threads'] or 'default (all cores)'} "
            f"(its scheduler process)\n{len(texts)} texts from {args.dataset}"
        )

        for s in sides:  # warm-up pass; it also sizes --repeat and gives the agreement check
            t0 = time.perf_counter()
            s.first_pass, tokens = s.run_pass()
            s.warmup_s = time.perf_counter() - t0
            print(f"  warm-up {s.label}: {s.warmup_s:.2f} s, {tokens} tokens/pass")
        ref = sides[0]
        repeat = args.repeat or max(1, round(args.target_seconds / (args.rounds * ref.warmup_s)))
        print(f"{args.rounds} rounds x {repeat} pass(es) of {len(texts)} texts per side, alternating")
        for i in range(args.rounds):
            line = ", ".join(f"{s.label} {timed_round(s, repeat, len(texts)):.1f} s" for s in sides)
            print(f"  round {i + 1}: {line}", flush=True)
        agreement = {s.label: min_cosine(s.first_pass, ref.first_pass) for s in sides[1:]}
    finally:
        engine.shutdown()

    print()
    rows = print_table(sides)
    for name, cos in agreement.items():
        print(f"min cosine vs ST float32: {name}: {cos:.6f}")
    if args.output_json:
        config = {k: v for k, v in vars(args).items() if k != "batch_sizes"}
        with open(args.output_json, "w") as f:
            json.dump(
                {
                    "command": shlex.join([sys.executable, *sys.argv]),
                    "machine": machine,
                    "config": config,
                    "repeat": repeat,
                    "threads": threads,
                    "min_cosine_vs_st_fp32": agreement,
                    "sides": rows,
                },
                f,
                indent=2,
            )
        print(f"wrote {args.output_json}")


if __name__ == "__main__":
    main()
