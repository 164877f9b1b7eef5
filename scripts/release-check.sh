#!/usr/bin/env bash
# The release check: build the sdist and, from it, the wheel; prove the wheel carries every
# file of the package (the wheel index, the TUI's stylesheet, the runtime it bundles); install
# the wheel alone, away from this tree, as README's user install does (a fresh venv with pip,
# and `uv tool install`); and run it from there. Downloads come from PyPI only (pip's own
# configuration may name a local copy). Usage: bash scripts/release-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
repo="$PWD"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
say() { echo "release-check: $*"; }

"$PY" -m venv "$work/build-env"
"$work/build-env/bin/python" -m pip install -q --disable-pip-version-check build
"$work/build-env/bin/python" -m build --outdir "$work/dist" . > "$work/build.log" 2>&1 \
    || { cat "$work/build.log"; exit 1; }  # the sdist, then the wheel from it
wheel="$(echo "$work"/dist/sagedoctor-*.whl)"
test -f "$wheel" && test -f "$(echo "$work"/dist/sagedoctor-*.tar.gz)"
say "built $(basename "$wheel") and its sdist"

git ls-files sagedoctor | "$PY" -c '
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
tracked = [line.strip() for line in sys.stdin if line.strip()]
missing = [n for n in tracked if n not in names]
strays = sorted(n for n in names if n.split("/")[0] in ("tests", "benchmarks", "docs"))
if not tracked or missing or strays:
    sys.exit(f"the wheel lacks {missing} or carries {strays}")
print(f"release-check: the wheel carries all {len(tracked)} files of the package")
' "$wheel"

# Run from an empty folder with a HOME of its own: nothing of this tree can be imported.
mkdir -p "$work/elsewhere" "$work/home"
try() {
    local sagedoctor="$1"
    (
        cd "$work/elsewhere"
        export HOME="$work/home"
        unset VIRTUAL_ENV PYTHONPATH
        set +e
        "$sagedoctor" check --json > check.json
        rc=$?
        set -e
        case "$rc" in 0|1|2) ;; *) echo "check --json exited $rc" >&2; exit 1;; esac
        "$PY" -c 'import json, sys; report = json.load(open(sys.argv[1])); assert report["facts"], report' check.json
        "$sagedoctor" plan --facts "$repo/tests/profiles/windows-torch214-today.json" > plan.txt
        grep -q "sageattention-2.2.0+cu130" plan.txt && grep -q "runtime 0.1.0" plan.txt
        "$sagedoctor" tui --help | grep -q "usage: sagedoctor tui"
    )
    say "check --json (exit code in the table), plan --facts <Windows profile> and tui --help ran from $1"
}

"$PY" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --disable-pip-version-check "$wheel"
try "$work/venv/bin/sagedoctor"

# `uv tool install`, as README says, into tool folders of this check's own.
UV_TOOL_DIR="$work/uv-tools" UV_TOOL_BIN_DIR="$work/uv-bin" UV_PYTHON_DOWNLOADS=never \
    "$work/venv/bin/uv" tool install -q --python "$(command -v "$PY")" "$wheel"
try "$work/uv-bin/sagedoctor"
say "passed"
