#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one run (each part time-boxed; logs go to $OUT, or ./gpu_check_out):
#   1. the CUDA tests (`-m cuda`),
#   2. the GPU benchmark: a small transformer LM under bf16-mixed and 16-mixed (fused AdamW, GradScaler), raw loop
#      against ember with nothing on and with its defaults (checkpoints included), syncs per step counted,
#   3. the training-thread stall of a background checkpoint on CUDA (pinned snapshot), and the per-epoch
#      table (each default switched off in turn) on the language model,
#   4. the whole suite with the GPU visible (in parallel), for what is left of the time box.
# Usage on a machine with a CUDA build of torch and ember's requirements installed:
#   bash scripts/gpu_check.sh [seconds for the suite, default 200]
# GPU_CHECK="cuda suite" picks sections (cuda, bench, stall, epochs, suite); SUITE_ARGS replaces the suite's selection.
# Wheels of requirements missing there can be put in .whl/ beforehand; they are installed first.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu_check_out}
mkdir -p "$out"
py=${PYTHON:-python3}
if ls .whl/*.whl >/dev/null 2>&1; then
    # ember's requirements (pluggy >= 1.7 among them) and the test extras the suite imports, resolved from .whl/
    # against what is installed: only what is missing or too old is installed.
    if ! "$py" -m pip install -q --no-index --find-links .whl --no-compile "pluggy>=1.7,<2" "attrs>=23.1" \
            "jsonargparse[signatures]>=4.49,<5" pytest-markdown-docs tensorboard rich torchmetrics 2>&1 | tail -3; then
        # a requirement the folder cannot resolve: every wheel there as it is (the machine's numpy kept)
        "$py" -m pip install -q --no-index --no-deps --no-compile $(ls .whl/*.whl | grep -v -e numpy -e pillow) \
            2>&1 | tail -3
    fi
fi
"$py" -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
"$py" -m pip list 2>/dev/null > "$out/pip_list.txt"
"$py" - <<'PY' | tee "$out/requirements.txt"  # every requirement of ember met? (a failed test may be the set-up's)
from importlib.metadata import PackageNotFoundError, requires, version
from packaging.requirements import Requirement
for line in requires("ember") or []:
    req = Requirement(line)
    if req.marker is not None:
        continue
    try:
        have = version(req.name)
    except PackageNotFoundError:
        have = None
    if have is None or have not in req.specifier:
        print(f"requirement not met: {req} (installed: {have})")
PY
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
"$py" -c "import torch, ember; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())" | tee -a "$out/gpu.txt"
export PYTHONUNBUFFERED=1
# pytest-benchmark (where installed) refuses to run under xdist with warnings as errors: not ours, switched off.
# -v -rfE: each test's outcome is printed when it ends, so a run cut by its time box still names its failures
# (grep 'FAILED\|ERROR' in the logs); --timeout stops one hung test, not the whole box.
pytest=("$py" -m pytest -v -rfE --tb=short -p no:randomly -p no:benchmark -p no:cacheprovider)
"$py" -c "import pytest_timeout" 2>/dev/null && pytest+=(--timeout=120)
sections=${GPU_CHECK:-cuda bench stall epochs suite}
has() { [[ " $sections " == *" $1 "* ]]; }
has cuda && echo "== 1. CUDA tests"
has cuda && timeout 150 "${pytest[@]}" -m cuda -n 6 --junitxml="$out/cuda_tests.xml" 2>&1 | tee "$out/cuda_tests.log" | grep -E "FAILED|ERROR|passed|failed" | tail -25
has bench && echo "== 2. GPU benchmark"
has bench && timeout 150 "$py" - <<'PY' 2>&1 | tee "$out/gpu_bench.log" | tail -30
from benchmarks import harness
from benchmarks.gpu import LMConfig, gpu_groups
groups = gpu_groups(harness.CLOCKS["wall"], 3, ["ember", "ember+defaults"], LMConfig(), compile_too=False)
print(harness.format_table(groups))
PY
has stall && echo "== 3. checkpoint stall on CUDA"
has stall && timeout 45 "$py" benchmarks/checkpoint_overhead.py --stall-only --accelerator cuda 2>&1 | tee "$out/stall.log" | tail -8
has epochs && echo "== 3b. per-epoch costs on the GPU (each default off in turn; --quick)"
has epochs && timeout 120 "$py" -m benchmarks --only gpu-epochs --quick 2>&1 | tee "$out/gpu_epochs.log" | tail -14
has suite && echo "== 4. whole suite, GPU visible"
has suite && timeout "${1:-200}" "${pytest[@]}" -n 14 --extended ${SUITE_ARGS:--m "not cuda"} --junitxml="$out/suite.xml" 2>&1 | tee "$out/suite.log" | grep -E "FAILED|ERROR|passed|failed" | tail -60
exit 0
