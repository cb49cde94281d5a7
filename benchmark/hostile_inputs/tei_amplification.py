"""Small requests with huge answers or work on the tokenizer and per-token routes (issue #27 items
3-5): TEI /tokenize with a million inputs or a 90 MB answer, /decode with a million id lists, and
/embed_all and /pooling token_embed whose per-token answer would be ~150 MB. Each must be answered
in seconds (413 naming the flag, or a 200 where it is allowed) with `/health` under 1 s meanwhile
and, for the allowed ones, the HTTP process's RSS growth < 300 MB at peak and < 100 MB after
(frontend/token_work.py, frontend/response_size.py, frontend/http/response_parts.py).

Runs against the runner's server (the bundled MiniLM, or --url). With several HTTP workers the RSS
watched is the first one's. Alone: `python -m benchmark.hostile_inputs.tei_amplification`.
"""

from __future__ import annotations

import json
import os
from typing import Optional

import orjson

from benchmark.hostile_inputs.common import Context, Recorder, Result, http
from test.helpers.server import ServerProcess
from test.helpers.watch import Watch, watched

AREA = "tei_amp"
ROW_TEXT = "hello " * 252  # 254 tokens with [CLS] and [SEP]
# Seconds to the 413. /tokenize's answer is refused once rendered past the limit: ~1 M tokens
# tokenized first (3.5 s with offsets on a loaded 2-core machine, 5.7 s to the 413).
REFUSE_S = {"/tokenize": 15.0, "/decode": 5.0, "/embed_all": 1.0, "/pooling": 1.0}
ALLOWED_S = 120.0


def _message(body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return ""
    err = data.get("error") if isinstance(data, dict) else None
    return str(err.get("message", "")) if isinstance(err, dict) else str(err or "")


def _probe(rec: Recorder, ctx: Context, pid: Optional[int], name: str, path: str, body: bytes, want: int, text: str):
    """One watched request: status `want` (`text` in a refusal's message) in time, /health < 1 s
    meanwhile and, for a 200 on our own server, the RSS bounds."""
    try:
        w: Watch = watched(
            ctx.base_url, pid if pid is not None else os.getpid(), lambda: http(ctx, "POST", path, body, ctx.headers())
        )
    except Exception as e:  # a probe that crashes (times out) is a failed probe, not a crashed run
        rec.check(name, False, f"{type(e).__name__}: {e}")
        return
    status, _, out = w.result
    in_time = w.elapsed_s < (REFUSE_S[path] if want != 200 else ALLOWED_S)
    memory_ok = want != 200 or pid is None or (w.peak_growth_mb < 300 and w.growth_mb < 100)
    ok = status == want and (want == 200 or text in _message(out)) and in_time
    ok = ok and w.health_max_s < 1.0 and not w.health_failures and memory_ok
    detail = f"{status}, {w.summary()}, {len(out) / 2**20:.1f} MB answer"
    if not ok:
        detail += f" {out[:160]!r}"
    rec.check(name, ok, detail)
    ctx.numbers[f"{AREA}: {name}"] = detail


def run(ctx: Context) -> list[Result]:
    rec = Recorder(AREA)
    pid = ctx.proc.pid if ctx.proc is not None else None
    _, _, info = http(ctx, "GET", "/info", headers=ctx.headers())
    context = json.loads(info)["max_input_length"]
    probes = [
        ("TEI /tokenize 10^6 inputs -> 413", "/tokenize", {"inputs": ["a"] * 1_000_000}, 413,
         "--max-client-batch-size"),
        ("TEI /tokenize 2048 x 700 tokens (~90 MB answer) -> 413", "/tokenize", {"inputs": ["word " * 700] * 2048},
         413, "--max-response-bytes"),
        ("TEI /decode 10^6 id lists -> 413", "/decode", {"ids": [[7592]] * 1_000_000}, 413,
         "--max-client-batch-size"),
        (f"TEI /decode 2048 x {context} ids -> 200", "/decode", {"ids": [[7592] * context] * 2048}, 200, ""),
        ("/embed_all 128 x 254 tokens (~150 MB answer) -> 413", "/embed_all", {"inputs": [ROW_TEXT] * 128}, 413,
         "--max-response-bytes"),
        ("/pooling token_embed 128 x 254 tokens -> 413", "/pooling",
         {"input": [ROW_TEXT] * 128, "task": "token_embed"}, 413, "--max-response-bytes"),
        ("/embed_all 50 x 254 tokens (56 MB answer) -> 200", "/embed_all", {"inputs": [ROW_TEXT] * 50}, 200, ""),
    ]  # fmt: skip
    for name, path, payload, want, text in probes:
        _probe(rec, ctx, pid, name, path, orjson.dumps(payload), want, text)
    return rec.results


if __name__ == "__main__":
    with ServerProcess() as s:
        for r in run(Context(s.base_url, s.port, proc=s.proc)):
            print(f"{'ok' if r.ok else 'FAILED':<7} {r.probe:<64} {r.detail}")
