"""The install transaction in real venvs with real uv: rollback proven by hashes when uv fails
half-way, a file uv cannot remove (chattr +i), a cancel from the progress callback, SIGTERM and
SIGHUP mid-build (no orphan), SIGKILL mid-build, mid-change and after the invokeai.yaml write
(the next run recovers), and two installs at once."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sagedoctor.events import as_lines
from sagedoctor.install.errors import InstallLocked
from sagedoctor.install.execute import Executor
from sagedoctor.install.lock import venv_lock, venv_state_dir
from sagedoctor.install.recover import recover_pending
from sagedoctor.install.runner import InstallError
from sagedoctor.install.transaction import Journal
from sagedoctor.plan import Step
from sagedoctor.state import pending_install
from tests.standins import clean_env, run_cli
from tests.test_install_kit import (
    add_installed_sage,
    fake_source,
    plan,
    settings_for,
    torch_venv,
    tree_hashes,
)

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


@pytest.fixture
def venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    monkeypatch.setenv("SAGEDOCTOR_SMOKE_DEVICE", "cpu")
    python, site = torch_venv(tmp_path / "app venv ü")
    add_installed_sage(site, "2.1.1")
    return python, site


def build_step(source: Path) -> Step:
    return Step("build-from-source", "Build SageAttention", "why", ("sageattention",),
                build=settings_for(str(source)))


def executor(python: Path, tmp_path: Path, *steps: Step, progress: Any = None) -> Executor:
    work = tmp_path / f"work-{len(list(tmp_path.glob('work-*')))}"
    return Executor(plan(python, *steps), progress or (lambda _m: None), work,
                    tmp_path / "logs", cache_dir=tmp_path / "cache",
                    state_root=tmp_path / "state")


def test_uv_failing_half_way_is_rolled_back_and_proven_by_hashes(
        venv: tuple[Path, Path], tmp_path: Path) -> None:
    python, site = venv
    source = fake_source(tmp_path / "src")
    (source / "sageattention" / "extra.py").write_text("NEW = 1\n", encoding="utf-8")
    # A folder where the new wheel writes a file: uv removes the old files, then fails.
    (site / "sageattention" / "extra.py").mkdir()
    (site / "sageattention" / "extra.py" / "keep.txt").write_text("mine", encoding="utf-8")
    before = tree_hashes(site)
    with pytest.raises(InstallError) as info:
        executor(python, tmp_path, build_step(source)).run("0.1.0")
    # uv wraps its message at the terminal's width: where depends on the path's length.
    said = " ".join(info.value.message.replace(" | ", " ").split())
    assert "failed" in said and "Is a directory" in said, said
    assert "files match their sha256 from before" in info.value.fix
    assert "sageattention 2.1.1" in info.value.fix
    after = tree_hashes(site)
    assert after == before
    assert not list((tmp_path / "state").rglob("journal.json"))


def test_an_exception_from_the_progress_callback_rolls_back(venv: tuple[Path, Path],
                                                            tmp_path: Path) -> None:
    python, site = venv

    class InstallCancelled(InstallError):  # what the TUI raises when the user cancels
        code = "SD910"

    def progress(message: str) -> None:
        if message.startswith("smoke check:"):  # the new sageattention is in place by now
            raise InstallCancelled("cancelled by the user", "")

    before = tree_hashes(site)
    with pytest.raises(InstallCancelled) as info:
        executor(python, tmp_path, build_step(fake_source(tmp_path / "src")),
                 progress=progress).run("0.1.0")
    assert "Rolled back" in info.value.fix
    assert tree_hashes(site) == before


# --- signals and a second process --------------------------------------------------------------

# (Python's own Ctrl+C handler first: a process started in the background of a shell without
# job control, as a CI runner may start the suite, inherits SIGINT ignored)
DRIVER = r"""
import json, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from pathlib import Path
from sagedoctor.install.execute import execute_plan
from sagedoctor.plan import Step
from tests.test_install_kit import plan, settings_for
cfg = json.loads(sys.argv[1])
steps = [Step("build-from-source", "Build", "why", ("sageattention",),
              build=settings_for(cfg["source"]))]
if cfg.get("config"):  # last, so the smoke check (which can be made to hang) follows it
    steps.append(Step("enable-invokeai", "Enable", "why", paths=(cfg["config"],),
                      config=(("attention_backend", "sage"),)))
