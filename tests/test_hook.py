"""The start-up hook in a real venv with the bundled runtime and the real CPU torch:
`sagedoctor enable` arms it, a changed venv keeps it off, `disable` and the kill switch too."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sagedoctor.install.bundle import build_runtime_wheel
from sagedoctor.install.runner import Installer
from sagedoctor.runtime.hook import fingerprint_differences
from tests.standins import (
    borrow_host_site,
    clean_env,
    make_venv,
    record_passing_verify,
    run_cli,
    venv_python,
)

pytest.importorskip("torch")

SCRIPT = r"""
import json, sys
from torch.nn.functional import scaled_dot_product_attention as bound  # bound at import
import torch
import torch.nn.functional as F
q = k = v = torch.randn(1, 2, 8, 16)
out = bound(q, k, v)
again = F.scaled_dot_product_attention(q, k, v)
info = {"bound": bound.__name__, "same": bool(torch.allclose(out, again))}
if "sagedoctor_runtime.router" in sys.modules:
    import sagedoctor_runtime as r
    router = r.get_router()
    info.update(armed=F.scaled_dot_product_attention == router.patched, glob=router._global,
                sdpa=router.stats()["sdpa"])
else:
    info.update(armed=False)
print(json.dumps(info))
"""


def test_fingerprint_differences_name_each_change() -> None:
    saved = {"python": "3.12.3", "dists": {"torch": "2.11.0", "sageattention": "2.2.0",
                                           "triton": "3.6.0"}}
    live = {"python": "3.12.3", "dists": {"torch": "2.12.0", "sageattention": "2.2.0",
                                          "triton": None}}
    assert fingerprint_differences(saved, live) == ["torch 2.11.0 -> 2.12.0",
                                                    "triton 3.6.0 -> (none)"]
    assert fingerprint_differences(saved, saved) == []


@pytest.fixture
def venv(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A venv whose Python sees this machine's CPU torch, with the runtime installed."""
    root = tmp_path / "app venv ü"
    site = make_venv(root)
    # torch (gigabytes) comes from the test interpreter's site-packages, by a path line.
    borrow_host_site(site)
    python = venv_python(root)
    Installer.for_target(python).install([str(build_runtime_wheel(tmp_path / "w", "0.1.0"))])
    return python, clean_env(tmp_path)


def ours(stderr: str) -> list[str]:
    """The runtime's own messages (each starts 'sagedoctor: '); a path in a NumPy warning may
    hold the checkout's name, 'sagedoctor', and must not count."""
    return [line for line in stderr.splitlines() if line.startswith("sagedoctor: ")]


def live_fingerprint(python: Path, env: dict[str, str]) -> dict:
    done = subprocess.run([str(python), "-c", "import json, sagedoctor_runtime.hook as h; "
                           "print(json.dumps(h.live_fingerprint()))"],
                          capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout)


def write_verified(python: Path, fingerprint: dict, env: dict[str, str]) -> None:
    """Both copies of a passing verify's record (user state and the venv's)."""
    record_passing_verify(python.parent.parent, fingerprint, Path(env["HOME"]))


def rewrite_arming_copy(python: Path, fingerprint: dict) -> None:
    """The venv's copy only, as if the venv had been verified as ``fingerprint`` says: what
    the hook compares at start, after enable."""
    path = python.parent.parent / "sagedoctor" / "verified.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**data, "fingerprint": fingerprint}), encoding="utf-8")


