"""CPU time of the HTTP process's tokenization step per text, per way of tokenizing (issue #32).

    python benchmark/bench_tokenize.py [--rounds 5] [--seconds 2] [--batch 1,64] [--tokenizer PATH]

What the server does for a request's texts (frontend/tokenization.py's InputTokenizer.tokenize,
truncation to the model's context included), four ways, on the bundled corpus, alternated round
after round so a slow minute hits all of them:

- `wrapper`: transformers' tokenizer call (the path before plain_encode.py);
- `plain`: the Rust tokenizer without the wrapper, with its own BertNormalizer (plain_encode.py);
- `plain+ascii`: the same, with ASCII texts normalized in Python first (bert_ascii.py);
- `plain+ascii+words`: and those texts' ids word by word from the words' cache (bert_words.py), the
  default (timed warm: the cache has the corpus's words after the check below).

`--batch 1` is a request of one text (the common single-text request), 64 a bulk request. Printed
per text, medians over rounds: the process's CPU time (the Rust tokenizer runs a request of several
texts on its own threads), which on a shared machine moves far less than wall time, and the wall
time. Every way gives the same ids (checked before timing).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # test/helpers' ModelInfo
import bench_serving  # noqa: E402

from sglang.srt.frontend.tokenization import InputTokenizer  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402
from sglang.srt.utils.hf_tokenizer import load_tokenizer  # noqa: E402
from sglang.srt.wire.io_struct import EmbeddingReqInput  # noqa: E402
from test.helpers.model_info import make_model_info  # noqa: E402


def tokenizers(path: str, context: int) -> dict[str, InputTokenizer]:
    """One InputTokenizer per way, each with its own tokenizer object (no shared state)."""
    args = ServerArgs(allow_auto_truncate=True)
    out = {}
    for name in ("wrapper", "plain", "plain+ascii", "plain+ascii+words"):
        tok = load_tokenizer(path, False)
        t = InputTokenizer(args, make_model_info(max_input_length=context, vocab_size=len(tok)), tokenizer=tok)
        if name == "wrapper":
            t._plain = None
        elif name == "plain" and t._plain is not None:
            t._plain._ascii = None
            t._plain._words = None
        elif name == "plain+ascii" and t._plain is not None:
            t._plain._words = None
        out[name] = t
    return out


def per_text_us(t: InputTokenizer, requests: list[EmbeddingReqInput], seconds: float) -> tuple[float, float]:
    """(CPU-us, wall-us) per text: CPU of the whole process, since the Rust tokenizer spreads a
    request of several texts over its own threads (a thread's own time would miss that work)."""
    n, cpu, wall = 0, time.process_time(), time.perf_counter()
    while time.perf_counter() - wall < seconds:
        for req in requests:
            t.tokenize(req)
            n += req.batch_size
    return (time.process_time() - cpu) * 1e6 / n, (time.perf_counter() - wall) * 1e6 / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0, help="per way, per batch size, per round")
    ap.add_argument("--batch", default="1,64", help="texts per request, comma-separated")
    ap.add_argument("--tokenizer", default=ServerArgs().tokenizer_path)
    ap.add_argument("--context", type=int, default=256, help="tokens an input is cut to (the model's context)")
    args = ap.parse_args()

    texts = bench_serving.load_texts(bench_serving.DEFAULT_TEXTS, None)
    ways = tokenizers(args.tokenizer, args.context)
    print(f"CPU flags: {' '.join(bench_serving.cpu_flags())}")
    print(f"{len(texts)} corpus texts, {sum(t.isascii() for t in texts)} of them ASCII; tokenizer {args.tokenizer}")
    for size in (int(b) for b in args.batch.split(",")):
        requests = [EmbeddingReqInput(text=texts[i : i + size]) for i in range(0, len(texts), size)]
        ids = {name: [[a.tolist() for a, _ in t.tokenize(r)] for r in requests] for name, t in ways.items()}
        assert all(v == ids["wrapper"] for v in ids.values()), "the ways disagree on the ids"
        per: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
        for rnd in range(args.rounds):
            order = list(ways.items()) if rnd % 2 == 0 else list(ways.items())[::-1]
            for name, t in order:
                per[name].append(per_text_us(t, requests, args.seconds))
        base = statistics.median(c for c, _ in per["wrapper"])
        for name, vals in per.items():
            cpu, wall = statistics.median(c for c, _ in vals), statistics.median(w for _, w in vals)
            rounds = ", ".join(f"{c:.1f}" for c, _ in vals)
            print(
                f"batch {size:>3}  {name:<18} {cpu:7.1f} CPU-us, {wall:7.1f} wall-us per text "
                f"({base / cpu:4.2f}x the wrapper's texts per CPU-second; CPU by round {rounds})"
            )


if __name__ == "__main__":
    main()
