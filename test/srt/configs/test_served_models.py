"""plan_models (configs/served_models.py): each model's ServerArgs from repeated --model-path, the
SGLANG_MODEL_PATH list or a --models-config file, and the start-up errors of a bad plan. Nothing is
loaded: the model directories only hold a config.json, so the paths exist."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sglang.cli import parse_serve_args
from sglang.srt.configs.served_models import plan_models
from sglang.srt.errors import ConfigError
from sglang.srt.server_args import ServerArgs


@pytest.fixture
def dirs(tmp_path: Path) -> list[str]:
    """Three model directories a, b, c."""
    out = []
    for name in ("a", "b", "c"):
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text('{"architectures": ["BertModel"]}')
        out.append(str(d))
    return out


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def planned(config: str, **flags) -> list[ServerArgs]:
    return plan_models(ServerArgs(models_config=config, **flags))


def refused(config: str, **flags) -> str:
    with pytest.raises(ConfigError) as exc:
        planned(config, **flags)
    return str(exc.value)


# ----- one model, repeated paths -----


def test_one_model_is_the_base_itself(dirs):
    base = ServerArgs(model_path=dirs[0], served_model_name=["x", "y"], dp_size=2)
    assert plan_models(base) == [base] and plan_models(base)[0] is base
    assert base.served_model_names == ["x", "y"]


def _paths_and_names(models: list[ServerArgs]) -> list[tuple]:
    return [(m.model_path, m.served_model_name, m.tokenizer_path, m.more_model_paths) for m in models]


def test_repeated_model_paths_three_ways(dirs):
    a, b = dirs[0], dirs[1]
    # Names default to the path's last folder (the path as given is an alias); tokenizers to the path.
    want = [(a, os.path.basename(a), a, []), (b, os.path.basename(b), b, [])]
    by_list = ServerArgs(model_path=[a, b], dtype="float32", max_batch_size=7)
    by_flags = parse_serve_args(
        ["--model-path", a, "--model-path", b, "--dtype", "float32", "--max-batch-size", "7"], {}
    )
    by_env = parse_serve_args([], {"SGLANG_MODEL_PATH": f"{a},{b}", "SGLANG_DTYPE": "float32"})
    for base in (by_list, by_flags, by_env):
        assert (base.model_path, base.more_model_paths) == (a, [b])
        models = plan_models(base)
        assert _paths_and_names(models) == want
        assert [m.served_model_aliases for m in models] == [[a], [b]]
        assert [m.dtype for m in models] == ["float32", "float32"]  # the command line's flags are everyone's
    assert [m.max_batch_size for m in plan_models(by_flags)] == [7, 7]


def test_command_line_paths_replace_the_variables(dirs):
    a, b, c = dirs
    base = parse_serve_args(["--model-path", a, "--model-path", b], {"SGLANG_MODEL_PATH": c})
    assert [m.model_path for m in plan_models(base)] == [a, b]
    one = parse_serve_args(["--model-path", a], {})
    assert plan_models(one) == [one] and one.more_model_paths == []


def test_the_same_path_twice_claims_one_name(dirs):
    with pytest.raises(ConfigError, match="both claim the name"):
        plan_models(ServerArgs(model_path=[dirs[0], dirs[0]]))


# ----- models files -----


def test_yaml_models_list_with_per_model_settings(tmp_path, dirs):
    a, b = dirs[0], dirs[1]
    config = write(
        tmp_path,
        "models.yaml",
        f"""
models:
  - model-path: {a}
    served-model-name: [small, small-v1, minilm]
    dp-size: 2
    max_queue_size: 64
    pooler-config: {{pooling_type: CLS, normalize: false}}
    hf_overrides: {{max_position_embeddings: 128}}
  - model_path: {b}
    dtype: bfloat16
    is-embedding: false
    max-running-requests: 9
