"""--pooler-config (vLLM's JSON) and --max-embed-len: what is accepted, what stops start-up."""

import pytest

from sglang.srt.errors import ConfigError
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.pooler_config import PoolerSettings, parse_pooler_config

ISSUE_EXAMPLE = (
    '{"pooling_type": "MEAN", "normalize": true, "use_activation": true, '
    '"enable_chunked_processing": true, "max_embed_len": 10000}'
)


def test_vllm_example_as_is():
    assert parse_pooler_config(ISSUE_EXAMPLE) == PoolerSettings("mean", True, True, 10000)


@pytest.mark.parametrize(
    "raw, pooling",
    [('{"pooling_type": "CLS"}', "cls"), ('{"pooling_type": "last"}', "lasttoken"), ('{"pooling_type": "auto"}', None)],
)
def test_pooling_names(raw, pooling):
    assert parse_pooler_config(raw).pooling == pooling


def test_seq_pooling_type_and_use_activation_are_aliases():
    pc = parse_pooler_config({"seq_pooling_type": "MEAN", "use_activation": False})
    assert (pc.pooling, pc.normalize) == ("mean", False)


def test_empty_means_the_checkpoints_choices():
    assert parse_pooler_config(None) == PoolerSettings()
    assert parse_pooler_config("{}") == PoolerSettings()


@pytest.mark.parametrize(
    "raw, words",
    [
        ('{"pooling_typ": "MEAN", "foo": 1}', ["unknown keys", "foo", "pooling_typ"]),
        ('{"dimensions": 256}', ["dimensions", "per request"]),
        ('{"step_tag_id": 5}', ["step_tag_id"]),
        ('{"pooling_type": "ALL"}', ["per-token"]),
        ('{"pooling_type": "MAX"}', ["MEAN, CLS, LAST"]),
        ('{"normalize": "yes"}', ["true or false"]),
        ('{"normalize": true, "use_activation": false}', ["disagree"]),
        ('{"pooling_type": "CLS", "seq_pooling_type": "MEAN"}', ["disagree"]),
        ('{"enable_chunked_processing": true, "max_embed_len": 0}', ["positive integer"]),
        ('{"max_embed_len": 4000}', ["enable_chunked_processing"]),
        ("[1]", ["JSON object"]),
        ("{nope", ["not valid JSON"]),
    ],
)
def test_refusals_name_the_key(raw, words):
    with pytest.raises(ConfigError) as e:
        parse_pooler_config(raw)
    for w in words:
        assert w in str(e.value)


def test_server_args_fold_both_spellings():
    a = ServerArgs(pooler_config=ISSUE_EXAMPLE)
    assert (a.max_embed_len, a.pooling_override, a.normalize_override) == (10000, "mean", True)
    assert ServerArgs(max_embed_len=3000).max_embed_len == 3000
    same = ServerArgs(max_embed_len=10000, pooler_config=ISSUE_EXAMPLE)
    assert same.max_embed_len == 10000
    with pytest.raises(ConfigError, match="disagree"):
        ServerArgs(max_embed_len=500, pooler_config=ISSUE_EXAMPLE)
    with pytest.raises(ConfigError, match="at least 1"):
        ServerArgs(max_embed_len=0)


def test_cli_flags():
    import argparse

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    ns = parser.parse_args(["--override-pooler-config", ISSUE_EXAMPLE])
    assert ServerArgs.from_cli_args(ns).max_embed_len == 10000
    ns = parser.parse_args(["--max-embed-len", "1234"])
    assert ServerArgs.from_cli_args(ns).max_embed_len == 1234
