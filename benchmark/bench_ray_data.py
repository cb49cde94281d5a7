"""Bulk embedding on Ray Data: sglang.integrations.ray against sentence-transformers in the same
Ray Data job shape, with 1 and 2 actors, in one run.

    python benchmark/bench_ray_data.py                            # 4,000 texts, layouts 1x2 and 2x1
    python benchmark/bench_ray_data.py --texts 1000 --layouts 2x1 --no-peer
    python benchmark/bench_ray_data.py --dtype bfloat16 --output-json ray_data.json

A layout AxT runs A actors with T torch threads each (A*T should not exceed the cores). Each job
reads a materialized dataset (so no file I/O is timed), adds the embedding column with
`map_batches` over an actor pool, and materializes the result. Reported per side:
- total: texts / wall time of the whole job, actor start-up (Ray worker, model load) included;
- steady: texts / time between the first and the last finished batch, excluding the rows of the
  first batch: the rate once the actors are up, which is what a long job runs at.
The peer is the callable class a Ray Data user writes without us: SentenceTransformer(...).encode
(batch_size=32) inside map_batches, same layout, float32.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_serving import DEFAULT_TEXTS, load_texts, machine_info  # noqa: E402


class TimedSGLang:
    """SGLangEmbedder plus the time each batch finished (a column the benchmark reads back)."""

    def __init__(self, **kwargs: Any) -> None:
        from sglang.integrations.ray import SGLangEmbedder

        self.inner = SGLangEmbedder(**kwargs)

    def __call__(self, batch: pa.Table) -> pa.Table:
        out = self.inner(batch)
        return out.append_column("done_at", pa.array([time.time()] * out.num_rows))


class TimedSentenceTransformers:
    """The peer: what a Ray Data user writes around sentence-transformers."""

    def __init__(self, model_path: str, threads: int) -> None:
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(threads)
        self.model = SentenceTransformer(model_path, device="cpu")

    def __call__(self, batch: pa.Table) -> pa.Table:
        vectors = self.model.encode(batch.column("text").to_pylist(), batch_size=32)
        from sglang.integrations.ray import embedding_column

        out = batch.append_column("embedding", embedding_column(np.asarray(vectors, dtype=np.float32)))
        return out.append_column("done_at", pa.array([time.time()] * out.num_rows))


def run_job(ray: Any, table: pa.Table, cls: type, kwargs: dict, actors: int, batch_size: int) -> dict:
    # One block per batch, so the actor pool shares them out (one block would go to one actor).
    ds = ray.data.from_arrow([table.slice(i, batch_size) for i in range(0, table.num_rows, batch_size)]).materialize()
    t0 = time.time()
    out = ds.map_batches(
        cls,
        fn_constructor_kwargs=kwargs,
        compute=ray.data.ActorPoolStrategy(size=actors),
        batch_size=batch_size,
        batch_format="pyarrow",
        num_cpus=0.5,
    ).materialize()
    wall = time.time() - t0
    done = np.sort(np.concatenate([b["done_at"] for b in out.iter_batches(batch_format="numpy")]))
    n = len(done)
    first = done[0]
    later = int(np.sum(done > first))
    span = done[-1] - first
    return {
        "texts": n,
        "wall_s": wall,
        "total_texts_per_s": n / wall,
        "steady_texts_per_s": later / span if span > 0 else float("nan"),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--texts", type=int, default=4000, help="rows to embed (the corpus repeated)")
    p.add_argument("--texts-file", default=DEFAULT_TEXTS)
    p.add_argument("--layouts", default="1x2,2x1", help="comma-separated ACTORSxTHREADS")
    p.add_argument("--batch-size", type=int, default=256, help="rows per map_batches call")
    p.add_argument("--dtype", default="float32", help="our Engine's dtype (the peer stays float32)")
    p.add_argument("--no-peer", action="store_true", help="skip the sentence-transformers side")
    p.add_argument("--output-json", default=None)
    args = p.parse_args()

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    from sglang.srt.server_args import default_model_path

    corpus = load_texts(args.texts_file, None)
    texts = [corpus[i % len(corpus)] for i in range(args.texts)]
    table = pa.table({"id": np.arange(len(texts)), "text": texts})
    model_path = default_model_path()
    ray.init(
        num_cpus=os.cpu_count(),
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        configure_logging=False,
        log_to_driver=False,
    )
    ray.data.DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    info = {
        **machine_info(),  # cpu_flags included
        "ray": ray.__version__,
        "texts": len(texts),
        "batch_size": args.batch_size,
        "dtype": args.dtype,
        "results": [],
    }
    print(
        f"{info['cpu']}, {info['cores']} cores, flags: {' '.join(info['cpu_flags'])}; ray {ray.__version__}; "
        f"{len(texts)} texts from {os.path.basename(args.texts_file)}"
    )
    print(f"{'layout':>8} {'side':>22} {'wall s':>8} {'total texts/s':>14} {'steady texts/s':>15}")
    try:
        for layout in args.layouts.split(","):
            actors, threads = map(int, layout.lower().split("x"))
            sides = [
                (
                    "sglang " + args.dtype,
                    TimedSGLang,
                    {"cpu_threads": threads, "dtype": args.dtype, "allow_auto_truncate": True},
                )
            ]
            if not args.no_peer:
                sides.append(
                    ("sentence-transformers", TimedSentenceTransformers, {"model_path": model_path, "threads": threads})
                )
            row = {"layout": layout}
            for name, cls, kwargs in sides:
                r = run_job(ray, table, cls, kwargs, actors, args.batch_size)
                row[name] = r
                print(
                    f"{layout:>8} {name:>22} {r['wall_s']:8.1f} {r['total_texts_per_s']:14.1f} "
                    f"{r['steady_texts_per_s']:15.1f}",
                    flush=True,
                )
            if len(sides) == 2:
                ours, peer = row[sides[0][0]], row[sides[1][0]]
                row["steady_ratio"] = ours["steady_texts_per_s"] / peer["steady_texts_per_s"]
                row["total_ratio"] = ours["total_texts_per_s"] / peer["total_texts_per_s"]
                print(f"{layout:>8} {'ours / peer':>22} {'':>8} {row['total_ratio']:14.2f} {row['steady_ratio']:15.2f}")
            info["results"].append(row)
    finally:
        ray.shutdown()
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump(info, f, indent=2)


if __name__ == "__main__":
    main()
