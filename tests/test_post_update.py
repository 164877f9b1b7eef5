"""`sagedoctor post-update` end to end in a real venv: a stand-in torch 2.10 (+cu130 by its
version.py, this machine's CPU torch underneath), a stand-in SageAttention build that only
imports with the torch it was built for, the self-test's CPU mode, a fake nvidia-smi and CUDA
toolkit on PATH, real uv for the launcher's upgrade and a real local HTTP server for the
pinned source archive.

Faked only at the process boundary: nvidia-smi, nvcc and gcc are executables, the torch and
SageAttention stand-ins are real distributions in a real venv, the archive comes over HTTP."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sagedoctor.install.bundle import build_runtime_wheel
from sagedoctor.install.runner import Installer
from tests.standins import (
    EXT,
    H200,
    borrow_host_site,
    clean_env,
    fake_nvidia_smi,
    make_venv,
    put_non_file,
    run_at_start_up,
    run_cli,
)
from tests.test_install_kit import SAGE_GOOD, make_wheel, serving
from tests.test_install_steps import source_archive

torch = pytest.importorskip("torch")

TORCH_VERSION_PY = (
    "from typing import Optional\n"
    "__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'rocm', 'xpu']\n"
    "__version__ = '{version}+cu130'\n"
    "debug = False\n"
    "cuda: Optional[str] = '13.0'\n"
    "git_version = 'stand-in'\n"
    "hip: Optional[str] = None\n"
    "rocm: Optional[str] = None\n"
    "xpu: Optional[str] = None\n")

# A build made against torch 2.10: with any other torch its compiled modules fail to load,
# as a Linux build does after the launcher replaced torch (an undefined C++ symbol).
SAGE_BUILT_FOR_2_10 = (
    "import torch\n"
    "if not torch.__version__.startswith('2.10.'):\n"
    "    raise ImportError('sageattention/_qattn_sm90" + EXT + ": undefined symbol: "
    "_ZN3c104impl3cow11cow_deleterEPv')\n" + SAGE_GOOD)

APP = r"""
import json
import os
import torch.nn.functional as F
# the hook's trampoline wraps the real SDPA (a builtin, which has no __wrapped__)
print(json.dumps({"armed": hasattr(F.scaled_dot_product_attention, "__wrapped__")}))
"""


@dataclass
class App:
    root: Path
    python: Path
    site: Path
    env: dict[str, str]
    wheels: Path


def torch_wheel(out: Path, version: str) -> Path:
    """A stand-in torch wheel: its only file is version.py, which says what it is (the probe
    reads it, and `torch.__version__` comes from it)."""
    return make_wheel(out, "torch", version,
                      {"torch/version.py": TORCH_VERSION_PY.format(version=version)})


def torch_farm(site: Path) -> None:
    """The rest of site/torch: every entry of this machine's CPU torch by symlink. They are
    in no RECORD, so an upgrade by uv replaces version.py alone."""
    real = Path(torch.__file__).parent
    for entry in real.iterdir():
        if entry.name not in ("version.py", "__pycache__"):
            (site / "torch" / entry.name).symlink_to(entry)


def fake_toolkit(tmp_path: Path) -> tuple[Path, Path]:
    """A CUDA 13.0 toolkit folder (bin/nvcc, include/cuda_runtime.h) and a gcc, as files."""
    home = tmp_path / "cuda 13"
    (home / "bin").mkdir(parents=True)
    (home / "include").mkdir()
    (home / "include" / "cuda_runtime.h").write_text("", encoding="utf-8")
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\n" + "".join(
        f"echo '{line}'\n" for line in (H200 / "nvcc-version.txt").read_text(
            encoding="utf-8").splitlines() if "'" not in line), encoding="utf-8")
    nvcc.chmod(0o755)
    tools = tmp_path / "bin"
    tools.mkdir(exist_ok=True)
    gcc = tools / "gcc"
    gcc.write_text("#!/bin/sh\necho 'gcc (Ubuntu 13.3.0-6ubuntu2~24.04) 13.3.0'\n",
                   encoding="utf-8")
    gcc.chmod(0o755)
    return home, tools


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    root = tmp_path / "invoke app ü" / ".venv"
    site = make_venv(root)
    python = root / "bin" / "python"
    # numpy and the rest of torch's imports come from the test interpreter, by a path line
    borrow_host_site(site)
    # Installed from real wheels with full RECORDs, as the app's installer leaves them.
    first = tmp_path / "installed wheels"
    Installer.for_target(python).install([str(w) for w in (
        torch_wheel(first, "2.10.0"), make_wheel(first, "triton", "3.6.0", {}),
        make_wheel(first, "sageattention", "2.2.0", {
            "sageattention/__init__.py": SAGE_BUILT_FOR_2_10,
            **{f"sageattention/{m}{EXT}": "" for m in ("_fused", "_qattn_sm90")}}),
        build_runtime_wheel(tmp_path / "rt", "0.1.0"))])
    torch_farm(site)
    home, tools = fake_toolkit(tmp_path)
    fake_nvidia_smi(tools, "replay", (H200 / "nvidia-smi-query.csv").read_text(encoding="utf-8"))
    env = clean_env(tmp_path, tools)
    env.update(CUDA_HOME=str(home), SAGEDOCTOR_SELFTEST_DEVICE="cpu",
               SAGEDOCTOR_SMOKE_DEVICE="cpu",
               # a kernel that ties SDPA on the CPU counts as faster: the decision, not the
               # timing, is under test here
               SAGEDOCTOR_ROUTE_MARGIN="0.5")
    wheels = tmp_path / "wheels"
    torch_wheel(wheels, "2.13.0")
    make_wheel(wheels, "triton", "3.7.0", {})
    yield App(root.parent, python, site, env, wheels)


def run_app(app: App, **extra: str) -> tuple[bool, list[str]]:
    done = subprocess.run([str(app.python), "-c", APP], capture_output=True, text=True,
                          env={**app.env, **extra}, timeout=120)
    assert done.returncode == 0, done.stderr
    ours = [line for line in done.stderr.splitlines() if line.startswith("sagedoctor: ")]
    return json.loads(done.stdout)["armed"], ours


def verify_and_enable(app: App) -> None:
    done = run_cli(["verify", "--python", str(app.python), "--quick"], app.env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sageattn_cpu" in done.stdout
    done = run_cli(["enable", "--python", str(app.python)], app.env)
    assert done.returncode == 0, done.stderr


def launcher_upgrade(app: App) -> None:
    """What InvokeAI's launcher does to the venv on an update: uv swaps torch (and the
    triton it pins) in place and leaves sageattention alone."""
    uv = Path(sys.executable).parent / "uv"
    uv_bin = str(uv) if uv.exists() else shutil.which("uv")
    assert uv_bin, "uv is a test dependency"
    done = subprocess.run([uv_bin, "pip", "install", "--python", str(app.python), "--no-index",
                           "--find-links", str(app.wheels), "--no-deps", "torch==2.13.0",
                           "triton==3.7.0"], capture_output=True, text=True,
                          env={**app.env, "UV_CACHE_DIR": str(app.wheels / "uv-cache")},
                          timeout=120)
    assert done.returncode == 0, done.stderr
    version = subprocess.run([str(app.python), "-c", "import torch; print(torch.__version__)"],
                             capture_output=True, text=True, env=app.env, check=True)
    assert version.stdout.strip() == "2.13.0+cu130"



def post_update_from_served_source(
        app: App) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """`post-update --yes --quick` with the pinned source archive served on 127.0.0.1; the
    finished process and the paths the server was asked for."""
    with serving() as site:
        site.routes["/SageAttention.tar.gz"] = source_archive(app.root)
        done = run_cli(["post-update", "--python", str(app.python), "--yes", "--quick",
                        "--source-url", site.url("/SageAttention.tar.gz")], app.env,
                       timeout=600)
        return done, list(site.requests)

def test_a_torch_upgrade_is_noticed_repaired_from_the_pinned_source_and_verified(
        app: App) -> None:
    verify_and_enable(app)
    armed, lines = run_app(app)
    assert armed and lines == []

    launcher_upgrade(app)
    armed, lines = run_app(app)
    assert not armed
    assert len(lines) == 1, lines
    assert "torch, triton changed since the last verify" in lines[0]
    assert f"`sagedoctor post-update --venv {app.root / '.venv'}`" in lines[0]

    done, requests = post_update_from_served_source(app)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert requests == ["/SageAttention.tar.gz"]
    assert "torch 2.10.0 -> 2.13.0" in out and "triton 3.6.0 -> 3.7.0" in out
    assert "built for the old torch and no longer works" in out
    assert "Build SageAttention from source" in out and "d1a57a5" in out
    assert "repaired and verified" in out
    armed, lines = run_app(app)
    assert armed and lines == []

    # Nothing changed since: the fast path, which starts no target process.
    done = run_cli(["post-update", "--venv", str(app.root / ".venv")], app.env)
    assert done.returncode == 0 and "nothing to do" in done.stdout, done.stdout + done.stderr


def _record(app: App) -> dict:
    return json.loads((app.root / ".venv" / "sagedoctor" / "verified.json").read_text())


def test_unchanged_exits_at_once_without_starting_the_target(app: App) -> None:
    verify_and_enable(app)
    # Were the target started, it would leave this file behind (run at every start).
    witness = app.root / "started.txt"
    run_at_start_up(app.site, f"open({str(witness)!r}, 'a').write('started\\n')\n")
    began = time.monotonic()
    done = run_cli(["post-update", "--venv", str(app.root / ".venv")], app.env)
    elapsed = time.monotonic() - began
    assert done.returncode == 0, done.stderr
    assert "unchanged since the last passing verify" in done.stdout
    assert "torch 2.10.0" in done.stdout
    assert not witness.exists()
    assert elapsed < 30  # not a timing test (benchmarks/bench_post_update.py): a sanity bound
    # --python inside the venv takes the same fast path
    done = run_cli(["post-update", "--python", str(app.python)], app.env)
    assert done.returncode == 0 and not witness.exists(), done.stderr


def test_without_a_terminal_or_yes_the_plan_is_printed_and_nothing_changes(app: App) -> None:
    verify_and_enable(app)
    launcher_upgrade(app)
    before = (app.site / "sageattention" / "__init__.py").read_text()
    done = run_cli(["post-update", "--venv", str(app.root / ".venv"), "--quick"], app.env,
                   timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Build SageAttention from source" in done.stdout
    assert "SD951" in done.stderr and "--yes" in done.stderr
    assert (app.site / "sageattention" / "__init__.py").read_text() == before
    assert not (app.root / ".venv" / "sagedoctor" / "verified.json").exists()
    armed, lines = run_app(app)
    assert not armed and len(lines) == 1  # routing stays off, the hint stays


def test_what_cannot_be_repaired_turns_routing_off_and_says_why(app: App) -> None:
    verify_and_enable(app)
    # The driver went away with the update: no GPU to build for, nothing to install.
    (app.root.parent / "bin" / "nvidia-smi").unlink()
    launcher_upgrade(app)
    done = run_cli(["post-update", "--venv", str(app.root / ".venv"), "--yes", "--quick"],
                   app.env, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "cannot repair" in done.stdout and "SD111" in done.stdout
    assert "routing is off" in done.stdout
    assert not (app.root / ".venv" / "sagedoctor" / "verified.json").exists()
    states = list((Path(app.env["HOME"]) / ".local" / "state" / "sagedoctor" / "venvs")
                  .glob("*.json"))
    assert [json.loads(p.read_text())["verdict"] for p in states] == ["broken"]
    armed, _lines = run_app(app)
    assert not armed


@pytest.fixture
def bystander(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Another install's InvokeAI, started by a relative path from its own folder (as
    `python invokeai-web` there, or `sagedoctor check invokeai` would be): no business of the
    repair, whose own folder is in the venv (a parallel test run once had one like it)."""
    elsewhere = tmp_path / "another install"
    elsewhere.mkdir()
    (elsewhere / "invokeai-web").write_text("import time\ntime.sleep(600)\n", encoding="utf-8")
    proc = subprocess.Popen([sys.executable, "invokeai-web"], cwd=elsewhere)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_auto_repair_starts_post_update_once_and_it_removes_its_marker(
        app: App, bystander: subprocess.Popen[bytes]) -> None:
    verify_and_enable(app)
    launcher_upgrade(app)
    marker = app.root / ".venv" / "sagedoctor" / "auto-repair.started"
    log = marker.with_name("auto-repair.log")
    assert bystander.poll() is None  # running all along
    with serving() as site:
        site.routes["/SageAttention.tar.gz"] = source_archive(app.root)
        url = site.url("/SageAttention.tar.gz")
        armed, lines = run_app(app, SAGEDOCTOR_AUTO_REPAIR="1", SAGEDOCTOR_SOURCE_URL=url)
        assert not armed and len(lines) == 1
        # a second start while the repair runs leaves it alone (the marker)
        run_app(app, SAGEDOCTOR_AUTO_REPAIR="1", SAGEDOCTOR_SOURCE_URL=url)
        deadline = time.monotonic() + 300
        while marker.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not marker.exists(), log.read_text() if log.exists() else "no log"
        assert site.requests == ["/SageAttention.tar.gz"], log.read_text()  # one repair
    assert bystander.poll() is None
    text = log.read_text(encoding="utf-8")
    assert "verifying again" in text and "repaired and verified" in text, text
    armed, lines = run_app(app)
    assert armed and lines == []