try:
    execute_plan(plan(Path(cfg["python"]), *steps), lambda m: print(m, flush=True),
                 Path(cfg["logs"]), "0.1.0", cache_dir=Path(cfg["cache"]),
                 state_root=Path(cfg["state"]))
except Exception as exc:
    print("ERROR", type(exc).__name__, getattr(exc, "code", ""), exc, "|",
          getattr(exc, "fix", ""), f"exit={getattr(exc, 'exit_status', '')}", flush=True)
    sys.exit(3)
print("DONE", flush=True)
"""


def start(python: Path, source: Path, tmp_path: Path,
          config: Path | None = None, state: Path | None = None) -> subprocess.Popen[str]:
    cfg = {"python": str(python), "source": str(source), "logs": str(tmp_path / "logs"),
           "cache": str(tmp_path / "cache"), "state": str(state or tmp_path / "state"),
           "config": str(config) if config else None}
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"), BUILD_PIDS=str(tmp_path / "pids"),
               SAGEDOCTOR_SMOKE_DEVICE="cpu", SMOKE_HANG_FILE=str(tmp_path / "hang"))
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return subprocess.Popen([sys.executable, "-c", DRIVER, json.dumps(cfg)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for(condition: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for a reaper."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def build_pids(tmp_path: Path) -> list[int]:
    wait_for(lambda: (tmp_path / "pids").is_file() and (tmp_path / "pids").read_text(),
             "the build to start")
    return [int(p) for p in (tmp_path / "pids").read_text().split()]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["TERM", "HUP"])
def test_sigterm_or_sighup_mid_build_kills_the_build_tree_and_cleans_up(venv: tuple[Path, Path],
                                                              tmp_path: Path,
                                                              signum: int) -> None:
    python, site = venv
    before = tree_hashes(site)
    proc = start(python, fake_source(tmp_path / "src", slow=True), tmp_path)
    pids = build_pids(tmp_path)
    assert all(alive(p) for p in pids)
    proc.send_signal(signum)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 3, out
    name = signal.Signals(signum).name
    assert "InstallInterrupted SD912" in out and f"stopped by {name}" in out
    wait_for(lambda: not any(alive(p) for p in pids), "the build tree to die", 10)
    assert list((tmp_path / "tmp").iterdir()) == []  # the temporary folder is gone
    assert tree_hashes(site) == before
    assert not list((tmp_path / "state").rglob("journal.json"))
    again = start(python, fake_source(tmp_path / "src2"), tmp_path)  # nothing left to recover
    out, _ = again.communicate(timeout=120)
    assert again.returncode == 0 and "DONE" in out and "interrupted" not in out, out


def test_sigkill_mid_build_is_recovered_by_the_next_run(venv: tuple[Path, Path],
                                                        tmp_path: Path) -> None:
    python, site = venv
    before = tree_hashes(site)
    proc = start(python, fake_source(tmp_path / "src", slow=True), tmp_path)
    pids = build_pids(tmp_path)
    proc.kill()
    proc.communicate(timeout=30)
    assert any(alive(p) for p in pids)  # nothing could stop them: sagedoctor died at once
    assert list((tmp_path / "state").rglob("journal.json"))
    again = start(python, fake_source(tmp_path / "src2"), tmp_path)
    out, _ = again.communicate(timeout=120)
    assert "was interrupted; recovering before anything else" in out, out
    assert "stopped its build" in out and "removed its temporary folder" in out
    assert "RecoveredInterruptedRun SD914" in out
    wait_for(lambda: not any(alive(p) for p in pids), "the orphaned build to die", 10)
    assert list((tmp_path / "tmp").iterdir()) == []
    assert tree_hashes(site) == before
    third = start(python, fake_source(tmp_path / "src3"), tmp_path)
    out, _ = third.communicate(timeout=120)
    assert third.returncode == 0 and "DONE" in out, out


def test_ctrl_c_mid_build_says_the_venv_was_not_changed_and_exits_130(
        venv: tuple[Path, Path], tmp_path: Path) -> None:
    """Issue 34: Ctrl+C in the prepare phase (a build, before anything changed) printed only
    "sagedoctor: interrupted": the KeyboardInterrupt passed the install's own handling."""
    python, site = venv
    before = tree_hashes(site)
    proc = start(python, fake_source(tmp_path / "src", slow=True), tmp_path)
    pids = build_pids(tmp_path)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert "InstallInterrupted SD912 stopped by Ctrl+C (SIGINT)" in out, out
    assert "The venv was not changed" in out and "exit=130" in out, out
    assert "rolling back" not in out  # nothing to roll back
    wait_for(lambda: not any(alive(p) for p in pids), "the build tree to die", 10)
    assert tree_hashes(site) == before
    assert not list((tmp_path / "state").rglob("journal.json"))


