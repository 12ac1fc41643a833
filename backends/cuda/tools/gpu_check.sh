#!/usr/bin/env bash
# The checks of the cuda plugin that need a GPU, as one run on a lent GPU
# machine (an H100 or H200 with PyTorch, nvcc and NVIDIA's CUDA wheels, no
# network): install the project from this checkout offline, then
#   1. the plugin's own tests (backends/cuda/tests) on the GPU;
#   2. the conformance suite on cuda:0 (--candle-strict);
#   3. benchmarks/cuda_vs_torch.py --quick (GEMM, SDPA, decode, memory-bound ops against PyTorch);
#   4. with time left, the conformance suite's elementwise and reduction cases on NVRTC's kernels.
# Each step has a time limit, and the whole run ends within DEADLINE seconds (default 540: a device
# command may run 600), leaving room in a 15-minute lease for a second run; a step that would start with
# under 30 s left is skipped. Logs go to $OUT (or ./gpu-check-out).
#
#   bash backends/cuda/tools/gpu_check.sh            # from the repository root, on the GPU machine
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1 CANDLE_CUDA_ARCHS="${CANDLE_CUDA_ARCHS:-90}" CANDLE_WERROR=1
DEADLINE="${DEADLINE:-540}"
status=0

step() {  # step NAME LIMIT_S COMMAND...: runs a step under a time limit, logging to $OUT/NAME.log
    local name=$1 limit=$2
    shift 2
    local left=$((DEADLINE - SECONDS))
    if [ "$left" -lt 30 ]; then
        echo "== $name: skipped, ${left}s left"
        status=1
        return 0
    fi
    [ "$limit" -le "$left" ] || limit=$left
    echo "== $name (limit ${limit}s)"
    local t0=$SECONDS
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    tail -n 25 "$OUT/$name.log"
    echo "-- $name: exit $rc in $((SECONDS - t0)) s"
    [ "$rc" = 0 ] || status=1
    return 0
}

echo "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
"$PY" -c "import sys, torch; print(sys.version.split()[0], 'torch', torch.__version__, torch.cuda.get_device_name(0))"
command -v nvcc && nvcc --version | tail -n 2

# Offline install: no index, no build isolation (the image has setuptools; nvcc builds the fatbins).
step install 150 "$PY" -m pip install --no-index --no-deps --no-build-isolation --quiet \
    -e . -e ./backends/cpu -e ./backends/cuda -e ./formats -e ./models
"$PY" -c "from candle_api.info import describe; print(describe(show_ops=False))" | grep -A1 " cuda:" || true

step plugin-tests 90 "$PY" -m pytest -q -p no:cacheprovider -rfEs backends/cuda/tests
step conformance 240 "$PY" -m pytest -q -p no:cacheprovider --tb=line -rf --candle-strict \
    --pyargs candle_api.testing.conformance --candle-device cuda:0
step benchmark 120 "$PY" benchmarks/cuda_vs_torch.py --quick
if [ $((DEADLINE - SECONDS)) -ge 90 ]; then
    CANDLE_CUDA_KERNELS=nvrtc CANDLE_CUDA_CACHE="$OUT/nvrtc-cache" step nvrtc-conformance 90 \
        "$PY" -m pytest -q -p no:cacheprovider --tb=line -rf -k "unary or binary or sum or max" \
        --pyargs candle_api.testing.conformance.test_ops --candle-device cuda:0
fi
rm -rf "$OUT/nvrtc-cache"
echo "== done in ${SECONDS} s, status $status (logs in $OUT)"
exit $status