def _check_codes(app: App) -> dict[str, dict]:
    done = run_cli(["check", "--json", "--venv", str(app.root / ".venv")], app.env)
    assert done.stdout, done.stderr
    return {f["code"]: f for f in json.loads(done.stdout)["findings"]}


def test_check_names_post_update_after_an_invokeai_launcher_update(app: App) -> None:
    """The launcher writes <install>/.first_run after each install or update and rewrites
    <install>/.launcher-bootstrap/; both newer than the last verify mean torch may be new."""
    bootstrap = app.root / ".launcher-bootstrap"
    bootstrap.mkdir()
    (bootstrap / "uv.lock").write_text("version = 1\n", encoding="utf-8")
    (app.root / ".first_run").write_text("", encoding="utf-8")
    found = _check_codes(app)
    assert "SD187" in found and "no verify since" in found["SD187"]["detail"]
    assert "SD188" not in found  # no verify to compare with: SD169's business
    assert found["SD187"]["fix"] == f"sagedoctor post-update --venv '{app.root / '.venv'}'"

    verify_and_enable(app)
    assert not {"SD187", "SD188"} & set(_check_codes(app))  # the verify came after both

    later = time.time() + 60  # the next launcher update, a minute after the verify
    for path in (app.root / ".first_run", bootstrap, bootstrap / "uv.lock"):
        os.utime(path, (later, later))
    found = _check_codes(app)
    assert {"SD187", "SD188"} <= set(found)
    assert "last verify" in found["SD188"]["detail"]
    assert found["SD188"]["severity"] == "warn"