def kill_at_the_smoke_check(python: Path, tmp_path: Path, state: Path | None = None) -> None:
    """SIGKILL an install once the new version is in place (its sageattn() hangs the smoke
    check), leaving its journal in the 'changing' phase."""
    (tmp_path / "hang").write_text("", encoding="utf-8")
    proc = start(python, fake_source(tmp_path / "src"), tmp_path, state=state)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("smoke check:"):
            break
    proc.kill()
    proc.communicate(timeout=30)
    (tmp_path / "hang").unlink()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
def test_ctrl_c_or_sigterm_in_the_smoke_check_says_why_and_exits_130(
        venv: tuple[Path, Path], tmp_path: Path, signum: int) -> None:
    """D13: the rollback named no reason for Ctrl+C ("rolling back: "), and the run exited 3
    (SD912) where the README says 130."""
    python, site = venv
    before = tree_hashes(site)
    (tmp_path / "hang").write_text("", encoding="utf-8")  # the new sageattn() hangs
    proc = start(python, fake_source(tmp_path / "src"), tmp_path)
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("smoke check:"):
            break
    time.sleep(0.5)  # into the smoke check's wait
    proc.send_signal(signum)
    out, _ = proc.communicate(timeout=60)
    out = "".join(seen) + out
    reason = "stopped by Ctrl+C (SIGINT)" if signum == signal.SIGINT else "stopped by SIGTERM"
    assert f"rolling back: {reason}" in out, out
    assert "rolling back: \n" not in out
    assert "SD912" in out and "exit=130" in out, out
    assert tree_hashes(site) == before


