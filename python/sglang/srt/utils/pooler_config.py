"""vLLM's `--pooler-config` JSON, read into the few settings this server has for it.

vLLM users start servers with e.g. `--pooler-config '{"pooling_type": "MEAN", "normalize": true,
"enable_chunked_processing": true, "max_embed_len": 10000}'`. The keys that map onto something
this server does are accepted as they are; keys of vLLM's that have no counterpart here, and keys
vLLM does not know either, stop start-up with a ConfigError that names them (a silently ignored
setting would serve different vectors than the user asked for).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Optional, Union

from sglang.srt.errors import ConfigError

logger = logging.getLogger(__name__)

# vLLM's sequence pooling names -> this server's Pooler methods (layers/pooler.py).
POOLING_TYPES = {"MEAN": "mean", "CLS": "cls", "LAST": "lasttoken"}
# Keys vLLM's PoolerConfig has that this server cannot honour, with what to do instead.
UNSUPPORTED = {
    "tok_pooling_type": "per-token outputs are asked per request (/embed_all, /pooling task token_embed)",
    "dimensions": "ask for fewer dimensions per request (`dimensions`) on a Matryoshka model",
    "softmax": "classifier outputs are served as the checkpoint defines them",
    "activation": "classifier outputs are served as the checkpoint defines them",
    "logit_bias": "classifier outputs are served as the checkpoint defines them",
    "step_tag_id": "reward (STEP) pooling is not served",
    "returned_token_ids": "reward (STEP) pooling is not served",
}
SUPPORTED = ("pooling_type", "seq_pooling_type", "normalize", "use_activation", "enable_chunked_processing")
SUPPORTED += ("max_embed_len",)


@dataclass(frozen=True)
class PoolerSettings:
    """What a --pooler-config asks for. None: the checkpoint's own choice (or no chunking)."""

    pooling: Optional[str] = None  # a layers/pooler.py method: mean, cls, lasttoken
    normalize: Optional[bool] = None
    enable_chunked_processing: bool = False
    max_embed_len: Optional[int] = None


def parse_pooler_config(raw: Union[None, str, dict]) -> PoolerSettings:
    """The settings of a --pooler-config (JSON text, or a dict from Python), ConfigError when it
    holds anything this server would not honour."""
    if raw is None or raw == "":
        return PoolerSettings()
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ConfigError(f"--pooler-config is not valid JSON: {e}") from e
    if not isinstance(raw, dict):
        raise ConfigError('--pooler-config must be a JSON object, e.g. \'{"pooling_type": "MEAN"}\'')
    unknown = sorted(k for k in raw if k not in SUPPORTED and k not in UNSUPPORTED)
    if unknown:
        raise ConfigError(f"--pooler-config has unknown keys: {', '.join(unknown)} (known: {', '.join(SUPPORTED)})")
    refused = [k for k in raw if k in UNSUPPORTED and raw[k] is not None]
    if refused:
        reasons = "; ".join(f"{k}: {UNSUPPORTED[k]}" for k in refused)
        raise ConfigError(f"--pooler-config keys this server does not support: {reasons}")
    chunked = _flag(raw, "enable_chunked_processing") or False
    max_len = raw.get("max_embed_len")
    if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1):
        raise ConfigError(f"--pooler-config max_embed_len must be a positive integer, not {max_len!r}")
    if max_len is not None and not chunked:
        raise ConfigError(
            "--pooler-config max_embed_len has no effect without enable_chunked_processing: true "
            "(inputs over the context length are refused or truncated as before)"
        )
    if chunked and max_len is None:
        logger.warning(
            "--pooler-config enable_chunked_processing without max_embed_len: as in vLLM, inputs stay "
            "limited to the context length; set max_embed_len (or --max-embed-len) to chunk longer ones"
        )
    return PoolerSettings(_pooling(raw), _normalize(raw), chunked, max_len)


def _flag(raw: dict[str, Any], key: str) -> Optional[bool]:
    value = raw.get(key)
    if value is not None and not isinstance(value, bool):
        raise ConfigError(f"--pooler-config {key} must be true or false, not {value!r}")
    return value


def _pooling(raw: dict[str, Any]) -> Optional[str]:
    given = {k: raw[k] for k in ("pooling_type", "seq_pooling_type") if raw.get(k) is not None}
    if len(given) == 2 and str(given["pooling_type"]).upper() != str(given["seq_pooling_type"]).upper():
        raise ConfigError("--pooler-config pooling_type and seq_pooling_type disagree")
    if not given:
        return None
    key, value = next(iter(given.items()))
    name = str(value).upper()
    if name == "AUTO":
        return None
    if name in ("ALL", "STEP"):
        raise ConfigError(
            f"--pooler-config {key} {value!r}: per-token pooling is asked per request here "
            "(/embed_all, /pooling task token_embed), not set for the server"
        )
    if name not in POOLING_TYPES:
        raise ConfigError(f"--pooler-config {key} must be one of MEAN, CLS, LAST (or auto), not {value!r}")
    return POOLING_TYPES[name]


def _normalize(raw: dict[str, Any]) -> Optional[bool]:
    normalize, activation = _flag(raw, "normalize"), _flag(raw, "use_activation")
    if normalize is not None and activation is not None and normalize != activation:
        raise ConfigError("--pooler-config normalize and use_activation disagree (vLLM reads them as one setting)")
    return normalize if normalize is not None else activation
