#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one run (each part time-boxed; logs go to $OUT, or ./gpu_check_out):
#   1. the CUDA tests (`-m cuda`),
#   2. the GPU benchmark: a small transformer LM under bf16-mixed and 16-mixed (fused AdamW, GradScaler), raw loop
#      against ember with nothing on and with its defaults (checkpoints included), syncs per step counted,
#   3. the training-thread stall of a background checkpoint on CUDA (pinned snapshot),
#   4. the whole suite with the GPU visible (in parallel), for what is left of the time box.
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
# pytest-benchmark (where installed) refuses to run under xdist with warnings as errors: not ours, switched off.
# -v -rfE: each test's outcome is printed when it ends, so a run cut by its time box still names its failures
# (grep 'FAILED\|ERROR' in the logs); --timeout stops one hung test, not the whole box.
pytest=("$py" -m pytest -v -rfE --tb=short -p no:randomly -p no:benchmark -p no:cacheprovider)
"$py" -c "import pytest_timeout" 2>/dev/null && pytest+=(--timeout=120)
echo "== 1. CUDA tests"
timeout 150 "${pytest[@]}" -m cuda -n 4 --junitxml="$out/cuda_tests.xml" 2>&1 | tee "$out/cuda_tests.log" | grep -E "FAILED|ERROR|passed|failed" | tail -25
echo "== 2. GPU benchmark"
timeout 150 "$py" - <<'PY' 2>&1 | tee "$out/gpu_bench.log" | tail -30
from benchmarks import harness
from benchmarks.gpu import LMConfig, gpu_groups
groups = gpu_groups(harness.CLOCKS["wall"], 3, ["ember", "ember+defaults"], LMConfig(), compile_too=False)
print(harness.format_table(groups))
PY
echo "== 3. checkpoint stall on CUDA"
timeout 45 "$py" benchmarks/checkpoint_overhead.py --stall-only --accelerator cuda 2>&1 | tee "$out/stall.log" | tail -8
echo "== 4. whole suite, GPU visible"
timeout "${1:-200}" "${pytest[@]}" -n 14 -m "not cuda" --junitxml="$out/suite.xml" 2>&1 | tee "$out/suite.log" | grep -E "FAILED|ERROR|passed|failed" | tail -60
exit 0
