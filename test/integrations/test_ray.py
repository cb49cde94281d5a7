"""sglang.integrations.ray on a real local Ray (one session for the module, two CPUs): a Parquet
corpus through embed_dataset back to Parquet, with order, count and vectors checked against
Engine.encode, and a bad row failing the job with its id in the message.

Ray's start-up is slow and hungry on two cores: one session, jobs bounded by an alarm, and every
process it started (raylet, workers, their engines) checked gone at the end.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from contextlib import contextmanager

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sglang.integrations.ray import EmbeddingRowError, SGLangEmbedder, embed_dataset, embedding_column
from test.helpers.procs import running
from test.helpers.tiny_models import WORDS, build_tiny_bert
from test.helpers.waiting import wait_until

pytestmark = pytest.mark.slow

N_ROWS = 2000


def corpus(n: int) -> list[str]:
    """n distinct short texts in the tiny model's vocabulary."""
    return [" ".join(WORDS[(i * k + i // len(WORDS)) % len(WORDS)] for k in range(1, 3 + i % 5)) for i in range(n)]


def descendants() -> set[int]:
    """Every process below this one (Ray's gcs_server, raylet, workers, and their engines)."""
    out = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True).stdout
    children: dict[int, list[int]] = {}
    for line in out.splitlines():
        pid, ppid = map(int, line.split())
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [os.getpid()]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in found:
                found.add(c)
                todo.append(c)
    return found


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@contextmanager
def time_limit(seconds: int):
    """Fail a Ray job that hangs instead of hanging the test run."""

    def expired(*_):
        raise TimeoutError(f"Ray job still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture(scope="module")
def ray_session():
    import ray

    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    before = descendants()
    with time_limit(120):
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            configure_logging=False,
            log_to_driver=False,
        )
    ray.data.DataContext.get_current().execution_options.preserve_order = True
    try:
        yield ray
    finally:
        # Everything Ray started: its daemons, idle and actor workers, and the actors' engines (not
        # multiprocessing's resource tracker, which the driver's first Engine starts for good).
        started = {p for p in descendants() - before if "resource_tracker" not in cmdline(p)}
        ray.shutdown()
        assert wait_until(lambda: not running(sorted(started)), timeout=30), (
            f"processes left after ray.shutdown(): {running(sorted(started))}"
        )


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    """A tiny random BERT: the test is about the plumbing, so the model costs next to nothing."""
    return build_tiny_bert(str(tmp_path_factory.mktemp("tiny-bert-ray")), st_pooling="mean")


@pytest.fixture(scope="module")
def embedder(tiny_model):
    """The integration's class in this process: its Engine is also the reference for Engine.encode.

    Declared Matryoshka (any width), so `dimensions` can be checked without a second model."""
    e = SGLangEmbedder(tiny_model, cpu_threads=1, id_column="id", json_model_override_args='{"is_matryoshka": true}')
    yield e
    e.close()


def test_parquet_to_embeddings_to_parquet(ray_session, tiny_model, embedder, tmp_path):
    texts = corpus(N_ROWS)
    src, dst = tmp_path / "in", tmp_path / "out"
    src.mkdir()
    ids = np.arange(N_ROWS, dtype=np.int64) * 7  # ids that are not positions
    for part in range(4):  # several files, so the job really has several blocks
        rows = slice(part * N_ROWS // 4, (part + 1) * N_ROWS // 4)
        pq.write_table(pa.table({"id": ids[rows], "text": texts[rows]}), src / f"part-{part}.parquet")

    # One actor (each costs an Engine start); four blocks, so the rows still travel in several parts.
    ds = ray_session.data.read_parquet(str(src), override_num_blocks=4)
    with time_limit(240):
        job = embed_dataset(ds, tiny_model, concurrency=1, num_cpus=0.5, batch_size=200, id_column="id").materialize()
        assert [row["id"] for row in job.iter_rows()] == ids.tolist()  # order kept, nothing lost or repeated
        job.write_parquet(str(dst))

    # Ray names the files it writes by task, not by row order: read them back in id order (ids ascend).
    out = pq.read_table(dst).sort_by("id")
    assert out.num_rows == N_ROWS
    assert out.column("id").to_pylist() == ids.tolist()
    assert out.column("text").to_pylist() == texts
    assert out.schema.field("embedding").type == pa.list_(pa.float32())
    got = np.array(out.column("embedding").to_pylist(), dtype=np.float32)
    want = np.array([o["embedding"] for o in embedder.engine.encode(texts)], dtype=np.float32)
    assert got.shape == want.shape == (N_ROWS, 32)
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_bad_row_fails_the_job_naming_the_row(ray_session, tiny_model, tmp_path):
    texts = corpus(60)
    texts[37] = "   "
    ds = ray_session.data.from_arrow(pa.table({"id": [f"doc-{i}" for i in range(60)], "text": texts}))
    with time_limit(120), pytest.raises(Exception) as info:
        embed_dataset(ds, tiny_model, concurrency=1, num_cpus=0.5, batch_size=20, id_column="id").materialize()
    message = str(info.value)
    assert "row id='doc-37'" in message and "blank" in message, message


def test_batch_formats_and_column_types(embedder):
    texts = corpus(3)
    want = np.array([o["embedding"] for o in embedder.engine.encode(texts)], dtype=np.float32)
    for batch in (
        {"id": np.arange(3), "text": np.array(texts, dtype=object)},
        pd.DataFrame({"id": range(3), "text": texts}),
        pa.table({"id": range(3), "text": texts}),
    ):
        out = embedder(batch)
        assert out.column_names == ["id", "text", "embedding"]
        np.testing.assert_allclose(np.array(out.column("embedding").to_pylist()), want, atol=1e-6)


def test_dimensions_pass_through(embedder):
    texts = corpus(2)
    want = np.array([o["embedding"] for o in embedder.engine.encode(texts, dimensions=16)], dtype=np.float32)
    embedder.dimensions = 16
    try:
        out = embedder(pa.table({"text": texts}))
    finally:
        embedder.dimensions = None
    got = np.array(out.column("embedding").to_pylist())
    assert got.shape == (2, 16)
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_column_types():
    vectors = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    col = embedding_column(vectors)
    assert col.type == pa.list_(pa.float32()) and np.array(col.to_pylist()).tolist() == vectors.tolist()
    col = embedding_column(vectors, "fixed_size_list", "float16")
    assert col.type == pa.list_(pa.float16(), 8)
    np.testing.assert_allclose(np.array(col.to_pylist()), vectors, atol=2e-3)
    col = embedding_column(vectors, "tensor")
    np.testing.assert_array_equal(col.to_numpy(), vectors)


def test_rows_the_engine_refuses_are_named(embedder):
    for bad, what in ((None, "missing (null)"), ("", "empty"), (3.5, "not text (float")):
        with pytest.raises(EmbeddingRowError, match=re.escape(f"row id=1: 'text' is {what}")):
            embedder(pd.DataFrame({"id": [0, 1], "text": ["fine", bad]}))
    # A row only the engine can judge (too long for the model, no auto-truncation): found and named.
    with pytest.raises(EmbeddingRowError, match=r"row id=2: The input (at index \d+ )?\(\d+ tokens\) is longer"):
        embedder(pa.table({"id": [0, 1, 2], "text": ["a", "b", "word " * 600]}))
    with pytest.raises(KeyError, match="no text column 'text'"):
        embedder(pa.table({"body": ["x"]}))
    with pytest.raises(ValueError, match="column_type"):
        SGLangEmbedder(column_type="arrow")
