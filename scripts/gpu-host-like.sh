#!/usr/bin/env bash
# Runs the test suite as on a GPU machine, as far as a machine without one can look like it:
# the host's PATH has an nvidia-smi (replaying the recorded H200) and an nvcc, CUDA_HOME is a
# toolkit, and the test interpreter itself has sageattention, triton and the sagedoctor
# runtime installed (the device's torch venv has the real ones). No test may see any of it.
# Arguments go to pytest: CI passes `-m host`, the tests that read any of these (the rest are
# listed in tests/conftest.py as host-independent).
# It changes .venv: run it in a throw-away clone (CI does, after the stranger's run).
set -euo pipefail
cd "$(dirname "$0")/.."
test -x .venv/bin/python || { echo "run scripts/test.sh first: it makes .venv" >&2; exit 2; }
host="$(mktemp -d)"
trap 'rm -rf "$host"' EXIT
recorded="$PWD/tests/fixtures/h200-linux"
mkdir -p "$host/bin" "$host/cuda/bin" "$host/cuda/include" "$host/wheel"
cat > "$host/bin/nvidia-smi" <<EOF
#!/bin/sh
case "\$*" in *--query*) cat '$recorded/nvidia-smi-query.csv';; *) cat '$recorded/nvidia-smi.txt';; esac
EOF
printf '#!/bin/sh\ncat %s\n' "'$recorded/nvcc-version.txt'" > "$host/cuda/bin/nvcc"
chmod +x "$host/bin/nvidia-smi" "$host/cuda/bin/nvcc"
cp "$host/cuda/bin/nvcc" "$host/bin/nvcc"
: > "$host/cuda/include/cuda_runtime.h"

site="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
mkdir -p "$site/sageattention" "$site/triton"
cat > "$site/sageattention/__init__.py" <<'EOF'
import torch.nn.functional as F


def sageattn(q, k, v, tensor_layout="HND", is_causal=False, sm_scale=None, **_):
    return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=sm_scale)
EOF
echo '__version__ = "3.6.0"' > "$site/triton/__init__.py"
for dist in sageattention:2.2.0 triton:3.6.0; do
    name="${dist%%:*}" version="${dist##*:}"
    info="$site/$name-$version.dist-info"
    mkdir -p "$info"
    printf 'Metadata-Version: 2.1\nName: %s\nVersion: %s\n' "$name" "$version" > "$info/METADATA"
    echo pip > "$info/INSTALLER"
    : > "$info/RECORD"
done
.venv/bin/python -c "import sys; from pathlib import Path; \
from sagedoctor.install.bundle import build_runtime_wheel; \
build_runtime_wheel(Path(sys.argv[1]), '0.1.0')" "$host/wheel"
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps "$host"/wheel/*.whl

PATH="$host/bin:$PATH" CUDA_HOME="$host/cuda" CUDA_PATH="$host/cuda" \
    .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
