"""Bulk embedding on Ray Data: one sglang Engine per actor adds an embedding column to each batch.

    import ray
    from sglang.integrations.ray import embed_dataset

    ds = ray.data.read_parquet("corpus/")                      # a `text` column
    ds = embed_dataset(ds, "BAAI/bge-small-en-v1.5", concurrency=4, num_gpus=1)
    ds.write_parquet("embedded/")                             # ... plus `embedding`

`embed_dataset` is `ds.map_batches(SGLangEmbedder, ...)` with an actor pool; call map_batches
yourself for anything it does not expose. Needs the `ray` extra: pip install "sglang-embed[ray]".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np
import pyarrow as pa

from sglang.srt.entrypoints.engine import Engine
from sglang.srt.errors import EmbeddingError

if TYPE_CHECKING:
    import pandas
    import ray.data

Batch = Union[pa.Table, "pandas.DataFrame", dict[str, np.ndarray]]
COLUMN_TYPES = ("list", "fixed_size_list", "tensor")
OUTPUT_DTYPES = {"float32": pa.float32(), "float16": pa.float16()}


class EmbeddingRowError(ValueError):
    """A row that cannot be embedded; the message names it (id column value, or position)."""


class SGLangEmbedder:
    """A callable class for `Dataset.map_batches`: starts one Engine when Ray starts the actor and
    returns each batch as a pyarrow Table with the embedding column added, rows in order.

    text_column: the column holding the texts (str; an empty, blank or non-text value fails the
        job with an EmbeddingRowError naming the row).
    embedding_column: the column to add.
    id_column: a column whose value names a row in error messages (default: its position in the batch).
    dimensions: Matryoshka truncation, as in the API's `dimensions`.
    output_dtype: "float32" (default) or "float16" for the stored vectors.
    column_type: "list" (Arrow list<float>, what every Parquet reader understands),
        "fixed_size_list" (Arrow fixed_size_list<float>[dim], what vector stores such as LanceDB
        index), or "tensor" (Ray's tensor column: numpy arrays of shape (dim,) downstream).
    dp_size: scheduler replicas inside the Engine (--dp-size); give the actor that many GPUs.
    engine_kwargs: any other Engine / `sglang serve` option (dtype="bfloat16", cpu_threads=4,
        max_batch_size=..., allow_auto_truncate=True, ...).
    """

    def __init__(
        self,
        model_path: Optional[str] = None,
        *,
        text_column: str = "text",
        embedding_column: str = "embedding",
        id_column: Optional[str] = None,
        dimensions: Optional[int] = None,
        output_dtype: str = "float32",
        column_type: str = "list",
        dp_size: Optional[int] = None,
        **engine_kwargs: Any,
    ) -> None:
        if column_type not in COLUMN_TYPES:
            raise ValueError(f"column_type must be one of {', '.join(COLUMN_TYPES)}, not {column_type!r}")
        if output_dtype not in OUTPUT_DTYPES:
            raise ValueError(f"output_dtype must be one of {', '.join(OUTPUT_DTYPES)}, not {output_dtype!r}")
        self.text_column = text_column
        self.embedding_column = embedding_column
        self.id_column = id_column
        self.dimensions = dimensions
        self.output_dtype = output_dtype
        self.column_type = column_type
        if dp_size is not None:
            engine_kwargs["dp_size"] = dp_size
        self.engine: Optional[Engine] = Engine(model_path=model_path, **engine_kwargs)
        output = self.engine.get_model_info().get("embeddings_output", "dense")
        if output != "dense":
            self.close()
            raise ValueError(f"SGLangEmbedder needs a dense embedding model; this one returns {output} outputs")
        if dimensions is not None:
            self.engine.encode("dimensions check", dimensions=dimensions)  # a bad value fails here, not mid-job

    def __call__(self, batch: Batch) -> pa.Table:
        table = _to_arrow(batch)
        if self.text_column not in table.column_names:
            raise KeyError(f"no text column {self.text_column!r} in the batch (columns: {table.column_names})")
        texts = table.column(self.text_column).to_pylist()
        for i, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise EmbeddingRowError(
                    f"{self._row(table, i)}: {self.text_column!r} is {_describe(text)}; "
                    "every row needs non-empty text to embed"
                )
        vectors = self._encode(table, texts)
        return table.append_column(
            self.embedding_column, embedding_column(vectors, self.column_type, self.output_dtype)
        )

    def _encode(self, table: pa.Table, texts: list[str]) -> np.ndarray:
        try:
            out = self.engine.encode(texts, dimensions=self.dimensions)
        except EmbeddingError:
            # The engine names the request, not the row: find the first row it refuses on its own.
            for i, text in enumerate(texts):
                try:
                    self.engine.encode([text], dimensions=self.dimensions)
                except EmbeddingError as e:
                    raise EmbeddingRowError(f"{self._row(table, i)}: {e.message}") from e
            raise
        return np.asarray([o["embedding"] for o in out], dtype=np.float32).reshape(len(texts), -1)

    def _row(self, table: pa.Table, i: int) -> str:
        if self.id_column is not None and self.id_column in table.column_names:
            return f"row {self.id_column}={table.column(self.id_column)[i].as_py()!r}"
        return f"row {i} of its batch"

    def close(self) -> None:
        """Stop the Engine's processes (Ray calls __del__ when it retires the actor)."""
        engine, self.engine = getattr(self, "engine", None), None
        if engine is not None:
            engine.shutdown()

    def __del__(self) -> None:
        self.close()


def embed_dataset(
    ds: "ray.data.Dataset",
    model_path: Optional[str] = None,
    *,
    concurrency: int = 1,
    num_gpus: float = 0,
    num_cpus: Optional[float] = None,
    batch_size: int = 256,
    **embedder_kwargs: Any,
) -> "ray.data.Dataset":
    """`ds` with an embedding column, computed by `concurrency` actors holding one Engine each.

    num_gpus / num_cpus: what Ray reserves per actor (num_gpus=1: one GPU each; with dp_size=N
    give each actor N GPUs). Without an explicit cpu_threads, a CPU actor runs as many torch
    threads as it reserved CPUs, so actors on one node do not fight over cores.
    batch_size: rows per call; the Engine batches them further by its own token budget.
    embedder_kwargs: SGLangEmbedder's options (text_column, dimensions, column_type, dp_size, ...)
    and any Engine option.
    """
    import ray.data

    if num_cpus and "cpu_threads" not in embedder_kwargs:
        embedder_kwargs["cpu_threads"] = max(1, int(num_cpus))
    remote_args: dict[str, Any] = {}
    if num_gpus:
        remote_args["num_gpus"] = num_gpus
    if num_cpus is not None:
        remote_args["num_cpus"] = num_cpus
    return ds.map_batches(
        SGLangEmbedder,
        fn_constructor_kwargs={"model_path": model_path, **embedder_kwargs},
        compute=ray.data.ActorPoolStrategy(size=concurrency),
        batch_size=batch_size,
        batch_format="pyarrow",
        **remote_args,
    )


def embedding_column(vectors: np.ndarray, column_type: str = "list", output_dtype: str = "float32") -> pa.Array:
    """[rows, dim] vectors as an Arrow column of SGLangEmbedder's `column_type`."""
    vectors = vectors.astype(output_dtype, copy=False)
    if column_type == "tensor":
        from ray.data.extensions import ArrowTensorArray

        return ArrowTensorArray.from_numpy(vectors)
    flat = pa.array(vectors.reshape(-1), type=OUTPUT_DTYPES[output_dtype])
    if column_type == "fixed_size_list":
        return pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1])
    offsets = pa.array(np.arange(0, vectors.size + 1, vectors.shape[1], dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, flat)


def _to_arrow(batch: Batch) -> pa.Table:
    if isinstance(batch, pa.Table):
        return batch
    from ray.data.block import BlockAccessor

    table = BlockAccessor.batch_to_block(batch)  # numpy dicts and pandas frames, tensor columns too
    return table if isinstance(table, pa.Table) else pa.Table.from_pandas(table, preserve_index=False)


def _describe(value: object) -> str:
    if value is None:
        return "missing (null)"
    if isinstance(value, str):
        return "empty" if not value else f"blank ({value!r})"
    return f"not text ({type(value).__name__}: {str(value)[:60]!r})"
