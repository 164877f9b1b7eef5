"""The install screen carrying out a real plan in a real stand-in venv, its wheel downloaded
over HTTPS from a local server (a self-signed certificate made by openssl, trusted through
SSL_CERT_FILE): a whole install, and a cancel while the download runs."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import ssl
import subprocess
import threading
import time
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Log, ProgressBar, Static

from sagedoctor.install.execute import installed_distributions
from sagedoctor.plan import Plan, Step, WheelDownload
from sagedoctor.tui.app import SagedoctorApp
from sagedoctor.tui.model import human_bytes
from sagedoctor.tui.screens.confirm import ConfirmScreen
from sagedoctor.tui.screens.install import InstallScreen
from sagedoctor.tui.screens.verify import VerifyScreen
from sagedoctor.tui.session import TuiOptions
from tests.standins import H200, add_dist, add_torch, make_venv, venv_python
from tests.test_install_kit import SAGE_GOOD, fake_source, settings_for, torch_venv, tree_hashes
from tests.tui_support import settle

pytestmark = [pytest.mark.anyio,
              pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")]
PROFILE = Path(__file__).parent / "profiles" / "linux-h200-ready.json"
WHEEL_NAME = "sageattention-2.2.0-py3-none-any.whl"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


PAD_BYTES = 3 << 20  # incompressible, stored: the wheel is a little over 3 MiB


def make_wheel(path: Path) -> bytes:
    """A real, installable wheel standing in for SageAttention 2 (no kernels)."""
    files = {
        "sageattention/__init__.py": SAGE_GOOD.encode(),  # passes the smoke check on the CPU
        "sageattention/_kernels.bin": os.urandom(PAD_BYTES),
        "sageattention-2.2.0.dist-info/METADATA":
            b"Metadata-Version: 2.1\nName: sageattention\nVersion: 2.2.0\n",
        "sageattention-2.2.0.dist-info/WHEEL":
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(data)}")
    record.append("sageattention-2.2.0.dist-info/RECORD,,")
    files["sageattention-2.2.0.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return path.read_bytes()


class Served:
    """What the local server sends, and a gate that holds the second half of the body."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload
        self.gate = threading.Event()
        self.started = threading.Event()


@pytest.fixture
def https_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Served]]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    served = Served(make_wheel(tmp_path / WHEEL_NAME))

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != f"/{WHEEL_NAME}":
                self.send_error(404)
                return
            half = len(served.payload) // 2
            self.send_response(200)
            self.send_header("Content-Length", str(len(served.payload)))
            self.end_headers()
            self.wfile.write(served.payload[:half])
            self.wfile.flush()
            served.started.set()
            served.gate.wait(30)
            self.wfile.write(served.payload[half:])

        def log_message(self, *args: Any) -> None:
            pass

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    try:
        yield f"https://127.0.0.1:{httpd.server_address[1]}", served
    finally:
        served.gate.set()
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SAGEDOCTOR_SMOKE_DEVICE", "cpu")  # the install's smoke check
    for name in ("XDG_CACHE_HOME", "XDG_STATE_HOME"):  # the download cache, locks, journals
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    python, site = torch_venv(tmp_path / "app venv ü")
    add_dist(site, "sageattention", "1.0.6", {"sageattention/__init__.py": ""})
    # A RECORD lists the dist-info's own files too (as pip writes it), so an uninstall
    # removes the dist-info and not only the package.
    info = site / "sageattention-1.0.6.dist-info"
    with (info / "RECORD").open("a", encoding="utf-8") as record:
        for name in ("METADATA", "INSTALLER", "RECORD"):
            record.write(f"{info.name}/{name},,\n")
    return python


def the_plan(python: Path, url: str, sha256: str) -> Plan:
    return Plan(python=str(python), prefix=str(python.parent.parent), os="linux", steps=(
        Step("uninstall", "Uninstall SageAttention 1", "it shadows SageAttention 2",
             ("sageattention",)),
        Step("install-wheel", f"Install {WHEEL_NAME}", "the wheel for this torch",
             ("sageattention",), wheel=WheelDownload(WHEEL_NAME, f"{url}/{WHEEL_NAME}",
                                                     sha256, "test")),
        Step("bundle-runtime", "Install the sagedoctor runtime", "routes attention",
             ("sagedoctor-runtime",)),
        Step("verify", "Verify in the target venv", "prove it on the GPU"),
    ))


