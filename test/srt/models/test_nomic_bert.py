"""NomicBERT (nomic-embed-text-v1.5's architecture) on both CPU backends, against
- transformers' NomicBertModel (transformers >= 5.x ships one), on the same tensors, and
- a small independent reference written here from nomic's published architecture (the config.json
  fields of nomic-embed-text-v1.5 and the layer recipe of its modelling code, which upstream runs
  with trust_remote_code), on the config.json exactly as nomic-ai's checkpoints spell it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sglang.srt.errors import ConfigError
from test.helpers.parity import MIXED_TEXTS, hf_pool, make_runner, relative_error_rows, tokenize_for_runner
from test.helpers.tiny_encoders import build_tiny_nomic_bert


@pytest.fixture(scope="module")
def hub_dir(tmp_path_factory) -> str:
    return build_tiny_nomic_bert(str(tmp_path_factory.mktemp("nomic") / "hub"))


def nomic_reference(model_dir: str, texts: list[str]) -> np.ndarray:
    """Independent reference (labelled as such): nomic-bert's forward in plain torch, from its
    published recipe. Mean pooling then L2 normalization, as nomic-embed-text's ST files say."""
    import json

    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    cfg = json.load(open(f"{model_dir}/config.json"))
    w = load_file(f"{model_dir}/model.safetensors")
    d, h, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    hd = d // h
    out = []
    for ids in AutoTokenizer.from_pretrained(model_dir)(texts)["input_ids"]:
        ids = torch.tensor(ids)
        n = len(ids)
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.token_type_embeddings.weight"][0]
        x = F.layer_norm(x, (d,), w["emb_ln.weight"], w["emb_ln.bias"], eps)
        inv = 1.0 / (cfg["rotary_emb_base"] ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.outer(torch.arange(n).float(), inv)
        cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()

        def rope(t):  # [h, n, hd], rotate-half (non-interleaved)
            t1, t2 = t[..., : hd // 2], t[..., hd // 2 :]
            return t * cos + torch.cat([-t2, t1], -1) * sin

        for i in range(cfg["n_layer"]):
            p = f"encoder.layers.{i}."
            q, k, v = (x @ w[p + "attn.Wqkv.weight"].t()).view(n, 3, h, hd).permute(1, 2, 0, 3)
            att = (rope(q) @ rope(k).transpose(-1, -2) / hd**0.5).softmax(-1) @ v
            x = F.layer_norm(x + att.transpose(0, 1).reshape(n, d) @ w[p + "attn.out_proj.weight"].t(), (d,),
                             w[p + "norm1.weight"], w[p + "norm1.bias"], eps)  # fmt: skip
            up, gate = x @ w[p + "mlp.fc11.weight"].t(), x @ w[p + "mlp.fc12.weight"].t()
            y = (F.silu(gate) * up) @ w[p + "mlp.fc2.weight"].t()
            x = F.layer_norm(x + y, (d,), w[p + "norm2.weight"], w[p + "norm2.bias"], eps)
        out.append(F.normalize(x.mean(0), dim=-1))
    return torch.stack(out).numpy()


def transformers_reference(model_dir: str, texts: list[str]) -> np.ndarray:
    from transformers import AutoTokenizer, NomicBertModel

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = NomicBertModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    enc = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
    return F.normalize(hf_pool(hidden, enc["attention_mask"], "mean"), dim=-1).numpy()


@pytest.mark.parametrize("backend", ["cpu_varlen", "torch_native"])
def test_hub_config_matches_the_independent_reference(hub_dir, backend):
    runner = make_runner(hub_dir, attention_backend=backend)  # no flags, no --trust-remote-code
    mc = runner.model_config
    assert (mc.architecture, mc.pooling, mc.normalize, mc.hidden_size) == ("NomicBertModel", "mean", True, 32)
    assert mc.context_length == 512 and runner.model.rotary.cos_sin_cache.shape[0] == 512
    ids = tokenize_for_runner(hub_dir, MIXED_TEXTS)
    ours = runner.embed(ids)
    assert relative_error_rows(ours, nomic_reference(hub_dir, MIXED_TEXTS)).max() <= 1e-4
    single = np.concatenate([runner.embed([x]) for x in ids])
    assert np.abs(ours - single).max() <= 1e-5


def test_transformers_config_matches_transformers(tmp_path):
    d = build_tiny_nomic_bert(str(tmp_path / "native"), seed=1, hub_config=False)
    runner = make_runner(d)
    ours = runner.embed(tokenize_for_runner(d, MIXED_TEXTS))
    assert relative_error_rows(ours, transformers_reference(d, MIXED_TEXTS)).max() <= 1e-4
    assert relative_error_rows(ours, nomic_reference_native(d)).max() <= 1e-4


def nomic_reference_native(model_dir: str) -> np.ndarray:
    """The independent reference reads nomic's field names: give it the same sizes."""
    import json
    import shutil

    from test.helpers.tiny_encoders import nomic_hub_config

    hub = model_dir + "-as-hub"
    shutil.copytree(model_dir, hub)
    vocab = json.load(open(f"{model_dir}/config.json"))["vocab_size"]
    json.dump(nomic_hub_config(vocab), open(f"{hub}/config.json", "w"))
    return nomic_reference(hub, MIXED_TEXTS)


def test_unsupported_variants_fail_with_one_line(tmp_path):
    import json

    d = build_tiny_nomic_bert(str(tmp_path / "variant"), seed=2)
    cfg = json.load(open(f"{d}/config.json"))
    cfg["rotary_scaling_factor"] = 2.0
    json.dump(cfg, open(f"{d}/config.json", "w"))
    with pytest.raises(ConfigError, match="rotary_scaling_factor"):
        make_runner(d)


def test_plain_config_reading_for_transformers_without_nomic_bert(hub_dir):
    """Older transformers do not know `nomic_bert`: the config is then read from config.json as is."""
    from sglang.srt.configs.nomic_bert_config import normalize_nomic_config, read_plain_config

    cfg = normalize_nomic_config(read_plain_config(hub_dir))
    assert (cfg.hidden_size, cfg.num_attention_heads, cfg.num_hidden_layers, cfg.intermediate_size) == (32, 4, 2, 48)
    assert (cfg.max_position_embeddings, cfg.rotary_emb_base, cfg.gated_activation) == (512, 1000.0, "silu")
