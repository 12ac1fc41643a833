#!/usr/bin/env bash
# The checks that need an NVIDIA GPU, as one run on a lent GPU machine (an H100 or H200 with PyTorch,
# transformers, nvcc and NVIDIA's CUDA wheels, no network): install the project from this checkout
# offline, then
#   1. the cuda plugin's own tests (backends/cuda/tests) on the GPU;
#   2. the conformance suite on cuda:0 (--candle-strict, 8 pytest-xdist workers);
#   3. the wgpu plugin's tests and the conformance suite through NVIDIA's Vulkan driver, when the
#      machine has a Vulkan loader (WHEELS must then hold the wgpu wheel: see below);
#   4. benchmarks/cuda_vs_torch.py (element-wise, softmax, layer_norm, GEMM, SDPA, decode GEMVs);
#   5. benchmarks/cuda_models.py (MiniLM-shaped embeddings, SmolLM2-shaped decode, against transformers);
#   6. tools/profile_models.py (where the model rows' time goes: each kernel's GPU time, the host's);
#   7. the models on the GPU: tools/gguf_check.py (candle generate --device cuda on GGUF weights kept
#      quantized, against the cpu) and examples/train_fashion_mnist.py --device cuda (the MLP, and the CNN
#      on a part of the data), when the Fashion-MNIST files are in DATA (default .data/fashion-mnist:
#      Debian's dataset-fashion-mnist, /usr/share/datasets/fashion-mnist, copied there and carried);
#   8. benchmarks/wgpu_vs_cpu.py --large through Vulkan (GEMM and bandwidth figures naming the GPU).
# Each step has a time limit and the whole run ends within DEADLINE seconds (default 540), so that it
# fits one device command; QUICK=1 runs cuda_vs_torch.py --quick. Logs go to $OUT (or
# ./gpu-check-out), one per step: the machine's description is printed, not logged, as the device
# tool brings back at most 8 files.
#
# Packages the machine lacks travel as wheels in WHEELS (default .whl): wgpu==0.32.0 for the wgpu steps,
# cffi and pycparser for wgpu_vs_cpu.py's wgpu-py figure. A machine without a Vulkan loader can be given
# one from Debian's packages (libvulkan1) unpacked before this script runs.
#
#   bash backends/cuda/tools/gpu_check.sh            # from the repository root, on the GPU machine
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
WHEELS="${WHEELS:-.whl}"
export PYTHONUNBUFFERED=1 CANDLE_CUDA_ARCHS="${CANDLE_CUDA_ARCHS:-90}" CANDLE_WERROR=1
DATA="${DATA:-.data/fashion-mnist}"
DEADLINE="${DEADLINE:-540}"
status=0

step() {  # step NAME LIMIT_S COMMAND...: runs a step under a time limit, logging to $OUT/NAME.log
    local name=$1 limit=$2
    shift 2
    local left=$((DEADLINE - SECONDS))
    if [ "$left" -lt 25 ]; then
        echo "== $name: skipped, ${left}s left"
        status=1
        return 0
    fi
    [ "$limit" -le "$left" ] || limit=$left
    echo "== $name (limit ${limit}s, at ${SECONDS}s)"
    local t0=$SECONDS
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    tail -n 25 "$OUT/$name.log"
    echo "-- $name: exit $rc in $((SECONDS - t0)) s"
    [ "$rc" = 0 ] || status=1
    return 0
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$PY" -c "import sys, torch; print(sys.version.split()[0], 'torch', torch.__version__, torch.cuda.get_device_name(0))"
command -v nvcc && nvcc --version | tail -n 1
[ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ] && echo "Vulkan driver: NVIDIA's ICD"
[ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ] &&
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
vulkan=0
if ldconfig -p | grep -q libvulkan.so.1 && compgen -G "$WHEELS/wgpu-*.whl" > /dev/null; then vulkan=1; fi

# Offline install: no index, no build isolation (the image has setuptools; nvcc builds the fatbins).
extra=()
[ "$vulkan" = 1 ] && extra=(-e ./backends/metal "$WHEELS"/*.whl)
step install 150 "$PY" -m pip install --no-index --no-deps --no-build-isolation --quiet \
    -e . -e ./backends/cpu -e ./backends/cuda -e ./formats -e ./models "${extra[@]}"
"$PY" -c "from candle_api.info import describe; print(describe(show_ops=False))" | grep -A1 " cuda:\| wgpu" || true

step cuda-tests 100 "$PY" -m pytest -q -p no:cacheprovider -rfEs backends/cuda/tests
step cuda-conformance 220 "$PY" -m pytest -q -p no:cacheprovider -n 8 --tb=short -rf --candle-strict \
    --pyargs candle_api.testing.conformance --candle-device cuda:0
[ "$vulkan" = 1 ] && step vulkan-conformance 150 "$PY" -m pytest -q -p no:cacheprovider -n 6 --tb=short -rf \
    --candle-strict backends/metal/tests --pyargs candle_api.testing.conformance --candle-device vulkan
step bench-cuda 150 "$PY" benchmarks/cuda_vs_torch.py ${QUICK:+--quick}
step bench-models 120 "$PY" benchmarks/cuda_models.py --reps 3
step profile 90 "$PY" backends/cuda/tools/profile_models.py
step gguf-generate 60 "$PY" backends/cuda/tools/gguf_check.py
train=("$PY" examples/train_fashion_mnist.py --device cuda --data "$DATA" --out "/tmp/fashion_{model}.safetensors")
[ -f "$DATA/train-images-idx3-ubyte.gz" ] && step fashion-mnist 150 \
    bash -c '"$@" --model mlp --epochs 2 && "$@" --model cnn --epochs 1 --limit 20000' _ "${train[@]}"
[ "$vulkan" = 1 ] && step bench-wgpu 90 "$PY" benchmarks/wgpu_vs_cpu.py --large --device vulkan:0
echo "== done in ${SECONDS} s, status $status (logs in $OUT)"
exit $status
