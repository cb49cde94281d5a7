"""The metrics one HTTP + tokenizer process exposes on GET /metrics.

Request counts come from the HTTP middleware; per-request durations and tokens from the
TokenizerManager when a request completes. The scheduler's queue and batches are its own metrics
(scheduler_metrics.py). In a server every process writes into prometheus-client's multiprocess
directory, so any worker's /metrics reports all of them (prometheus.py). Every series carries the
served model's name as `model`: a server of several models keeps one ServerMetrics per model in each
HTTP process, and the label keeps their totals apart (in the multiprocess files and in queries).
"""

from __future__ import annotations

from sglang.srt.metrics.prometheus import Counter, Gauge, Histogram, Registry

DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class ServerMetrics:
    """One HTTP + tokenizer process's metrics (gauges add up over the processes in a scrape)."""

    def __init__(self, model: str) -> None:
        if not model:
            raise ValueError("ServerMetrics needs the served model's name (its `model` label)")
        self.model = model
        self.registry = Registry()
        r = self.registry.collectors
        m = {"model": model}
        self.requests = Counter(
            "sglang_http_requests_total",
            "HTTP requests answered, by route and status code.",
            ("route", "status"),
            registry=r,
            constant=m,
        )
        self.in_flight = Gauge(
            "sglang_http_requests_in_flight", "HTTP requests being handled now.", registry=r, constant=m
        )
        self.request_duration = Histogram(
            "sglang_request_duration_seconds",
            "Time from receiving an embeddings request to its response.",
            DURATION_BUCKETS,
            registry=r,
            constant=m,
        )
        self.tokenize_duration = Histogram(
            "sglang_tokenization_duration_seconds",
            "Time spent validating and tokenizing a request.",
            DURATION_BUCKETS,
            registry=r,
            constant=m,
        )
        self.queue_duration = Histogram(
            "sglang_queue_duration_seconds",
            "Time a request's inputs waited in the scheduler queue (the longest of its inputs).",
            DURATION_BUCKETS,
            registry=r,
            constant=m,
        )
        self.inference_duration = Histogram(
            "sglang_inference_duration_seconds",
            "Forward-pass time of the batch that served a request "
            "(the longest, when its inputs spread over several batches).",
            DURATION_BUCKETS,
            registry=r,
            constant=m,
        )
        self.prompt_tokens = Counter(
            "sglang_prompt_tokens_total", "Tokens embedded for successful requests.", registry=r, constant=m
        )
        self.inputs = Counter(
            "sglang_embedding_inputs_total",
            "Inputs (texts or token lists) embedded for successful requests.",
            registry=r,
            constant=m,
        )

    def observe_request(
        self, *, inputs: int, prompt_tokens: int, tokenize: float, queue: float, inference: float
    ) -> None:
        """A request finished successfully inside the TokenizerManager."""
        self.inputs.inc(inputs)
        self.prompt_tokens.inc(prompt_tokens)
        self.tokenize_duration.observe(tokenize)
        self.queue_duration.observe(queue)
        self.inference_duration.observe(inference)

    def render(self) -> bytes:
        return self.registry.render()