""",
    )
    first, second = planned(config, max_batch_size=5, is_embedding=True)
    assert (first.model_path, first.served_model_name, first.served_model_aliases) == (
        a,
        "small",
        ["small-v1", "minilm"],
    )
    assert first.served_model_names == ["small", "small-v1", "minilm"]
    assert (first.dp_size, first.max_queue_size, first.max_batch_size) == (2, 64, 5)
    assert (first.pooling_override, first.normalize_override) == ("cls", False)
    assert first.model_override_args == {"max_position_embeddings": 128}
    assert first.tokenizer_path == a and first.models_config is None
    assert (second.model_path, second.served_model_name, second.tokenizer_path) == (b, os.path.basename(b), b)
    assert second.served_model_aliases == [b]
    assert (second.dtype, second.is_embedding, second.max_batch_size) == ("bfloat16", False, 9)
    assert (second.dp_size, second.max_queue_size, second.pooling_override) == (1, ServerArgs().max_queue_size, None)
    assert second.model_override_args == {}


def test_json_list_form_with_string_overrides(tmp_path, dirs):
    a, b = dirs[0], dirs[1]
    entries = [
        {"model": a, "served_model_name": "x", "cpu-threads": "3"},
        {"model-path": b, "pooler_config": '{"pooling_type": "MEAN"}', "json-model-override-args": '{"k": 1}'},
    ]
    first, second = planned(write(tmp_path, "models.json", json.dumps(entries)))
    assert (first.model_path, first.served_model_name, first.cpu_threads) == (a, "x", 3)
    assert (second.pooling_override, second.model_override_args) == ("mean", {"k": 1})


def test_json_models_mapping_form_and_yml_suffix(tmp_path, dirs):
    a, b = dirs[0], dirs[1]
    as_json = write(tmp_path, "m.json", json.dumps({"models": [{"model-path": a}, {"model-path": b}]}))
    as_yml = write(tmp_path, "m.yml", f"- model-path: {a}\n- model-path: {b}\n")
    for config in (as_json, as_yml):
        assert [m.model_path for m in planned(config)] == [a, b]


def test_an_entry_may_turn_a_command_line_switch_off(tmp_path, dirs):
    config = write(
        tmp_path, "m.yaml", f"- model-path: {dirs[0]}\n  trust-remote-code: false\n- model-path: {dirs[1]}\n"
    )
    first, second = planned(config, trust_remote_code=True)
    assert (first.trust_remote_code, second.trust_remote_code) == (False, True)


# ----- what a models file may not say -----


@pytest.mark.parametrize(
    "entry,message",
    [
        ("port: 8000", "`port` is a server-wide setting"),
        ("api-key: secret", "`api-key` is a server-wide setting"),
        ("max_payload_bytes: 10", "`max_payload_bytes` is a server-wide setting"),
        ("colour: blue", "unknown key `colour`"),
        ("dp-size: two", "`dp-size`: invalid value 'two'"),
        ("dp-size: 2.5", "`dp-size`: invalid value 2.5"),
        ("dp-size: true", "`dp-size` must be a single value"),
        ("dp-size: [1, 2]", "`dp-size` must be a single value"),
        ("dtype: int4", "`dtype` must be one of auto, float32"),
        ("quantization: int4", "`quantization` must be one of"),
        ("is-embedding: maybe", "`is-embedding` must be true or false"),
        ("served-model-name: []", "served-model-name must be a name or a list of names"),
        ("served-model-name: [x, 5]", "served-model-name must be a name or a list of names"),
        ("max-batch-size: 0", "--max-batch-size must be at least 1"),
        ("dp-size: 4\n  max-queue-size: 2", "must be at least --dp-size"),
        ("pooler-config: not-json", "--pooler-config is not valid JSON"),
        ("hf-overrides: '[1]'", "--json-model-override-args must be a JSON object"),
    ],
)
def test_a_bad_entry_names_its_place(tmp_path, dirs, entry, message):
    config = write(tmp_path, "models.yaml", f"- model-path: {dirs[1]}\n- model-path: {dirs[0]}\n  {entry}\n")
    text = refused(config)
    assert text.startswith(f"{config} model 2: ") and message in text, text


def test_an_entry_without_a_model_path(tmp_path, dirs):
    config = write(tmp_path, "models.yaml", "- served-model-name: lonely\n")
    assert refused(config) == f"{config} model 1: needs a model-path"
    assert "model 1: `model-path` must be a single value" in refused(
        write(tmp_path, "l.yaml", f"- model-path: [{dirs[0]}]\n")
    )


@pytest.mark.parametrize(
    "entries",
    [
        lambda a, b: [{"model-path": a}, {"model-path": a}],
        lambda a, b: [{"model-path": a, "served-model-name": "x"}, {"model-path": b, "served-model-name": "x"}],
        lambda a, b: [{"model-path": a, "served-model-name": ["x", "y"]}, {"model-path": b, "served-model-name": "y"}],
        lambda a, b: [{"model-path": a, "served-model-name": ["x", b]}, {"model-path": b}],  # an alias takes b's name
    ],
)
def test_two_models_claiming_one_name_are_refused(tmp_path, dirs, entries):
    config = write(tmp_path, "models.json", json.dumps(entries(dirs[0], dirs[1])))
    assert "both claim the name" in refused(config)


@pytest.mark.parametrize(
    "name,text,message",
    [
        ("m.yaml", "[]", "must hold a non-empty list of models"),
        ("m.yaml", "models: []", "must hold a non-empty list of models"),
        ("m.yaml", "just text", "must hold a non-empty list of models"),
        ("m.yaml", "- a\n- b\n", "must hold a non-empty list of models"),
        ("m.json", "{}", "must hold a non-empty list of models"),
        ("m.yaml", "models: [", "is not valid YAML"),
        ("m.json", "[{", "is not valid JSON"),
        ("m.txt", "- model-path: x\n", "is not valid JSON"),  # not .yaml/.yml: read as JSON
    ],
)
def test_a_file_that_is_not_a_list_of_models(tmp_path, name, text, message):
    config = write(tmp_path, name, text)
    got = refused(config)
    assert got.startswith(f"--models-config {config}") and message in got, got


def test_a_missing_file(tmp_path):
    assert "No such file or directory" in refused(str(tmp_path / "absent.yaml"))


# ----- flags that name one model, given with several -----


def test_models_config_with_model_paths_is_refused(tmp_path, dirs):
    config = write(tmp_path, "m.yaml", f"- model-path: {dirs[0]}\n")
    for argv in (["--model-path", dirs[1], "--model-path", dirs[2]], ["--model-path", dirs[1]]):
        with pytest.raises(ConfigError, match="--models-config names every model: give it without --model-path"):
            parse_serve_args(["--models-config", config, *argv], {})
    with pytest.raises(ConfigError, match=r"\(set by SGLANG_MODEL_PATH\)"):
        parse_serve_args(["--models-config", config], {"SGLANG_MODEL_PATH": dirs[1]})
    assert [m.model_path for m in plan_models(parse_serve_args([], {"SGLANG_MODELS_CONFIG": config}))] == [dirs[0]]


@pytest.mark.parametrize("flag,value", [("--served-model-name", "x"), ("--tokenizer-path", "tok")])
def test_one_models_flags_with_several_models_are_refused(tmp_path, dirs, flag, value):
    config = write(tmp_path, "m.yaml", f"- model-path: {dirs[0]}\n- model-path: {dirs[1]}\n")
    for several in (["--model-path", dirs[0], "--model-path", dirs[1]], ["--models-config", config]):
        with pytest.raises(ConfigError, match=f"{flag} .*with several models"):
            parse_serve_args([*several, flag, value], {})
    with pytest.raises(ConfigError, match="with several models"):
        ServerArgs(model_path=[dirs[0], dirs[1]], served_model_name="x")
    assert parse_serve_args(["--model-path", dirs[0], flag, value], {}).model_path == dirs[0]  # one model: fine


# ----- what the command line's ServerArgs derived follows the entry -----


def test_an_entrys_pooler_config_brings_its_own_max_embed_len(tmp_path, dirs):
    chunked = '{"max_embed_len": 1000, "enable_chunked_processing": true}'
    config = write(
        tmp_path,
        "m.yaml",
        f"""
