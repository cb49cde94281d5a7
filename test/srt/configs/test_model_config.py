"""ModelConfig: embedding-model detection, start-up errors, context length, Matryoshka settings."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest

from sglang.srt.configs.model_config import NOT_EMBEDDING_MESSAGE, check_model, matryoshka_settings
from sglang.srt.errors import ConfigError
from sglang.srt.server_args import ServerArgs
from test.helpers.tiny_models import build_tiny_bert, build_tiny_qwen3, write_st_pooling


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory) -> str:
    """A plain Qwen3ForCausalLM: no sentence-transformers files, so not an embedding model by default."""
    return build_tiny_qwen3(str(tmp_path_factory.mktemp("qwen3")))


def _variant(src: str, dst: str, **config_updates) -> str:
    """A copy of `src` with config.json keys replaced (None removes a key)."""
    shutil.copytree(src, dst)
    path = os.path.join(dst, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    for key, value in config_updates.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    with open(path, "w") as f:
        json.dump(cfg, f)
    return dst


def _config(model_path: str, **kwargs):
    return check_model(ServerArgs(model_path=model_path, **kwargs))


# ----- detection -----
def test_generation_model_needs_is_embedding(qwen3_dir):
    with pytest.raises(ConfigError) as err:
        _config(qwen3_dir)
    assert str(err.value) == NOT_EMBEDDING_MESSAGE
    mc = _config(qwen3_dir, is_embedding=True)
    assert (mc.architecture, mc.pooling, mc.normalize, mc.is_encoder) == ("Qwen3ForCausalLM", "lasttoken", True, False)


def test_sentence_transformers_pooling_makes_a_decoder_an_embedding_model(qwen3_dir, tmp_path):
    d = _variant(qwen3_dir, str(tmp_path / "st"))
    write_st_pooling(d, 48, mode="lasttoken", normalize=True)
    mc = _config(d)
    assert mc.pooling == "lasttoken" and mc.normalize


def test_encoders_are_embedding_models_without_flags(tmp_path):
    mc = _config(build_tiny_bert(str(tmp_path / "bert")))
    assert mc.is_encoder and mc.pooling == "cls"


def test_unsupported_architecture_lists_supported_ones(tmp_path):
    d = tmp_path / "gpt2"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}))
    with pytest.raises(ConfigError) as err:
        _config(str(d), is_embedding=True)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("Model architecture GPT2LMHeadModel is not supported")
    for arch in (
        "BertModel",
        "Qwen3ForCausalLM",
        "Qwen2Model",
        "LlamaForCausalLM",
        "MistralModel",
        "CLIPModel",
        "SiglipModel",
    ):
        assert arch in msg


def test_custom_code_needs_trust_remote_code(tmp_path, qwen3_dir):
    d = tmp_path / "custom"
    d.mkdir()
    (d / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["MyModel"],
                "model_type": "my_custom_model",
                "auto_map": {"AutoConfig": "configuration_my.MyConfig"},
            }
        )
    )
    with pytest.raises(ConfigError, match="add --trust-remote-code"):
        _config(str(d))

    from sglang.srt.utils.hf_tokenizer import load_tokenizer

    tok_dir = tmp_path / "custom_tokenizer"
    tok_dir.mkdir()
    shutil.copy(os.path.join(qwen3_dir, "tokenizer.json"), tok_dir)
    (tok_dir / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "MyTokenizer",
                "auto_map": {"AutoTokenizer": ["tokenization_my.MyTokenizer", None]},
            }
        )
    )
    with pytest.raises(ConfigError, match="add --trust-remote-code"):
        load_tokenizer(str(tok_dir), trust_remote_code=False)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["not_embedding", "unsupported", "missing"])
def test_cli_start_up_errors_are_one_line(qwen3_dir, tmp_path, case):
    """The model check's verdict is all the output, though the engine's processes and the HTTP
    stack were already importing (entrypoints/child_start.py); a missing directory is answered
    before the check imports torch."""
    if case == "not_embedding":
        model, expected = qwen3_dir, f"error: {NOT_EMBEDDING_MESSAGE}"
    elif case == "missing":
        model = str(tmp_path / "no-such-model")
        expected = f"error: Model directory {model} does not exist"
    else:
        model = _variant(qwen3_dir, str(tmp_path / "bad"), architectures=["FancyNewForCausalLM"])
        expected = "error: Model architecture FancyNewForCausalLM is not supported. Supported architectures: "
    r = subprocess.run(
        [sys.executable, "-m", "sglang.launch_server", "--model-path", model, "--port", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(expected), r.stderr


# ----- context length -----
def test_context_length_defaults_and_override(qwen3_dir, tmp_path):
    assert _config(qwen3_dir, is_embedding=True).context_length == 256  # max_position_embeddings
    d = _variant(qwen3_dir, str(tmp_path / "st"))
    write_st_pooling(d, 48, mode="lasttoken", max_seq_length=100)
    assert _config(d).context_length == 100  # sentence-transformers' max_seq_length is lower
    assert _config(d, context_length=40).context_length == 40
    assert _config(d, context_length=1000).context_length == 1000  # RoPE: no table to run out of


def test_context_length_cannot_exceed_a_learned_position_table(tmp_path):
    d = build_tiny_bert(str(tmp_path / "bert"))
    with pytest.raises(ConfigError, match="exceeds the model's 128 position embeddings"):
        _config(d, context_length=129)


# ----- Matryoshka -----
def test_matryoshka_from_overrides(qwen3_dir):
    mc = _config(qwen3_dir, is_embedding=True)
    assert (mc.is_matryoshka, mc.matryoshka_dimensions) == (False, None)
    mc = _config(qwen3_dir, is_embedding=True, json_model_override_args='{"matryoshka_dimensions": [32, 8, 16, 8]}')
    assert (mc.is_matryoshka, mc.matryoshka_dimensions) == (True, [8, 16, 32])
    mc = _config(qwen3_dir, is_embedding=True, json_model_override_args='{"is_matryoshka": true}')
    assert (mc.is_matryoshka, mc.matryoshka_dimensions) == (True, None)


def test_matryoshka_from_config_json(qwen3_dir, tmp_path):
    d = _variant(qwen3_dir, str(tmp_path / "mrl"), matryoshka_dimensions=[16, 48])
    mc = _config(d, is_embedding=True)
    assert (mc.is_matryoshka, mc.matryoshka_dimensions) == (True, [16, 48])
    # The list wins over is_matryoshka: true (SGLang's rule: its test asks for 100 with both set, expects 400).
    mc = _config(d, is_embedding=True, json_model_override_args='{"is_matryoshka": true}')
    assert (mc.is_matryoshka, mc.matryoshka_dimensions) == (True, [16, 48])


@pytest.mark.parametrize(
    "cfg, match",
    [
        ({"matryoshka_dimensions": []}, "non-empty list"),
        ({"matryoshka_dimensions": [0, 8]}, "non-empty list"),
        ({"matryoshka_dimensions": "8,16"}, "non-empty list"),
        ({"matryoshka_dimensions": [8.5]}, "non-empty list"),
        ({"is_matryoshka": "yes"}, "is_matryoshka must be true or false"),
    ],
)
def test_invalid_matryoshka_settings(cfg, match):
    # (a width above the model's is allowed: SGLang's documented example lists 1536 for a 1024-wide model)
    assert matryoshka_settings(SimpleNamespace(matryoshka_dimensions=[8, 64]), 48) == (True, [8, 64])
    with pytest.raises(ConfigError, match=match):
        matryoshka_settings(SimpleNamespace(**cfg), 48)


def test_model_info_reports_matryoshka(qwen3_dir):
    from test.helpers.parity import make_runner

    info = make_runner(
        qwen3_dir, is_embedding=True, json_model_override_args='{"matryoshka_dimensions": [8, 16]}'
    ).model_info()
    assert (info.is_matryoshka, info.matryoshka_dimensions, info.embedding_dim) == (True, (8, 16), 48)
