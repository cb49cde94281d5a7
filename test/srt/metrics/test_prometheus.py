"""The hand-written Prometheus exposition parses strictly and counts what it is told."""

from __future__ import annotations

import pytest

from sglang.srt.metrics.prometheus import Counter, Gauge, Histogram, Registry, format_value
from sglang.srt.metrics.server_metrics import ServerMetrics
from test.helpers.prom import parse, value


def test_counter_gauge_histogram_render_and_parse():
    reg = Registry()
    c = reg.register(Counter("req_total", "Requests.", ("route", "status")))
    g = reg.register(Gauge("queue", "Queue length."))
    h = reg.register(Histogram("lat_seconds", "Latency.", (0.1, 1.0)))
    c.inc(route="/a", status="200")
    c.inc(2, route="/a", status="200")
    c.inc(route='we"ird\\path\n', status="404")
    g.set(7)
    g.dec(2)
    for v in (0.05, 0.1, 0.5, 3.0):
        h.observe(v)
    fams = parse(reg.render().decode())
    assert fams["req_total"]["type"] == "counter" and fams["lat_seconds"]["type"] == "histogram"
    assert value(fams, "req_total", route="/a", status="200") == 3
    assert value(fams, "req_total", route='we"ird\\path\n', status="404") == 1
    assert value(fams, "queue") == 5
    # le is inclusive: 0.1 falls in the 0.1 bucket.
    assert value(fams, "lat_seconds_bucket", le="0.1") == 2
    assert value(fams, "lat_seconds_bucket", le="1.0") == 3
    assert value(fams, "lat_seconds_bucket", le="+Inf") == 4
    assert value(fams, "lat_seconds_count") == 4 and value(fams, "lat_seconds_sum") == pytest.approx(3.65)


def test_misuse_is_refused():
    with pytest.raises(ValueError):
        Counter("no_suffix", "x")
    with pytest.raises(ValueError):
        Counter("a_total", "x").inc(-1)
    with pytest.raises(ValueError):
        Counter("a_total", "x", ("route",)).inc(other="1")
    with pytest.raises(ValueError):
        Histogram("h", "x", (), ())
    with pytest.raises(ValueError):
        Gauge("bad name", "x")
    reg = Registry()
    reg.register(Gauge("g", "x"))
    with pytest.raises(ValueError):
        reg.register(Gauge("g", "y"))


def test_format_value():
    assert format_value(3) == "3.0" and format_value(0.25) == "0.25"
    assert format_value(float("inf")) == "+Inf" and format_value(float("nan")) == "NaN"


def test_server_metrics_exposition_moves():
    m = ServerMetrics()
    before = parse(m.render().decode())
    assert value(before, "sglang_prompt_tokens_total") == 0
    m.requests.inc(route="/v1/embeddings", status="200")
    m.observe_request(inputs=2, prompt_tokens=11, tokenize=0.001, queue=0.002, inference=0.03)
    m.observe_batch(batch_size=5, batch_tokens=40, queue_length=3)
    m.observe_batch(batch_size=0, batch_tokens=0, queue_length=9)  # a 429: no forward pass
    fams = parse(m.render().decode())
    assert value(fams, "sglang_http_requests_total", route="/v1/embeddings", status="200") == 1
    assert value(fams, "sglang_prompt_tokens_total") == 11
    assert value(fams, "sglang_embedding_inputs_total") == 2
    assert value(fams, "sglang_queue_length") == 9
    assert value(fams, "sglang_batch_size_count") == 1 and value(fams, "sglang_batch_size_sum") == 5
    assert value(fams, "sglang_batch_tokens_bucket", le="64.0") == 1
    assert value(fams, "sglang_inference_duration_seconds_bucket", le="0.05") == 1
    for family in (
        "sglang_tokenization_duration_seconds",
        "sglang_queue_duration_seconds",
        "sglang_request_duration_seconds",
        "sglang_http_requests_in_flight",
    ):
        assert family in fams


@pytest.mark.parametrize(
    "bad",
    [
        "# TYPE a counter\na_total 1",  # no final newline
        "# TYPE a gauge\nb 1\n",  # sample outside its family
        '# TYPE a gauge\na{x="1} 1\n',  # broken label
        '# TYPE h histogram\nh_bucket{le="1.0"} 3\nh_bucket{le="+Inf"} 2\nh_sum 1\nh_count 2\n',  # not cumulative
        '# TYPE h histogram\nh_bucket{le="1.0"} 1\nh_bucket{le="+Inf"} 2\nh_sum 1\nh_count 3\n',  # count mismatch
    ],
)
def test_parser_rejects_malformed_text(bad):
    with pytest.raises(AssertionError):
        parse(bad)