async def _open_install(pilot: Any, app: SagedoctorApp, plan: Plan) -> InstallScreen:
    await settle(pilot)
    app.session.plan = plan
    screen = InstallScreen(plan)
    await app.push_screen(screen)
    return screen


async def test_install_screen_carries_out_the_plan_with_progress_and_log(
        venv: Path, https_server: tuple[str, Served], tmp_path: Path) -> None:
    url, served = https_server
    served.gate.set()
    before = installed_distributions(venv)
    plan = the_plan(venv, url, hashlib.sha256(served.payload).hexdigest())
    app = SagedoctorApp(TuiOptions(facts_file=PROFILE, log_dir=tmp_path / "logs"))
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _open_install(pilot, app, plan)
        assert app.install_running
        await settle(pilot)
        assert screen.state == "done", "\n".join(screen.query_one(Log).lines)
        assert not app.install_running
        log = "\n".join(screen.query_one(Log).lines)
        assert f"downloading {url}/{WHEEL_NAME}" in log
        assert "(matches the index" in log
        bar = screen.query_one(ProgressBar)
        assert bar.progress == bar.total == 4
        assert str(screen.query_one("#install-state", Static).render()).startswith(
            f"Installed into {plan.prefix}.")
        assert str(screen.query_one("#install-elapsed", Static).render()).startswith("took ")
        after = installed_distributions(venv)
        assert after["sageattention"] == "2.2.0" and after["sagedoctor-runtime"]
        assert after["torch"] == before["torch"]
        # verify runs the real self-test in that venv: its torch sees no GPU, so it fails
        await pilot.press("v")
        await settle(pilot)
        assert isinstance(app.screen, VerifyScreen)
        verdict = str(app.screen.query_one("#verdict", Static).render())
        assert verdict.startswith(("SageAttention does not work in this venv",
                                   "Could not verify"))


async def test_cancel_during_the_download_leaves_the_venv_unchanged(
        venv: Path, https_server: tuple[str, Served], tmp_path: Path) -> None:
    url, served = https_server
    before = installed_distributions(venv)
    plan = the_plan(venv, url, hashlib.sha256(served.payload).hexdigest())
    app = SagedoctorApp(TuiOptions(facts_file=PROFILE, log_dir=tmp_path / "logs"))
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _open_install(pilot, app, plan)
        deadline = time.monotonic() + 30
        while not served.started.is_set() and time.monotonic() < deadline:
            await pilot.pause(0.05)  # the event loop must run: progress goes through it
        assert served.started.is_set(), "the download never began"
        await pilot.press("q")  # quitting mid-install is refused
        assert app.is_running and app.screen is screen
        await pilot.press("ctrl+c")  # Ctrl+C too: Esc cancels (and rolls back) first
        assert app.is_running and app.screen is screen
        await pilot.press("escape")
        assert screen.state == "cancelling"
        served.gate.set()  # the download finishes; the executor's next event stops it
        deadline = time.monotonic() + 60
        while screen.state == "cancelling" and time.monotonic() < deadline:
            await pilot.pause(0.1)
        await settle(pilot)
        assert screen.state == "cancelled", "\n".join(screen.query_one(Log).lines)
        state = str(screen.query_one("#install-state", Static).render())
        assert "The venv was not touched" in state
        log = "\n".join(screen.query_one(Log).lines)
        assert "cancelled: " in log and "cancelled by the user" in log
        assert installed_distributions(venv) == before
        assert before["sageattention"] == "1.0.6"
        await pilot.press("v")  # nothing to verify after a cancel
        assert app.screen is screen
        assert not screen.check_action("cancel", ()) and not screen.check_action("verify", ())
        assert screen.check_action("leave", ())  # Esc now leaves, as b does
        await pilot.press("b")
        assert app.screen is not screen


