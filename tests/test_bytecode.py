"""Where a self-test started by sagedoctor writes its bytecode (runtime/bytecode.py): under
sagedoctor's cache where writing is off and torch has none, else Python's own way."""

from __future__ import annotations

import json
import os
import py_compile
import subprocess
import sys
from importlib.util import cache_from_source
from pathlib import Path

import pytest

from sagedoctor.runtime.bytecode import CACHE_ENV, cache_folder, has_bytecode

ROOT = Path(__file__).resolve().parents[1]


def test_the_folder_is_used_only_where_writing_is_off_and_the_module_has_no_bytecode() -> None:
    named = {CACHE_ENV: "/cache/bytecode"}
    assert cache_folder(named, True, None, False) == "/cache/bytecode"
    assert cache_folder(named, False, None, False) is None  # Python writes it beside: fine
    assert cache_folder(named, True, None, True) is None  # the venv's own: read as it is
    assert cache_folder(named, True, None, None) is None  # not found: nothing to gain
    assert cache_folder(named, True, "/theirs", False) is None  # the user's prefix stays
    assert cache_folder({}, True, None, False) is None  # not started by sagedoctor
    assert cache_folder({CACHE_ENV: ""}, True, None, False) is None


def _package(site: Path, name: str, compiled: bool) -> Path:
    source = site / name / "__init__.py"
    source.parent.mkdir(parents=True)
    source.write_text("VALUE = 42\n", encoding="utf-8")
    if compiled:
        py_compile.compile(str(source), cfile=cache_from_source(str(source)), doraise=True)
    return source


def test_has_bytecode_looks_beside_the_source(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _package(tmp_path, "heavy_plain", compiled=False)
    _package(tmp_path, "heavy_built", compiled=True)
    # only a module one folder down compiled: a venv that links a package's folders in
    linked = _package(tmp_path, "heavy_linked", compiled=False)
    inner = linked.parent / "nn" / "functional.py"
    inner.parent.mkdir()
    inner.write_text("X = 1\n", encoding="utf-8")
    py_compile.compile(str(inner), cfile=cache_from_source(str(inner)), doraise=True)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert has_bytecode("heavy_plain") is False
    assert has_bytecode("heavy_built") is True
    assert has_bytecode("heavy_linked") is True
    assert has_bytecode("no_such_module_here") is None
    assert has_bytecode("sys") is None  # built in: no source


# A stand-in target process: the runtime's decision, then the import it is made for.
PROBE = (
    "import json, sys\n"
    "from sagedoctor.runtime.bytecode import cache_bytecode\n"
    "folder = cache_bytecode('heavy')\n"
    "import heavy\n"
    "print(json.dumps({'folder': folder, 'value': heavy.VALUE}))\n")


@pytest.mark.parametrize("compiled", [False, True])
def test_a_process_with_writing_off_caches_its_bytecode_outside_the_venv_when_it_has_none(
        tmp_path: Path, compiled: bool) -> None:
    site = tmp_path / "venv é" / "site-packages"
    source = _package(site, "heavy", compiled)
    cache = tmp_path / "cache" / "bytecode"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", CACHE_ENV: str(cache),
           "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    env.pop("PYTHONPYCACHEPREFIX", None)

    def run() -> dict[str, object]:
        done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                              text=True, timeout=60, check=True)
        return json.loads(done.stdout)

    first = run()
    assert first["value"] == 42
    in_cache = list(cache.rglob("__init__.*.pyc")) if cache.exists() else []
    beside = list(source.parent.glob("__pycache__/*.pyc"))
    if compiled:  # the venv's own bytecode is read; nothing else written anywhere
        assert first["folder"] is None and in_cache == [] and len(beside) == 1
        return
    assert first["folder"] == str(cache)
    assert beside == [] and [p.parent.name for p in in_cache] == ["heavy"]
    # the next run reads it instead of compiling again
    stamp = in_cache[0].stat().st_mtime_ns
    assert run()["value"] == 42
    assert in_cache[0].stat().st_mtime_ns == stamp


STAND_IN_SELFTEST = f"""
import json, os
print(json.dumps({{"schema_version": 1, "gpus": [], "cache": os.environ.get({CACHE_ENV!r})}}))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="a shebang stand-in")
def test_verify_names_the_bytecode_folder_under_sagedoctors_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sagedoctor.verify import run_selftest

    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!{sys.executable}\n{STAND_IN_SELFTEST}", encoding="utf-8")
    python.chmod(0o755)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg cache"))
    report = run_selftest(python, quick=False)
    assert report["cache"] == str(tmp_path / "xdg cache" / "sagedoctor" / "bytecode")


def test_the_self_test_decides_before_it_imports_torch(tmp_path: Path) -> None:
    """`python -m <runtime>.selftest` with writing off and a torch without bytecode (a
    stand-in that stops the run at its import): torch's bytecode lands in the named folder,
    so the decision came first."""
    site = tmp_path / "venv" / "site-packages"
    source = site / "torch" / "__init__.py"
    source.parent.mkdir(parents=True)
    source.write_text("raise ImportError('a stand-in torch')\n", encoding="utf-8")
    cache = tmp_path / "cache"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", CACHE_ENV: str(cache),
           "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    env.pop("PYTHONPYCACHEPREFIX", None)
    done = subprocess.run([sys.executable, "-m", "sagedoctor.runtime.selftest", "--json"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert "a stand-in torch" in done.stderr
    assert [p.parent.name for p in cache.rglob("__init__.*.pyc")
            if "site-packages" in p.parts] == ["torch"]
    assert list(source.parent.glob("__pycache__/*")) == []
