"""Engine: the serving engine in-process, for offline use (no HTTP).

Usage:
    import sglang
    with sglang.Engine(model_path="...", is_embedding=True) as engine:
        out = engine.encode(["a", "b"])   # [{"embedding": [...], "meta_info": {...}}, ...]
        vecs = engine.encode(["a", "b"], normalize_embeddings=True)  # sentence-transformers' answer:
                                                                     # float32 numpy array [2, dim]

Several models (each with its own scheduler, loaded side by side), picked per call by name:
    with sglang.Engine(model_path=["/models/embedder", "/models/reranker"]) as engine:
        engine.encode("a", model="/models/embedder")   # the first model when `model` is not given
"""

from __future__ import annotations

import asyncio
import atexit
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Union

import orjson

from sglang.srt.configs.model_info import ModelInfo, OutputKind
from sglang.srt.configs.served_models import ServedModel, plan_models
from sglang.srt.entrypoints.server_processes import ServerProcesses
from sglang.srt.frontend.embed_options import set_prompt
from sglang.srt.frontend.inputs import Prompt, normalize_input
from sglang.srt.frontend.openai.multi_vector import multi_vector_output
from sglang.srt.frontend.openai.serving_base import model_not_found
from sglang.srt.frontend.tokenizer_manager import TokenizerManager
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.tracing import Tracing
from sglang.srt.wire.io_struct import FORMAT_RAW, FORMAT_SPARSE_DICT
from sglang.srt.wire.matryoshka import validate_dimensions

if TYPE_CHECKING:
    from sglang.srt.entrypoints.st_face import SentenceEncoder


def _sparse_payload(payload: bytes) -> dict[int, float]:
    """A sparse model's {"token_id": weight} JSON object -> {token_id: weight}."""
    return {int(k): v for k, v in orjson.loads(payload).items()}


@dataclass(frozen=True)
class EngineModel:
    """One model of an Engine: its options, what its scheduler reported, and its TokenizerManager."""

    args: ServerArgs
    info: ModelInfo
    tm: TokenizerManager


