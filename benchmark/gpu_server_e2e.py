"""The GPU check's end-to-end stage: a real server (HTTP, scheduler and detokenizer processes) on the
device, /v1/embeddings through all three, each vector compared with transformers' on the host CPU.

Fails when the server does not start, a request fails, a vector's cosine to transformers' is
below 0.99 (bf16 serving against a float32 reference), or, on CUDA, the scheduler's log does not
say it serves with FlashInfer. Writes OUT/e2e.json.

    python benchmark/gpu_server_e2e.py --model PATH --device cuda|cpu --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

import numpy as np
import requests
import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path[:0] = [os.path.join(ROOT, "python"), ROOT]

from test.helpers.server import ServerProcess  # noqa: E402

MIN_COSINE = 0.99
TEXTS = [
    "hello",
    "The quick brown fox jumps over the lazy dog.",
    "GPU serving: FlashInfer attention and CUDA graphs, broken at each attention call. " * 6,
    "short",
    "Embeddings of texts of very different lengths share one packed batch without padding. " * 12,
]


def reference(model: str, texts: list[str]) -> np.ndarray:
    """transformers on CPU in float32: mean pooling over the mask, normalized (MiniLM's recipe)."""
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    net = AutoModel.from_pretrained(model, dtype=torch.float32).eval()
    batch = tok(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.inference_mode():
        hidden = net(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1).numpy()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    flags = ["--model-path", args.model, "--device", args.device]
    if args.device == "cuda":
        flags += ["--attention-backend", "flashinfer"]  # refuse to start rather than fall back
    result: dict = {"device": args.device, "flags": flags}
    start = time.perf_counter()
    with ServerProcess(*flags, timeout=150) as server:
        result["startup_s"] = round(time.perf_counter() - start, 2)
        t0 = time.perf_counter()
        resp = requests.post(server.base_url + "/v1/embeddings", json={"input": TEXTS, "model": "m"}, timeout=60)
        result["request_s"] = round(time.perf_counter() - t0, 3)
        t0 = time.perf_counter()
        health = requests.get(server.base_url + "/health", timeout=10).status_code
        result["health_s"] = round(time.perf_counter() - t0, 3)
        log = server.log()
    result["status"], result["health_status"] = resp.status_code, health
    problems = []
    if resp.status_code != 200:
        problems.append(f"/v1/embeddings answered {resp.status_code}: {resp.text[:300]}")
    else:
        ours = np.array([d["embedding"] for d in resp.json()["data"]], dtype=np.float32)
        ref = reference(args.model, TEXTS)
        cos = (ours * ref).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(ref, axis=1)
        result["cosine_min"] = float(cos.min())
        if ours.shape != ref.shape or cos.min() < MIN_COSINE:
            problems.append(f"vectors differ from transformers: shape {ours.shape}, cosine min {cos.min():.5f}")
    backend = re.search(r"attention=(\w+)", log)
    result["attention_backend"] = backend.group(1) if backend else None
    if args.device == "cuda" and result["attention_backend"] != "flashinfer":
        problems.append(f"the server's attention backend is {result['attention_backend']}, not flashinfer")
    result["problems"] = problems
    with open(os.path.join(args.out, "e2e.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
