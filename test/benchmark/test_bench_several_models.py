"""The several-models benchmark's pieces that decide its numbers: the round order, the two setups'
command lines, the requests and how answers are counted, process roles, memory reads, the A/B table."""

from __future__ import annotations

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmark"))
from bench_several_models import (  # noqa: E402
    Model,
    Setup,
    parse_args,
    payload,
    report,
    role,
    round_order,
    server_commands,
    setup_names,
    table,
    texts_answered,
)
from rss_sampler import memory_mb  # noqa: E402

MODELS = [Model("embed", "/m/embedder", "embed"), Model("rerank", "/m/cross", "rerank")]


def test_rounds_alternate_which_setup_goes_first():
    assert round_order(1) == ["A", "B"]
    assert round_order(3) == ["A", "B", "B", "A", "A", "B"]


def test_one_server_serves_both_models_from_a_models_file_and_setup_b_one_each(tmp_path):
    commands = server_commands(MODELS, str(tmp_path), "--cpu-threads 1")
    (a,) = commands["A"]
    config = a[a.index("--models-config") + 1]
    with open(config) as f:
        assert json.load(f) == [
            {"model-path": "/m/embedder", "served-model-name": "embed"},
            {"model-path": "/m/cross", "served-model-name": "rerank"},
        ]
    assert len(commands["B"]) == 2
    for cmd, model in zip(commands["B"], MODELS):
        assert cmd[cmd.index("--model-path") + 1] == model.path
        assert cmd[cmd.index("--served-model-name") + 1] == model.name
    for cmd in [a, *commands["B"]]:  # the same options everywhere: only the model layout differs
        assert cmd.count("--allow-auto-truncate") == 1 and cmd[cmd.index("--cpu-threads") + 1] == "1"
        assert "{port}" in cmd


def test_setup_b_may_be_the_same_two_model_server_with_other_flags(tmp_path):
    commands = server_commands(MODELS, str(tmp_path), "--dtype bfloat16", "one-server", "--cpu-threads 1")
    (a,), (b,) = commands["A"], commands["B"]
    assert b[: len(a)] == a and b[len(a) :] == ["--cpu-threads", "1"]
    assert "--cpu-threads" not in a and a[a.index("--dtype") + 1] == "bfloat16"
    args = parse_args(["--b-layout", "one-server", "--b-server-args", "--cpu-threads 1"])
    assert setup_names(args) == {"A": "one server, two models", "B": "one server, two models --cpu-threads 1"}
    assert setup_names(parse_args([]))["B"] == "two servers, one model each"


def test_requests_name_their_model_and_walk_the_corpus():
    texts = [f"t{i}" for i in range(10)]
    path, body = payload(MODELS[0], texts, 3, 2, 4)
    assert path == "/v1/embeddings"
    assert body == {"model": "embed", "input": ["t6", "t7"], "encoding_format": "base64"}
    assert payload(MODELS[0], texts, 12, 1, 4)[1]["input"] == "t2"  # cycled, one text as a string
    path, body = payload(MODELS[1], texts, 1, 1, 4)
    assert path == "/v1/rerank"
    assert body == {"model": "rerank", "query": "t5", "documents": ["t6", "t7", "t8", "t9"]}


def test_answers_count_embedded_texts_or_scored_documents():
    assert texts_answered({"data": [{}, {}]}) == 2
    assert texts_answered({"results": [{}, {}, {}]}) == 3
    assert texts_answered({}) == 0


@pytest.mark.parametrize(
    "name, expected",
    [
        ("http (main)", "http"),
        ("sglang-schedule", "scheduler"),
        ("sglang-sched-1", "scheduler"),
        ("sglang-detokeni", "detokenizer"),
        ("sglang-http-1", "http worker"),
        ("python", "other"),
    ],
)
def test_process_roles(name, expected):
    assert role(name) == expected


def test_memory_of_this_process_and_of_a_gone_one():
    rss, pss = memory_mb(os.getpid())
    assert 10 < pss <= rss
    assert memory_mb(2**22 + 1) is None  # above pid_max's default ceiling: no such process


def _round(texts_per_s: float, p50: float, ok: int = 10) -> dict:
    return {"texts_per_s": texts_per_s, "p50_ms": p50, "p95_ms": 2 * p50, "requests": 10, "ok": ok}


def test_table_takes_medians_over_rounds_and_divides_a_by_b():
    a = Setup("A", [], {}, rounds=[{"embed": _round(10, 100)}, {"embed": _round(30, 300)}, {"embed": _round(20, 50)}])
    b = Setup(
        "B", [], {}, rounds=[{"embed": _round(5, 100, ok=9)}, {"embed": _round(10, 200)}, {"embed": _round(40, 100)}]
    )
    rows = {r["setup"]: r for r in table({"A": a, "B": b}, MODELS[:1])}
    assert rows["A"]["texts_per_s"] == 20 and rows["A"]["p50_ms"] == 100 and rows["A"]["rounds"] == [10, 30, 20]
    assert rows["B"]["texts_per_s"] == 10 and rows["B"]["errors"] == 1
    assert rows["A/B"]["texts_per_s"] == 2.0 and rows["A/B"]["p50_ms"] == 1.0 and rows["A/B"]["p95_ms"] == 1.0


def test_the_report_holds_the_table_cpu_and_both_memory_samples(capsys):
    def setup(key: str, texts_per_s: float, servers: int, rss: float) -> Setup:
        s = Setup(key, [None] * servers, {})
        s.rounds = [{m.name: {**_round(texts_per_s, 100), "texts": 10 * texts_per_s} for m in MODELS}]
        s.cores, s.cpu_s = [{"scheduler": 0.9, "http": 0.1}], [10.0]
        s.memory_start = [{"server": i, "role": "http", "rss_mb": rss, "pss_mb": rss / 2} for i in range(servers)]
        s.memory = [{**r, "rss_mb": r["rss_mb"] + 10} for r in s.memory_start]
        return s

    out = report({"A": setup("A", 20, 1, 120), "B": setup("B", 10, 2, 110)}, MODELS, parse_args([]))
    assert [(r["model"], r["setup"]) for r in out["table"]] == [
        (m, s) for m in ("embed", "rerank") for s in ("A", "B", "A/B")
    ]
    assert out["table"][2]["texts_per_s"] == 2.0
    assert out["cpu"]["A"]["texts_per_cpu_s"] == 2 * 200 / 10 and out["cpu"]["A"]["total"] == 1.0
    assert out["memory"]["A"]["started"]["total"] == {"rss_mb": 120, "pss_mb": 60}
    assert out["memory"]["B"]["after_load"]["total"] == {"rss_mb": 240, "pss_mb": 110}
    printed = capsys.readouterr().out
    assert "A/B: RSS 0.55, PSS 0.55" in printed and "server 1 http 110 / 55" in printed


def test_bad_flags_are_refused():
    assert parse_args([]).second == "cross-encoder" and parse_args([]).sessions == "shared"
    for bad in (["--clients", "1"], ["--rounds", "0"], ["--duration", "0"], ["--second", "sparse"]):
        with pytest.raises(SystemExit):
            parse_args(bad)
