#!/usr/bin/env bash
# One entry point for a fresh machine: sets up .venv (torch 2.13.0 CPU build first, then ember with its test
# extras), then runs what was asked.
#   bash scripts/dev.sh demo [ember demo options]   train on the bundled digits data, print validation accuracy
#   bash scripts/dev.sh test [pytest options]       lint (ruff), type-check (mypy), then the test suite
#                                                   (--extended: with the tests marked 'extended' too)
#   bash scripts/dev.sh test --torch 2.4.1 [pytest options]
#                                                   the test suite against another torch, in its own side
#                                                   environment .venv-torch-2.4.1 (made on first use; the
#                                                   torch wheel comes from the package index with its CUDA
#                                                   libraries). Lint and type-check belong to the plain `test`.
#   bash scripts/dev.sh lightning-suite [FILE...]   Lightning's own tests (tests/tests_pytorch of the tag that
#                                                   scripts/lightning_suite.py pins) on ember, compared with the
#                                                   outcomes recorded on Lightning (tests/lightning/suite.json);
#                                                   writes the table to lightning-suite.md. Not part of `test`.
#   bash scripts/dev.sh lightning-suite record [FILE...]
#                                                   records those outcomes again, on Lightning itself, in the side
#                                                   environment .venv-lightning (made on first use).
#       LIGHTNING_SRC=DIR uses a checkout of Lightning's repository there instead of cloning it into
#       .lightning-src; LIGHTNING_PYTHON=PATH an interpreter that has Lightning instead of .venv-lightning.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
cmd=${1:-test}
shift || true
torch_version=""
if [ "$cmd" = test ] && [ "${1:-}" = --torch ]; then
    if [ -z "${2:-}" ]; then
        echo "dev.sh test --torch needs a version, e.g. bash scripts/dev.sh test --torch 2.4.1" >&2
        exit 2
    fi
    torch_version=$2
    shift 2
fi
venv=.venv
[ -n "$torch_version" ] && venv=".venv-torch-$torch_version"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
py="$venv/bin/python"
# uv installs ember's requirements several times faster than pip; pip does it where uv cannot be had. Nothing is
# byte-compiled up front: what runs here writes the bytecode of each module it imports, once (about a fifth of
# the environment's 15,000 files; compiling them all took longer than the installs). For that, the commands below
# run with bytecode writing on even where PYTHONDONTWRITEBYTECODE is set, as on some machines: otherwise every
# process would compile torch anew.
unset PYTHONDONTWRITEBYTECODE
no_compile=()
if "$py" -m uv --version >/dev/null 2>&1 || "$py" -m pip install --quiet --no-compile uv >/dev/null 2>&1; then
    no_compile=(--no-compile)
fi
if [ -n "$torch_version" ]; then
    have=$("$py" -c "import torch; print(torch.__version__.split('+')[0])" 2>/dev/null || true)
    if [ "$have" != "$torch_version" ]; then
        "$py" -m pip install --quiet "${no_compile[@]}" "torch==$torch_version"
        rm -f "$venv/.ember-installed"
    fi
elif ! "$py" -c "import torch" >/dev/null 2>&1; then
    # The CPU build (pip finds it where the machine's pip configuration points); a bare 'torch' requirement
    # could pull several GB of CUDA packages.
    "$py" -m pip install --quiet "${no_compile[@]}" "torch==2.13.0"
    rm -f "$venv/.ember-installed"
fi
stamp="$venv/.ember-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || ! "$py" -c "import ember" >/dev/null 2>&1; then
    # Keep the torch installed above: ember's own requirements must not move it.
    "$py" -c "import importlib.metadata as m; print('torch==' + m.version('torch'))" > "$venv/torch-constraint.txt"
    if [ ${#no_compile[@]} -gt 0 ]; then
        "$py" -m uv pip install --python "$py" --quiet -e ".[test]" \
            --constraint "$venv/torch-constraint.txt"
    else
        "$py" -m pip install --quiet -e ".[test]" --constraint "$venv/torch-constraint.txt"
    fi
    touch "$stamp"
fi
case "$cmd" in
    demo) exec "$venv/bin/ember" demo "$@" ;;
    test)
        if [ -n "$torch_version" ]; then
            "$py" -c "import torch; print('torch', torch.__version__, 'in $venv')"
            exec "$py" -m pytest -n "${EMBER_TEST_WORKERS:-auto}" --dist worksteal "$@"
        fi
        "$py" -m ruff check .
        "$py" -m mypy > "$venv/mypy.log" 2>&1 &  # type-checks while the tests run
        mypy_pid=$!
        # In parallel (pytest-xdist, one worker per core; EMBER_TEST_WORKERS=0 runs in one process) and in random
        # order (pytest-randomly prints its seed: --randomly-seed=N replays that order, -p no:randomly turns it off).
        # One torch thread per process: the workers and the processes tests start share the cores, and torch's
        # thread pools would otherwise spin against each other.
        status=0
        OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$py" -m pytest -n "${EMBER_TEST_WORKERS:-auto}" --dist worksteal "$@" \
            || status=$?
        mypy_status=0
        wait "$mypy_pid" || mypy_status=$?
        cat "$venv/mypy.log"
        [ "$mypy_status" -eq 0 ] || exit "$mypy_status"
        exit "$status" ;;
    lightning-suite)
        tag=$("$py" -c "import sys; sys.path.insert(0, 'scripts'); import lightning_suite; print(lightning_suite.LIGHTNING_TAG)")
        src=${LIGHTNING_SRC:-.lightning-src}
        if [ ! -d "$src/tests/tests_pytorch" ]; then
            # Lightning's repository is large: only its tests, at the pinned tag
            git clone --quiet --depth 1 --branch "$tag" --filter=blob:none --sparse \
                https://github.com/Lightning-AI/pytorch-lightning "$src"
            git -C "$src" sparse-checkout set tests/tests_pytorch
        fi
        if [ "${1:-}" = record ]; then
            shift
            lpy=${LIGHTNING_PYTHON:-.venv-lightning/bin/python}
            if [ ! -x "$lpy" ]; then
                "$python" -m venv .venv-lightning
                lpy=.venv-lightning/bin/python
            fi
            if ! "$lpy" -c "import lightning, pytest, cloudpickle, tensorboard" >/dev/null 2>&1; then
                "$lpy" -m pip install --quiet "torch==$("$py" -c "import torch; print(torch.__version__.split('+')[0])")"
                "$lpy" -m pip install --quiet "lightning==$("$py" -c "import ember.lightning as L; print(L.__version__)")" \
                    pytest cloudpickle tensorboard pyyaml jsonargparse
            fi
            exec "$lpy" scripts/lightning_suite.py --framework lightning --src "$src" \
                --record tests/lightning/suite.json "$@"
        fi
        exec "$py" scripts/lightning_suite.py --src "$src" --against tests/lightning/suite.json \
            --report lightning-suite.md "$@" ;;
    *) echo "usage: bash scripts/dev.sh demo|test [--torch VERSION] [options] | lightning-suite [record] [FILE...]" >&2
       exit 2 ;;
esac
