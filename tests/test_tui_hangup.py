"""The TUI on a real pseudo-terminal, as a user runs it, during a source build that would run
for ten minutes: SIGHUP (the terminal window closed) takes the path Esc -> y takes. The
build's whole process group is killed, the venv rolled back byte for byte, the terminal
given back (the alternate screen left) and the exit status is 129. Also what a bad --facts
file and a missing terminal show instead of hanging."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.standins import clean_env, run_cli
from tests.test_install_kit import add_installed_sage, fake_source, torch_venv, tree_hashes
from tests.tui_support import screen_text, settle

REPO = Path(__file__).resolve().parents[1]
PROFILE = Path(__file__).parent / "profiles" / "linux-h200-ready.json"
posix_pty = pytest.mark.skipif(sys.platform == "win32" or not Path("/proc/self/stat").exists(),
                               reason="a POSIX pseudo-terminal and /proc")

DRIVER = r"""
import json, sys
from pathlib import Path
from sagedoctor.plan import Plan, Step
from sagedoctor.tui.app import SagedoctorApp
from sagedoctor.tui.screens.install import InstallScreen
from sagedoctor.tui.session import TuiOptions
from tests.test_install_kit import settings_for
cfg = json.loads(sys.argv[1])
python = Path(cfg["python"])
plan = Plan(python=str(python), prefix=str(python.parent.parent), os="linux", steps=(
    Step("build-from-source", "Build SageAttention from source", "no wheel fits",
         ("sageattention",), build=settings_for(cfg["source"])),))

class Installing(SagedoctorApp):  # the plan screen's `i`, without the live check before it
    CSS_PATH = str(Path(sys.modules[SagedoctorApp.__module__].__file__).with_name(
        "sagedoctor.tcss"))

    def on_mount(self):  # textual calls SagedoctorApp's too: the install goes on top, after
        self.session.plan = plan
        self.call_after_refresh(lambda: self.push_screen(InstallScreen(plan)))

app = Installing(TuiOptions(facts_file=Path(cfg["profile"]), log_dir=Path(cfg["logs"])))
app.run()
sys.exit(app.return_code or 0)
"""


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def on_a_terminal(argv: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[bytes], int,
                                                                   bytearray]:
    """argv with a pseudo-terminal as its controlling terminal; what it writes is drained
    into the returned buffer by a thread (a full pty would stall the app)."""
    import fcntl
    import pty
    import termios

    main, child = pty.openpty()

    def take_terminal() -> None:  # after setsid: the pty becomes the controlling terminal
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(argv, stdin=child, stdout=child, stderr=child, env=env, cwd=REPO,
                            start_new_session=True, preexec_fn=take_terminal)
    os.close(child)
    seen = bytearray()

    def drain() -> None:
        while True:
            try:
                data = os.read(main, 65536)
            except OSError:
                return
            if not data:
                return
            seen.extend(data)

    threading.Thread(target=drain, daemon=True).start()
    return proc, main, seen


@posix_pty
@pytest.mark.parametrize("how", ["kill -HUP", "terminal closed"])
def test_sighup_mid_build_cancels_kills_the_build_rolls_back_and_restores_the_terminal(
        tmp_path: Path, how: str) -> None:
    python, site = torch_venv(tmp_path / "app venv ü")
    add_installed_sage(site, "2.1.1")
    before = tree_hashes(site)
    pids = tmp_path / "build pids"
    env = clean_env(tmp_path)
    env.update(TERM="xterm-256color", COLUMNS="80", LINES="24", BUILD_PIDS=str(pids),
               SAGEDOCTOR_SMOKE_DEVICE="cpu", TMPDIR=str(tmp_path),
               PATH=os.environ["PATH"],  # uv, as the install runs it
               XDG_STATE_HOME=str(tmp_path / "state"), XDG_CACHE_HOME=str(tmp_path / "cache"))
    cfg = {"python": str(python), "source": str(fake_source(tmp_path / "src", slow=True)),
           "profile": str(PROFILE), "logs": str(tmp_path / "logs")}
    proc, main, seen = on_a_terminal([sys.executable, "-c", DRIVER, json.dumps(cfg)], env)
    try:
        deadline = time.monotonic() + 90
        while not (pids.is_file() and pids.read_text()) and time.monotonic() < deadline:
            assert proc.poll() is None, bytes(seen)[-2000:]
            time.sleep(0.1)
        build, child = (int(p) for p in pids.read_text().split())
        assert alive(build) and alive(child)
        time.sleep(0.5)  # the screen has said "building"
        assert b"\x1b[?1049h" in seen  # full screen, in the alternate screen
        mark = len(seen)
        if how == "kill -HUP":
            os.kill(proc.pid, signal.SIGHUP)
        else:
            os.close(main)  # the kernel hangs up the session: SIGHUP, and EIO on the tty
        assert proc.wait(timeout=90) == 128 + signal.SIGHUP
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if how == "kill -HUP":
            os.close(main)
    deadline = time.monotonic() + 10
    while (alive(build) or alive(child)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(build) and not alive(child)  # not left running under pid 1
    assert tree_hashes(site) == before
    assert not list((tmp_path / "state").rglob("journal.json"))
    if how == "kill -HUP":
        after = bytes(seen[mark:])
        shown = re.sub(rb"\x1b\[[0-9;?<>=]*[A-Za-z]", b"", after)  # the text, no escapes
        assert b"SIGHUP: cancelling the install" in shown  # the install screen's own path
        assert b"Cancelling: the current step stops" in shown  # as after Esc -> y
        assert b"\x1b[?1049l" in after  # and the terminal given back


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe", b'{"schema_version": 99}'])
async def test_a_bad_facts_file_shows_the_sd901_screen_not_checking_forever(
        tmp_path: Path, content: bytes, anyio_backend: str) -> None:
    from sagedoctor.tui.app import SagedoctorApp
    from sagedoctor.tui.screens.check import CheckScreen
    from sagedoctor.tui.session import TuiOptions

    facts = tmp_path / "facts.json"
    facts.write_bytes(content)
    app = SagedoctorApp(TuiOptions(facts_file=facts), clock=lambda: 0.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, CheckScreen) and screen.done
        assert not [r for r in screen.rows.values() if r.state == "pending"]
        text = screen_text(app)
        assert "checking…" not in text and "Checking" not in text
        assert "Could not check facts from facts.json: error SD901" in text
        assert "error SD901: " in text
        from textual.widgets import Static

        details = str(screen.query_one("#detail-text", Static).render())  # it scrolls
        assert "error SD901: " in details and "fix: pass a file written by" in details
        await pilot.press("q")
    assert app.return_code == 0


def test_tui_without_a_terminal_says_what_bare_sagedoctor_says(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    bare = subprocess.run([sys.executable, "-m", "sagedoctor"], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)
    done = subprocess.run([sys.executable, "-m", "sagedoctor", "tui"], env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert done.returncode == 64  # asked for by name: a usage error, and no hang
    assert done.stdout == bare.stdout and done.stdout.startswith("usage: sagedoctor")
    assert done.stderr == ("sagedoctor: error: the TUI needs a terminal (standard input and "
                           "output); use the commands above\n")
    assert run_cli(["tui", "--facts", str(PROFILE)], env).returncode == 64