class Engine:
    """Starts each model's scheduler and detokenizer processes; tokenizes in the caller's process.

    Takes the keyword arguments of ServerArgs (`max_batch_size=...`, `dtype=...`, ...);
    `model_path` may be a list, or `models_config` a models file (docs/scaling.md), for several models.
    """

    def __init__(self, model_path: Union[str, list[str], None] = None, is_embedding: bool = True, **kwargs) -> None:
        self.server_args = ServerArgs(model_path=model_path, is_embedding=is_embedding, **kwargs)
        models = plan_models(self.server_args)
        self._processes = ServerProcesses(self.server_args, models)
        self._processes.prestart()  # they import torch and the model code while the models are checked
        try:
            # Imported here, not at the top: it imports torch (~1.7 s), which the children just
            # started are importing too, side by side with this.
            from sglang.srt.configs.model_config import check_model

            for args in models:  # config problems surface here, before any process runs
                check_model(args)
        except BaseException:
            self._processes.shutdown()
            raise
        args = self.server_args
        self._tracing = Tracing.start(args.enable_trace, args.otlp_traces_endpoint, "engine")
        self._closed = False
        self._sentence_encoder: Optional["SentenceEncoder"] = None
        served = self._processes.start()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="sglang-engine-loop", daemon=True)
        self._thread.start()
        self.models: dict[str, EngineModel] = {}
        for m in served:
            model = EngineModel(m.args, m.info, self._call(self._make_tokenizer_manager(m)))
            self.models.update({name: model for name in m.args.served_model_names})
        self._order = [self.models[m.name] for m in served]
        # The first model's options and info: what a one-model Engine always exposed.
        self.server_args, self.model_info = self._order[0].args, self._order[0].info
        self._processes.watch(self._on_model_death, lambda reason: None, self._on_model_revived)
        atexit.register(self.shutdown)

    async def _make_tokenizer_manager(self, served: ServedModel) -> TokenizerManager:
        tm = TokenizerManager(served.args, served.port_args, served.info, tracing=self._tracing)
        tm.start()
        return tm

    def _on_model_death(self, index: int, reason: str) -> None:
        self._loop.call_soon_threadsafe(self._order[index].tm.on_engine_dead, reason)

    def _on_model_revived(self, index: int) -> None:
        self._loop.call_soon_threadsafe(self._order[index].tm.on_engine_back)

    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def model(self, name: Optional[str] = None) -> EngineModel:
        """The model served as `name` (a name or alias; None: the first model)."""
        if name is None:
            return self._order[0]
        model = self.models.get(name)
        if model is None:
            raise model_not_found(name, [m.args.served_model_name for m in self._order])
        return model

    def encode(
        self,
        prompt: Prompt = None,
        dimensions: Optional[int] = None,
        multi_vector: Optional[bool] = None,
        input_type: Optional[str] = None,
        prompt_prefix: Optional[str] = None,
        model: Optional[str] = None,
        **st_kwargs: Any,
    ) -> Union[dict, list[dict], Any]:
        """Embed one input (-> dict) or a batch (-> list of dicts), like SGLang's Engine.encode.

        Given any of sentence-transformers' `encode` arguments (`batch_size`, `show_progress_bar`,
        `normalize_embeddings`, `convert_to_numpy`, `convert_to_tensor`, `prompt_name`, `precision`,
        `truncate_dim`, `output_value`, `device`, `sentences`, ...), it is sentence-transformers'
        `encode` instead and returns what that returns (a 2-D float32 numpy array for a list, 1-D for
        a string, tensors, quantized arrays): see `encode_query` / `encode_document` and
        `sglang.SentenceTransformer`. Its text prompt is `prompt_prefix` here (SGLang's `prompt` is
        the input); over-long inputs follow the engine's `allow_auto_truncate`.

        An input is a string, a list of token ids, or (multimodal models) a `{"text", "image"}`
        dict as the HTTP API takes it.

        `embedding` is a list of floats: the vector, or a classifier's logits; on a sparse model
        (SPLADE, --sparse-head) it is a {token_id: weight} dict.

        Multi-vector (ColBERT) models, or `multi_vector=True` on a model with such a head, give
        one vector per token: `embedding` is a list of lists and `token_ids` says whose each is
        (`input_type` "query" or "document", as on /v1/embeddings). On every model `input_type` also
        picks the model's prompt of that name, as on /v1/embeddings (frontend/input_types.py);
        `prompt_prefix` is a raw prefix for every text input instead ("": none, not even the default).

        `model` picks one of several models by name (default: the first); sentence-transformers'
        arguments always use the first model.

        Raises EmbeddingError for a bad input, with the same message the HTTP API would give.
        """
        if st_kwargs:
            if model is not None:
                raise TypeError("model= picks one of several models for SGLang's encode arguments only")
            if dimensions is not None or multi_vector is not None or input_type is not None:
                raise TypeError(
                    "dimensions / multi_vector / input_type are SGLang's encode arguments; with "
                    f"sentence-transformers' ({', '.join(sorted(st_kwargs))}) use truncate_dim / prompt_name"
                )
            return self.sentence_encoder.encode(prompt, prompt=prompt_prefix, **st_kwargs)
        if prompt is None:
            raise TypeError("encode() missing 1 required argument: 'prompt'")
        target = self.model(model)
        info, served = target.info, target.args.served_model_name
        req, single = normalize_input(prompt)
        validate_dimensions(dimensions, info, served)
        req.dimensions = dimensions
        req.token_output = multi_vector_output(info, served, multi_vector, input_type, dimensions)
        set_prompt(req, info, prompt=prompt_prefix, input_type=input_type)  # that prompt, or the default
        sparse = info.embeddings_output is OutputKind.SPARSE and req.token_output is None
        req.encoding_format = FORMAT_SPARSE_DICT if sparse else FORMAT_RAW
        payloads, prompt_tokens, token_ids = [], [], []
        # A call larger than --max-queue-size could never be queued whole: it goes in parts.
        for part in req.split(target.args.max_queue_size):
            result = self._call(target.tm.embed(part))
            payloads += result.payloads
            prompt_tokens += result.prompt_tokens
            token_ids += result.token_ids or [None] * len(result.payloads)
        out = []
        for p, n, ids in zip(payloads, prompt_tokens, token_ids):
            item = {
                "embedding": _sparse_payload(p) if sparse else p.tolist(),  # float32 rows, typed
                "meta_info": {"prompt_tokens": n},
            }
            if req.token_output is not None:
                item["token_ids"] = orjson.loads(ids) if ids else []
            out.append(item)
        return out[0] if single else out

    def encode_query(self, inputs: Any = None, **kwargs: Any) -> Any:
        """sentence-transformers 5+'s `encode_query`: its arguments, the model's "query" prompt."""
        return self.sentence_encoder.encode_query(inputs, **kwargs)

    def encode_document(self, inputs: Any = None, **kwargs: Any) -> Any:
        """sentence-transformers 5+'s `encode_document`: its arguments, the model's "document" prompt."""
        return self.sentence_encoder.encode_document(inputs, **kwargs)

    @property
    def sentence_encoder(self) -> "SentenceEncoder":
        """sentence-transformers' encode / similarity API on this engine (made on first use; a
        ValueError for a model without dense sentence embeddings)."""
        if self._sentence_encoder is None:
            from sglang.srt.entrypoints.st_face import SentenceEncoder

            self._sentence_encoder = SentenceEncoder(self)
        return self._sentence_encoder

    def get_model_info(self, model: Optional[str] = None) -> dict:
        return self.model(model).info.to_dict()

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._loop.is_running():
                for model in self._order:
                    self._call(model.tm.close())
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(timeout=5)
        finally:
            self._processes.shutdown()
            self._tracing.shutdown()
            atexit.unregister(self.shutdown)

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
