#!/usr/bin/env bash
# One entry point for a fresh machine: sets up .venv (torch 2.13.0 CPU build first, then ember with its test
# extras), then runs what was asked.
#   bash scripts/dev.sh demo [ember demo options]   train on the bundled digits data, print validation accuracy
#   bash scripts/dev.sh test [pytest options]       lint (ruff), type-check (mypy), then the test suite
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
venv=.venv
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
py="$venv/bin/python"
if ! "$py" -c "import torch" >/dev/null 2>&1; then
    # The CPU build; a bare 'torch' requirement could pull several GB of CUDA packages.
    "$py" -m pip install --quiet "torch==2.13.0"
fi
stamp="$venv/.ember-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || ! "$py" -c "import ember" >/dev/null 2>&1; then
    "$py" -m pip install --quiet -e ".[test]"
    touch "$stamp"
fi
cmd=${1:-test}
shift || true
case "$cmd" in
    demo) exec "$venv/bin/ember" demo "$@" ;;
    test)
        "$py" -m ruff check .
        "$py" -m mypy
        exec "$py" -m pytest "$@" ;;
    *) echo "usage: bash scripts/dev.sh demo|test [options]" >&2; exit 2 ;;
esac
