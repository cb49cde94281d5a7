"""sentence-transformers' `encode` API on a running Engine: the part of `sglang.SentenceTransformer`
that needs only an engine, so `Engine.encode` can answer sentence-transformers' arguments too.

`encode`, `encode_query` and `encode_document` take sentence-transformers' arguments and return what
it returns (a 2-D float32 numpy array for a list, 1-D for a string; tensors with `convert_to_tensor`
or `convert_to_numpy=False`; int8 / uint8 / packed binary with `precision`); `similarity` /
`similarity_pairwise` score them. The vectors come from the Engine's own processes, so `batch_size`
is how many inputs go to the engine per call (and per progress-bar step); the scheduler still forms
its own forward batches.
"""

from __future__ import annotations

import logging
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Optional, Protocol

import numpy as np

from sglang.srt.configs.model_info import Capability, ModelInfo
from sglang.srt.configs.sentence_transformers import read_sentence_transformers_info
from sglang.srt.entrypoints.st_encode import (
    DOCUMENT_PROMPT_NAMES,
    QUERY_PROMPT_NAMES,
    check_arguments,
    convert,
    finish,
    pick_prompt_name,
    resolve_prompt,
    split_inputs,
)
from sglang.srt.entrypoints.st_similarity import (
    check_similarity_fn_name,
    checkpoint_similarity_fn_name,
    similarity,
    similarity_pairwise,
)
from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)

# Engine calls of one encode in flight at once. MiniLM, 160 texts, batch_size 32, shared 2-core CPU,
# mean of 3: 4 in flight 7.7 s, one Engine call of the whole list 7.4 s, 1 in flight 11.6 s.
IN_FLIGHT = 4


class EngineLike(Protocol):
    """What the encoder uses of `sglang.Engine` (named so the engine can import this module)."""

    model_info: ModelInfo
    server_args: ServerArgs

    def encode(self, prompt: Any, *, prompt_prefix: Optional[str] = None) -> Any: ...


