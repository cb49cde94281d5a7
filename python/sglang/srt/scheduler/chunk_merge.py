"""Long inputs in the scheduler: an input that arrives in chunks (`chunk_lens`, frontend/chunking.py)
is queued as one input per chunk, and answered with one row once all of them have run.

Each chunk waits and is batched like any input, so it counts in the token budget and may run in a
different batch than its siblings. Its pooled row (unnormalized: the runner returns raw rows and
the renderer normalizes) is added in, weighted by the chunk's token count; when the last chunk is
back the input's row is the weighted sum over the total, in the place of that last chunk's row. A
chunk that fails (timeout, failed forward) fails its input at once and drops its queued siblings;
an abort of the input drops all of its chunks. The input's `prompt_tokens` counts every chunk's
tokens, their special tokens included.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, replace
from typing import MutableMapping, Optional

import numpy as np

from sglang.srt.wire.io_struct import BatchEmbeddingOutput, TokenizedEmbeddingReqInput


@dataclass
class _Input:
    """A chunked input in flight: what its answered chunks add up to so far."""

    req: TokenizedEmbeddingReqInput
    chunk_rids: list[str]
    remaining: int
    weighted: Optional[np.ndarray] = None  # float64 sum of row * tokens
    tokens: int = 0
    queue_time: float = 0.0

    def add(self, row: np.ndarray, tokens: int, queue_time: float) -> None:
        term = row.astype(np.float64) * tokens
        self.weighted = term if self.weighted is None else self.weighted + term
        self.tokens += tokens
        self.queue_time = max(self.queue_time, queue_time)
        self.remaining -= 1

    def mean(self) -> np.ndarray:
        return (self.weighted / max(self.tokens, 1)).astype(np.float32)


def chunk_requests(req: TokenizedEmbeddingReqInput) -> list[TokenizedEmbeddingReqInput]:
    """The chunks of a chunked input as inputs of their own (rid `<input rid>#<k>`)."""
    lens = np.asarray(req.chunk_lens, dtype=np.int64)
    if lens.ndim != 1 or len(lens) == 0 or lens.min() < 1 or int(lens.sum()) != req.num_tokens:
        raise ValueError(f"chunk_lens {lens.tolist()} do not cut the input's {req.num_tokens} tokens")
    ends = np.cumsum(lens)
    return [
        replace(req, rid=f"{req.rid}#{k}", input_ids=req.input_ids[end - n : end], chunk_lens=None)
        for k, (n, end) in enumerate(zip(lens.tolist(), ends.tolist()))
    ]


@dataclass
class ChunkMerger:
    inputs: dict[str, _Input] = field(default_factory=dict)  # input rid -> its state
    owner: dict[str, str] = field(default_factory=dict)  # chunk rid -> input rid

    def expand(self, reqs: list[TokenizedEmbeddingReqInput]) -> list[TokenizedEmbeddingReqInput]:
        """What to queue for `reqs`: each chunked input's chunks, the others as they are. The
        chunked inputs are tracked from here on (forget them if they are not queued)."""
        if all(r.chunk_lens is None for r in reqs):
            return reqs
        out: list[TokenizedEmbeddingReqInput] = []
        for req in reqs:
            if req.chunk_lens is None:
                out.append(req)
                continue
            chunks = chunk_requests(req)
            self.inputs[req.rid] = _Input(req, [c.rid for c in chunks], len(chunks))
            self.owner.update((c.rid, req.rid) for c in chunks)
            out.extend(chunks)
        return out

    def forget(self, reqs: list[TokenizedEmbeddingReqInput]) -> None:
        """`reqs` were refused as they arrived: stop tracking their chunks."""
        self.with_chunks([r.rid for r in reqs if r.chunk_lens is not None])

    def with_chunks(self, rids: list[str]) -> list[str]:
        """Queue entries of inputs being aborted: each chunked input's chunks instead of it (it is forgotten)."""
        if not self.inputs:
            return rids
        out: list[str] = []
        for rid in rids:
            state = self.inputs.pop(rid, None)
            if state is None:
                out.append(rid)
                continue
            for c in state.chunk_rids:
                self.owner.pop(c, None)
            out.extend(state.chunk_rids)
        return out

    def finish(
        self, out: Optional[BatchEmbeddingOutput], waiting: MutableMapping[str, TokenizedEmbeddingReqInput]
    ) -> Optional[BatchEmbeddingOutput]:
        """`out` with its chunk rows taken out, and one row for each input that they complete or
        fail; a failed input's chunks still queued are removed from `waiting`."""
        if out is None or not self.owner or not any(rid in self.owner for rid in out.rids):
            return out
        width = out.embeddings.shape[1]  # [n, dim] always (wire/forward_output.ForwardOutput)
        rows: list[tuple[int, Optional[dict]]] = []  # (row of `out`, what the input's row changes)
        dropped: set[str] = set()
        for i, rid in enumerate(out.rids):
            if rid in dropped:
                continue
            parent = self.owner.pop(rid, None)
            if parent is None:
                rows.append((i, None))
                continue
            state = self.inputs[parent]
            if out.error_codes[i] != 0:  # one chunk failed: so did the input, siblings dropped
                for sibling in self.with_chunks([parent]):
                    dropped.add(sibling)
                    waiting.pop(sibling, None)
                row = {"embeddings": np.zeros(width, np.float32)}
                rows.append((i, {**row, "rids": parent, "prompt_tokens": state.req.num_tokens}))
                continue
            state.add(out.embeddings[i], out.prompt_tokens[i], out.queue_times[i])
            if state.remaining == 0:
                del self.inputs[parent]
                done = {"rids": parent, "embeddings": state.mean(), "prompt_tokens": state.tokens}
                rows.append((i, {**done, "queue_times": state.queue_time}))
        return select_rows(out, rows)


def select_rows(out: BatchEmbeddingOutput, rows: list[tuple[int, Optional[dict]]]) -> BatchEmbeddingOutput:
    """A copy of `out` holding `rows`: (source row, None to keep it as it is, or the values that
    replace its own, by field name). Every per-row column follows; rows left out must have no
    sparse or per-token entries (chunk rows are dense), so the packed buffers stay as they are."""
    n = len(out.rids)
    changes = {}
    for f in dataclasses.fields(out):
        value = getattr(out, f.name)
        if f.name == "embeddings":
            new = np.empty((len(rows), value.shape[1]), dtype=np.float32)
            for j, (i, over) in enumerate(rows):
                new[j] = over["embeddings"] if over and "embeddings" in over else value[i]
            changes[f.name] = new
        elif f.name.endswith("_offsets") and isinstance(value, np.ndarray) and len(value) == n + 1:
            lengths = np.diff(value)
            kept = np.array([lengths[i] if over is None else 0 for i, over in rows], dtype=value.dtype)
            if int(kept.sum()) != int(lengths.sum()):
                raise ValueError(f"a merged or dropped row has {f.name} entries")
            changes[f.name] = np.concatenate([value[:1], value[0] + np.cumsum(kept)]).astype(value.dtype)
        elif isinstance(value, list) and len(value) == n:
            changes[f.name] = [over[f.name] if over and f.name in over else value[i] for i, over in rows]
    return replace(out, **changes)