def test_a_wrong_build_put_in_by_hand_is_found_and_replaced_by_the_pinned_source(
        app: App) -> None:
    """The device scenario on the CPU: a verified venv, then a v2.2.0-like build whose
    sageattn() returns garbage installed by hand; post-update finds it wrong and rebuilds."""
    from tests.test_install_kit import SAGE_GARBAGE, sage_wheel

    verify_and_enable(app)
    wrong = sage_wheel(app.root / "by hand", "2.2.0", kernel=SAGE_GARBAGE)
    Installer.for_target(app.python).install([str(wrong)])
    done, _ = post_update_from_served_source(app)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert out.startswith("sagedoctor: sageattention rewritten since the last verify")
    assert "the verify found `sageattn()` wrong on cpu" in out
    assert "Build SageAttention from source" in out and "d1a57a5" in out
    assert "repaired and verified" in out
    armed, lines = run_app(app)
    assert armed and lines == []


def _put_unreadable_calibration(path: Path, kind: str) -> None:
    """Something at calibration.json that is no record: what the hook refuses to read."""
    path.unlink(missing_ok=True)
    put_non_file(path, kind)


@pytest.mark.parametrize("kind", ["folder", "fifo", "socket", "device", "loop", "huge"])
def test_an_unreadable_calibration_record_is_reported_and_repaired(app: App, kind: str) -> None:
    """D4 (issue 34): a calibration.json that is no file kept the hook off ("run
    post-update") while post-update said "nothing to do" and check "No problems found"; verify
    with a folder there ended in an internal error and left a .tmp per run."""
    verify_and_enable(app)
    records = app.root / ".venv" / "sagedoctor"
    calibration = records / "calibration.json"
    assert calibration.is_file()
    _put_unreadable_calibration(calibration, kind)
    armed, lines = run_app(app)
    assert not armed and len(lines) == 1 and "post-update" in lines[0], lines

    found = _check_codes(app)
    assert "SD168" in found, found
    assert "calibration" in found["SD168"]["detail"] and found["SD168"]["severity"] == "error"
    done = run_cli(["enable", "--venv", str(app.root / ".venv")], app.env)
    assert done.returncode == 1 and "SD930" in done.stderr and "calibration" in done.stderr

    done = run_cli(["post-update", "--venv", str(app.root / ".venv"), "--yes", "--quick"],
                   app.env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "nothing to do" not in done.stdout and "stays on" in done.stdout, done.stdout
    # the first line names the cause, not "the venv changed" (nothing in it did)
    first = done.stdout.splitlines()[0]
    assert "calibration record is unreadable" in first and "venv changed" not in first, first
    assert calibration.is_file() and not calibration.is_symlink()
    assert json.loads(calibration.read_text(encoding="utf-8"))["gpus"]
    assert not [p.name for p in records.iterdir() if p.name.endswith(".tmp")]
    armed, lines = run_app(app)
    assert armed and lines == []
    assert "SD168" not in _check_codes(app)


def test_verify_replaces_a_folder_at_the_calibration_record(app: App) -> None:
    """D4: verify with a folder at calibration.json was an internal error and left
    calibration.json.<pid>.tmp behind on every run."""
    verify_and_enable(app)
    records = app.root / ".venv" / "sagedoctor"
    _put_unreadable_calibration(records / "calibration.json", "folder")
    for _ in range(2):
        done = run_cli(["verify", "--python", str(app.python), "--quick"], app.env, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        assert (records / "calibration.json").is_file()
        assert not [p.name for p in records.iterdir() if p.name.endswith(".tmp")]


def _wait_for_repair(marker: Path, log: Path, after: int) -> str:
    """The auto-repair's log from byte `after` on, once its marker is gone (or 90 s)."""
    deadline = time.monotonic() + 90
    while marker.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    text = log.read_bytes()[after:].decode("utf-8", "replace") if log.exists() else "no log"
    assert not marker.exists(), text
    return text


def test_auto_repair_starts_from_any_folder_and_a_failed_start_may_retry(
        app: App, tmp_path: Path) -> None:
    """D6 (issue 34): the app started from a folder holding a `sagedoctor/` folder made the
    detached `python -m sagedoctor` import that folder and die (ImportError in
    auto-repair.log), and its marker stayed, so the repair never ran again."""
    verify_and_enable(app)
    records = app.root / ".venv" / "sagedoctor"
    marker, log = records / "auto-repair.started", records / "auto-repair.log"
    record = next(app.site.glob("sageattention-*.dist-info")) / "RECORD"
    record.write_text(record.read_text(encoding="utf-8") + "\n", encoding="utf-8")  # reinstalled

    # The app's own folder holds a `sagedoctor/` folder (a custom node, a checkout).
    app_dir = tmp_path / "app folder"
    (app_dir / "sagedoctor").mkdir(parents=True)
    (app_dir / "sagedoctor" / "__init__.py").write_text("", encoding="utf-8")
    done = subprocess.run([str(app.python), "-c", APP], capture_output=True, text=True,
                          env={**app.env, "SAGEDOCTOR_AUTO_REPAIR": "1"}, cwd=app_dir,
                          timeout=120)
    assert done.returncode == 0 and not json.loads(done.stdout)["armed"], done.stderr
    text = _wait_for_repair(marker, log, 0)
    assert "verified again; SageAttention stays on" in text, text
    armed, lines = run_app(app)
    assert armed and lines == []

    # Changed again; a start whose repair cannot import sagedoctor at all: the marker goes
    # (the next start may try again), the log says why.
    record.write_text(record.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    size = log.stat().st_size
    broken = tmp_path / "broken path"
    (broken / "sagedoctor").mkdir(parents=True)
    (broken / "sagedoctor" / "__init__.py").write_text(
        "raise ImportError('a sagedoctor that is not this one')\n", encoding="utf-8")
    armed, lines = run_app(app, SAGEDOCTOR_AUTO_REPAIR="1", PYTHONPATH=str(broken))
    assert not armed and len(lines) == 1
    text = _wait_for_repair(marker, log, size)
    assert "not this one" in text, text



def test_verify_reads_its_report_past_what_the_venv_prints_at_exit(app: App) -> None:
    """Issue 34 ("Also"): an atexit print in the target's sitecustomize made verify fail with
    SD920 "printed no JSON report": the report is framed, as check's probe answer is."""
    run_at_start_up(app.site,
                    "import atexit, sys\n"
                    "print('banner from sitecustomize')\n"
                    "atexit.register(lambda: print('goodbye from an atexit hook'))\n")
    done = run_cli(["verify", "--python", str(app.python), "--quick"], app.env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SD920" not in done.stderr and "sageattn_cpu" in done.stdout
    done = run_cli(["verify", "--python", str(app.python), "--quick", "--json"], app.env,
                   timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["verdict"] == "routing"


def test_post_update_says_the_hook_is_off_where_it_was_never_enabled(app: App) -> None:
    """D22 (issue 34): post-update with the hook never enabled said "SageAttention stays
    on"."""
    done = run_cli(["verify", "--python", str(app.python), "--quick"], app.env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    record = next(app.site.glob("sageattention-*.dist-info")) / "RECORD"
    record.write_text(record.read_text(encoding="utf-8") + "\n", encoding="utf-8")  # reinstalled
    done = run_cli(["post-update", "--venv", str(app.root / ".venv"), "--yes", "--quick"],
                   app.env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verified again" in done.stdout
    assert "stays on" not in done.stdout and "start-up hook is not enabled" in done.stdout
    assert "sagedoctor enable --venv" in done.stdout
    armed, _ = run_app(app)
    assert not armed


def test_verify_names_a_pyvenv_cfg_that_names_another_python(app: App) -> None:
    """D21 (issue 34): pyvenv.cfg claiming 3.8.0: verify passed without a word, then enable
    refused (SD930) and check said SD168; verify says check's SD168 line too."""
    import re

    cfg = app.root / ".venv" / "pyvenv.cfg"
    cfg.write_text(re.sub(r"(?m)^(version(?:_info)?\s*=\s*).*$", r"\g<1>3.8.0",
                          cfg.read_text(encoding="utf-8")), encoding="utf-8")
    # the verdict must be routing however loaded this machine is: any speed-up routes
    env = {**app.env, "SAGEDOCTOR_ROUTE_MARGIN": "0.001"}
    done = run_cli(["verify", "--python", str(app.python), "--quick"], env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr  # the kernel passed: routing
    found = _check_codes(app)["SD168"]
    assert "pyvenv.cfg says Python 3.8.0" in found["detail"], found
    said = [line for line in done.stdout.splitlines() if "SD168" in line]
    assert said == [f"! SD168 Verification out of date: {found['detail']}; fix: {found['fix']}"], \
        done.stdout
    done = run_cli(["verify", "--python", str(app.python), "--quick", "--json"], env,
                   timeout=300)
    assert json.loads(done.stdout)["verdict"] == "routing"  # the line goes to stderr
    assert f"SD168 Verification out of date: {found['detail']}" in done.stderr, done.stderr
