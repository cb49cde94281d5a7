"""The GPU check's first stage: stop at once when the run could only measure the wrong thing.

Fails (exit 1, one line per problem) when a module the server or the GPU tests import is missing
(the image lacks fastapi, uvicorn, pyzmq, pydantic, orjson, ...: the bundle must carry them), when
FlashInfer does not import, or when the attention backend `auto` picks on the GPU is not
FlashInfer (without it the engine silently falls back to torch-native attention and the numbers
look normal). With --device cpu (the rehearsal) the backend check is the import of our FlashInfer
backend module against whatever `flashinfer` is importable (the test suite's stand-in there).

    python benchmark/gpu_preflight.py --model PATH [--device cuda|cpu]
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Optional

# What the three server processes, the benchmarks and the GPU tests import beyond torch.
REQUIRED_MODULES = (
    "fastapi",
    "starlette",
    "uvicorn",
    "httptools",
    "pydantic",
    "pydantic_core",
    "orjson",
    "zmq",
    "uvloop",
    "transformers",
    "tokenizers",
    "safetensors",
    "PIL",
    "prometheus_client",
    "pytest",
    "sglang.launch_server",
    "sglang.srt.wire.io_struct",
    "sglang.srt.frontend.http.http_server",
    "sglang.srt.model_executor.model_runner",
    "flashinfer",
)
EXPECTED_BACKEND = "flashinfer"


def missing_modules(names: tuple[str, ...] = REQUIRED_MODULES) -> dict[str, str]:
    """name -> the import error, for each module that does not import."""
    missing = {}
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as e:  # an ImportError, or a broken wheel failing on import
            missing[name] = f"{type(e).__name__}: {e}"
    return missing


def backend_problem(backend_name: str, expected: str = EXPECTED_BACKEND) -> Optional[str]:
    """Why a run on this backend would measure the wrong thing, or None."""
    if backend_name == expected:
        return None
    return f"attention backend is {backend_name!r}, not {expected!r}: the numbers would not be FlashInfer's"


def auto_backend_name(model_path: str, device: str) -> str:
    """The backend `--attention-backend auto` builds for this model on this device, in bf16."""
    import torch

    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.layers.attention.registry import create_attention_backend
    from sglang.srt.server_args import ServerArgs

    args = ServerArgs(model_path=model_path, device=device, dtype="bfloat16")
    config = ModelConfig.from_server_args(args, model_path, device)
    return create_attention_backend("auto", torch.device(device), config).name


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a checkpoint directory (the bundled MiniLM)")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = parser.parse_args(argv)
    problems = [f"cannot import {n}: {e}" for n, e in missing_modules().items()]
    if not problems:
        import flashinfer

        where = getattr(flashinfer, "__file__", "(in memory)")
        print("flashinfer", getattr(flashinfer, "__version__", "(stand-in)"), "from", where)
        if args.device == "cuda":
            problem = backend_problem(auto_backend_name(args.model, "cuda"))
            problems += [problem] if problem else []
        else:
            importlib.import_module("sglang.srt.layers.attention.flashinfer_backend")
    for p in problems:
        print("PREFLIGHT FAILED:", p, file=sys.stderr)
    if not problems:
        print("preflight ok: every module imports, attention backend:", EXPECTED_BACKEND)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
