"""A venv this user may not write (issue 34, D5): its site-packages on a read-only bind mount,
or a venv of another user. enable, disable and uninstall ended in "internal error", exit 3;
they say what is not writable and how to fix it (SD932, exit 1). Root only: the mount is made
in a mount namespace of its own (unshare -m), the other user is `nobody` in a forked child."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from tests.standins import add_dist, add_sageattention, add_torch, clean_env, run_cli
from tests.test_still_as_verified import TORCH_PY, WHEN, fingerprint_of

NOBODY = 65534
UNSHARE, MOUNT = shutil.which("unshare"), shutil.which("mount")

pytestmark = pytest.mark.skipif(
    sys.platform == "win32" or not hasattr(os, "getuid") or os.getuid() != 0
    or UNSHARE is None or MOUNT is None,
    reason="needs root, unshare and mount (a read-only bind mount; becoming nobody)")


def _can_mount() -> bool:
    done = subprocess.run([str(UNSHARE), "-m", str(MOUNT), "--bind", "/tmp", "/tmp"],
                          capture_output=True, timeout=30, check=False)
    return done.returncode == 0


@pytest.fixture
def venv(tmp_path: Path) -> Iterator[tuple[Path, Path, dict[str, str]]]:
    """A verified venv with torch, SageAttention and the runtime, in a folder every user may
    read (pytest's tmp_path is under a 0700 folder of root's)."""
    from tests.standins import make_venv, record_passing_verify

    folder = Path(tempfile.mkdtemp(prefix="sagedoctor ro ü "))
    folder.chmod(0o755)
    try:
        prefix = folder / "venv"
        site = make_venv(prefix)
        add_torch(site, TORCH_PY, "2.11.0")
        add_sageattention(site, "2.2.0", ("_fused", "_qattn_sm90"))
        add_dist(site, "sagedoctor-runtime", "0.1.0")
        env = clean_env(tmp_path)
        record_passing_verify(prefix, fingerprint_of(prefix), Path(env["HOME"]), WHEN)
        yield prefix, site, env
    finally:
        shutil.rmtree(folder)


def run_read_only(args: list[str], env: dict[str, str], folder: Path
                  ) -> subprocess.CompletedProcess[str]:
    """The CLI with `folder` bind-mounted read-only over itself, in a mount namespace of its
    own (the mount goes away with the process)."""
    script = ('"$0" --bind "$1" "$1" && "$0" -o remount,bind,ro "$1" "$1" && shift && '
              'exec "$@"')
    return subprocess.run([str(UNSHARE), "-m", "sh", "-c", script, str(MOUNT), str(folder),
                           sys.executable, "-m", "sagedoctor", *args], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def assert_not_writable(done: subprocess.CompletedProcess[str], where: Path) -> None:
    assert done.returncode == 1, done.stdout + done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    assert "SD932" in done.stderr and str(where) in done.stderr, done.stderr
    assert "fix:" in done.stderr


@pytest.mark.parametrize("command", ["enable", "disable", "uninstall"])
def test_a_read_only_site_packages_is_said_not_an_internal_error(
        venv: tuple[Path, Path, dict[str, str]], command: str) -> None:
    if not _can_mount():
        pytest.skip("no mount namespace here")
    prefix, site, env = venv
    hook = site / "sagedoctor-runtime.pth"
    if command != "enable":
        assert run_cli(["enable", "--venv", str(prefix)], env).returncode == 0
    args = [command, "--venv", str(prefix)] + (["--yes"] if command == "uninstall" else [])
    before = sorted(p.name for p in site.iterdir())
    done = run_read_only(args, env, site)
    assert_not_writable(done, site)
    assert sorted(p.name for p in site.iterdir()) == before  # nothing changed
    assert hook.exists() == (command != "enable")


def as_nobody_cli(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """The CLI's main() in a forked child that became nobody: its exit status and stderr."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(read)
        err = io.StringIO()
        status = 99
        try:
            # nobody cannot read this interpreter's library (under root's 0700 home): what
            # disable imports is imported first
            import importlib
            import pkgutil

            import sagedoctor

            # every module of the tool, whatever the layout (not __main__, which runs the CLI)
            names = [m.name for m in pkgutil.walk_packages(sagedoctor.__path__, "sagedoctor.")
                     if m.name != "sagedoctor.__main__"]
            for name in [*names, "platformdirs"]:
                importlib.import_module(name)
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.environ.clear()
            os.environ.update(env)
            from sagedoctor.cli import main

            with redirect_stdout(io.StringIO()), redirect_stderr(err):
                status = main(args)
        except BaseException as exc:
            err.write(f"{type(exc).__name__}: {exc}")
        os.write(write, f"{status}\n{err.getvalue()}".encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        said = pipe.read().decode()
    os.waitpid(pid, 0)
    first, _, stderr = said.partition("\n")
    return int(first), stderr


def test_disable_in_another_users_venv_is_said_not_an_internal_error(
        venv: tuple[Path, Path, dict[str, str]], tmp_path: Path) -> None:
    prefix, site, env = venv
    assert run_cli(["enable", "--venv", str(prefix)], env).returncode == 0
    home = Path(tempfile.mkdtemp(prefix="nobody home "))
    home.chmod(0o777)
    try:  # HOME, the empty host root and the basic tools where nobody may read them
        status, stderr = as_nobody_cli(["disable", "--venv", str(prefix)], clean_env(home))
    finally:
        shutil.rmtree(home)
    assert status == 1, stderr
    assert "internal error" not in stderr and "SD932" in stderr and str(site) in stderr, stderr
    assert (site / "sagedoctor-runtime.pth").exists()