def test_ctrl_c_in_the_verify_after_the_commit_says_the_install_stays(tmp_path: Path) -> None:
    """D13: Ctrl+C in the verify that follows a committed install said only "interrupted"."""
    from tests.standins import make_venv, run_at_start_up

    root = tmp_path / "venv ü"
    site = make_venv(root)
    started = tmp_path / "verify started"
    run_at_start_up(site,  # the target hangs at start-up: verify waits
                    f"import pathlib, time\npathlib.Path({str(started)!r}).touch()\n"
                    "time.sleep(300)\n")
    code = ("import signal, sys\nfrom pathlib import Path\n"
            "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "from sagedoctor.commands.install import verify_after_commit\n"
            "sys.exit(verify_after_commit(Path(sys.argv[1]), Path(sys.argv[2]), True, False, "
            "sys.stdout))\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(root / "bin" / "python"),
                             str(root)], cwd=REPO, env=clean_env(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(started.exists, "the verify to start the target")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, (out, err)
    assert "the install was committed and stays" in err, err
    assert f"sagedoctor verify --venv {root}" in err


def test_sigkill_mid_change_is_rolled_back_by_the_next_run(venv: tuple[Path, Path],
                                                           tmp_path: Path) -> None:
    python, site = venv
    before = tree_hashes(site)
    kill_at_the_smoke_check(python, tmp_path)
    assert tree_hashes(site) != before  # killed with the new version in place
    journal = json.loads(next((tmp_path / "state").rglob("journal.json")).read_text())
    assert journal["phase"] == "changing"
    again = start(python, fake_source(tmp_path / "src2"), tmp_path)
    out, _ = again.communicate(timeout=120)
    assert "the venv is as before the install: sageattention 2.1.1" in out, out
    assert tree_hashes(site) == before


def test_after_a_sigkill_check_says_sd199_and_verify_enable_post_update_refuse(
        venv: tuple[Path, Path], tmp_path: Path) -> None:
    python, site = venv
    prefix = python.parent.parent
    env = clean_env(tmp_path)
    state = tmp_path / "home" / ".local" / "state" / "sagedoctor"  # the CLI's, under HOME
    kill_at_the_smoke_check(python, tmp_path, state)
    [journal] = state.rglob("journal.json")  # killed with the new version in place

    checked = run_cli(["check", "python", "--venv", str(prefix), "--json"], env, timeout=120)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    report = json.loads(checked.stdout)
    [found] = [f for f in report["findings"] if f["code"] == "SD199"]
    assert found["severity"] == "error" and str(journal) in found["detail"]
    assert "an install was interrupted" in found["detail"]
    assert found["fix"].startswith("`sagedoctor install --venv")
    assert "rolls the venv back first" in found["fix"]
    assert report["facts"]["interrupted_install"]["phase"] == "changing"
    shown = run_cli(["check", "python", "--venv", str(prefix)], env, timeout=120)
    assert shown.returncode == 1 and "SD199" in shown.stdout, shown.stdout

    for command in (["verify", "--quick"], ["enable"], ["post-update", "--yes"]):
        refused = run_cli([*command, "--venv", str(prefix)], env, timeout=120)
        said = refused.stdout + refused.stderr
        assert refused.returncode == 1, (command, said)
        assert "error SD199: an install was interrupted" in said, (command, said)
        assert "refuses to arm the runtime" in said and "sagedoctor install --venv" in said
    assert not (prefix / "sagedoctor" / "verified.json").exists()
    assert not (site / "sagedoctor-runtime.pth").exists()
    assert journal.is_file()  # refusing touched nothing

    again = start(python, fake_source(tmp_path / "src2"), tmp_path, state=state)
    out, _ = again.communicate(timeout=120)
    assert "the venv is as before the install: sageattention 2.1.1" in out, out
    assert not journal.exists()
    after = run_cli(["check", "python", "--venv", str(prefix), "--json"], env, timeout=120)
    report = json.loads(after.stdout)
    assert "SD199" not in {f["code"] for f in report["findings"]}, report["findings"]
    assert report["facts"]["interrupted_install"] is None


def test_uninstall_after_a_sigkill_rolls_the_install_back_first(
        venv: tuple[Path, Path], tmp_path: Path) -> None:
    python, site = venv
    prefix = python.parent.parent
    before = tree_hashes(site)
    env = clean_env(tmp_path)
    state = tmp_path / "home" / ".local" / "state" / "sagedoctor"  # the CLI's, under HOME
    kill_at_the_smoke_check(python, tmp_path, state)
    [journal] = state.rglob("journal.json")
    assert tree_hashes(site) != before  # killed with the new version in place

    done = run_cli(["uninstall", "--venv", str(prefix), "--yes"], env, timeout=120)
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "SD914" in said and "uninstall` again" in said, said
    assert "was interrupted; recovering before anything else" in said, said
    assert tree_hashes(site) == before and not journal.exists()  # as before the install
    checked = run_cli(["check", "python", "--venv", str(prefix), "--json"], env, timeout=120)
    assert "SD199" not in {f["code"] for f in json.loads(checked.stdout)["findings"]}


def test_a_plan_of_only_the_recovery_rolls_back_and_ends_without_an_error(
        venv: tuple[Path, Path], tmp_path: Path) -> None:
    python, _site = venv
    state = tmp_path / "state"
    folder = venv_state_dir(python.parent.parent, state)
    journal = Journal(folder)  # as the transaction writes it, of a process that is gone
    journal.begin(python, python.parent.parent, tmp_path / "old work", tmp_path / "old.log")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    journal.write(pid=int(dead.stdout))
    pending = pending_install(python.parent.parent, state)
    assert pending is not None and pending.phase == "preparing" and not pending.running
    said: list[str] = []
    recover = Step("recover", "Roll back the interrupted install", "why",
                   paths=(str(journal.path),))
    executor(python, tmp_path, recover, progress=said.append).run("0.1.0")
    assert any("was interrupted; recovering" in m for m in said), said
    assert pending_install(python.parent.parent, state) is None
    with pytest.raises(InstallError, match="rolled back first"):  # more than that: plan again
        journal.begin(python, python.parent.parent, tmp_path / "w", tmp_path / "l.log")
        journal.write(pid=int(dead.stdout))
        executor(python, tmp_path, recover, build_step(fake_source(tmp_path / "src"))
                 ).run("0.1.0")


def test_a_journal_that_cannot_be_read_is_still_pending(tmp_path: Path) -> None:
    prefix = tmp_path / "venv ü"
    folder = venv_state_dir(prefix, tmp_path / "state")
    folder.mkdir(parents=True)
    (folder / "journal.json").write_bytes(b"\xff\x00 not json")
    pending = pending_install(prefix, tmp_path / "state")
    assert pending is not None and pending.pid is None and pending.phase is None
    (folder / "journal.json").unlink()
    os.mkfifo(folder / "journal.json")  # a FIFO must not block the probe
    pending = pending_install(prefix, tmp_path / "state")
    assert pending is not None and pending.pid is None
    (folder / "journal.json").unlink()
    (folder / "journal.json").write_text(json.dumps({"pid": os.getpid(), "phase": "changing"}))
    with venv_lock(folder, prefix, lambda _m: None):
        pending = pending_install(prefix, tmp_path / "state")
    assert pending is not None and pending.running  # an install at work now, not a dead one
    assert pending_install(tmp_path / "another venv", tmp_path / "state") is None


def test_a_stale_journal_whose_pid_now_is_another_process_is_recovered(
        venv: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """D1: after a reboot the journal's PID belongs to an unrelated live process. The lock,
    free, says no install runs: the journal is recovered, not waited on forever."""
    python, _site = venv
    prefix = python.parent.parent
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))  # recover_pending's default
    folder = venv_state_dir(prefix)
    unrelated = subprocess.Popen(["sleep", "60"], start_new_session=True)  # a group leader
    try:
        journal = Journal(folder)
        journal.begin(python, prefix, tmp_path / "old work", tmp_path / "old.log")
        # written in an earlier boot: its build's group number is another's by now
        journal.write(pid=unrelated.pid, build_pgid=unrelated.pid, boot="an earlier boot")
        with venv_lock(folder, prefix, lambda _m: None):  # an install at work: running
            held = pending_install(prefix)
        assert held is not None and held.running
        pending = pending_install(prefix)
        assert pending is not None and not pending.running, pending
        assert pending.pid == unrelated.pid
        env = dict(clean_env(tmp_path), XDG_STATE_HOME=str(tmp_path / "xdg"))
        refused = run_cli(["enable", "--venv", str(prefix)], env, timeout=120)
        text = refused.stdout + refused.stderr
        assert "SD199" in text and "an install was interrupted" in text, text
        assert "wait for it" not in text and "sagedoctor install --venv" in text
        said: list[str] = []
        # what `sagedoctor install` runs first
        assert recover_pending(prefix, as_lines(said.append))
        assert any("was interrupted; recovering" in m for m in said), said
        assert pending_install(prefix) is None and not journal.path.exists()
        assert unrelated.poll() is None  # the unrelated process (group) was left alone
        assert not any("stopped its build" in m for m in said), said
    finally:
        unrelated.kill()
        unrelated.wait()


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("existed", [True, False], ids=["edited", "created"])
def test_sigkill_after_the_invokeai_yaml_write_is_undone_by_the_next_run(
        venv: tuple[Path, Path], tmp_path: Path, existed: bool) -> None:
    python, site = venv
    config = tmp_path / "invoke root ü" / "invokeai.yaml"
    config.parent.mkdir()
    (config.parent / "databases").mkdir()  # an InvokeAI root (the preflight asks for one)
    original = b"# mine\r\nschema_version: 4.0.3\r\nprecision: float16\r\n"
    if existed:
        config.write_bytes(original)
    before = tree_hashes(site)
    (tmp_path / "hang").write_text("", encoding="utf-8")  # the smoke check after it hangs
    proc = start(python, fake_source(tmp_path / "src"), tmp_path, config=config)
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("smoke check:"):
            break
    proc.kill()  # the yaml is written: its step came last, right before the smoke check
    proc.communicate(timeout=30)
    (tmp_path / "hang").unlink()
    assert any(line.startswith("set attention_backend: sage in") for line in seen), seen
    assert b"attention_backend: sage" in config.read_bytes()
    journal = json.loads(next((tmp_path / "state").rglob("journal.json")).read_text())
    [entry] = journal["edited_files"]
    assert entry["path"] == str(config)
    assert entry["sha256_before"] == (hashlib.sha256(original).hexdigest() if existed else None)
    for bak in config.parent.glob("invokeai.yaml.sagedoctor-*.bak"):
        bak.unlink()  # the user's copy may go: the journal keeps its own
    again = start(python, fake_source(tmp_path / "src2"), tmp_path)
    out, _ = again.communicate(timeout=120)
    assert "RecoveredInterruptedRun SD914" in out, out
    if existed:
        assert f"restored {config} (sha256 {entry['sha256_before'][:12]}" in out, out
        assert sha256_of(config) == hashlib.sha256(original).hexdigest()
        assert "1 edited config file(s) restored" in out
    else:
        assert f"removed {config} (the install had created it)" in out, out
        assert not config.exists()
    assert tree_hashes(site) == before
    assert not list((tmp_path / "state").rglob("journal.json"))