def run_app(python: Path, env: dict[str, str]) -> tuple[dict, str]:
    done = subprocess.run([str(python), "-c", SCRIPT], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


def test_enable_arms_the_router_for_every_python_of_the_venv(
        venv: tuple[Path, dict[str, str]]) -> None:
    python, env = venv
    fingerprint = live_fingerprint(python, env)
    assert fingerprint["dists"]["torch"]
    write_verified(python, fingerprint, env)
    done = run_cli(["enable", "--python", str(python)], env)
    assert done.returncode == 0, done.stderr
    info, stderr = run_app(python, env)
    assert info["bound"] == "scaled_dot_product_attention" and info["armed"] and info["glob"]
    assert info["same"]
    assert info["sdpa"] == {"device": 2}  # CPU tensors: counted by the router, left on SDPA
    assert not ours(stderr)

    off = dict(env, SAGEDOCTOR_RUNTIME="off")
    info, stderr = run_app(python, off)
    assert not info["armed"] and not ours(stderr)

    done = run_cli(["disable", "--python", str(python)], env)
    assert done.returncode == 0 and "removed" in done.stdout
    info, _ = run_app(python, env)
    assert not info["armed"]


def test_a_venv_changed_since_verify_keeps_sdpa_and_names_the_command_to_run(
        venv: tuple[Path, dict[str, str]]) -> None:
    python, env = venv
    fingerprint = live_fingerprint(python, env)
    torch_stat = fingerprint["stat"]["torch"]
    assert torch_stat and torch_stat[0].startswith("torch-")
    write_verified(python, fingerprint, env)
    assert run_cli(["enable", "--python", str(python)], env).returncode == 0
    # What pip or uv leaves after an upgrade: another dist-info, another RECORD.
    changed = {**fingerprint, "stat": {**fingerprint["stat"],
                                       "torch": ["torch-2.12.0.dist-info", 1, 2]}}
    rewrite_arming_copy(python, changed)
    info, stderr = run_app(python, env)
    assert not info["armed"] and info["same"]
    lines = ours(stderr)
    assert len(lines) == 1, stderr
    assert lines[0].startswith("sagedoctor: torch changed since the last verify")
    assert f"`sagedoctor post-update --venv {python.parent.parent}`" in lines[0]


def test_a_replaced_interpreter_keeps_sdpa_like_a_new_python_version(
        venv: tuple[Path, dict[str, str]]) -> None:
    """The verify records the interpreter binary's stat; a base-Python upgrade rewrites the
    binary (pyvenv.cfg keeps the old version): the hook stays off and says so, as check does."""
    python, env = venv
    fingerprint = live_fingerprint(python, env)
    path, size, mtime = fingerprint["interpreter"]
    assert Path(path).is_file() and size > 0
    write_verified(python, fingerprint, env)
    assert run_cli(["enable", "--python", str(python)], env).returncode == 0
    info, stderr = run_app(python, env)
    assert info["armed"] and not ours(stderr)
    rewrite_arming_copy(python, {**fingerprint, "interpreter": [path, size, mtime - 1]})
    info, stderr = run_app(python, env)
    lines = ours(stderr)
    assert not info["armed"] and len(lines) == 1, stderr
    assert lines[0].startswith("sagedoctor: python changed since the last verify")


def test_a_record_without_stat_data_compares_versions(
        venv: tuple[Path, dict[str, str]]) -> None:
    python, env = venv
    fingerprint = live_fingerprint(python, env)
    del fingerprint["stat"]
    write_verified(python, fingerprint, env)  # by versions: they match
    assert run_cli(["enable", "--python", str(python)], env).returncode == 0
    rewrite_arming_copy(python, {**fingerprint, "dists": {**fingerprint["dists"],
                                                          "torch": "2.12.0"}})
    info, stderr = run_app(python, env)
    assert not info["armed"] and info["same"]
    assert f"torch 2.12.0 -> {fingerprint['dists']['torch']}" in stderr


@pytest.mark.parametrize("content", ["{not json", '{"schema_version": 1, "verdict": "routing",'
                                     ' "fingerprint": 7}', '["routing"]'])
def test_a_corrupt_record_starts_quietly_on_sdpa(
        venv: tuple[Path, dict[str, str]], content: str) -> None:
    python, env = venv
    write_verified(python, live_fingerprint(python, env), env)
    assert run_cli(["enable", "--python", str(python)], env).returncode == 0
    (python.parent.parent / "sagedoctor" / "verified.json").write_text(content,
                                                                       encoding="utf-8")
    info, stderr = run_app(python, env)
    assert not info["armed"] and info["same"]
    assert len(ours(stderr)) <= 1, stderr


def test_a_stale_pth_after_uninstalling_the_runtime_starts_quietly(
        venv: tuple[Path, dict[str, str]]) -> None:
    python, env = venv
    write_verified(python, live_fingerprint(python, env), env)
    assert run_cli(["enable", "--python", str(python)], env).returncode == 0
    site = next(python.parent.parent.glob("lib/python*/site-packages"))
    import shutil
    shutil.rmtree(site / "sagedoctor_runtime")  # a manual uninstall that left the .pth
    info, stderr = run_app(python, env)
    assert not info["armed"] and info["same"]
    assert len(ours(stderr)) <= 1, stderr


def test_enable_needs_a_passing_verify(venv: tuple[Path, dict[str, str]]) -> None:
    python, env = venv
    done = run_cli(["enable", "--python", str(python)], env)
    assert done.returncode == 1  # fixable: verify first
    assert "SD930" in done.stderr and "sagedoctor verify" in done.stderr
    assert not list(python.parent.parent.glob("lib/python*/site-packages/sagedoctor-*.pth"))


def test_verify_without_a_gpu_reports_broken_and_leaves_the_hook_off(
        venv: tuple[Path, dict[str, str]]) -> None:
    python, env = venv
    write_verified(python, live_fingerprint(python, env), env)  # an old passing verdict
    done = run_cli(["verify", "--python", str(python), "--quick"], env, timeout=180)
    assert done.returncode == 1, done.stderr
    assert "does not work in this venv" in done.stdout
    assert not (python.parent.parent / "sagedoctor" / "verified.json").exists()  # no arming
    calibration = json.loads((python.parent.parent / "sagedoctor" / "calibration.json")
                             .read_text())
    assert calibration["gpus"] == {}  # no GPU: no decision
    states = list((Path(env["HOME"]) / ".local" / "state" / "sagedoctor" / "venvs").glob("*.json"))
    assert len(states) == 1
    state = json.loads(states[0].read_text())
    assert state["verdict"] == "broken" and state["prefix"] == str(python.parent.parent)
    assert state["fingerprint"]["dists"]["torch"]
