"""Errors of the machine, not of sagedoctor: a full disk under the state folder (SD922), a
standard output whose reader quit or that was closed (quiet, the command's own status), and
one that cannot be written (SD924, exit 3). Never "internal error".

A full disk is the kernel's own ENOSPC: /dev/full, linked where sagedoctor writes (Linux)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sagedoctor.errors import OutOfSpace
from tests.standins import clean_env, make_venv, run_cli

PROFILES = Path(__file__).parent / "profiles"
FACTS = PROFILES / "windows-sageattention1.json"  # check says: fixable (exit 1)
DEV_FULL = Path("/dev/full")
needs_dev_full = pytest.mark.skipif(not DEV_FULL.exists(), reason="needs Linux's /dev/full")
posix = pytest.mark.skipif(sys.platform == "win32", reason="POSIX descriptors")
CLI = [sys.executable, "-m", "sagedoctor"]


def test_the_fixture_checks_as_fixable(tmp_path: Path) -> None:
    assert run_cli(["check", "--facts", str(FACTS)], clean_env(tmp_path)).returncode == 1


@posix
@pytest.mark.parametrize("args", [["check", "--facts", str(FACTS)],
                                  ["check", "--json", "--facts", str(FACTS)],
                                  ["plan", "--facts", str(FACTS)]])
def test_a_reader_that_quits_ends_the_output_quietly(tmp_path: Path, args: list[str]) -> None:
    expected = run_cli(args, clean_env(tmp_path)).returncode
    proc = subprocess.Popen([*CLI, *args], env=clean_env(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # `sagedoctor check | head -0`: every write meets EPIPE
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == expected
    assert err == ""  # no "internal error", no "Exception ignored ... BrokenPipeError"


@posix
def test_a_closed_stdout_runs_quietly_with_its_own_status(tmp_path: Path) -> None:
    done = subprocess.run(["sh", "-c", 'exec "$0" "$@" >&-', *CLI, "check", "--facts",
                           str(FACTS)], env=clean_env(tmp_path), capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stderr) == (1, "")
    verbose = subprocess.run(["sh", "-c", 'exec "$0" "$@" >&-', *CLI, "check", "-v",
                              "--facts", str(FACTS)], env=clean_env(tmp_path),
                             capture_output=True, text=True, timeout=60)
    assert verbose.returncode == 1


@posix
def test_stdout_closed_mid_run_is_said_with_v(tmp_path: Path) -> None:
    proc = subprocess.Popen([*CLI, "check", "-v", "--facts", str(FACTS)],
                            env=clean_env(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 1
    assert err.startswith("sagedoctor: error SD923: standard output was closed")


@needs_dev_full
@pytest.mark.parametrize("args", [["check", "--facts", str(FACTS)],
                                  ["check", "--json", "--facts", str(FACTS)]])
def test_a_full_disk_under_stdout_is_sd924_and_exit_3(tmp_path: Path, args: list[str]) -> None:
    with DEV_FULL.open("w") as full:
        done = subprocess.run([*CLI, *args], env=clean_env(tmp_path), stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    assert done.returncode == 3
    assert done.stderr.startswith("sagedoctor: error SD924: the output could not be written "
                                  "to standard output (No space left on device)")
    assert "internal error" not in done.stderr and "Exception ignored" not in done.stderr


@needs_dev_full
def test_a_full_state_disk_is_sd922_not_internal_error(tmp_path: Path) -> None:
    from sagedoctor.install.lock import venv_state_dir

    root = tmp_path / "venv ü"
    make_venv(root)
    env = clean_env(tmp_path)
    folder = venv_state_dir(root, tmp_path / "home" / ".local" / "state" / "sagedoctor")
    folder.mkdir(parents=True)
    # A journal to recover (so the lock is taken first) on a disk with no room for the PID.
    (folder / "journal.json").write_text(json.dumps({
        "schema_version": 1, "pid": 2 ** 22 + 7, "phase": "preparing", "work": None,
        "build_pgid": None, "python": str(root / "bin" / "python"), "prefix": str(root)}),
        encoding="utf-8")
    (folder / "install.pid").symlink_to(DEV_FULL)
    done = run_cli(["install", "--venv", str(root)], env, timeout=120)
    assert done.returncode == 3
    assert "internal error" not in done.stderr
    assert (f"sagedoctor: error SD922: no space left on the disk holding "
            f"{folder / 'install.pid'}") in done.stderr, done.stderr
    assert "free some space on that disk" in done.stderr


@needs_dev_full
def test_a_full_state_disk_keeps_the_previous_verify_record(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    import errno
    import os

    from sagedoctor.state import VerifyRecord, load_record, save_record, state_path

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    prefix = tmp_path / "venv"
    prefix.mkdir()
    old = VerifyRecord("sdpa-only", "2026-12-01T00:00:00Z", {"torch": "2.11.0"})
    save_record(prefix, old)
    path = state_path(prefix)
    real_write = os.write

    def full_there(fd: int, data: bytes) -> int:
        # The disk of the state folder is full: the write syscall says so (ENOSPC) there only.
        # The writer's temporary file has a fresh random name, so /dev/full cannot stand in.
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(path.parent)):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full_there)
    with pytest.raises(OutOfSpace) as caught:
        save_record(prefix, VerifyRecord("broken", "2026-12-04T00:00:00Z", {"torch": "2.12.0"}))
    monkeypatch.setattr(os, "write", real_write)
    assert caught.value.code == "SD922" and str(path) in caught.value.message  # the file
    assert load_record(prefix) == old  # the old record, whole
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no partial file


@needs_dev_full
def test_verify_on_a_full_venv_disk_leaves_no_temporary_file_and_names_the_file(
        tmp_path: Path) -> None:
    """D11: verify's calibration write on a full disk left a 0-byte .tmp in <venv>/sagedoctor
    per run, and SD922 named no file (the failed write carried no file name)."""
    import os

    from sagedoctor.errors import disk_full
    from sagedoctor.runtime.decisions import Calibration, Decision
    from sagedoctor.verify import write_calibration

    prefix = tmp_path / "venv ü"
    folder = prefix / "sagedoctor"
    folder.mkdir(parents=True)
    calibration = Calibration()
    calibration.put("GPU-0", "bf16|128|32|4096|4096|0", Decision(
        True, "fp8", 1.5, 1.4, 1.6, 5, "verify", "2026-12-07T00:00:00Z"), "H200", "sm90")
    # this process's temporary file, on a disk with no room (the kernel's own ENOSPC)
    (folder / f"calibration.json.{os.getpid()}.tmp").symlink_to(DEV_FULL)
    with pytest.raises(OSError) as caught:
        write_calibration(prefix, calibration)
    assert disk_full(caught.value)
    assert caught.value.filename == str(folder / "calibration.json")
    assert OutOfSpace(caught.value.filename).message.endswith(
        str(folder / "calibration.json"))  # what the CLI says (SD922) for it
    assert list(folder.iterdir()) == []  # no temporary file left, no partial record


@needs_dev_full
def test_a_log_on_a_full_disk_is_given_up_not_the_install(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    from sagedoctor.install.execute import Executor, installed_distributions
    from tests.test_install_kit import plan, sage_wheel, serving, torch_venv
    from tests.test_install_steps import wheel_step

    monkeypatch.setenv("SAGEDOCTOR_SMOKE_DEVICE", "cpu")
    python, _site = torch_venv(tmp_path / "venv")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "full.log").symlink_to(DEV_FULL)
    said: list[str] = []
    with serving() as site:
        step = wheel_step(site, sage_wheel(tmp_path / "w"))
        Executor(plan(python, step), said.append, tmp_path / "work", logs,
                 cache_dir=tmp_path / "cache", state_root=tmp_path / "state",
                 github_api="http://127.0.0.1:9", log_name="full.log").run("0.1.0")
    assert installed_distributions(python)["sageattention"] == "2.2.0"
    assert [m for m in said if "cannot be written" in m] == [
        f"the log {logs / 'full.log'} cannot be written (No space left on device); going on "
        "without it"]