def test_a_failed_smoke_check_after_the_yaml_edit_restores_it_by_hash(
        venv: tuple[Path, Path], tmp_path: Path) -> None:
    from tests.test_install_kit import SAGE_GARBAGE

    python, site = venv
    config = tmp_path / "root" / "invokeai.yaml"
    config.parent.mkdir()
    config.write_text("# mine\nschema_version: 4.0.3\n", encoding="utf-8")
    digest = sha256_of(config)
    before = tree_hashes(site)
    enable = Step("enable-invokeai", "Enable", "why", paths=(str(config),),
                  config=(("attention_backend", "sage"),))
    messages: list[str] = []
    with pytest.raises(InstallError, match="smoke check") as info:
        executor(python, tmp_path, build_step(fake_source(tmp_path / "src", kernel=SAGE_GARBAGE)),
                 enable, progress=messages.append).run("0.1.0")
    assert any(m.startswith("set attention_backend: sage") for m in messages)
    assert "1 edited config file(s) restored" in info.value.fix
    assert sha256_of(config) == digest
    assert tree_hashes(site) == before


def test_invokeais_switch_set_back_for_the_hook_is_undone_by_a_rollback(
        venv: tuple[Path, Path], tmp_path: Path) -> None:
    # The plan's step where sagedoctor's hook is the better switch (issue 36): the same edit,
    # so a failed install leaves the user's own `attention_backend: sage` in place.
    from tests.test_install_kit import SAGE_GARBAGE

    python, _site = venv
    config = tmp_path / "root" / "invokeai.yaml"
    config.parent.mkdir()
    config.write_text("# mine\nschema_version: 4.0.3\nattention_backend: sage\n",
                      encoding="utf-8")
    digest = sha256_of(config)
    reset = Step("enable-invokeai", "Set attention_backend: auto", "why",
                 paths=(str(config),), config=(("attention_backend", "auto"),))
    seen: list[str] = []

    def progress(message: str) -> None:
        if message.startswith("set attention_backend: auto"):  # edited, not yet rolled back
            seen.append(config.read_text(encoding="utf-8"))

    with pytest.raises(InstallError, match="smoke check") as info:
        executor(python, tmp_path, build_step(fake_source(tmp_path / "src", kernel=SAGE_GARBAGE)),
                 reset, progress=progress).run("0.1.0")
    assert seen == ["# mine\nschema_version: 4.0.3\nattention_backend: auto\n"]
    assert "1 edited config file(s) restored" in info.value.fix
    assert sha256_of(config) == digest
    assert sorted(p.name for p in config.parent.iterdir()) == ["invokeai.yaml"]  # no .bak


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes and groups")
def test_a_rollback_puts_invokeai_yaml_back_with_its_mode_owner_and_group(
        venv: tuple[Path, Path], tmp_path: Path) -> None:
    from tests.test_install_kit import SAGE_GARBAGE

    python, _site = venv
    config = tmp_path / "root" / "invokeai.yaml"
    config.parent.mkdir()
    config.write_text("# mine\nschema_version: 4.0.3\n", encoding="utf-8")
    if os.getuid() == 0:
        os.chown(config, 0, 1)  # root:daemon, as a service install has it
    config.chmod(0o640)
    info = config.stat()
    want = (0o640, info.st_uid, info.st_gid)
    digest = sha256_of(config)
    enable = Step("enable-invokeai", "Enable", "why", paths=(str(config),),
                  config=(("attention_backend", "sage"),))
    seen: list[tuple[int, int, int]] = []

    def progress(message: str) -> None:
        if message.startswith("set attention_backend: sage"):  # edited, not yet rolled back
            now = config.stat()
            seen.append((stat.S_IMODE(now.st_mode), now.st_uid, now.st_gid))

    with pytest.raises(InstallError, match="smoke check") as info_:
        executor(python, tmp_path, build_step(fake_source(tmp_path / "src", kernel=SAGE_GARBAGE)),
                 enable, progress=progress).run("0.1.0")
    assert seen == [want]
    assert "1 edited config file(s) restored" in info_.value.fix
    after = config.stat()
    assert sha256_of(config) == digest
    assert (stat.S_IMODE(after.st_mode), after.st_uid, after.st_gid) == want
    assert sorted(p.name for p in config.parent.iterdir()) == ["invokeai.yaml"]  # no .bak


