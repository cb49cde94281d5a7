"""The metrics one HTTP + tokenizer process exposes on GET /metrics.

Request counts come from the HTTP middleware; per-request durations and tokens from the
TokenizerManager when a request completes; queue length and batch shapes from the scheduler,
carried on every result message, with a `dp_rank` label for the replica that ran them
(`--dp-size`). With `--tokenizer-worker-num N` each worker process keeps its own registry, so its
/metrics covers the requests it served and the batches whose results it received.
"""

from __future__ import annotations

from sglang.srt.metrics.prometheus import Counter, Gauge, Histogram, Registry

DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
BATCH_TOKEN_BUCKETS = (16, 64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536)


class ServerMetrics:
    def __init__(self) -> None:
        r = self.registry = Registry()
        self.requests = r.register(
            Counter(
                "sglang_http_requests_total", "HTTP requests answered, by route and status code.", ("route", "status")
            )
        )
        self.in_flight = r.register(Gauge("sglang_http_requests_in_flight", "HTTP requests being handled now."))
        self.request_duration = r.register(
            Histogram(
                "sglang_request_duration_seconds",
                "Time from receiving an embeddings request to its response.",
                DURATION_BUCKETS,
            )
        )
        self.tokenize_duration = r.register(
            Histogram(
                "sglang_tokenization_duration_seconds",
                "Time spent validating and tokenizing a request.",
                DURATION_BUCKETS,
            )
        )
        self.queue_duration = r.register(
            Histogram(
                "sglang_queue_duration_seconds",
                "Time a request's inputs waited in the scheduler queue (the longest of its inputs).",
                DURATION_BUCKETS,
            )
        )
        self.inference_duration = r.register(
            Histogram(
                "sglang_inference_duration_seconds",
                "Forward-pass time of the batch that served a request "
                "(the longest, when its inputs spread over several batches).",
                DURATION_BUCKETS,
            )
        )
        self.prompt_tokens = r.register(
            Counter("sglang_prompt_tokens_total", "Tokens embedded for successful requests.")
        )
        self.inputs = r.register(
            Counter("sglang_embedding_inputs_total", "Inputs (texts or token lists) embedded for successful requests.")
        )
        # Per scheduler replica (--dp-size): the dp_rank label says which one ran the batch.
        self.queue_length = r.register(
            Gauge(
                "sglang_queue_length",
                "Inputs waiting in a scheduler replica's queue, as of the latest result this process received from it.",
                ("dp_rank",),
            )
        )
        self.batch_size = r.register(
            Histogram(
                "sglang_batch_size",
                "Inputs per forward pass (batches this process received results of).",
                BATCH_SIZE_BUCKETS,
                ("dp_rank",),
            )
        )
        self.batch_tokens = r.register(
            Histogram(
                "sglang_batch_tokens",
                "Tokens per forward pass (batches this process received results of).",
                BATCH_TOKEN_BUCKETS,
                ("dp_rank",),
            )
        )
        self.forward_duration = r.register(
            Histogram(
                "sglang_forward_duration_seconds",
                "Forward-pass time per batch (batches this process received results of).",
                DURATION_BUCKETS,
                ("dp_rank",),
            )
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

    def observe_batch(
        self, *, batch_size: int, batch_tokens: int, queue_length: int, forward_time: float = 0.0, dp_rank: int = 0
    ) -> None:
        """A result message arrived; batch_size is 0 for answers given without a forward pass."""
        rank = str(dp_rank)
        self.queue_length.set(queue_length, dp_rank=rank)
        if batch_size > 0:
            self.batch_size.observe(batch_size, dp_rank=rank)
            self.batch_tokens.observe(batch_tokens, dp_rank=rank)
            self.forward_duration.observe(forward_time, dp_rank=rank)

    def render(self) -> bytes:
        return self.registry.render()
