"""/metrics on a server of two models (#31): each model's series carry its served name and count only
its own requests and batches, across two HTTP workers (each holding both models' metric sets)."""

from __future__ import annotations

import json

import pytest
import requests

from sglang.srt.server_args import default_model_path
from test.helpers.prom import parse, value
from test.helpers.server import ServerProcess

pytestmark = pytest.mark.slow


def test_each_model_counts_its_own_requests_under_its_name(tmp_path):
    config = tmp_path / "models.json"  # the bundled MiniLM twice, under two names
    entries = [{"model_path": default_model_path(), "served_model_name": n} for n in ("alpha", "beta")]
    config.write_text(json.dumps(entries))
    sent = {"alpha": 3, "beta": 2}
    with ServerProcess("--models-config", str(config), "--tokenizer-worker-num", "2") as s:
        tokens = {}
        for name, n in sent.items():
            for _ in range(n):
                r = requests.post(s.base_url + "/v1/embeddings", json={"input": "hi there", "model": name}, timeout=60)
                assert r.status_code == 200, r.text
                tokens[name] = tokens.get(name, 0) + r.json()["usage"]["prompt_tokens"]
        text = requests.get(s.base_url + "/metrics", timeout=10).text
    fams = parse(text)
    ok = dict(route="/v1/embeddings", status="200")
    for name, n in sent.items():
        assert value(fams, "sglang_http_requests_total", model=name, **ok) == n, name
        assert value(fams, "sglang_prompt_tokens_total", model=name) == tokens[name], name
        assert value(fams, "sglang_tokenization_duration_seconds_count", model=name) == n, name
        assert value(fams, "sglang_batch_size_count", model=name, dp_rank="0") == n, name  # one input each
    unnamed = [line for line in text.splitlines() if line and not line.startswith("#") and 'model="' not in line]
    assert not unnamed, unnamed
    models = {labels["model"] for fam in fams.values() for _, labels, _ in fam["samples"]}
    assert models == {"alpha", "beta"}
