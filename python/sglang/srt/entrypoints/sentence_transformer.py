"""`sglang.SentenceTransformer`: sentence-transformers' model object, served by the Engine.

For code written against `sentence_transformers.SentenceTransformer`, changing the import is the
migration: the constructor takes the model path, `device`, `prompts`, `default_prompt_name`,
`truncate_dim` and `similarity_fn_name`; `encode`, `encode_query` and `encode_document` take
sentence-transformers' arguments and return what it returns (a 2-D float32 numpy array for a list,
1-D for a string; tensors with `convert_to_tensor` or `convert_to_numpy=False`; int8 / uint8 /
packed binary with `precision`); `similarity` / `similarity_pairwise` score them. The vectors
come from the Engine's own processes (tokenizer in the caller, scheduler and renderer as children),
so `batch_size` is how many inputs go to the engine per call (and per progress-bar step); the
scheduler still forms its own forward batches.

The methods are `st_face.SentenceEncoder`'s; this class adds what owning the engine takes: the
constructor (model path, `device`, engine options) and `shutdown`. `Engine.encode` answers
sentence-transformers' arguments through the same SentenceEncoder.
"""

from __future__ import annotations

from typing import Any, Optional

from sglang.srt.entrypoints.engine import Engine
from sglang.srt.entrypoints.st_face import SentenceEncoder
from sglang.srt.entrypoints.st_similarity import check_similarity_fn_name

# sentence-transformers constructor arguments that steer its own loading, and what to do instead.
UNSUPPORTED_INIT: dict[str, str] = {
    "modules": "the engine loads the checkpoint's modules itself; pass model_name_or_path",
    "cache_folder": "set HF_HOME for the hub cache",
    "token": "set HF_TOKEN for private hub models",
    "use_auth_token": "set HF_TOKEN for private hub models",
    "model_kwargs": "pass the engine's options instead (dtype=..., quantization=...)",
    "processor_kwargs": "the tokenizer is the checkpoint's",
    "tokenizer_kwargs": "the tokenizer is the checkpoint's",
    "config_kwargs": "pass json_model_override_args='{...}'",
    "model_card_data": "model cards are not written here",
}


def _engine_device(device: Optional[str]) -> dict[str, Any]:
    """ServerArgs options for sentence-transformers' `device` ("cpu", "cuda", "cuda:1")."""
    if device is None:
        return {}
    kind, _, index = str(device).partition(":")
    if kind == "cpu" and not index:
        return {"device": "cpu"}
    if kind == "cuda" and (not index or index.isdigit()):
        return {"device": "cuda", "base_gpu_id": int(index or 0)}
    raise ValueError(f"device {device!r} is not supported; use 'cpu', 'cuda' or 'cuda:N'.")


class SentenceTransformer(SentenceEncoder):
    """sentence-transformers' `SentenceTransformer` on the serving engine, which it starts and owns.

    Other keyword arguments are the Engine's (server flags: `dtype="bfloat16"`, `max_batch_size=64`,
    `dp_size=2`, ...). Inputs longer than the model's limit are cut, as sentence-transformers cuts
    them (`allow_auto_truncate=True` unless given).
    """

    def __init__(
        self,
        model_name_or_path: Optional[str] = None,
        *,
        device: Optional[str] = None,
        prompts: Optional[dict[str, str]] = None,
        default_prompt_name: Optional[str] = None,
        truncate_dim: Optional[int] = None,
        similarity_fn_name: Optional[str] = None,
        backend: str = "torch",
        local_files_only: bool = False,
        **engine_kwargs: Any,
    ) -> None:
        for name in UNSUPPORTED_INIT:
            if engine_kwargs.get(name) is not None:
                raise ValueError(f"{name} is not supported by sglang.SentenceTransformer: {UNSUPPORTED_INIT[name]}.")
            engine_kwargs.pop(name, None)
        if backend != "torch":
            raise ValueError(f"backend {backend!r} is not supported: the engine runs its own model code.")
        if truncate_dim is not None and (
            isinstance(truncate_dim, bool) or not isinstance(truncate_dim, int) or truncate_dim < 1
        ):
            raise ValueError(f"truncate_dim must be a positive integer, got {truncate_dim!r}.")
        if similarity_fn_name is not None:
            similarity_fn_name = check_similarity_fn_name(similarity_fn_name)  # before any process starts
        engine_kwargs.update(_engine_device(device))
        engine_kwargs.setdefault("allow_auto_truncate", True)
        engine = Engine(model_path=model_name_or_path, is_embedding=True, **engine_kwargs)
        try:
            super().__init__(
                engine,
                prompts=prompts,
                default_prompt_name=default_prompt_name,
                truncate_dim=truncate_dim,
                similarity_fn_name=similarity_fn_name,
            )
        except BaseException:
            engine.shutdown()
            raise

    def shutdown(self) -> None:
        self.engine.shutdown()

    def __enter__(self) -> "SentenceTransformer":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
