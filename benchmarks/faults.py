"""The fault suite, with figures: every parser of outside data fuzzed, and faults injected into
each install step of a real venv, proven harmless by hashes.

1. Parsers: runs tests/test_fuzz_*.py (hypothesis, bounded and derandomized) and prints, per
   parser, the inputs tried and what became of them: parsed, or refused with which code.
2. Install steps: a real venv (it sees this machine's CPU torch; run `bash scripts/test.sh`
   once first) holding sageattention 2.1.1, installed by uv so its RECORD has hashes. Each
   fault is injected at the process boundary (a local HTTP server that misbehaves, a stand-in
   build that fails or hangs, a folder or an immutable file where uv must write, a wrong
   kernel, a signal, a FIFO where invokeai.yaml should be) into the real executor. After each:
   the venv is intact when every RECORD hash matches and every file under site-packages has
   the sha256 it had before; a file lost is one that was there before and is gone.
   Then the machine's own faults: a truncated source archive, a sitecustomize that prints, no
   space left in the state folder (/dev/full), a hostile file name, a standard output closed
   or full, escapes in a GPU name, and SIGHUP (its terminal closed) in the TUI mid-build.
   Then issue 34's signals and races: a stale journal whose PID is another live process now
   (D1), two installs with different state folders (D7), Ctrl+C in the smoke check (D13), an
   uninstall between an install's plan and its lock (D15). Each must end in the one outcome
   it should ("handled" where it is met without an error).

Exit status 1 when a fuzz test fails, a fault ends in anything but our error, a venv is not
intact or a file is lost. No GPU needed; about two minutes on two cores.

    python benchmarks/faults.py [--skip-fuzz]
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sagedoctor.errors import SagedoctorError  # noqa: E402
from sagedoctor.install.execute import Executor  # noqa: E402
from sagedoctor.install.runner import Installer  # noqa: E402
from sagedoctor.plan import Step  # noqa: E402
from tests.standins import run_at_start_up  # noqa: E402
from tests.test_install_kit import (  # noqa: E402
    SAGE_GARBAGE,
    Site,
    fake_source,
    make_wheel,
    plan,
    sage_wheel,
    serving,
    settings_for,
    torch_venv,
    tree_hashes,
)
from tests.test_install_steps import COMMIT, source_archive, wheel_step  # noqa: E402
from tests.test_transaction import build_pids, build_step, start  # noqa: E402

# --- 1. the parsers ------------------------------------------------------------------------


def fuzz_figures(tally: Path) -> tuple[bool, dict[str, dict[str, int]], float]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_fuzz_*.py"))],
        cwd=ROOT, env={**os.environ, "SAGEDOCTOR_FUZZ_TALLY": str(tally)},
        capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        print(done.stdout[-4000:], done.stderr[-2000:], sep="\n")
    data = json.loads(tally.read_text(encoding="utf-8")) if tally.is_file() else {}
    return done.returncode == 0, data, seconds


def print_fuzz(data: dict[str, dict[str, int]], ok: bool, seconds: float) -> None:
    tried = sum(sum(counts.values()) for counts in data.values())
    print(f"parsers fuzzed: {len(data)}, inputs tried: {tried}, fuzz tests "
          f"{'passed' if ok else 'FAILED'} in {seconds:.0f} s")
    print(f"  {'parser':42} {'tried':>6}  outcomes (parsed, a result, or refused with a code)")
    for parser, counts in sorted(data.items()):
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(counts.items(),
                                                          key=lambda kv: -kv[1]))
        print(f"  {parser:42} {sum(counts.values()):6}  {outcomes}")


# --- 2. the install steps ------------------------------------------------------------------

def record_problems(site: Path) -> tuple[int, list[str]]:
    """(files checked, problems): every file a RECORD lists with a hash, against that hash."""
    checked, problems = 0, []
    for record in sorted(site.glob("*.dist-info/RECORD")):
        with record.open(encoding="utf-8", newline="") as handle:
            for row in csv.reader(handle):
                if len(row) < 2 or not row[1].startswith("sha256="):
                    continue
                path = site / row[0]
                checked += 1
                try:
                    digest = hashlib.sha256(path.read_bytes()).digest()
                except OSError:
                    problems.append(f"{row[0]}: missing")
                    continue
                if "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != row[1]:
                    problems.append(f"{row[0]}: hash differs from its RECORD")
    return checked, problems


@dataclass
class Venv:
    python: Path
    site: Path
    root: Path
    server: Site
    count: int = 0

    def folder(self) -> Path:
        self.count += 1
        path = self.root / f"fault {self.count}"
        path.mkdir()
        return path

    def executor(self, folder: Path, *steps: Step, progress: Callable[[str], None] | None = None,
                 **options: Any) -> Executor:
        options.setdefault("github_api", "http://127.0.0.1:9")  # nothing listens: no digest
        return Executor(plan(self.python, *steps), progress or (lambda _m: None),
                        folder / "work", folder / "logs", cache_dir=folder / "cache",
                        state_root=folder / "state", **options)


@dataclass
class Result:
    step: str
    fault: str
    outcome: str
    intact: bool
    lost: int
    changed: int
    seconds: float
    note: str = ""


def good_wheel(venv: Venv, folder: Path, **kw: Any) -> Step:
    return wheel_step(venv.server, sage_wheel(folder / "wheel", **kw))


# Each fault: (step, name, inject) where inject runs the executor and raises what it raised.
def server_gone(venv: Venv, folder: Path) -> None:
    wheel = sage_wheel(folder / "wheel")
    step = wheel_step(venv.server, wheel)
    venv.server.routes[f"/dl/{wheel.name}"] = ("drop", wheel.read_bytes()[:100])
    venv.executor(folder, step).run("0.1.0")


def digest_mismatch(venv: Venv, folder: Path) -> None:
    step = wheel_step(venv.server, sage_wheel(folder / "wheel"), sha256="0" * 64)
    venv.executor(folder, step).run("0.1.0")


def redirect_elsewhere(venv: Venv, folder: Path) -> None:
    wheel = sage_wheel(folder / "wheel")
    step = wheel_step(venv.server, wheel)
    other = venv.server.url(f"/dl/{wheel.name}").replace("127.0.0.1", "localhost")
    venv.server.routes[f"/dl/{wheel.name}"] = ("redirect", other)
    venv.executor(folder, step).run("0.1.0")


def record_lies(venv: Venv, folder: Path) -> None:
    venv.executor(folder, good_wheel(venv, folder, lie_about="sageattention/core.py")
                  ).run("0.1.0")


def zip_escape(venv: Venv, folder: Path) -> None:
    wheel = make_wheel(folder / "wheel", "sageattention", "2.2.0",
                       {"sageattention/__init__.py": ""}, extra={"../../escape.py": "x"})
    venv.executor(folder, wheel_step(venv.server, wheel)).run("0.1.0")


def compiler_fails(venv: Venv, folder: Path) -> None:
    venv.executor(folder, build_step(fake_source(folder / "src", fail=True))).run("0.1.0")


def uv_fails_half_way(venv: Venv, folder: Path) -> None:
    source = fake_source(folder / "src")
    (source / "sageattention" / "extra.py").write_text("NEW = 1\n", encoding="utf-8")
    blocker = venv.site / "sageattention" / "extra.py"  # a folder where uv writes a file
    blocker.mkdir()
    try:
        venv.executor(folder, build_step(source)).run("0.1.0")
    finally:
        blocker.rmdir()


def immutable_file(venv: Venv, folder: Path) -> None:
    target = venv.site / "sageattention" / "core.py"
    if subprocess.run(["chattr", "+i", str(target)], capture_output=True).returncode != 0:
        raise Unavailable("chattr +i is not allowed here")
    try:
        venv.executor(folder, good_wheel(venv, folder)).run("0.1.0")
    finally:
        subprocess.run(["chattr", "-i", str(target)], check=True)


def wrong_kernel(venv: Venv, folder: Path) -> None:
    venv.executor(folder, good_wheel(venv, folder, kernel=SAGE_GARBAGE)).run("0.1.0")


def cancel_at_smoke(venv: Venv, folder: Path) -> None:
    class InstallCancelled(SagedoctorError):  # what the TUI raises when the user cancels
        code = "SD910"

    def progress(message: str) -> None:
        if message.startswith("smoke check:"):
            raise InstallCancelled("cancelled by the user", "")

    venv.executor(folder, good_wheel(venv, folder), progress=progress).run("0.1.0")


def config_is_a_fifo(venv: Venv, folder: Path) -> None:
    config = folder / "root" / "invokeai.yaml"
    config.parent.mkdir()
    os.mkfifo(config)
    enable = Step("enable-invokeai", "Enable", "why", paths=(str(config),),
                  config=(("attention_backend", "sage"),))
    venv.executor(folder, good_wheel(venv, folder), enable).run("0.1.0")


# --- issue 19's faults: the machine, not the plan, misbehaves ----------------------------------

NOISY_SITECUSTOMIZE = ("import atexit, sys\n"
                       "sys.stdout.write('hello from sitecustomize {\"json\": 1}')\n"
                       "atexit.register(lambda: print('bye from sitecustomize'))\n")
HOSTILE_NAME = "NVIDIA H200\x1b]0;pwned\x07\x1b[2J\r\n[✓] All fine\u202e"


class WrongOutcome(Exception):
    """The fault was met, but not with the error it should be (the suite fails)."""


def expect(code: str, run: Callable[[], None]) -> None:
    try:
        run()
    except SagedoctorError as exc:
        if exc.code != code:
            raise WrongOutcome(f"{exc.code} instead of {code}: {exc.message[:80]}") from exc
        raise
    raise WrongOutcome(f"no error instead of {code}")


def truncated_archive(venv: Venv, folder: Path) -> None:
    """The mirror serves half the pinned source archive (no digest pinned: measured)."""
    good = source_archive(folder)
    route = f"/archive/{venv.count}/{COMMIT}.tar.gz"
    venv.server.routes[route] = good[:len(good) // 2]
    step = Step("build-from-source", "Build", "why", ("sageattention",),
                build=settings_for(venv.server.url(route), commit=COMMIT))
    expect("SD921", lambda: venv.executor(folder, step).run("0.1.0"))


def sitecustomize_noise(venv: Venv, folder: Path) -> None:
    """The venv prints at start-up and at exit: check reads it all the same; uv cannot query
    such an interpreter, so the install stops at its first uv call, saying why, unchanged."""
    # (as a .pth-imported module: Debian's Python never runs a venv's own sitecustomize.py)
    noise = run_at_start_up(venv.site, NOISY_SITECUSTOMIZE)
    try:
        report = json.loads(_cli(["check", "--json", "python", "--venv",
                                  str(venv.python.parent.parent)]).stdout)
        if any(f["code"] == "SD190" for f in report["findings"]):
            raise WrongOutcome("check could not read the venv: SD190")
        try:
            venv.executor(folder, good_wheel(venv, folder)).run("0.1.0")
        except SagedoctorError as exc:
            if "prints something of its own at start-up" not in exc.message:
                raise WrongOutcome(f"{exc.code}: {exc.message[:80]}") from exc
            raise
    finally:
        noise.unlink()
        (venv.site / "zz-test-start-up.pth").unlink()


def _fill(folder: Path) -> None:
    """Use up the free space of the file system ``folder`` is on."""
    with open(folder / "filler", "ab", buffering=0) as filler:  # unbuffered: close can't fail
        try:
            free = shutil.disk_usage(folder).free
            if free > 4096:
                os.posix_fallocate(filler.fileno(), 0, free - 4096)
            while True:
                filler.write(b"\0" * 512)
        except OSError:
            pass  # full


def state_disk_full(venv: Venv, folder: Path) -> None:
    """The state folder's disk fills up while the install runs (after its preflight saw room
    and its journal began): the kernel's ENOSPC from a tmpfs mounted over the venv's state
    folder, filled at the first step's progress message, so the journal's next write (the
    backups and the "changing" phase) is the one that fails. (The journal's temporary file has
    a unique name, so no fixed name can be linked to /dev/full.)"""
    from sagedoctor.install.lock import venv_state_dir
    from sagedoctor.install.preflight import VENV_NEEDS_BYTES

    journal = venv_state_dir(venv.python.parent.parent, folder / "state")
    journal.mkdir(parents=True)
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={VENV_NEEDS_BYTES * 2},"
                                  "mode=0700", "tmpfs", str(journal)], capture_output=True,
                                 text=True)
    except OSError as exc:  # no mount(8) on this machine
        raise Unavailable(f"cannot run mount: {exc.strerror}") from exc
    if mounted.returncode != 0:
        raise Unavailable(f"cannot mount a tmpfs: {mounted.stderr.strip()[:60]}")
    filled: list[str] = []

    def fill_once(message: str) -> None:
        # "[1/N] preparing: ..." comes after the lock and journal.begin wrote their files
        if not filled and message.startswith("["):
            filled.append(message)
            _fill(journal)

    def install() -> None:
        try:
            venv.executor(folder, good_wheel(venv, folder), progress=fill_once).run("0.1.0")
        except SagedoctorError as exc:
            if not filled:
                raise WrongOutcome(f"{exc.code} before the disk was filled: "
                                   f"{exc.message[:60]}") from exc
            raise

    try:
        expect("SD922", install)
    finally:
        (journal / "filler").unlink(missing_ok=True)
        unmounted = subprocess.run(["umount", "-l", str(journal)], capture_output=True,
                                   text=True)
        if unmounted.returncode != 0:
            print(f"warning: cannot unmount the tmpfs at {journal}: "
                  f"{unmounted.stderr.strip()[:80]}", file=sys.stderr)


def hostile_file_name(venv: Venv, folder: Path) -> None:
    wheel = sage_wheel(folder / "wheel")
    step = wheel_step(venv.server, wheel)
    assert step.wheel is not None
    hostile = Step(step.action, step.title, step.reason, step.distributions,
                   wheel=replace(step.wheel, file="sage\x1b]0;pwned\x07/../../x.whl"))
    expect("SD916", lambda: venv.executor(folder, hostile).run("0.1.0"))


def _cli(args: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sagedoctor", *args], cwd=ROOT, text=True,
                          capture_output="stdout" not in kw, timeout=120, **kw)


def closed_stdout(venv: Venv, folder: Path) -> None:
    """`check` of the venv whose output reader quit, closed with >&-, or on a full disk."""
    args = ["check", "--venv", str(venv.python.parent.parent)]
    expected = _cli(args).returncode
    proc = subprocess.Popen([sys.executable, "-m", "sagedoctor", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    piped = (proc.wait(timeout=120), proc.stderr.read())
    shut = subprocess.run(["sh", "-c", 'exec "$0" "$@" >&-', sys.executable, "-m",
                           "sagedoctor", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    if piped != (expected, "") or (shut.returncode, shut.stderr) != (expected, ""):
        raise WrongOutcome(f"exit {piped[0]}/{shut.returncode}, not {expected}: "
                           f"{(piped[1] + shut.stderr)[:80]}")
    if Path("/dev/full").exists():
        with open("/dev/full", "w") as full:
            done = _cli(args, stdout=full, stderr=subprocess.PIPE)
        if done.returncode != 3 or "SD924" not in done.stderr:
            raise WrongOutcome(f"a full stdout: exit {done.returncode}: {done.stderr[:80]}")
    raise Handled(f"SD923 quiet, exit {expected} as without the fault; full: SD924")


def hostile_gpu_name(venv: Venv, folder: Path) -> None:
    """Escapes, a carriage return and a forged line in a GPU name from a --facts file."""
    facts = json.loads((ROOT / "tests" / "profiles" / "linux-h200-ready.json")
                       .read_text(encoding="utf-8"))
    facts["gpu"]["gpus"][0]["name"] = HOSTILE_NAME
    path = folder / "facts.json"
    path.write_text(json.dumps(facts), encoding="utf-8")
    out = ""
    for args in (["check", "-v"], ["plan"], ["install", "--dry-run"]):
        done = _cli([*args, "--facts", str(path)])
        out += done.stdout + done.stderr
    report = _cli(["check", "--json", "--facts", str(path)]).stdout
    bad = [c for c in ("\x1b", "\x07", "\r", "\u202e") if c in out + report]
    if bad or json.loads(report)["facts"]["gpu"]["gpus"][0]["name"] != HOSTILE_NAME:
        raise WrongOutcome(f"reached the terminal: {bad!r}")
    raise Handled("defused in text, kept (escaped) in JSON")


def sighup_in_the_tui(venv: Venv, folder: Path) -> None:
    """The TUI on a pseudo-terminal mid-build, its terminal closed: the kernel's SIGHUP."""
    if sys.platform == "win32" or not Path("/proc/self/stat").exists():
        raise Unavailable("needs a POSIX pseudo-terminal and /proc")
    from tests.test_tui_hangup import DRIVER, PROFILE, alive, on_a_terminal

    pids = folder / "pids"
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="80", LINES="24",
               BUILD_PIDS=str(pids), XDG_STATE_HOME=str(folder / "state"),
               XDG_CACHE_HOME=str(folder / "cache"))
    cfg = {"python": str(venv.python), "source": str(fake_source(folder / "src", slow=True)),
           "profile": str(PROFILE), "logs": str(folder / "logs")}
    proc, main, _seen = on_a_terminal([sys.executable, "-c", DRIVER, json.dumps(cfg)], env)
    try:
        deadline = time.monotonic() + 90
        while not (pids.is_file() and pids.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        build = [int(p) for p in pids.read_text().split()]
        os.close(main)
        code = proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 10
    while any(alive(p) for p in build) and time.monotonic() < deadline:
        time.sleep(0.1)
    if code != 129 or any(alive(p) for p in build):
        raise WrongOutcome(f"exit {code}; build still running: {any(alive(p) for p in build)}")
    raise Handled("cancelled as Esc -> y, build group killed, exit 129")


class Handled(Exception):
    """A fault met by design without one of our errors: said how (counted as passed)."""

    def __init__(self, how: str) -> None:
        super().__init__(how)
        self.how = how


class Unavailable(Exception):
    """This machine cannot inject the fault (not counted)."""


class SignalOutcome(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def _driver_code(out: str) -> str:
    for line in out.splitlines():
        if line.startswith("ERROR "):
            parts = line.split()
            return parts[2] if len(parts) > 2 else "ERROR"
    return "DONE" if "DONE" in out else "no answer"


def sigterm_mid_build(venv: Venv, folder: Path) -> None:
    proc = start(venv.python, fake_source(folder / "src", slow=True), folder)
    build_pids(folder)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    raise SignalOutcome(_driver_code(out))


def sigkill_then_recover(venv: Venv, folder: Path, mid: str) -> None:
    if mid == "build":
        proc = start(venv.python, fake_source(folder / "src", slow=True), folder)
        build_pids(folder)
    else:
        (folder / "hang").write_text("", encoding="utf-8")  # the new sageattn() hangs
        proc = start(venv.python, fake_source(folder / "src"), folder)
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("smoke check:"):
                break
    proc.kill()
    proc.communicate(timeout=30)
    (folder / "hang").unlink(missing_ok=True)
    again = start(venv.python, fake_source(folder / "src2"), folder)
    out, _ = again.communicate(timeout=120)
    raise SignalOutcome("killed; next run: " + _driver_code(out))


# --- issue 34's signals and races -----------------------------------------------------------

def stale_journal_pid_reused(venv: Venv, folder: Path) -> None:
    """D1: a journal left by a killed run whose PID now belongs to an unrelated live process
    (after a reboot): the lock is free, so it is recovered (SD914: plan again), not waited on."""
    from sagedoctor.install.lock import venv_state_dir
    from sagedoctor.install.transaction import Journal

    prefix = venv.python.parent.parent
    unrelated = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        journal = Journal(venv_state_dir(prefix, folder / "state"))
        journal.begin(venv.python, prefix, folder / "old work", folder / "old.log")
        journal.write(pid=unrelated.pid, build_pgid=unrelated.pid, boot="an earlier boot")
        said: list[str] = []
        try:
            expect("SD914", lambda: venv.executor(folder, good_wheel(venv, folder),
                                                  progress=said.append).run("0.1.0"))
        finally:
            if unrelated.poll() is not None:
                raise WrongOutcome("the unrelated process (its group) was killed")
            if journal.path.exists():
                raise WrongOutcome("the stale journal is still there")
    finally:
        unrelated.kill()
        unrelated.wait()


def two_state_folders(venv: Venv, folder: Path) -> None:
    """D7: an install with another XDG_STATE_HOME (another lock there) is building; a second
    install meets the lock on the venv itself (SD911)."""
    first = start(venv.python, fake_source(folder / "src", slow=True), folder,
                  state=folder / "another state")
    try:
        build_pids(folder)
        expect("SD911", lambda: venv.executor(folder, good_wheel(venv, folder)).run("0.1.0"))
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)


def ctrl_c_in_the_smoke_check(venv: Venv, folder: Path) -> None:
    """D13: SIGINT (Ctrl+C) while the new kernel's smoke check runs: rolled back, the reason
    said ("stopped by Ctrl+C"), SD912 with exit status 130."""
    (folder / "hang").write_text("", encoding="utf-8")  # the new sageattn() hangs
    proc = start(venv.python, fake_source(folder / "src"), folder)
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("smoke check:"):
            break
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # a crash of this fault, not a cascade into the next one
            proc.kill()
            proc.communicate()
    out = "".join(seen) + out
    if "rolling back: stopped by Ctrl+C" not in out or "exit=130" not in out:
        raise WrongOutcome("no reason or not 130: " + out.strip().splitlines()[-1][:80])
    raise SignalOutcome(_driver_code(out))


def install_after_an_uninstall(venv: Venv, folder: Path) -> None:
    """D15: the install planned an upgrade of the sageattention there; an uninstall removed
    it before the install took the lock. Planned again under the lock, the plan differs:
    SD919, and the install changed nothing (proven against the venv as the uninstall left
    it); the old sageattention is then put back as it was, by uv."""
    from sagedoctor.install.execute import installed_distributions
    from sagedoctor.plan import Plan

    step = good_wheel(venv, folder)

    def planned() -> Plan:
        upgrade = "sageattention" in installed_distributions(venv.python)
        return plan(venv.python, *([step] if upgrade else []))

    made = planned()
    installer = Installer.for_target(venv.python, venv.root / "uv-cache")
    installer.uninstall(["sageattention"])  # the racing `uninstall --all`
    left = tree_hashes(venv.site)
    try:
        expect("SD919", lambda: venv.executor(folder, *made.steps, replan=planned)
               .run("0.1.0"))
    finally:
        changed = tree_hashes(venv.site) != left
        installer.install([str(venv.root / "old" / OLD_WHEEL)])
        if changed:
            raise WrongOutcome("the refused install changed the venv")


FAULTS: list[tuple[str, str, Callable[[Venv, Path], None]]] = [
    ("download", "server gone mid-download", server_gone),
    ("download", "digest mismatch", digest_mismatch),
    ("download", "redirect to another host", redirect_elsewhere),
    ("wheel check", "a RECORD that lies", record_lies),
    ("wheel check", "a zip entry escaping the venv", zip_escape),
    ("source build", "compiler fails", compiler_fails),
    ("source build", "SIGTERM mid-build", sigterm_mid_build),
    ("source build", "SIGKILL mid-build", lambda v, f: sigkill_then_recover(v, f, "build")),
    ("uv install", "a folder where uv writes a file", uv_fails_half_way),
    ("uv install", "an immutable file (chattr +i)", immutable_file),
    ("uv install", "SIGKILL mid-change", lambda v, f: sigkill_then_recover(v, f, "change")),
    ("smoke check", "a kernel that returns garbage", wrong_kernel),
    ("smoke check", "cancelled from the progress callback", cancel_at_smoke),
    ("enable-invokeai", "a FIFO where invokeai.yaml should be", config_is_a_fifo),
    ("download", "a truncated source archive", truncated_archive),
    ("probe", "a sitecustomize that prints", sitecustomize_noise),
    ("journal", "no space left in the state folder", state_disk_full),
    ("download", "an escape and '..' in a file name", hostile_file_name),
    ("cli output", "stdout closed, its reader gone, full", closed_stdout),
    ("cli output", "escapes in a GPU name (--facts)", hostile_gpu_name),
    ("tui", "SIGHUP (terminal closed) mid-build", sighup_in_the_tui),
    ("lock", "a stale journal, its PID reused", stale_journal_pid_reused),
    ("lock", "two installs, two state folders", two_state_folders),
    ("smoke check", "Ctrl+C (SIGINT) in the smoke check", ctrl_c_in_the_smoke_check),
    ("lock", "an uninstall between plan and lock", install_after_an_uninstall),
]


def inject(venv: Venv, step: str, name: str, fault: Callable[[Venv, Path], None]) -> Result:
    tree_before = tree_hashes(venv.site)
    started = time.perf_counter()
    note = ""
    try:
        fault(venv, venv.folder())
        outcome = "no error (the fault went unnoticed)"
    except SagedoctorError as exc:
        outcome = exc.code
        note = exc.message[:90]
    except SignalOutcome as exc:
        outcome = exc.code
    except Handled as exc:
        outcome = "handled"
        note = exc.how
    except WrongOutcome as exc:
        outcome = "WRONG"
        note = str(exc)[:90]
    except Unavailable as exc:
        return Result(step, name, "not injectable", True, 0, 0, 0.0, str(exc))
    except Exception as exc:  # a crash: the suite fails
        outcome = f"CRASH {type(exc).__name__}"
        note = str(exc)[:90]
    seconds = time.perf_counter() - started
    tree_after = tree_hashes(venv.site)
    _checked, problems = record_problems(venv.site)
    lost = len(set(tree_before) - set(tree_after))
    changed = sum(1 for k, v in tree_before.items() if tree_after.get(k, v) != v)
    added = len(set(tree_after) - set(tree_before))
    intact = not problems and tree_after == tree_before
    if problems or added:
        note = "; ".join(problems[:3]) + (f"; {added} file(s) added" if added else "")
    return Result(step, name, outcome, intact, lost, changed, seconds, note)


OLD_VERSION = "2.1.1"
OLD_WHEEL = f"sageattention-{OLD_VERSION}-py3-none-any.whl"


def run_faults(root: Path, only: str = "") -> list[Result]:
    os.environ["SAGEDOCTOR_SMOKE_DEVICE"] = "cpu"
    os.environ.setdefault("TMPDIR", str(root))
    with serving() as server:
        python, site = torch_venv(root / "venv ü")
        old = make_wheel(root / "old", "sageattention", OLD_VERSION,
                         {"sageattention/__init__.py": "def sageattn(*a, **k): pass\n",
                          "sageattention/core.py": "OLD = True\n"})
        Installer.for_target(python, root / "uv-cache").install([str(old)])
        venv = Venv(python, site, root, server)
        checked, problems = record_problems(site)
        assert checked and not problems, problems
        print(f"\nvenv: {site} ({len(tree_hashes(site))} files; {checked} RECORD hashes)")
        return [inject(venv, step, name, fault) for step, name, fault in FAULTS
                if only in step or only in name]


def print_faults(results: list[Result]) -> None:
    steps: dict[str, int] = {}
    for r in results:
        if r.outcome != "not injectable":
            steps[r.step] = steps.get(r.step, 0) + 1
    print("faults injected per install step: "
          + ", ".join(f"{step} {count}" for step, count in steps.items()))
    print(f"  {'step':15} {'fault':38} {'outcome':28} {'intact':6} {'lost':>4} {'s':>5}")
    for r in results:
        print(f"  {r.step:15} {r.fault:38} {r.outcome:28} {'yes' if r.intact else 'NO':6} "
              f"{r.lost:4} {r.seconds:5.1f}" + (f"  ({r.note})" if r.note else ""))
    counted = [r for r in results if r.outcome != "not injectable"]
    print(f"venvs intact: {sum(r.intact for r in counted)}/{len(counted)}; "
          f"files lost: {sum(r.lost for r in counted)}")


def main() -> int:
    # .ci/run starts this as a background job, where SIGINT is ignored, and the ignoring is
    # inherited by every install it starts: the Ctrl+C fault's install then never saw its
    # Ctrl+C. A user's install runs in the foreground; so does each install here.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-fuzz", action="store_true", help="only the install faults")
    parser.add_argument("--only", metavar="TEXT", default="",
                        help="only the install faults whose step or name contains TEXT")
    args = parser.parse_args()
    failed = False
    with tempfile.TemporaryDirectory(prefix="faults ü ") as tmp:
        root = Path(tmp)
        if not args.skip_fuzz:
            ok, data, seconds = fuzz_figures(root / "tally.json")
            print_fuzz(data, ok, seconds)
            failed |= not ok or not data
        results = run_faults(root, args.only)
        print_faults(results)
    bad = [r for r in results if r.outcome != "not injectable"
           and (not r.intact or r.lost or not r.outcome.startswith(
               ("SD", "killed; next run: SD", "handled")))]
    for r in bad:
        print(f"FAILED: {r.step}: {r.fault}: {r.outcome}, intact={r.intact}, lost={r.lost}")
    return 1 if failed or bad else 0


if __name__ == "__main__":
    sys.exit(main())
