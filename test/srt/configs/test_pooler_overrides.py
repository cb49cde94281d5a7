"""--pooler-config pooling / normalize and --max-embed-len against the model (start-up checks)."""

import pytest

from sglang.srt.configs.model_config import check_model
from sglang.srt.configs.pooler_overrides import check_chunk_count, resolve_pooling
from sglang.srt.errors import ConfigError
from sglang.srt.server_args import ServerArgs


def test_bundled_minilm_takes_the_overrides():
    mc = check_model(ServerArgs(pooler_config='{"pooling_type": "CLS", "normalize": false}'))
    assert (mc.pooling, mc.normalize) == ("cls", False)
    mc = check_model(ServerArgs())
    assert (mc.pooling, mc.normalize) == ("mean", True)


def test_chunking_checked_against_pooling():
    args = ServerArgs(max_embed_len=2000)
    assert resolve_pooling(args, "mean", True, dense=True) == ("mean", True)
    assert resolve_pooling(args, "lasttoken", True, dense=True) == ("lasttoken", True)
    with pytest.raises(ConfigError, match="mean, CLS or last-token"):
        resolve_pooling(args, "max", True, dense=True)
    with pytest.raises(ConfigError, match="no pooled dense vector"):
        resolve_pooling(args, "cls", False, dense=False)


def test_overrides_refused_where_nothing_pools():
    args = ServerArgs(pooler_config='{"normalize": true}')
    with pytest.raises(ConfigError, match="pool their token states"):
        resolve_pooling(args, "cls", False, dense=False)
    with pytest.raises(ConfigError, match="pool their token states"):
        resolve_pooling(args, "model", True, dense=True)
    assert resolve_pooling(ServerArgs(), "model", True, dense=True) == ("model", True)


def test_longest_input_must_fit_a_replica_queue():
    check_chunk_count(ServerArgs(max_embed_len=10000), 256)  # 40 chunks, 4096 places
    with pytest.raises(ConfigError, match="up to 40 chunks of 256 tokens, more than a replica's queue holds .16"):
        check_chunk_count(ServerArgs(max_embed_len=10000, max_queue_size=32, dp_size=2), 256)
    with pytest.raises(ConfigError, match="chunks"):
        check_model(ServerArgs(max_embed_len=10000, max_queue_size=8))