- model-path: {dirs[0]}
  pooler-config: {{max_embed_len: 2000, enable_chunked_processing: true}}
- model-path: {dirs[1]}
  pooler-config: {{pooling_type: CLS}}
- model-path: {dirs[2]}
""",
    )
    models = planned(config, pooler_config=chunked)
    assert [m.max_embed_len for m in models] == [2000, None, 1000]  # the third keeps the command line's
    assert [m.pooling_override for m in models] == [None, "cls", None]
    config = write(tmp_path, "n.yaml", f"- model-path: {dirs[0]}\n  pooler-config: {{pooling_type: CLS}}\n")
    assert planned(config, max_embed_len=700)[0].max_embed_len == 700  # given as its own flag: kept
    config = write(tmp_path, "o.yaml", f"- model-path: {dirs[0]}\n  max-embed-len: 3000\n")
    assert "--max-embed-len 3000 and --pooler-config max_embed_len 1000 disagree" in refused(
        config, pooler_config=chunked
    )


def test_an_entrys_cuda_graph_mode_wins_over_disable_cuda_graph(tmp_path, dirs):
    config = write(
        tmp_path,
        "m.yaml",
        f"- model-path: {dirs[0]}\n  cuda-graph-mode: full\n- model-path: {dirs[1]}\n"
        f"- model-path: {dirs[2]}\n  cuda-graph-mode: full\n  disable-cuda-graph: true\n",
    )
    models = planned(config, disable_cuda_graph=True)
    assert [(m.cuda_graph_mode, m.disable_cuda_graph) for m in models] == [
        ("full", False),
        ("off", True),
        ("off", True),
    ]


def test_an_entrys_default_prompt_replaces_the_command_lines_either_way(tmp_path, dirs):
    config = write(
        tmp_path,
        "m.yaml",
        f"- model-path: {dirs[0]}\n  default-prompt: 'query: '\n- model-path: {dirs[1]}\n"
        f"- model-path: {dirs[2]}\n  default-prompt-name: document\n",
    )
    models = planned(config, default_prompt_name="query")
    assert [(m.default_prompt_name, m.default_prompt) for m in models] == [
        (None, "query: "),
        ("query", None),
        ("document", None),
    ]
    assert [m.default_prompt_name for m in planned(config, default_prompt="q: ")] == [None, None, "document"]
    both = write(tmp_path, "b.yaml", f"- model-path: {dirs[0]}\n  default-prompt: x\n  default-prompt-name: y\n")
    assert "cannot be used together" in refused(both)


def test_relative_paths_are_found_beside_the_models_file(tmp_path, monkeypatch):
    """A relative model path that exists beside the models file is taken from there (wherever the
    server starts); one that does not (a hub id) is kept as written."""
    models_dir = tmp_path / "conf"
    (models_dir / "ckpt").mkdir(parents=True)
    (models_dir / "ckpt" / "config.json").write_text("{}")
    config = models_dir / "models.yaml"
    config.write_text("- model-path: ckpt\n  served-model-name: local\n- model-path: BAAI/bge-m3\n")
    monkeypatch.chdir(tmp_path)
    local, hub = plan_models(ServerArgs(models_config=str(config)))
    assert local.model_path == str(models_dir / "ckpt")
    assert hub.model_path == "BAAI/bge-m3"


def test_models_without_cpu_threads_share_the_cores():
    """Each replica of a model that names no cpu-threads gets cores / replicas (at least one); a
    model that names it, or a command-line --cpu-threads, keeps its own."""
    from sglang.srt.configs.served_models import share_cpu_threads

    def models(*dp_sizes: int) -> list[ServerArgs]:
        return [ServerArgs(dp_size=dp, max_queue_size=64) for dp in dp_sizes]

    two = models(1, 1)
    share_cpu_threads(two, [False, False], cores=8)
    assert [m.cpu_threads for m in two] == [4, 4]
    mixed = models(2, 1)
    share_cpu_threads(mixed, [False, True], cores=8)
    assert mixed[0].cpu_threads == 2 and mixed[1].cpu_threads is None  # 3 replicas on 8 cores: 2 each
    crowded = models(1, 1, 1)
    share_cpu_threads(crowded, [False] * 3, cores=2)
    assert [m.cpu_threads for m in crowded] == [1, 1, 1]


def test_plan_models_shares_threads_unless_given(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        (d / "config.json").write_text("{}")
    shared = plan_models(ServerArgs(model_path=[str(a), str(b)]))
    assert all(m.cpu_threads is not None and m.cpu_threads >= 1 for m in shared)
    given = plan_models(ServerArgs(model_path=[str(a), str(b)], cpu_threads=3))
    assert [m.cpu_threads for m in given] == [3, 3]
    config = tmp_path / "models.json"
    config.write_text(json.dumps([{"model-path": str(a), "cpu-threads": 5}, {"model-path": str(b)}]))
    first, second = plan_models(ServerArgs(models_config=str(config)))
    assert first.cpu_threads == 5 and second.cpu_threads is not None


def test_default_names_are_last_folders_unless_two_share_one(tmp_path):
    """A hub id's or a directory's last folder names the model; two models whose paths end in the
    same folder keep their paths as names (a name must route to one model)."""
    same = []
    for parent in ("x", "y"):
        d = tmp_path / parent / "model"
        d.mkdir(parents=True)
        (d / "config.json").write_text("{}")
        same.append(str(d) + "/")
    first, second = plan_models(ServerArgs(model_path=same))
    assert (first.served_model_name, second.served_model_name) == (same[0].rstrip("/"), same[1].rstrip("/"))
    other = tmp_path / "reranker"
    other.mkdir()
    (other / "config.json").write_text("{}")
    named = plan_models(ServerArgs(model_path=[same[0], str(other)]))
    assert [m.served_model_names for m in named] == [["model", same[0].rstrip("/")], ["reranker", str(other)]]
