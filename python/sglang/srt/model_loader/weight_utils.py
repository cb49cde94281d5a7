"""Iterate a checkpoint's tensors (safetensors, sharded or not, else pytorch .bin) and load them."""

from __future__ import annotations

import glob
import json
import os
from typing import Callable, Iterable, Iterator, Optional

import torch
from torch import nn

from sglang.srt.errors import ConfigError

# (fused parameter fragment, checkpoint fragment, shard id)
StackedMapping = list[tuple[str, str, object]]


def default_weight_loader(param: torch.Tensor, loaded: torch.Tensor, shard_id=None) -> None:
    """Copy a checkpoint tensor into a parameter of the same shape (what a parameter without a
    `weight_loader` of its own gets; fused layers bring theirs, layers/linear.py)."""
    if param.shape != loaded.shape:
        raise ValueError(f"shape mismatch: parameter {tuple(param.shape)} vs checkpoint {tuple(loaded.shape)}")
    with torch.no_grad():
        param.copy_(loaded)


def strip_prefix(name: str, prefixes: tuple[str, ...]) -> str:
    """A checkpoint name without the first of `prefixes` it starts with (task checkpoints nest the
    encoder under `bert.`, `model.`, ...)."""
    for prefix in prefixes:
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def _weight_files(model_dir: str) -> tuple[list[str], str]:
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        return [os.path.join(model_dir, s) for s in shards], "safetensors"
    files = sorted(glob.glob(os.path.join(model_dir, "*.safetensors")))
    if files:
        return files, "safetensors"
    index = os.path.join(model_dir, "pytorch_model.bin.index.json")
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        return [os.path.join(model_dir, s) for s in shards], "bin"
    files = sorted(glob.glob(os.path.join(model_dir, "pytorch_model*.bin")))
    if files:
        return files, "bin"
    raise ConfigError(f"No weights (*.safetensors or pytorch_model*.bin) found in {model_dir}")


def iterate_weights(model_dir: str, skip_prefixes: tuple[str, ...] = ()) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) for every checkpoint tensor; names starting with `skip_prefixes` (an LM head
    we never run) are not even read from safetensors files."""
    files, kind = _weight_files(model_dir)
    for path in files:
        if kind == "safetensors":
            from safetensors import safe_open

            with safe_open(path, framework="pt") as f:
                for name in f.keys():
                    if not name.startswith(skip_prefixes):
                        yield name, f.get_tensor(name)
        else:
            # weights_only: a checkpoint cannot run code on load.
            state = torch.load(path, map_location="cpu", weights_only=True)
            for name, tensor in state.items():
                if not name.startswith(skip_prefixes):
                    yield name, tensor
            del state


def load_weights_into(
    model: nn.Module,
    weights: Iterable[tuple[str, torch.Tensor]],
    stacked: StackedMapping = (),
    rename: Optional[Callable[[str], Optional[str]]] = None,
) -> set[str]:
    """Load checkpoint tensors into `model`; returns the names of the parameters it filled.

    `rename` maps a checkpoint name onto the model's naming (None: skip the tensor). `stacked`
    sends q/k/v-style names into fused parameters through their weight_loader.
    """
    params = dict(model.named_parameters())
    loaded: set[str] = set()
    for ckpt_name, tensor in weights:
        name = rename(ckpt_name) if rename else ckpt_name
        if name is None:
            continue
        shard_id = None
        for fused, part, sid in stacked:
            if part in name:
                name, shard_id = name.replace(part, fused), sid
                break
        param = params.get(name)
        if param is None:
            continue
        loader = getattr(param, "weight_loader", default_weight_loader)
        try:
            loader(param, tensor.to(param.dtype), shard_id)
        except ValueError as e:
            raise ConfigError(f"Checkpoint tensor {ckpt_name} does not fit the model: {e}") from e
        loaded.add(name)
    return loaded


def read_tensors(model_dir: str, prefixes: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """Only the checkpoint tensors whose names start with `prefixes` (an output head's few
    matrices); safetensors files are not read beyond those tensors."""
    files, kind = _weight_files(model_dir)
    out: dict[str, torch.Tensor] = {}
    for path in files:
        if kind == "safetensors":
            from safetensors import safe_open

            with safe_open(path, framework="pt") as f:
                out.update({name: f.get_tensor(name) for name in f.keys() if name.startswith(prefixes)})
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
            out.update({name: t for name, t in state.items() if name.startswith(prefixes)})
            del state
    return out


def fill_parameters(module: nn.Module, state: dict[str, torch.Tensor], what: str) -> None:
    """Copy `state` (named like the module's parameters) into every parameter of `module`;
    a missing or misshapen tensor is a ConfigError that names `what` was being loaded."""
    params = dict(module.named_parameters())
    missing = sorted(set(params) - set(state))
    if missing:
        raise ConfigError(f"{what} lacks weights for: {', '.join(missing)}")
    with torch.no_grad():
        for name, param in params.items():
            tensor = state[name]
            if tuple(tensor.shape) != tuple(param.shape):
                raise ConfigError(
                    f"{what}: tensor {name} has shape {tuple(tensor.shape)}, expected {tuple(param.shape)}"
                )
            param.copy_(tensor.to(param.dtype))


def read_rows(model_dir: str, names: tuple[str, ...], rows: list[int]) -> Optional[torch.Tensor]:
    """Rows `rows` of the first checkpoint tensor found under one of `names` ([len(rows), ...]),
    or None when there is none: a few rows of an LM head without reading the whole matrix
    (safetensors slices; a .bin checkpoint is loaded whole, as torch.load must)."""
    files, kind = _weight_files(model_dir)
    for wanted in names:
        for path in files:
            if kind == "safetensors":
                from safetensors import safe_open

                with safe_open(path, framework="pt") as f:
                    if wanted in f.keys():
                        part = f.get_slice(wanted)
                        return torch.cat([part[i : i + 1] for i in rows])
            else:
                state = torch.load(path, map_location="cpu", weights_only=True)
                if wanted in state:
                    return state[wanted][list(rows)].clone()
                del state
    return None