def test_two_installs_at_once_the_second_is_refused_with_its_own_log(
        venv: tuple[Path, Path], tmp_path: Path) -> None:
    python, _site = venv
    first = start(python, fake_source(tmp_path / "src", slow=True), tmp_path)
    try:
        build_pids(tmp_path)
        with pytest.raises(InstallLocked) as info:
            executor(python, tmp_path, build_step(fake_source(tmp_path / "src2"))).run("0.1.0")
        assert f"(pid {first.pid})" in info.value.message and info.value.code == "SD911"
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    logs = sorted((tmp_path / "logs").glob("install-*.log"))
    assert len(logs) == 2
    mine = [p for p in logs if p.name.endswith(f"-{os.getpid()}.log")]
    assert len(mine) == 1 and "building:" not in mine[0].read_text()


def test_two_installs_with_different_state_folders_meet_at_the_venv(
        venv: tuple[Path, Path], tmp_path: Path) -> None:
    """D7: another XDG_STATE_HOME (HOME, sudo) is another state folder, another lock there:
    the venv's own lock refuses the second install all the same."""
    python, site = venv
    before = tree_hashes(site)
    first = start(python, fake_source(tmp_path / "src", slow=True), tmp_path,
                  state=tmp_path / "another state")
    try:
        build_pids(tmp_path)
        with pytest.raises(InstallLocked) as info:
            executor(python, tmp_path, build_step(fake_source(tmp_path / "src2"))).run("0.1.0")
        assert info.value.code == "SD911" and "it uses another state folder" in info.value.message
        assert not list((tmp_path / "state").rglob("journal.json"))
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    assert tree_hashes(site) == before
    assert not list(python.parent.parent.glob("*.lock"))  # nothing left in the venv
    again = executor(python, tmp_path, build_step(fake_source(tmp_path / "src3")))
    again.run("0.1.0")  # both locks free again


