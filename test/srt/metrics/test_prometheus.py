"""Metrics on prometheus-client: the exposition parses strictly, counts what it is told, every
series of the server's metric sets carries its model's name, and in multiprocess mode one render adds
up every process while two models' metric sets keep separate totals."""

from __future__ import annotations

import subprocess
import sys

import pytest
from prometheus_client import CollectorRegistry, generate_latest, values
from prometheus_client.multiprocess import MultiProcessCollector

from sglang.srt.metrics.prometheus import MULTIPROC_ENV, Counter, Gauge, Histogram, Registry, enable_multiprocess
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
    with pytest.raises(ValueError):  # a constant label is not passed again per call
        Counter("c_total", "x", ("route",), registry=r, constant={"model": "m"}).inc(route="/a", model="n")
    with pytest.raises(ValueError):  # nor declared both ways
        Counter("d_total", "x", ("model",), registry=r, constant={"model": "m"})
    with pytest.raises(ValueError):
        ServerMetrics("")
    with pytest.raises(ValueError):
        SchedulerMetrics("", {"dp_rank": "0"})


def test_label_sets_are_looked_up_once_and_still_checked():
    """Children are cached per call-site label set: a repeated call reuses the series, a value
    given as int or str is one series, and a wrong label set is refused even after right ones."""
    reg = Registry()
    c = Counter("cached_total", "x", ("route", "status"), registry=reg.collectors, constant={"model": "m"})
    for _ in range(3):
        c.inc(route="/a", status="200")
    c.inc(route="/a", status=200)
    c.inc(status="200", route="/a")
    assert c.get(route="/a", status="200") == 5 == value(parse(reg.render().decode()), "cached_total", route="/a")
    with pytest.raises(ValueError):
        c.inc(route="/a")
    with pytest.raises(ValueError):
        c.inc(route="/a", status="200", model="n")
    assert len(c._children) == 3  # the three spellings above; the refused sets are not kept


def test_constant_labels_are_on_every_sample():
    reg = Registry()
    r = reg.collectors
    c = Counter("req_total", "Requests.", ("route",), registry=r, constant={"model": "m"})
    g = Gauge("busy", "Busy.", registry=r, constant={"model": "m", "dp_rank": 2})
    h = Histogram("lat_seconds", "Latency.", (1.0,), registry=r, constant={"model": "m"})
    fams = parse(reg.render().decode())
    # Series with no per-call labels exist (at zero) before their first update, as unlabelled ones do.
    assert fams["busy"]["samples"] == [("busy", {"model": "m", "dp_rank": "2"}, 0.0)]
    assert value(fams, "lat_seconds_count", model="m") == 0 and "req_total" not in {s for s, _, _ in _samples(fams)}
    c.inc(route="/a")
    g.set(3)
    h.observe(0.5)
    fams = parse(reg.render().decode())
    assert value(fams, "req_total", model="m", route="/a") == 1 == c.get(route="/a")
    assert value(fams, "busy", model="m", dp_rank="2") == 3 == g.get()
    assert value(fams, "lat_seconds_bucket", model="m", le="1.0") == 1 == h.count()
    assert all(labels["model"] == "m" for _, labels, _ in _samples(fams))


def _samples(fams: dict) -> list:
    return [sample for fam in fams.values() for sample in fam["samples"]]


def _every_sample_names_a_model(text: str, models: set[str]) -> None:
    """Every sample line (not only the parsed families) carries model="<one of models>"."""
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert lines and all('model="' in line for line in lines), [x for x in lines if 'model="' not in x]
    assert {labels["model"] for _, labels, _ in _samples(parse(text))} == models


