#!/usr/bin/env bash
# Sets up .venv (once) and runs the test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
# The runtime tests need real torch: the CPU build, which pip takes from this machine's disk.
.venv/bin/python -c 'import torch' 2>/dev/null \
    || .venv/bin/python -m pip install -q --disable-pip-version-check 'torch==2.13.0'
exec .venv/bin/python -m pytest -q "$@"
