"""Hostile shared pieces (issue #27 item 2): a 100 KB prompt / instruction / rerank query on hundreds
of inputs. Each must be answered in seconds (a 200 when truncation makes it fit, a 400 at once when
the piece alone is over the context, 413 over --max-request-tokens), with `/health` under 1 s while
it runs and the HTTP process's RSS barely moving (frontend/shared_inputs.py).

The embedding probes run against the runner's server (the bundled MiniLM, or --url); the rerank
probes start a tiny BERT cross-encoder of their own (one HTTP worker), whose RSS they watch.
Alone: `python -m benchmark.hostile_inputs.shared_prompts`.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Optional

from benchmark.hostile_inputs.common import Context, Recorder, Result, post_json
from test.helpers.server import ServerProcess
from test.helpers.tiny_task_models import build_tiny_bert_task
from test.helpers.watch import Watch, tokenize_seconds, watched

AREA = "shared"
HUGE = "word " * 20000  # 100,000 characters, 20,000 tokens
BUDGET = 10_000  # the cross-encoder's --max-request-tokens: 64 x 128 tokens fit, 256 x 128 do not
ANSWER_S = 8.0  # seconds to an error, or to tokenize a request that runs (its compute aside)


def _error_message(body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return ""
    err = data.get("error", data.get("message")) if isinstance(data, dict) else None
    return str(err.get("message", "")) if isinstance(err, dict) else str(err or "")


def _probe(rec: Recorder, ctx: Context, pid: Optional[int], name: str, path: str, body: Any, want: tuple, text: str):
    """One watched request: its status in `want`, `text` in an error's message, answered in time,
    /health < 1 s meanwhile, and (with `pid`) RSS growth < 300 MB at peak and < 100 MB after."""

    def send():
        return post_json(ctx, path, body, timeout=120)

    try:
        before = tokenize_seconds(ctx.base_url, ctx.headers())
        w: Watch = watched(ctx.base_url, pid if pid is not None else os.getpid(), send)
        tokenize_s = tokenize_seconds(ctx.base_url, ctx.headers()) - before
    except Exception as e:  # a probe that crashes (times out) is a failed probe, not a crashed run
        rec.check(name, False, f"{type(e).__name__}: {e}")
        return
    status, _, out = w.result
    in_time = (tokenize_s if status == 200 else w.elapsed_s) < ANSWER_S
    memory_ok = pid is None or (w.peak_growth_mb < 300 and w.growth_mb < 100)
    ok = status in want and (status == 200 or text in _error_message(out)) and in_time
    ok = ok and w.health_max_s < 1.0 and not w.health_failures and memory_ok
    detail = f"{status}, {w.summary() if pid is not None else f'{w.elapsed_s:.2f} s'}"
    if status != 200 and not ok:
        detail += f" {out[:160]!r}"
    if status == 200:
        detail += f", tokenized in {tokenize_s:.2f} s"
    rec.check(name, ok, detail)
    ctx.numbers[f"shared: {name}"] = detail


def run(ctx: Context) -> list[Result]:
    rec = Recorder(AREA)
    pid = ctx.proc.pid if ctx.proc is not None else None  # the first HTTP worker's RSS, when ours
    truncated = {"input": ["a"] * 128, "prompt": HUGE, "truncate_prompt_tokens": -1}
    for path, extra in (("/v1/embeddings", {}), ("/embeddings", {}), ("/pooling", {"task": "embed"})):
        _probe(rec, ctx, pid, f"128 inputs x 100 KB prompt, truncated, {path} -> 200", path, {**truncated, **extra},
               (200,), "")  # fmt: skip
        body = {"input": ["a"] * 128, "instruction": HUGE, **extra}
        _probe(rec, ctx, pid, f"128 inputs x 100 KB instruction, {path} -> 400 at once", path, body, (400,),
               "The prompt alone")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="hostile-shared-") as tmp:
        model = build_tiny_bert_task(os.path.join(tmp, "bert-ce"), "seq_cls", num_labels=1)
        flags = ("--model-path", model, "--log-level", "warning", "--max-request-tokens", str(BUDGET))
        with ServerProcess(*flags) as ce:
            own = Context(ce.base_url, ce.port, proc=ce.proc, numbers=ctx.numbers)
            rerank = {"query": HUGE, "documents": ["a"] * 256}
            _probe(rec, own, ce.proc.pid, "/v1/rerank 100 KB query x 256 documents -> 400 at once", "/v1/rerank",
                   rerank, (400,), "context length")  # fmt: skip
            tei = {"query": HUGE, "texts": ["a"] * 256}
            _probe(rec, own, ce.proc.pid, "TEI /rerank 100 KB query x 256 texts -> 422 at once", "/rerank", tei,
                   (400, 422), "context length")  # fmt: skip
            _probe(rec, own, ce.proc.pid, "TEI /rerank 100 KB query x 64 texts, truncate -> 200", "/rerank",
                   {**tei, "texts": ["a"] * 64, "truncate": True}, (200,), "")  # fmt: skip
            _probe(rec, own, ce.proc.pid, f"TEI /rerank 100 KB query x 256 texts, truncate -> 413 (budget {BUDGET})",
                   "/rerank", {**tei, "truncate": True}, (413,), "--max-request-tokens")  # fmt: skip
    return rec.results


if __name__ == "__main__":
    with ServerProcess() as s:
        context = Context(s.base_url, s.port, proc=s.proc)
        for r in run(context):
            print(f"{'ok' if r.ok else 'FAILED':<7} {r.probe:<72} {r.detail}")
