"""`sagedoctor disable` removes its own hook file whatever is in it: a .pth of binary bytes
kills every interpreter of the venv at `import site`, so the CLI cannot inspect the venv
through its Python, and disable must still find the file on disk and delete it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sagedoctor.state import HOOK_FILE
from tests.standins import clean_env, make_venv, put_non_file, run_cli, venv_python

CONTENTS = {"binary": b"import sys\x00\xff\xfe\x80\x81garbage\n\xc3\x28",
            "latin-1": "import sys # caf\xe9\n".encode("latin-1"),
            "empty": b""}


def starts(python: Path, env: dict[str, str]) -> bool:
    done = subprocess.run([str(python), "-c", "pass"], capture_output=True, env=env,
                          timeout=60)
    return done.returncode == 0


@pytest.mark.parametrize("how", ["--python", "--venv"])
@pytest.mark.parametrize("content", sorted(CONTENTS))
def test_disable_removes_a_corrupt_hook_file_and_the_python_starts_again(
        tmp_path: Path, content: str, how: str) -> None:
    root = tmp_path / "app venv ü"
    site = make_venv(root)
    python = venv_python(root)
    env = clean_env(tmp_path)
    hook = site / HOOK_FILE
    hook.write_bytes(CONTENTS[content])
    if content != "empty":
        assert not starts(python, env)  # what the user meets: no Python of the venv starts
    done = run_cli(["disable", how, str(python if how == "--python" else root)], env)
    assert done.returncode == 0, done.stderr
    assert not hook.exists()
    assert f"removed {hook}" in done.stdout, done.stdout
    assert starts(python, env)


def test_disable_without_a_hook_file_still_reports_the_dead_python(tmp_path: Path) -> None:
    root = tmp_path / "venv"
    site = make_venv(root)
    (site / "other.pth").write_bytes(b"\xff\xfe\x00")  # not ours: left alone
    done = run_cli(["disable", "--python", str(venv_python(root))], clean_env(tmp_path))
    assert done.returncode != 0
    assert "could not be inspected" in done.stderr
    assert (site / "other.pth").exists()


def test_disable_by_comfyui_removes_a_corrupt_hook_of_the_embedded_python(
        tmp_path: Path) -> None:
    from tests.test_comfyui_embedded import embedded_site, portable

    root, python = portable(tmp_path)
    env = clean_env(tmp_path)
    hook = embedded_site(python) / HOOK_FILE
    hook.write_bytes(CONTENTS["binary"])
    assert not starts(python, env)
    done = run_cli(["disable", "--comfyui", str(root)], env)
    assert done.returncode == 0, done.stderr
    assert not hook.exists() and f"removed {hook}" in done.stdout
    assert starts(python, env)


def _put_at(path: Path, kind: str) -> None:
    """Something at the hook's path that is no file."""
    put_non_file(path, kind)


@pytest.mark.parametrize("how", ["--python", "--venv"])
@pytest.mark.parametrize("kind", ["fifo", "folder", "socket"])
def test_disable_removes_whatever_is_at_the_hook_path(tmp_path: Path, kind: str,
                                                      how: str) -> None:
    """D12 (issue 34): a FIFO at the hook's path hangs every start of the venv's Python, and
    disable could not remove it (SD902 after 20 s); a folder there was an internal error."""
    import time

    root = tmp_path / "app venv ü"
    site = make_venv(root)
    python = venv_python(root)
    env = clean_env(tmp_path)
    hook = site / HOOK_FILE
    _put_at(hook, kind)
    began = time.monotonic()
    done = run_cli(["disable", how, str(python if how == "--python" else root)], env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not hook.exists() and not hook.is_symlink()
    assert f"removed {hook}" in done.stdout, done.stdout
    assert time.monotonic() - began < 15  # not after the probe's 20 s timeout
    assert starts(python, env)


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_enable_replaces_whatever_is_at_the_hook_path(tmp_path: Path, kind: str) -> None:
    """D12: enable with a folder at the hook's path was an internal error; a FIFO hung it."""
    from sagedoctor.hook import HOOK_LINE
    from tests.test_still_as_verified import verified_venv

    prefix, site, env = verified_venv(tmp_path)
    hook = site / HOOK_FILE
    _put_at(hook, kind)
    done = run_cli(["enable", "--venv", str(prefix)], env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert hook.is_file() and hook.read_text(encoding="utf-8") == HOOK_LINE


@pytest.mark.parametrize("kind", ["folder", "socket"])
def test_check_reports_what_is_at_the_hook_path_and_is_no_file(tmp_path: Path,
                                                                kind: str) -> None:
    """D12: a folder at the hook's path keeps the hook off (site skips it), and check said
    "No problems found"."""
    import json

    root = tmp_path / "app venv ü"
    site = make_venv(root)
    env = clean_env(tmp_path)
    hook = site / HOOK_FILE
    _put_at(hook, kind)
    done = run_cli(["check", "python", "--json", "--venv", str(root)], env)
    found = {f["code"]: f for f in json.loads(done.stdout)["findings"]}
    assert "SD136" in found, found.keys()
    assert found["SD136"]["severity"] == "error" and str(hook) in found["SD136"]["detail"]
    assert "sagedoctor disable" in found["SD136"]["fix"]
    assert done.returncode == 1
    assert run_cli(["disable", "--venv", str(root)], env).returncode == 0
    done = run_cli(["check", "python", "--json", "--venv", str(root)], env)
    assert "SD136" not in {f["code"] for f in json.loads(done.stdout)["findings"]}
