#!/usr/bin/env bash
# Sets up .venv (once) and runs the test suite. Extra arguments go to pytest; with none, the
# whole suite runs on every core (pytest-xdist): 636 s measured on two shared cores.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
# The runtime tests need real torch, and only its CPU build: a bare `torch` is the CUDA one,
# with gigabytes of nvidia packages. PyTorch's CPU wheel index has it; where that index cannot
# be reached, pip takes the same file from what it is given locally (find-links, this
# machine's /opt/wheels).
.venv/bin/python -c 'import torch' 2>/dev/null \
    || .venv/bin/python -m pip install -q --disable-pip-version-check --retries 1 --timeout 30 \
        --extra-index-url https://download.pytorch.org/whl/cpu 'torch==2.13.0+cpu'
if [ "$#" -eq 0 ]; then
    set -- -n auto
fi
exec .venv/bin/python -m pytest -q "$@"
