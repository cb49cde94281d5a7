"""The GPU check's CPU-testable parts: stage verdicts and rehearsal.json, the preflight's guards
(a missing module or FlashInfer, a backend that is not FlashInfer), the parity stage's per-bucket
batches and the benchmark's target verdicts. The rehearsal itself is `make gpu-rehearsal`."""

from __future__ import annotations

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmark"))
import gpu_check_report as report  # noqa: E402
import gpu_preflight as preflight  # noqa: E402

from sglang.srt.model_executor.graph_padding import choose_bucket, graph_buckets, token_buckets  # noqa: E402
from sglang.srt.server_args import default_model_path  # noqa: E402
from test.helpers import fake_flashinfer  # noqa: E402

STAGES = (
    "preflight\t0\t12\tnote\nprecompile\t124\t150\t\ngpu_tests\t1\t9\tcollection\nbench\t\t0\tskipped: out of time\n"
)


def test_stage_verdicts():
    stages = report.parse_stages(STAGES)
    assert [report.verdict(s) for s in stages] == [
        "ok",
        "timed out after 150s",
        "exit 1: collection",
        "skipped: out of time",
    ]
    assert report.summary(stages)["failed"] is True
    assert report.summary(report.parse_stages("a\t0\t1\t\n"))["failed"] is False
    assert report.summary([])["failed"] is True  # no stage ran: not a pass


def test_rehearsal_passes_only_with_every_stage_ok_tests_collected_and_the_flashinfer_guard(tmp_path):
    ok = report.parse_stages("preflight\t0\t3\t\nparity\t0\t9\t\n")
    assert report.rehearsal_passed(report.rehearsal(ok, 22, True))
    assert not report.rehearsal_passed(report.rehearsal(ok, 0, True))
    assert not report.rehearsal_passed(report.rehearsal(ok, 22, False))
    assert not report.rehearsal_passed(report.rehearsal(report.parse_stages(STAGES), 22, True))
    tsv = tmp_path / "stages.tsv"
    tsv.write_text("preflight\t0\t3\t\nparity\t1\t9\tcosine\n")
    argv = [str(tsv), str(tmp_path), "--rehearsal", str(tmp_path), "--gpu-tests-collected", "5"]
    assert report.main([*argv, "--flashinfer-missing-fails", "1"]) == 1
    written = json.loads((tmp_path / "rehearsal.json").read_text())
    assert written == {
        "stages": {"preflight": "ok", "parity": "exit 1: cosine"},
        "gpu_tests_collected": 5,
        "flashinfer_missing_fails": True,
    }
    assert json.loads((tmp_path / "summary.json").read_text())["failed"] is True


def test_missing_modules_names_each_failure(monkeypatch):
    monkeypatch.setitem(sys.modules, "flashinfer", None)  # what `import flashinfer` sees without it
    missing = preflight.missing_modules(("json", "flashinfer", "no_such_module_xyz"))
    assert set(missing) == {"flashinfer", "no_such_module_xyz"}
    assert "ModuleNotFoundError" in missing["no_such_module_xyz"]


def test_a_backend_other_than_flashinfer_fails_the_preflight():
    assert preflight.backend_problem("flashinfer") is None
    # What `auto` builds for MiniLM without CUDA: on a GPU machine this would be the silent fallback.
    name = preflight.auto_backend_name(default_model_path(), "cpu")
    assert name != "flashinfer"
    assert name in preflight.backend_problem(name)
    assert "torch_native" in preflight.backend_problem("torch_native")


@pytest.mark.slow  # imports the server's modules (a few seconds)
def test_preflight_exit_status_follows_flashinfer(monkeypatch, capsys):
    model = default_model_path()
    monkeypatch.setitem(sys.modules, "flashinfer", None)
    assert preflight.main(["--model", model, "--device", "cpu"]) == 1
    assert "cannot import flashinfer" in capsys.readouterr().err
    fake_flashinfer.install(monkeypatch)  # the stand-in imports: the rest of the guard passes on CPU
    assert preflight.main(["--model", model, "--device", "cpu"]) == 0


def test_parity_batches_land_in_their_bucket_within_context_and_seqs():
    import gpu_parity

    buckets = token_buckets(4096)
    batches = gpu_parity.bucket_batches(buckets, context=512, max_seqs=64, vocab=30522, seed=3)
    for bucket, ids in zip(buckets, batches):
        lens = [len(t) for t in ids]
        assert max(lens) <= 512 and len(lens) <= 64 and min(lens) >= 1
        plan = choose_bucket(lens, graph_buckets(4096, 64))
        assert plan is not None and plan.bucket.num_tokens == bucket, (bucket, lens)
        assert all(int(t.min()) >= 1000 and int(t.max()) < 30522 for t in ids)


def test_bench_targets_are_judged_on_the_right_rows():
    import bench_gpu

    def row(model, workload, batch, graph_ms, eager_ms, tokens):
        timing = lambda ms: {"p50_ms": ms, "tok_s": tokens / ms * 1e3, "req_s": batch / ms * 1e3}  # noqa: E731
        return {
            "model": model,
            "workload": workload,
            "batch": batch,
            "breakable": timing(graph_ms),
            "off": timing(eager_ms),
            "graphs_over_eager": eager_ms / graph_ms,
        }

    rows = [
        row("bert-base-shape", "long", 32, 20.0, 22.0, 32 * 512),  # 819k tokens/s
        row("qwen3-0.6b-shape", "short", 128, 50.0, 60.0, 128 * 24),  # 2,560 req/s; 1.2x, but 128 >= 64
        row("qwen3-0.6b-shape", "short", 8, 4.0, 10.0, 8 * 24),  # 2,000 req/s, 2.5x
        row("qwen3-0.6b-shape", "short", 32, 12.0, 18.0, 32 * 24),  # 2,667 req/s: short of 3,200; 1.5x
    ]
    t = bench_gpu.targets(rows)
    assert t["bert_base_long_tok_s"]["met"] and t["bert_base_long_tok_s"]["measured"] == pytest.approx(819200)
    assert not t["qwen3_short_req_s"]["met"] and t["qwen3_short_req_s"]["measured"] == pytest.approx(32 / 0.012)
    assert t["graphs_over_eager_short_lt_64"]["measured"] == pytest.approx(1.5)
    assert not t["graphs_over_eager_short_lt_64"]["met"]
    assert bench_gpu.targets([])["bert_base_long_tok_s"] == {"measured": None, "target": 600_000, "met": False}
