"""Several models behind one server: each model's ServerArgs, from repeated --model-path or a models file.

A model gets the command line's options, overridden by its entry in --models-config. Only options
that belong to one model may differ (its weights, names, dtype, batching, replicas, queue share);
what belongs to the port (host, TLS, API key, limits of a request, HTTP workers) is the command
line's alone, so an entry naming it is refused rather than silently ignored.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any, Optional

from sglang.srt.configs.model_info import ModelInfo
from sglang.srt.errors import ConfigError
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.network import PortArgs
from sglang.srt.utils.pooler_config import parse_pooler_config

# The ServerArgs fields a models-file entry may set: the "model", "batching" and "execution" flags,
# the replicas and the image resize bounds (the image limits of a request stay server-wide).
PER_MODEL_FIELDS = frozenset(
    {
        "model_path",
        "tokenizer_path",
        "served_model_name",
        "is_embedding",
        "trust_remote_code",
        "revision",
        "download_dir",
        "dtype",
        "quantization",
        "device",
        "context_length",
        "allow_auto_truncate",
        "json_model_override_args",
        "chat_template",
        "sparse_head",
        "default_prompt_name",
        "default_prompt",
        "pooler_config",
        "max_embed_len",
        "max_batch_size",
        "max_num_tokens",
        "max_queue_delay",
        "max_queue_size",
        "cpu_threads",
        "attention_backend",
        "cpu_allocator",
        "cpu_pool_mb",
        "disable_cuda_graph",
        "cuda_graph_mode",
        "cuda_graph_max_tokens",
        "cuda_graph_max_seqs",
        "mem_fraction_static",
        "dp_size",
        "load_balance_method",
        "base_gpu_id",
        "startup_timeout",
        "mm_min_pixels",
        "mm_max_pixels",
    }
)
# Other spellings an entry may use (the flags' aliases), by field.
KEY_ALIASES = {
    "hf_overrides": "json_model_override_args",
    "override_pooler_config": "pooler_config",
    "max_running_requests": "max_batch_size",
    "max_prefill_tokens": "max_num_tokens",
    "model": "model_path",
}


@dataclass(frozen=True)
class ServedModel:
    """One model of a running server, as the HTTP processes need it: its options, the sockets of its
    engine processes, and what its scheduler reported at start-up (picklable: HTTP workers get it)."""

    args: ServerArgs
    port_args: PortArgs
    info: ModelInfo

    @property
    def name(self) -> str:
        return self.args.served_model_name


def plan_models(base: ServerArgs) -> list[ServerArgs]:
    """Every model's ServerArgs: `[base]` for one model; a ConfigError names a bad entry or a name
    two models claim, before any process starts."""
    if base.models_config:
        entries = [resolve_paths(e, base.models_config) for e in read_models_file(base.models_config)]
    elif base.more_model_paths:
        entries = [{"model_path": p} for p in (base.model_path, *base.more_model_paths)]
    else:
        return [base]
    models = [model_args(base, entry, where) for where, entry in entries_with_place(base, entries)]
    name_by_folder(models, [not _sets(entry, "served_model_name") for entry in entries])
    check_names(models)
    explicit = [base.cpu_threads is not None or _sets(entry, "cpu_threads") for entry in entries]
    share_cpu_threads(models, explicit)
    return models


def name_by_folder(models: list[ServerArgs], unnamed: list[bool]) -> None:
    """A model given no served-model-name is named by its path's last folder (BAAI/bge-m3 ->
    bge-m3, /models/reranker/ -> reranker), with the path as given kept as an alias; where two
    models share a last folder, both keep their paths as names (one model keeps its path, as ever)."""
    folders = [os.path.basename(m.model_path.rstrip("/")) for m in models]
    for m, folder, named_by_path in zip(models, folders, unnamed):
        if not named_by_path or not folder or folders.count(folder) > 1 or folder == m.served_model_name:
            continue
        m.served_model_aliases = [m.served_model_name, *(a for a in m.served_model_aliases if a != folder)]
        m.served_model_name = folder


def share_cpu_threads(models: list[ServerArgs], explicit: list[bool], cores: Optional[int] = None) -> None:
    """Give each replica of a model without its own cpu-threads an equal share of the cores.

    One model's replicas take every core between them; several models doing the same run cores x
    models torch threads, which spin against each other under load (measured on 2 cores, two models
    under mixed load: 3.1 texts/s with a thread per core each, 24.2 with one thread each;
    docs/benchmarks.md). A GPU replica uses its threads only for host-side work."""
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    replicas = sum(m.dp_size for m in models)
    share = max(1, cores // replicas)
    for m, given in zip(models, explicit):
        if not given:
            m.cpu_threads = share


def _sets(entry: dict, field_name: str) -> bool:
    """Whether a models-file entry sets `field_name` (under any spelling)."""
    return any(KEY_ALIASES.get(str(k).replace("-", "_"), str(k).replace("-", "_")) == field_name for k in entry)


def entries_with_place(base: ServerArgs, entries: list[dict]) -> list[tuple[str, dict]]:
    origin = base.models_config or "--model-path"
    return [(f"{origin} model {i + 1}", entry) for i, entry in enumerate(entries)]


def read_models_file(path: str) -> list[dict]:
    """The entries of a models file: a list of mappings, or a mapping with a `models` list."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError(f"--models-config {path}: {e.strerror}") from None
    if path.endswith((".yaml", ".yml")):
        data = _load_yaml(path, text)
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"--models-config {path} is not valid JSON: {e}") from None
    if isinstance(data, dict) and "models" in data:
        data = data["models"]
    if not isinstance(data, list) or not data or not all(isinstance(e, dict) for e in data):
        raise ConfigError(f"--models-config {path} must hold a non-empty list of models, or a `models:` list")
    return data


