"""Where --pooler-config / --max-embed-len meet the model: which pooling and normalization it
serves, and whether long inputs may be chunked for it. Checked once at start-up (ConfigError)."""

from __future__ import annotations

import logging

from sglang.srt.errors import ConfigError
from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)

# Poolings whose per-chunk vectors are averaged (by token count) into one for a long input.
CHUNKABLE_POOLINGS = ("mean", "cls", "lasttoken")


def resolve_pooling(args: ServerArgs, pooling: str, normalize: bool, dense: bool) -> tuple[str, bool]:
    """The pooling and normalization to serve: the checkpoint's, unless --pooler-config says.

    `dense`: the model answers with pooled dense vectors (not only logits, sparse or per-token rows).
    """
    overridden = args.pooling_override is not None or args.normalize_override is not None
    if overridden and (not dense or pooling == "model"):
        raise ConfigError(
            "--pooler-config pooling_type / normalize apply to text embedding models that pool their "
            f"token states (this model's output: {'its own pooling' if dense else 'not a pooled dense vector'})"
        )
    if args.pooling_override is not None and args.pooling_override != pooling:
        logger.warning("--pooler-config: pooling %s instead of the checkpoint's %s", args.pooling_override, pooling)
        pooling = args.pooling_override
    if args.normalize_override is not None:
        normalize = args.normalize_override
    check_chunking(args, pooling, dense)
    return pooling, normalize


def check_chunking(args: ServerArgs, pooling: str, dense: bool) -> None:
    """--max-embed-len needs pooled dense vectors from the model's token states."""
    if args.max_embed_len is None:
        return
    if not dense or pooling not in CHUNKABLE_POOLINGS:
        raise ConfigError(
            f"--max-embed-len (chunked processing) needs a dense embedding model with mean, CLS or last-token "
            f"pooling; this one {'pools ' + pooling if dense else 'answers with no pooled dense vector'}"
        )
    if pooling != "mean":
        logger.warning(
            "--max-embed-len with %s pooling: a long input's vector is the token-weighted mean of its chunks' "
            "%s vectors, which the model was not trained to produce (mean pooling matches it best)",
            pooling,
            pooling,
        )


def check_chunk_count(args: ServerArgs, context_length: int) -> None:
    """An input's chunks are queued as inputs of their own: the longest input's must fit one
    replica's queue share, or it could never be accepted (a 429 for every try)."""
    if args.max_embed_len is None:
        return
    chunk_len = min(context_length, args.max_num_tokens)
    most = -(-args.max_embed_len // max(1, chunk_len - 2))  # a chunk repeats up to 2 special tokens
    share = min(args.replica_queue_sizes)
    if most > share:
        raise ConfigError(
            f"--max-embed-len {args.max_embed_len} cuts an input into up to {most} chunks of {chunk_len} tokens, "
            f"more than a replica's queue holds ({share}: --max-queue-size / --dp-size); raise --max-queue-size "
            "or lower --max-embed-len"
        )