class SentenceEncoder:
    """sentence-transformers' encode / similarity methods over an Engine (which it does not own).

    `prompts` add to (and override) the checkpoint's; `default_prompt_name` and `similarity_fn_name`
    default to the checkpoint's sentence-transformers config; `truncate_dim` cuts every vector.
    Raises ValueError for a model without dense sentence embeddings.
    """

    def __init__(
        self,
        engine: EngineLike,
        *,
        prompts: Optional[dict[str, str]] = None,
        default_prompt_name: Optional[str] = None,
        truncate_dim: Optional[int] = None,
        similarity_fn_name: Optional[str] = None,
    ) -> None:
        if truncate_dim is not None and (
            isinstance(truncate_dim, bool) or not isinstance(truncate_dim, int) or truncate_dim < 1
        ):
            raise ValueError(f"truncate_dim must be a positive integer, got {truncate_dim!r}.")
        self.engine = engine
        self.truncate_dim = truncate_dim
        self._check_model()
        model_dir = engine.model_info.model_path
        self.prompts: dict[str, str] = {**dict(engine.model_info.prompts), **(prompts or {})}
        checkpoint_default = read_sentence_transformers_info(model_dir).default_prompt_name
        self.default_prompt_name: Optional[str] = default_prompt_name or checkpoint_default
        if self.default_prompt_name is not None and self.default_prompt_name not in self.prompts:
            raise ValueError(
                f"Default prompt name '{self.default_prompt_name}' not found in the configured prompts "
                f"dictionary with keys {list(self.prompts)!r}."
            )
        self.similarity_fn_name = similarity_fn_name or checkpoint_similarity_fn_name(model_dir) or "cosine"

    def _check_model(self) -> None:
        info = self.engine.model_info
        if Capability.EMBED not in info.capabilities:
            raise ValueError(
                f"{info.model_path} gives no dense sentence embeddings (it serves "
                f"{sorted(c.value for c in info.capabilities)}); use Engine.encode for its output."
            )

    @property
    def device(self) -> str:
        return self.engine.model_info.device

    @property
    def max_seq_length(self) -> int:
        return self.engine.model_info.max_input_length

    def get_embedding_dimension(self) -> int:
        """The width of the vectors `encode` returns (after the constructor's `truncate_dim`)."""
        dim = self.engine.model_info.embedding_dim
        return min(dim, self.truncate_dim) if self.truncate_dim else dim

    get_sentence_embedding_dimension = get_embedding_dimension

    @property
    def similarity_fn_name(self) -> str:
        """ "cosine", "dot", "euclidean" or "manhattan": the constructor's, the checkpoint's, else cosine."""
        return self._similarity_fn_name

    @similarity_fn_name.setter
    def similarity_fn_name(self, value: str) -> None:
        self._similarity_fn_name = check_similarity_fn_name(value)

    def similarity(self, embeddings1: Any, embeddings2: Any) -> Any:
        """[len(embeddings1), len(embeddings2)] tensor of scores under `similarity_fn_name`."""
        return similarity(embeddings1, embeddings2, self._similarity_fn_name)

    def similarity_pairwise(self, embeddings1: Any, embeddings2: Any) -> Any:
        """Tensor of the scores of embeddings1[i] with embeddings2[i] under `similarity_fn_name`."""
        return similarity_pairwise(embeddings1, embeddings2, self._similarity_fn_name)

    def _default_prompt(self) -> Optional[str]:
        """The prefix of calls naming no prompt: `default_prompt_name`'s (None there: none, as in
        sentence-transformers, unless the engine was given a raw `default_prompt`)."""
        if self.default_prompt_name is not None:
            return self.prompts[self.default_prompt_name]
        return self.engine.server_args.default_prompt

    def encode(
        self,
        inputs: Any = None,
        prompt_name: Optional[str] = None,
        prompt: Optional[str] = None,
        batch_size: int = 32,
        show_progress_bar: Optional[bool] = None,
        output_value: Optional[str] = "sentence_embedding",
        precision: str = "float32",
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
        device: Any = None,
        normalize_embeddings: bool = False,
        truncate_dim: Optional[int] = None,
        pool: Any = None,
        chunk_size: Optional[int] = None,
        **kwargs: Any,
    ) -> Any:
        """sentence-transformers' `encode`: the same arguments, defaults and return types.

        `show_progress_bar=None` shows a tqdm bar over the batches when this module's logger is at
        INFO or DEBUG. Refused with a ValueError naming them: `output_value` other than
        "sentence_embedding", `device` other than the engine's own, `pool`, `chunk_size` and any other
        keyword. A bad input raises the Engine's EmbeddingError.
        """
        if inputs is None:
            if "sentences" not in kwargs:  # sentence-transformers < 6 names the first argument so
                raise TypeError("encode() missing 1 required argument: 'inputs'")
            inputs = kwargs.pop("sentences")
        if show_progress_bar is None:
            show_progress_bar = logger.getEffectiveLevel() in (logging.INFO, logging.DEBUG)
        if convert_to_tensor:
            convert_to_numpy = False
        check_arguments(
            batch_size, output_value, precision, truncate_dim, device, self.device, pool, chunk_size, kwargs
        )
        batch, single = split_inputs(inputs)
        text_prompt = resolve_prompt(self.prompts, self._default_prompt(), prompt_name, prompt)
        vectors = self._embed(batch, text_prompt, batch_size, show_progress_bar)
        truncate_dim = truncate_dim if truncate_dim is not None else self.truncate_dim
        rows = finish(vectors, truncate_dim, normalize_embeddings, precision)
        return convert(rows, single, convert_to_numpy, convert_to_tensor)

    def encode_query(
        self, inputs: Any = None, prompt_name: Optional[str] = None, prompt: Optional[str] = None, **kw: Any
    ) -> Any:
        """`encode` with the model's "query" prompt unless the call names one (sentence-transformers 5+)."""
        if prompt_name is None and prompt is None:
            prompt_name = pick_prompt_name(self.prompts, QUERY_PROMPT_NAMES)
        return self.encode(inputs, prompt_name=prompt_name, prompt=prompt, **kw)

    def encode_document(
        self, inputs: Any = None, prompt_name: Optional[str] = None, prompt: Optional[str] = None, **kw: Any
    ) -> Any:
        """`encode` with the model's "document" prompt ("passage", "corpus" where it has no
        "document") unless the call names one (sentence-transformers 5+)."""
        if prompt_name is None and prompt is None:
            prompt_name = pick_prompt_name(self.prompts, DOCUMENT_PROMPT_NAMES)
        return self.encode(inputs, prompt_name=prompt_name, prompt=prompt, **kw)

    def _embed(self, batch: list, text_prompt: str, batch_size: int, show_progress_bar: bool) -> np.ndarray:
        """float32 [len(batch), dim]: the engine's vectors, `batch_size` inputs per engine call, up to
        IN_FLIGHT calls at once (within --max-queue-size) so the scheduler never waits for the next
        call's tokenization; rows come back in input order."""
        chunks = [batch[i : i + batch_size] for i in range(0, len(batch), batch_size)]
        if not chunks:
            return np.zeros((0, self.engine.model_info.embedding_dim), dtype=np.float32)
        depth = max(1, min(IN_FLIGHT, len(chunks), self.engine.server_args.max_queue_size // batch_size))
        bar = None
        if show_progress_bar:
            from tqdm.auto import tqdm  # a dependency of huggingface_hub

            bar = tqdm(total=len(chunks), desc="Batches")
        rows: list = []
        pending: deque[Future] = deque()
        try:
            with ThreadPoolExecutor(depth, thread_name_prefix="sglang-st-encode") as pool:
                for i, chunk in enumerate(chunks):
                    pending.append(pool.submit(self.engine.encode, chunk, prompt_prefix=text_prompt))
                    while pending and (len(pending) >= depth or i == len(chunks) - 1):
                        rows += [item["embedding"] for item in pending.popleft().result()]
                        if bar is not None:
                            bar.update(1)
        finally:
            if bar is not None:
                bar.close()
        return np.asarray(rows, dtype=np.float32)
