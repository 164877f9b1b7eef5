"""Carrying out plans in real venvs: the runtime bundle, a source build with the plan's
environment, a failed build that changes nothing, downloads with digests, and the CLI."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from sagedoctor.apps.invokeai import load_edit_record
from sagedoctor.install.bundle import build_runtime_wheel
from sagedoctor.install.execute import (
    Executor,
    installed_distributions,
    unexpected_changes,
)
from sagedoctor.install.fetch import download, extract_source
from sagedoctor.install.runner import Installer, InstallError
from sagedoctor.plan import Step
from tests.standins import add_dist, clean_env, local_server, run_cli
from tests.test_install_kit import fake_source, plan, settings_for, torch_venv

PROFILES = Path(__file__).parent / "profiles"


@pytest.fixture
def venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    monkeypatch.setenv("SAGEDOCTOR_SMOKE_DEVICE", "cpu")  # the stand-in kernels run on the CPU
    return torch_venv(tmp_path / "my venv ü")


def run_plan(python: Path, tmp_path: Path, *steps: Step, messages: list[str] | None = None,
             **options: Any) -> Executor:
    work = tmp_path / f"work-{len(list(tmp_path.glob('work-*')))}"
    executor = Executor(plan(python, *steps), (messages if messages is not None else []).append,
                        work, tmp_path / "logs", cache_dir=tmp_path / "cache",
                        state_root=tmp_path / "state", **options)
    executor.run("0.1.0")
    return executor


def test_runtime_bundle_installs_with_a_record_and_uninstalls(venv: tuple[Path, Path],
                                                              tmp_path: Path) -> None:
    python, site = venv
    wheel = build_runtime_wheel(tmp_path / "out", "0.1.0")
    installer = Installer.for_target(python)
    installer.install([str(wheel)])
    assert installed_distributions(python)["sagedoctor-runtime"] == "0.1.0"
    done = subprocess.run([str(python), "-c", "import sagedoctor_runtime.registry as r; "
                           "print(len(r.SAGE_KERNELS))"], capture_output=True, text=True)
    assert done.returncode == 0 and int(done.stdout) >= 5, done.stderr
    installer.uninstall(["sagedoctor-runtime"])
    assert "sagedoctor-runtime" not in installed_distributions(python)
    assert not (site / "sagedoctor_runtime").exists()


def test_source_build_uses_the_plans_environment_and_changes_only_sageattention(
        venv: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    python, site = venv
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0 8.6")  # a stray value must not leak in
    source = fake_source(tmp_path / "Sage src")
    before = installed_distributions(python)
    messages: list[str] = []
    step = Step("build-from-source", "Build", "why", ("sageattention",),
                build=settings_for(str(source)))
    run_plan(python, tmp_path, step, messages=messages)
    after = installed_distributions(python)
    assert after["sageattention"] == "2.2.0"
    assert after["torch"] == before["torch"]
    recorded = json.loads((site / "sageattention" / "build_env.json").read_text())
    assert recorded == {"TORCH_CUDA_ARCH_LIST": "8.6;8.9", "MAX_JOBS": "2",
                        "EXT_PARALLEL": "2", "NVCC_APPEND_FLAGS": "--threads 2",
                        "CUDA_HOME": "/usr/local/cuda"}
    assert any("built sageattention-2.2.0" in m for m in messages)
    assert any(m.startswith("smoke check passed: cpu") for m in messages)
    assert not (source / "build").exists()  # built on a copy; the user's folder stays clean


def test_failed_build_leaves_the_venv_as_it_was(venv: tuple[Path, Path],
                                                 tmp_path: Path) -> None:
    python, _site = venv
    source = fake_source(tmp_path / "src", fail=True)
    before = installed_distributions(python)
    step = Step("build-from-source", "Build", "why", ("sageattention",),
                build=settings_for(str(source)))
    bundle = Step("bundle-runtime", "Runtime", "why", ("sagedoctor-runtime",))
    with pytest.raises(InstallError) as info:
        run_plan(python, tmp_path, step, bundle)
    assert "simulated compiler failure" in info.value.message
    assert "The venv was not changed" in info.value.fix
    assert installed_distributions(python) == before
    logs = list((tmp_path / "logs").glob("install-*.log"))
    assert len(logs) == 1 and "simulated compiler failure" in logs[0].read_text()


def test_a_failed_build_happens_before_sageattention_1_is_removed(venv: tuple[Path, Path],
                                                                  tmp_path: Path) -> None:
    python, site = venv
    add_dist(site, "sageattention", "1.0.6", {"sageattention/__init__.py": ""})
    uninstall = Step("uninstall", "Uninstall SageAttention 1", "why", ("sageattention",))
    build = Step("build-from-source", "Build", "why", ("sageattention",),
                 build=settings_for(str(fake_source(tmp_path / "src", fail=True))))
    with pytest.raises(InstallError, match=r"step 2 .*simulated compiler failure"):
        run_plan(python, tmp_path, uninstall, build)
    assert installed_distributions(python)["sageattention"] == "1.0.6"


def test_unknown_steps_are_refused_before_any_change(venv: tuple[Path, Path],
                                                     tmp_path: Path) -> None:
    python, _site = venv
    bundle = Step("bundle-runtime", "Runtime", "why", ("sagedoctor-runtime",))
    unknown = Step("frobnicate", "A step from a newer sagedoctor", "why")
    before = installed_distributions(python)
    with pytest.raises(InstallError, match="cannot yet carry out: frobnicate"):
        run_plan(python, tmp_path, bundle, unknown)
    assert installed_distributions(python) == before


def test_invokeai_step_edits_the_file_and_says_how_it_was_checked(venv: tuple[Path, Path],
                                                                  tmp_path: Path) -> None:
    python, _site = venv
    config = tmp_path / "root" / "invokeai.yaml"
    config.parent.mkdir()
    config.write_text("# mine\nschema_version: 4.0.3\n", encoding="utf-8")
    enable = Step("enable-invokeai", "Enable", "why", paths=(str(config),),
                  config=(("attention_backend", "sage"),))
    messages: list[str] = []
    run_plan(python, tmp_path, enable, messages=messages)
    assert config.read_text(encoding="utf-8") == (
        "# mine\nschema_version: 4.0.3\nattention_backend: sage\n")
    # recorded once committed, for uninstall --all and disable to put the file back
    loaded = load_edit_record(python.parent.parent)
    assert loaded is not None and loaded[0].path == str(config)
    assert loaded[0].settings == (("attention_backend", "sage"),)
    assert loaded[1] == hashlib.sha256(config.read_bytes()).hexdigest()
    # this venv has no InvokeAI, so its loader cannot prove it: the message says so
    assert any(f"set attention_backend: sage in {config} (checked by a strict YAML parse" in m
               for m in messages)


def test_unexpected_changes_names_each_distribution() -> None:
    before = {"torch": "2.11.0", "numpy": "2.1.0", "sageattention": "1.0.6"}
    after = {"torch": "2.12.0", "sageattention": "2.2.0", "triton": "3.6.0"}
    assert unexpected_changes(before, after, frozenset({"sageattention"})) == [
        "numpy 2.1.0 -> (removed)", "torch 2.11.0 -> 2.12.0", "triton (absent) -> 3.6.0"]


# --- downloads -------------------------------------------------------------------------------

def _zip_bytes() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("sageattention/__init__.py", "a small but whole zip, with a digest\n")
    return buffer.getvalue()


PAYLOAD = _zip_bytes()


class _Files(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path != "/file.whl":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(PAYLOAD)))
        self.end_headers()
        self.wfile.write(PAYLOAD)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    with local_server(_Files) as url:
        yield url


def test_download_keeps_a_file_only_when_its_digest_matches(server: str, tmp_path: Path) -> None:
    good = hashlib.sha256(PAYLOAD).hexdigest()
    dest = tmp_path / "file.whl"
    assert download(f"{server}/file.whl", dest, good, allow_http_host="127.0.0.1") == good
    assert dest.read_bytes() == PAYLOAD
    other = tmp_path / "other.whl"
    with pytest.raises(InstallError, match="does not match"):
        download(f"{server}/file.whl", other, "0" * 64, allow_http_host="127.0.0.1")
    assert not other.exists() and not list(tmp_path.glob("*.part"))
    with pytest.raises(InstallError, match="HTTP 404"):
        download(f"{server}/missing.whl", other, None, allow_http_host="127.0.0.1")


def _tarball(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_source_archive_unpacks_to_its_one_folder(tmp_path: Path) -> None:
    archive = _tarball(tmp_path / "src.tar.gz", {"SageAttention-d1a57a5/setup.py": b"x"})
    root = extract_source(archive, tmp_path / "out")
    assert root.name == "SageAttention-d1a57a5" and (root / "setup.py").read_bytes() == b"x"


def test_hostile_source_archive_is_refused(tmp_path: Path) -> None:
    archive = _tarball(tmp_path / "evil.tar.gz", {"../escaped.py": b"x"})
    with pytest.raises(InstallError, match="could not be unpacked safely"):
        extract_source(archive, tmp_path / "out")
    assert not (tmp_path / "escaped.py").exists()


def test_download_refuses_plain_http(server: str, tmp_path: Path) -> None:
    with pytest.raises(InstallError, match="refusing to download over http"):
        download(f"{server}/file.whl", tmp_path / "f.whl", None)


# --- the CLI -------------------------------------------------------------------------------

def test_install_dry_run_prints_the_plan_and_changes_nothing(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    done = run_cli(["install", "--dry-run", "--json", "--facts",
                    str(PROFILES / "windows-sageattention1.json")], env)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["status"] == "plan"
    assert [s["action"] for s in data["plan"]["steps"]] == [
        "uninstall", "install-wheel", "bundle-runtime", "verify"]
    wheel = data["plan"]["steps"][1]["wheel"]
    assert wheel["file"].startswith("sageattention-2.2.0+cu130torch2.10.0andhigher.post6")


def test_install_with_facts_of_another_machine_needs_dry_run(tmp_path: Path) -> None:
    done = run_cli(["install", "--facts", str(PROFILES / "windows-sageattention1.json")],
                   clean_env(tmp_path))
    # a usage error (64), not "cannot work on this machine" (2)
    assert done.returncode == 64 and "--dry-run" in done.stderr


def test_plan_blocked_exit_code_and_text(tmp_path: Path) -> None:
    done = run_cli(["plan", "--facts", str(PROFILES / "macos-apple.json")], clean_env(tmp_path))
    assert done.returncode == 2
    assert "No plan: SageAttention cannot work on this machine." in done.stdout
    assert "SD101" in done.stdout


def test_install_recovers_a_killed_runs_journal_before_planning(tmp_path: Path) -> None:
    from sagedoctor.install.lock import venv_state_dir
    from tests.standins import make_venv

    root = tmp_path / "venv ü"
    make_venv(root)
    env = clean_env(tmp_path)
    state = tmp_path / "home" / ".local" / "state" / "sagedoctor"
    folder = venv_state_dir(root, state)
    folder.mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    work = tmp_path / "left behind"
    work.mkdir()
    (folder / "journal.json").write_text(json.dumps({
        "schema_version": 1, "pid": dead.pid, "phase": "preparing", "work": str(work),
        "build_pgid": None, "python": str(root / "bin" / "python"), "prefix": str(root)}),
        encoding="utf-8")
    done = run_cli(["install", "--venv", str(root)], env, timeout=120)
    assert f"an earlier install (pid {dead.pid}) was interrupted" in done.stdout, done.stdout
    assert "it had not changed the venv yet" in done.stdout
    assert not (folder / "journal.json").exists() and not work.exists()


@pytest.mark.parametrize(("url", "ok"), [
    ("https://github.com/thu-ml/SageAttention/archive/x.tar.gz", True),
    ("http://127.0.0.1:8000/sage.tar.gz", True),
    ("http://localhost:8000/sage.tar.gz", True),
    ("http://example.org/sage.tar.gz", False),
    ("file:///tmp/sage.tar.gz", False),
])
def test_source_url_is_https_or_local_http(url: str, ok: bool,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from sagedoctor.install.source_url import chosen_source_url

    monkeypatch.delenv("SAGEDOCTOR_SOURCE_URL", raising=False)
    if ok:
        assert chosen_source_url(url) == url
    else:
        with pytest.raises(InstallError, match="not https"):
            chosen_source_url(url)
    monkeypatch.setenv("SAGEDOCTOR_SOURCE_URL", url)  # the variable is held to the same rule
    if ok:
        assert chosen_source_url(None) == url
    else:
        with pytest.raises(InstallError, match="SAGEDOCTOR_SOURCE_URL"):
            chosen_source_url(None)