def test_server_and_scheduler_metrics_move():
    m = ServerMetrics("mini")
    s = SchedulerMetrics("mini", {"dp_rank": "0"})
    before = parse(m.render().decode())
    assert value(before, "sglang_prompt_tokens_total", model="mini") == 0
    m.requests.inc(route="/v1/embeddings", status="200")
    m.observe_request(inputs=2, prompt_tokens=11, tokenize=0.001, queue=0.002, inference=0.03)
    text = m.render().decode()
    fams = parse(text)
    assert value(fams, "sglang_http_requests_total", model="mini", route="/v1/embeddings", status="200") == 1
    assert value(fams, "sglang_prompt_tokens_total", model="mini") == 11
    assert value(fams, "sglang_embedding_inputs_total", model="mini") == 2
    assert value(fams, "sglang_inference_duration_seconds_bucket", model="mini", le="0.05") == 1
    for family in (
        "sglang_tokenization_duration_seconds",
        "sglang_queue_duration_seconds",
        "sglang_request_duration_seconds",
        "sglang_http_requests_in_flight",
    ):
        assert family in fams
    _every_sample_names_a_model(text, {"mini"})
    s.observe_queue(9)
    s.observe_batch(5, 40)
    sched_text = s.registry.render().decode()
    sched = parse(sched_text)
    assert value(sched, "sglang_queue_length", model="mini", dp_rank="0") == 9
    assert value(sched, "sglang_batch_size_count") == 1 and value(sched, "sglang_batch_size_sum") == 5
    assert value(sched, "sglang_batch_tokens_bucket", le="64.0") == 1
    _every_sample_names_a_model(sched_text, {"mini"})
    ranked = SchedulerMetrics("mini", {"dp_rank": 1})
    ranked.observe_queue(3)
    assert value(parse(ranked.registry.render().decode()), "sglang_queue_length", model="mini", dp_rank="1") == 3


@pytest.fixture
def multiprocess(tmp_path, monkeypatch):
    """This process in multiprocess mode on a fresh directory; the variable and prometheus-client's
    value store are restored afterwards, so metrics made by later tests stay in memory."""
    monkeypatch.setenv(MULTIPROC_ENV, str(tmp_path))
    monkeypatch.setattr(values, "ValueClass", values.ValueClass)
    enable_multiprocess(str(tmp_path))
    return tmp_path


def test_two_models_in_one_process_keep_separate_totals(multiprocess):
    """Two models' metric sets in one HTTP process (and their schedulers) write the same metric names
    into one directory: the `model` label gives each its own slots, so neither overwrites the other."""
    alpha, beta = ServerMetrics("alpha"), ServerMetrics("beta")
    sched = {name: SchedulerMetrics(name, {"dp_rank": "0"}) for name in ("alpha", "beta")}
    for metrics, n in ((alpha, 3), (beta, 4), (alpha, 2)):  # interleaved, as concurrent requests are
        for _ in range(n):
            metrics.requests.inc(route="/v1/embeddings", status="200")
        metrics.observe_request(inputs=n, prompt_tokens=10 * n, tokenize=0.001, queue=0.0, inference=0.01)
        metrics.in_flight.inc()
    beta.in_flight.dec()
    sched["alpha"].observe_batch(8, 80)
    sched["beta"].observe_queue(6)
    text = alpha.render().decode()
    assert text == beta.render().decode()  # either model's /metrics shows the whole server
    fams = parse(text)
    ok = dict(route="/v1/embeddings", status="200")
    assert value(fams, "sglang_http_requests_total", model="alpha", **ok) == 5
    assert value(fams, "sglang_http_requests_total", model="beta", **ok) == 4
    assert value(fams, "sglang_prompt_tokens_total", model="alpha") == 50
    assert value(fams, "sglang_prompt_tokens_total", model="beta") == 40
    assert value(fams, "sglang_request_duration_seconds_count", model="alpha") == 0  # the middleware's, unused here
    assert value(fams, "sglang_tokenization_duration_seconds_count", model="alpha") == 2
    assert value(fams, "sglang_tokenization_duration_seconds_count", model="beta") == 1
    assert value(fams, "sglang_http_requests_in_flight", model="alpha") == 2
    assert value(fams, "sglang_http_requests_in_flight", model="beta") == 0
    assert value(fams, "sglang_batch_tokens_sum", model="alpha") == 80
    assert value(fams, "sglang_batch_tokens_sum", model="beta") == 0
    assert value(fams, "sglang_queue_length", model="alpha") == 0
    assert value(fams, "sglang_queue_length", model="beta") == 6
    _every_sample_names_a_model(text, {"alpha", "beta"})


_WRITER = """
import sys
from sglang.srt.metrics.prometheus import enable_multiprocess
enable_multiprocess(sys.argv[1])
from sglang.srt.metrics.server_metrics import ServerMetrics
from sglang.srt.metrics.scheduler_metrics import SchedulerMetrics
m = ServerMetrics("mini")
for _ in range(int(sys.argv[2])):
    m.requests.inc(route="/v1/embeddings", status="200")
m.in_flight.inc()
m.in_flight.dec()
if sys.argv[3] == "scheduler":
    s = SchedulerMetrics("mini", {"dp_rank": "0"})
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
    _every_sample_names_a_model(generate_latest(merged).decode(), {"mini"})


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