def test_a_plan_made_before_an_uninstall_ran_is_not_carried_out(
        venv: tuple[Path, Path], tmp_path: Path) -> None:
    """D15: the install planned, an `uninstall --all` took the lock and removed
    sageattention, then the install took the lock: its plan (made for a venv holding
    sageattention) is made again under the lock, differs, and nothing is done."""
    from sagedoctor.install.errors import PlanOutdated
    from sagedoctor.install.execute import installed_distributions
    from sagedoctor.install.runner import Installer
    from sagedoctor.plan import Plan

    python, site = venv
    step = build_step(fake_source(tmp_path / "src"))

    def planned() -> Plan:  # the planner's view: an upgrade of the sageattention there
        upgrade = "sageattention" in installed_distributions(python)
        return plan(python, *([step] if upgrade else []))

    made = planned()
    # the uninstall that ran in between (the stand-in's RECORD does not list its dist-info)
    Installer.for_target(python, tmp_path / "uv cache").uninstall(["sageattention"])
    shutil.rmtree(next(site.glob("sageattention-*.dist-info")))
    before = tree_hashes(site)
    said: list[str] = []
    with pytest.raises(PlanOutdated) as info:
        Executor(made, said.append, tmp_path / "work", tmp_path / "logs",
                 cache_dir=tmp_path / "cache", state_root=tmp_path / "state",
                 replan=planned).run("0.1.0")
    assert info.value.code == "SD919" and "nothing to do" in info.value.message
    assert "nothing was changed" in info.value.fix
    assert tree_hashes(site) == before and not any("building" in m for m in said)
    add_installed_sage(site, "2.1.1")  # as planned again: the same plan goes through
    Executor(planned(), said.append, tmp_path / "work2", tmp_path / "logs",
             cache_dir=tmp_path / "cache", state_root=tmp_path / "state",
             replan=planned).run("0.1.0")
    assert any(m.startswith("committed: ") for m in said), said


def test_a_signal_during_a_uv_call_waits_for_it_then_stops_the_run() -> None:
    from sagedoctor.install.errors import InstallInterrupted
    from sagedoctor.install.signals import deferred, interrupts_raise

    finished = []
    with interrupts_raise(), pytest.raises(InstallInterrupted, match="SIGTERM"), deferred():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)  # uv is still writing: it must not be cut off
        finished.append(True)
    assert finished == [True]
    with interrupts_raise(), pytest.raises(InstallInterrupted, match="SIGHUP"):
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(1)


# --- a file uv cannot remove ----------------------------------------------------------------------