# Entry keys naming files: a relative one is found beside the models file first (as Docker Compose
# does), else taken as given (a hub id such as BAAI/bge-m3 looks like a relative path too).
PATH_KEYS = ("model_path", "model-path", "model", "tokenizer_path", "tokenizer-path", "chat_template", "chat-template")


def resolve_paths(entry: dict, models_file: str) -> dict:
    out = dict(entry)
    here = os.path.dirname(os.path.abspath(models_file))
    for key in PATH_KEYS:
        value = out.get(key)
        if not isinstance(value, str) or not value:
            continue
        value = os.path.expanduser(value)
        beside = os.path.join(here, value)
        out[key] = beside if not os.path.isabs(value) and os.path.exists(beside) else value
    return out


def _load_yaml(path: str, text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"--models-config {path} is not valid YAML: {e}") from None


def model_args(base: ServerArgs, entry: dict, where: str) -> ServerArgs:
    """`base` with the entry's options: the model's own ServerArgs (validated like the command line)."""
    actions = _flag_actions()
    changes: dict[str, Any] = {}
    for raw_key, value in entry.items():
        key = str(raw_key).replace("-", "_")
        key = KEY_ALIASES.get(key, key)
        if key not in PER_MODEL_FIELDS:
            if key in {f.name for f in dataclasses.fields(ServerArgs)}:
                raise ConfigError(f"{where}: `{raw_key}` is a server-wide setting: give it on the command line")
            raise ConfigError(f"{where}: unknown key `{raw_key}`")
        changes[key] = _coerce(key, value, actions.get(key), where)
    if not changes.get("model_path"):
        raise ConfigError(f"{where}: needs a model-path")
    # What the first model's flags derived (its name, tokenizer, paths) is not every model's.
    fresh = {
        "served_model_name": None,
        "served_model_aliases": [],
        "tokenizer_path": None,
        "more_model_paths": [],
        "models_config": None,
    }
    try:
        return dataclasses.replace(base, **{**fresh, **_unset_derived(base, changes), **changes})
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None


def _unset_derived(base: ServerArgs, changes: dict[str, Any]) -> dict[str, Any]:
    """What the command line's ServerArgs derived from a flag the entry sets anew: it follows the
    entry's value. (--disable-cuda-graph is the mode "off"; --pooler-config's max_embed_len is
    --max-embed-len, and would otherwise disagree with the entry's own pooler config; the default
    prompt is given by name or as text, and an entry choosing one way drops the other.)"""
    out: dict[str, Any] = {}
    for one, other in (("default_prompt", "default_prompt_name"), ("default_prompt_name", "default_prompt")):
        if one in changes:
            out[other] = None
    if "cuda_graph_mode" in changes:
        out["disable_cuda_graph"] = False
    if "pooler_config" in changes and base.max_embed_len is not None:
        if parse_pooler_config(base.pooler_config).max_embed_len == base.max_embed_len:
            out["max_embed_len"] = None
    return out


def _coerce(key: str, value: Any, action: Optional[argparse.Action], where: str) -> Any:
    """An entry's value as its flag would have parsed it (type and choices), so a file and the
    command line accept the same things."""
    if key in ("json_model_override_args", "pooler_config") and isinstance(value, dict):
        return json.dumps(value)
    if key == "served_model_name":
        names = value if isinstance(value, list) else [value]
        if not names or not all(isinstance(n, str) and n for n in names):
            raise ConfigError(f"{where}: served-model-name must be a name or a list of names")
        return names
    if action is None:
        return value
    if action.nargs == 0:  # a store_true flag
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: `{key.replace('_', '-')}` must be true or false")
        return value
    if value is None:
        return None
    if isinstance(value, bool) or isinstance(value, (list, dict)):
        raise ConfigError(f"{where}: `{key.replace('_', '-')}` must be a single value")
    converted = value
    if action.type is not None:
        try:
            converted = action.type(str(value))
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: `{key.replace('_', '-')}`: invalid value {value!r}") from None
    elif not isinstance(value, str):
        converted = str(value)
    if action.choices is not None and converted not in action.choices:
        named = ", ".join(str(c) for c in action.choices)
        raise ConfigError(f"{where}: `{key.replace('_', '-')}` must be one of {named}")
    return converted


def _flag_actions() -> dict[str, argparse.Action]:
    parser = argparse.ArgumentParser(add_help=False)
    ServerArgs.add_cli_args(parser)
    return {a.dest: a for a in parser._actions}


def check_names(models: list[ServerArgs]) -> None:
    """Refuse a name (or alias) two models claim: a request naming it could not be routed."""
    owner: dict[str, str] = {}
    for m in models:
        for name in m.served_model_names:
            if name in owner:
                raise ConfigError(
                    f"models {owner[name]} and {m.model_path} both claim the name '{name}': "
                    "give them different served-model-name values"
                )
            owner[name] = m.model_path


def model_label(args: ServerArgs) -> str:
    """How start-up lines name a model: its served name, and its path where they differ."""
    name, path = args.served_model_name, args.model_path
    shown = os.path.basename(path.rstrip("/")) if os.path.isdir(path) else path
    return name if name in (path, shown) else f"{name} ({shown})"
