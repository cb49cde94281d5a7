"""Metrics on prometheus-client: the exposition parses strictly, counts what it is told, and in
multiprocess mode one render adds up every process."""

from __future__ import annotations

import subprocess
import sys

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from sglang.srt.metrics.prometheus import Counter, Gauge, Histogram, Registry
from sglang.srt.metrics.scheduler_metrics import SchedulerMetrics
from sglang.srt.metrics.server_metrics import ServerMetrics
from test.helpers.prom import parse, value


def test_counter_gauge_histogram_render_and_parse():
    reg = Registry()
    r = reg.collectors
    c = Counter("req_total", "Requests.", ("route", "status"), registry=r)
    g = Gauge("queue", "Queue length.", registry=r)
    h = Histogram("lat_seconds", "Latency.", (0.1, 1.0), registry=r)
    c.inc(route="/a", status="200")
    c.inc(2, route="/a", status="200")
    c.inc(route='we"ird\\path\n', status="404")
    g.set(7)
    g.dec(2)
    for v in (0.05, 0.1, 0.5, 3.0):
        h.observe(v)
    fams = parse(reg.render().decode())
    assert fams["req_total"]["type"] == "counter" and fams["lat_seconds"]["type"] == "histogram"
    assert value(fams, "req_total", route="/a", status="200") == 3 == c.get(route="/a", status="200")
    assert value(fams, "req_total", route='we"ird\\path\n', status="404") == 1
    assert value(fams, "queue") == 5 == g.get()
    # le is inclusive: 0.1 falls in the 0.1 bucket.
    assert value(fams, "lat_seconds_bucket", le="0.1") == 2
    assert value(fams, "lat_seconds_bucket", le="1.0") == 3
    assert value(fams, "lat_seconds_bucket", le="+Inf") == 4 == h.count()
    assert value(fams, "lat_seconds_count") == 4 and value(fams, "lat_seconds_sum") == pytest.approx(3.65)


def test_misuse_is_refused():
    r = Registry().collectors
    with pytest.raises(ValueError):
        Counter("no_suffix", "x", registry=r)
    with pytest.raises(ValueError):
        Counter("a_total", "x", registry=r).inc(-1)
    with pytest.raises(ValueError):
        Counter("b_total", "x", ("route",), registry=r).inc(other="1")
    Gauge("g", "x", registry=r)
    with pytest.raises(ValueError):
        Gauge("g", "y", registry=r)


def test_server_and_scheduler_metrics_move():
    m = ServerMetrics()
    s = SchedulerMetrics()
    before = parse(m.render().decode())
    assert value(before, "sglang_prompt_tokens_total") == 0
    m.requests.inc(route="/v1/embeddings", status="200")
    m.observe_request(inputs=2, prompt_tokens=11, tokenize=0.001, queue=0.002, inference=0.03)
    fams = parse(m.render().decode())
    assert value(fams, "sglang_http_requests_total", route="/v1/embeddings", status="200") == 1
    assert value(fams, "sglang_prompt_tokens_total") == 11
    assert value(fams, "sglang_embedding_inputs_total") == 2
    assert value(fams, "sglang_inference_duration_seconds_bucket", le="0.05") == 1
    for family in (
        "sglang_tokenization_duration_seconds",
        "sglang_queue_duration_seconds",
        "sglang_request_duration_seconds",
        "sglang_http_requests_in_flight",
    ):
        assert family in fams
    s.observe_queue(9)
    s.observe_batch(5, 40)
    sched = parse(s.registry.render().decode())
    assert value(sched, "sglang_queue_length") == 9
    assert value(sched, "sglang_batch_size_count") == 1 and value(sched, "sglang_batch_size_sum") == 5
    assert value(sched, "sglang_batch_tokens_bucket", le="64.0") == 1
    ranked = SchedulerMetrics({"dp_rank": 1})
    ranked.observe_queue(3)
    assert value(parse(ranked.registry.render().decode()), "sglang_queue_length", dp_rank="1") == 3


_WRITER = """
import sys
from sglang.srt.metrics.prometheus import enable_multiprocess
enable_multiprocess(sys.argv[1])
from sglang.srt.metrics.server_metrics import ServerMetrics
from sglang.srt.metrics.scheduler_metrics import SchedulerMetrics
m = ServerMetrics()
for _ in range(int(sys.argv[2])):
    m.requests.inc(route="/v1/embeddings", status="200")
m.in_flight.inc()
m.in_flight.dec()
if sys.argv[3] == "scheduler":
    s = SchedulerMetrics()
    s.observe_queue(7)
    s.observe_queue(0)
    s.observe_batch(4, 100)
"""


@pytest.mark.slow
def test_multiprocess_mode_adds_every_process(tmp_path):
    """Two writers (say two HTTP workers, one also the scheduler): one render shows the sums."""
    for n, role in ((3, "scheduler"), (4, "http")):
        subprocess.run([sys.executable, "-c", _WRITER, str(tmp_path), str(n), role], check=True, timeout=60)
    merged = CollectorRegistry()
    MultiProcessCollector(merged, path=str(tmp_path))
    fams = parse(generate_latest(merged).decode())
    assert value(fams, "sglang_http_requests_total", route="/v1/embeddings", status="200") == 7
    assert value(fams, "sglang_batch_size_count") == 1 and value(fams, "sglang_batch_tokens_sum") == 100
    # Gauges are back at their idle values; the dead writers' live gauges are not summed as stale.
    assert value(fams, "sglang_queue_length") == 0
    assert value(fams, "sglang_http_requests_in_flight") == 0


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
