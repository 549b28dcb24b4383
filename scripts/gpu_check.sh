#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one run (each part time-boxed; logs go to $OUT, or ./gpu_check_out):
#   1. the CUDA tests (`-m cuda`), 2. the whole suite with the GPU visible (in parallel),
#   3. the GPU benchmark (bf16-mixed and 16-mixed LM, defaults with their checkpoints, torch.compile),
#   4. the training-thread stall of a background checkpoint on CUDA (pinned snapshot).
# Usage on a machine with a CUDA build of torch and ember's requirements installed:
#   bash scripts/gpu_check.sh [seconds for the suite, default 200]
# Wheels of requirements missing there can be put in .whl/ beforehand; they are installed first.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu_check_out}
mkdir -p "$out"
py=${PYTHON:-python3}
if ls .whl/*.whl >/dev/null 2>&1; then
    "$py" -m pip install -q --no-index --no-deps --no-compile .whl/*.whl 2>&1 | tail -3
fi
"$py" -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
"$py" -c "import torch, ember; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())" | tee -a "$out/gpu.txt"
export PYTHONUNBUFFERED=1
echo "== 1. CUDA tests"
timeout 150 "$py" -m pytest -q -m cuda -p no:randomly -p no:benchmark -n 4 -p no:cacheprovider 2>&1 | tee "$out/cuda_tests.log" | tail -25
echo "== 3. GPU benchmark"
timeout 200 "$py" -m benchmarks --only gpu --repeats 3 --json "$out/gpu_bench.json" 2>&1 | tee "$out/gpu_bench.log" | tail -40
echo "== 4. checkpoint stall on CUDA"
timeout 60 "$py" benchmarks/checkpoint_overhead.py --stall-only --accelerator cuda 2>&1 | tee "$out/stall.log" | tail -15
echo "== 2. whole suite, GPU visible"
timeout "${1:-200}" "$py" -m pytest -q -n 14 -p no:randomly -p no:benchmark -p no:cacheprovider --maxfail=30 2>&1 | tee "$out/suite.log" | tail -40
exit 0