def undeletable(path: Path) -> tuple[str, Any]:
    """Make `path` impossible to remove, as the issue's `chattr +i` did; returns (how, undo).

    chattr +i needs CAP_LINUX_IMMUTABLE and a filesystem that has the flag; where that fails, a
    read-only parent folder stops a non-root uv the same way (root ignores folder modes, so
    then the test cannot be made and is skipped)."""
    chattr = shutil.which("chattr")
    if chattr and subprocess.run([chattr, "+i", str(path)], capture_output=True).returncode == 0:
        return "chattr +i", lambda: subprocess.run([chattr, "-i", str(path)], check=True)
    if os.geteuid() != 0:
        folder = path.parent
        folder.chmod(0o555)
        return "read-only folder", lambda: folder.chmod(0o755)
    pytest.skip("neither chattr +i nor a read-only folder can stop this user removing a file")


def test_a_file_uv_cannot_remove_is_rolled_back_and_said_plainly(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    from sagedoctor.install.execute import installed_distributions
    from sagedoctor.install.runner import Installer
    from tests.test_install_kit import sage_wheel

    monkeypatch.setenv("SAGEDOCTOR_SMOKE_DEVICE", "cpu")
    python, site = torch_venv(tmp_path / "app venv ü")
    # Installed by real uv, so its RECORD lists its dist-info too (uv removes that first).
    Installer.for_target(python).install([str(sage_wheel(tmp_path / "old", "2.1.1"))])
    before = tree_hashes(site)
    how, undo = undeletable(site / "sageattention" / "core.py")
    try:
        with pytest.raises(InstallError) as info:
            executor(python, tmp_path, build_step(fake_source(tmp_path / "src"))).run("0.1.0")
        after = tree_hashes(site)
        dists = installed_distributions(python)
    finally:
        undo()
    message = f"{info.value.message} | {info.value.fix}"
    assert "failed" in info.value.message, (how, message)
    assert "not changed" not in message and "Already done: nothing" not in message
    assert "files match their sha256 from before" in info.value.fix, message
    assert "sageattention 2.1.1" in info.value.fix
    assert dists["sageattention"] == "2.1.1"  # not None, as `check` showed before the fix
    assert after == before
    assert not list((tmp_path / "state").rglob("journal.json"))


def test_an_immutable_file_uv_cannot_replace_is_rolled_back_without_a_crash(
        venv: tuple[Path, Path], tmp_path: Path) -> None:
    # benchmarks/faults.py found this: the rollback wrote back every backed-up file, and the
    # unchanged immutable one raised PermissionError out of the rollback.
    python, site = venv
    target = site / "sageattention" / "core.py"
    if subprocess.run(["chattr", "+i", str(target)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not allowed here (needs root on a filesystem with it)")
    try:
        before = tree_hashes(site)
        with pytest.raises(InstallError) as info:
            executor(python, tmp_path, build_step(fake_source(tmp_path / "src"))).run("0.1.0")
        said = " ".join(info.value.message.replace(" | ", " ").split())  # uv wraps it
        assert "os error 1" in said, said  # EPERM, as uv words it
        assert "files match their sha256 from before" in info.value.fix
        assert tree_hashes(site) == before
    finally:
        subprocess.run(["chattr", "-i", str(target)], check=True)


@pytest.mark.parametrize("pid", [2**31, 2**63 + 5])
def test_a_journal_pid_too_large_for_the_os_is_no_internal_error(tmp_path: Path,
                                                                 pid: int) -> None:
    """D10: os.kill overflowed (OverflowError) on a journal PID of 2**31 or more: internal
    error in check, enable, install and uninstall."""
    from tests.standins import make_venv

    root = tmp_path / "venv ü"
    make_venv(root)
    env = clean_env(tmp_path)
    state = tmp_path / "home" / ".local" / "state" / "sagedoctor"  # the CLI's, under HOME
    folder = venv_state_dir(root, state)
    folder.mkdir(parents=True)
    (folder / "journal.json").write_text(json.dumps({
        "schema_version": 1, "pid": pid, "phase": "preparing", "build_pgid": pid,
        "python": str(root / "bin" / "python"), "prefix": str(root)}), encoding="utf-8")
    (folder / "install.pid").write_text(str(2**63 - 1), encoding="utf-8")
    for command in (["check", "python"], ["enable"], ["uninstall", "--dry-run"]):
        done = run_cli([*command, "--venv", str(root)], env, timeout=120)
        said = done.stdout + done.stderr
        assert "internal error" not in said and done.returncode in (0, 1), (command, said)
        assert f"pid {pid}" in said, (command, said)
    done = run_cli(["install", "--venv", str(root)], env, timeout=120)
    said = done.stdout + done.stderr
    assert "internal error" not in said, said
    assert f"an earlier install (pid {pid}) was interrupted" in said, said
    assert not (folder / "journal.json").exists()