async def test_after_a_cancel_torch_is_named_as_its_version_py_declares_it(
        https_server: tuple[str, Served], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """PyPI's CUDA torch says 2.11.0 in its dist-info and 2.11.0+cu130 in torch/version.py
    (H200's, recorded); check shows the latter, and so does the install screen."""
    for name in ("XDG_CACHE_HOME", "XDG_STATE_HOME"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    root = tmp_path / "cuda venv"
    site = make_venv(root)
    add_torch(site, (H200 / "torch-version.py").read_text(encoding="utf-8"), "2.11.0")
    add_dist(site, "sageattention", "1.0.6", {"sageattention/__init__.py": ""})
    url, served = https_server
    plan = the_plan(venv_python(root), url, hashlib.sha256(served.payload).hexdigest())
    app = SagedoctorApp(TuiOptions(facts_file=PROFILE, log_dir=tmp_path / "logs"))
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _open_install(pilot, app, plan)
        deadline = time.monotonic() + 30
        while not served.started.is_set() and time.monotonic() < deadline:
            await pilot.pause(0.05)
        await pilot.press("escape")
        served.gate.set()
        deadline = time.monotonic() + 60
        while screen.state == "cancelling" and time.monotonic() < deadline:
            await pilot.pause(0.1)
        await settle(pilot)
        state = str(screen.query_one("#install-state", Static).render())
        assert screen.state == "cancelled", state
        assert "(sageattention 1.0.6, torch 2.11.0+cu130);" in state, state


async def test_download_bar_reaches_the_wheels_size_and_shows_the_rate(
        venv: Path, https_server: tuple[str, Served], tmp_path: Path) -> None:
    url, served = https_server
    size = len(served.payload)
    plan = the_plan(venv, url, hashlib.sha256(served.payload).hexdigest())
    app = SagedoctorApp(TuiOptions(facts_file=PROFILE, log_dir=tmp_path / "logs"))
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _open_install(pilot, app, plan)
        bar = screen.query_one("#transfer-bar", ProgressBar)
        text = screen.query_one("#transfer-text", Static)
        # The server holds the second half back: the bar stops at half, said in bytes.
        deadline = time.monotonic() + 30
        while bar.progress < size // 2 and time.monotonic() < deadline:
            await pilot.pause(0.1)
        assert bar.total == size and bar.progress == size // 2
        assert str(text.render()).startswith(f"{human_bytes(size // 2)} of {human_bytes(size)}")
        served.gate.set()
        await settle(pilot)
        assert screen.state == "done", "\n".join(screen.query_one(Log).lines)
        assert bar.total == bar.progress == size
        shown = str(text.render())
        assert re.fullmatch(rf"{re.escape(human_bytes(size))} of {re.escape(human_bytes(size))}"
                            r"  \d+(\.\d)? (B|KiB|MiB|GiB)/s  \d+:\d\d", shown), shown


def _alive(pid: int) -> bool:
    """A process that still runs (a zombie waiting for its reaper does not count)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    except OSError:
        return False
    return "\nState:\tZ" not in status


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
async def test_cancel_during_a_source_build_asks_then_stops_it_and_the_venv_is_as_before(
        venv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pids_file = tmp_path / "build pids"
    monkeypatch.setenv("BUILD_PIDS", str(pids_file))  # the stand-in build writes its PIDs
    site = next(venv.parent.parent.glob("lib/python3*/site-packages"))
    before_files = tree_hashes(site)
    before = installed_distributions(venv)
    source = fake_source(tmp_path / "Sage src ü", slow=True)  # its setup.py sleeps 600 s
    plan = Plan(python=str(venv), prefix=str(venv.parent.parent), os="linux", steps=(
        Step("uninstall", "Uninstall SageAttention 1", "it shadows SageAttention 2",
             ("sageattention",)),
        Step("build-from-source", "Build SageAttention from source", "no wheel fits",
             ("sageattention",), build=settings_for(str(source))),
        Step("verify", "Verify in the target venv", "prove it on the GPU"),
    ))
    app = SagedoctorApp(TuiOptions(facts_file=PROFILE, log_dir=tmp_path / "logs"))
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _open_install(pilot, app, plan)
        deadline = time.monotonic() + 60
        while not pids_file.exists() and time.monotonic() < deadline:
            await pilot.pause(0.1)
        assert pids_file.exists(), "\n".join(screen.query_one(Log).lines)
        build_pid, child_pid = (int(p) for p in pids_file.read_text().split())
        await pilot.pause(0.2)
        assert screen.build_started is not None
        assert str(screen.query_one("#transfer-text", Static).render()).startswith("building")

        await pilot.press("escape")  # asks first: a build's work would be lost
        confirm = app.screen
        assert isinstance(confirm, ConfirmScreen)
        question = str(confirm.query_one("#confirm-question", Static).render())
        assert question.startswith("A build is running") and "Stop it" in question
        await pilot.press("n")  # keep building
        assert app.screen is screen and screen.state == "running"
        assert _alive(build_pid) and _alive(child_pid)

        await pilot.press("escape", "y")
        # "cancelling" lasts only until the killed build is reaped, which can already
        # have happened once the key presses are processed
        assert screen.state in ("cancelling", "cancelled")
        assert "cancel requested" in screen.query_one(Log).lines
        deadline = time.monotonic() + 60
        while screen.state == "cancelling" and time.monotonic() < deadline:
            await pilot.pause(0.1)
        await settle(pilot)
        log = "\n".join(screen.query_one(Log).lines)
        assert screen.state == "cancelled", log
        assert "the build was cancelled after" in log
        state = str(screen.query_one("#install-state", Static).render())
        assert state.startswith("Cancelled. The venv was not touched")
        assert re.search(r"Checked: the venv is as before \(sageattention 1\.0\.6, torch "
                         r"[^)]*\); (1 file matches|\d+ files match) their sha256 from "
                         r"before\.", state), state
        assert str(screen.query_one("#transfer-text", Static).render()) == \
            "the build was stopped"
    # the whole build process group is gone, and the venv is byte for byte as it was
    deadline = time.monotonic() + 10
    while (_alive(build_pid) or _alive(child_pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(build_pid) and not _alive(child_pid)
    assert installed_distributions(venv) == before
    assert tree_hashes(site) == before_files


async def test_cancel_after_the_venv_changed_rolls_back_and_the_hashes_prove_it(
        venv: Path, https_server: tuple[str, Served], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    url, served = https_server
    served.gate.set()
    hang = tmp_path / "smoke hangs while this exists"
    hang.write_text("", encoding="utf-8")
    monkeypatch.setenv("SMOKE_HANG_FILE", str(hang))  # the new sageattn() waits on it
    site = next(venv.parent.parent.glob("lib/python3*/site-packages"))
    before_files = tree_hashes(site)
    before = installed_distributions(venv)
    plan = the_plan(venv, url, hashlib.sha256(served.payload).hexdigest())
    app = SagedoctorApp(TuiOptions(facts_file=PROFILE, log_dir=tmp_path / "logs"))
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _open_install(pilot, app, plan)
        log = screen.query_one(Log)
        deadline = time.monotonic() + 60
        while not any(line.startswith("smoke check:") for line in log.lines) \
                and time.monotonic() < deadline:
            await pilot.pause(0.1)
        assert installed_distributions(venv)["sageattention"] == "2.2.0"  # changed by now
        await pilot.press("escape")  # no build runs: no question, the cancel is at once
        assert screen.state == "cancelling"
        hang.unlink()
        deadline = time.monotonic() + 60
        while screen.state == "cancelling" and time.monotonic() < deadline:
            await pilot.pause(0.1)
        await settle(pilot)
        lines = "\n".join(log.lines)
        assert screen.state == "cancelled", lines
        assert "rolling back: " in lines
        state = str(screen.query_one("#install-state", Static).render())
        assert state.startswith("Cancelled. Rolled back the steps that had begun to change "
                                "the venv: Uninstall SageAttention 1; Install "), state
        assert "Checked: the venv is as before (sageattention 1.0.6, torch" in state
    assert installed_distributions(venv) == before
    assert tree_hashes(site) == before_files
