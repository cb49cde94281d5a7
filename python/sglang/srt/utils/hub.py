"""Turn a `--model-path` (local directory or hub id) into a local directory."""

from __future__ import annotations

import os
from typing import Optional

from sglang.srt.errors import ConfigError

# What a checkpoint needs to be served; LM heads and training state are skipped by the loader anyway.
_ALLOW_PATTERNS = [
    "*.json",
    "*.safetensors",
    "*.txt",
    "*.model",
    "*.tiktoken",
    "*.jinja",
    "*.pt",
    "*/*.json",
    "*/*.safetensors",
    "*/*.bin",
    "*/*.pt",
]


def resolve_model_path(model_path: str, revision: Optional[str] = None, cache_dir: Optional[str] = None) -> str:
    """A local directory is used as is; anything else is a hub id fetched with huggingface_hub.

    Honours HF_HUB_OFFLINE: offline and not cached is a one-line ConfigError, not a traceback.
    """
    expanded = os.path.expanduser(model_path)
    if os.path.isdir(expanded):
        return os.path.abspath(expanded)
    if os.path.exists(expanded):
        raise ConfigError(f"--model-path {model_path} is a file; give the checkpoint's directory")
    if model_path.startswith((".", "/", "~")) or model_path.count("/") > 1:
        raise ConfigError(f"Model directory {model_path} does not exist")

    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError

    offline = os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on")
    try:
        path = snapshot_download(
            model_path,
            revision=revision,
            cache_dir=cache_dir,
            allow_patterns=_ALLOW_PATTERNS,
            local_files_only=offline,
        )
    except HFValidationError as e:
        raise ConfigError(f"'{model_path}' is neither a local directory nor a valid hub id") from e
    except Exception as e:  # network, auth, missing repo, not cached while offline
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        hint = " (HF_HUB_OFFLINE is set and it is not in the local cache)" if offline else ""
        raise ConfigError(f"Could not get model '{model_path}' from the hub{hint}: {reason}") from e
    if not _has_weights(path):
        # Only .bin weights upstream: fetch those too.
        try:
            path = snapshot_download(
                model_path,
                revision=revision,
                cache_dir=cache_dir,
                allow_patterns=_ALLOW_PATTERNS + ["*.bin"],
                local_files_only=offline,
            )
        except Exception as e:
            raise ConfigError(f"Could not get the weights of '{model_path}': {e}") from e
    return path


def _has_weights(path: str) -> bool:
    return any(f.endswith((".safetensors", ".bin")) for f in os.listdir(path))
