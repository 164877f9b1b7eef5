"""The install's preflight: what the commit phase would meet is found before any download or
build, refused with the finding (exit 1) and nothing is changed. Real files, a real running
process named `invokeai-web`, a real local server whose archive is never asked for."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sagedoctor.apps.invokeai import ProcessInfo, running_processes
from sagedoctor.facts import InvokeAIFacts
from sagedoctor.install.preflight import (
    BUILD_NEEDS_BYTES,
    GIB,
    ConfigState,
    PreflightRefused,
    PreflightState,
    config_state,
    gather_state,
    preflight_findings,
    run_preflight,
)
from sagedoctor.plan import Plan, Step
from sagedoctor.probe.invokeai import parse_config
from tests.standins import H200, add_torch, clean_env, fake_nvidia_smi, run_cli

BUILD = Step("build-from-source", "Build", "why", ("sageattention",))
EDIT = Step("enable-invokeai", "Enable", "why", config=(("attention_backend", "sage"),))
GOOD_CONFIG = ConfigState("/r/invokeai.yaml", (("attention_backend", "sage"),), True, None,
                          True, ("invokeai.yaml", ".venv"))


def _plan(*steps: Step, prefix: str = "/r/.venv") -> Plan:
    return Plan(python=f"{prefix}/bin/python", prefix=prefix, os="linux", steps=steps)


@pytest.mark.parametrize(("state", "codes"), [
    (PreflightState(GOOD_CONFIG, (), (("the source build", "/tmp", 10 * GIB,
                                       BUILD_NEEDS_BYTES),)), []),
    (PreflightState(None, (ProcessInfo(4242, ("/r/.venv/bin/invokeai-web",), None),), ()),
     ["SD196"]),
    (PreflightState(GOOD_CONFIG.__class__(**{**GOOD_CONFIG.__dict__, "root_markers": ()}),
                    (), ()), ["SD197"]),
    (PreflightState(GOOD_CONFIG.__class__(**{**GOOD_CONFIG.__dict__, "problem":
                                             "duplicate key"}), (), ()), ["SD183"]),
    (PreflightState(GOOD_CONFIG.__class__(**{**GOOD_CONFIG.__dict__, "writable": False}),
                    (), ()), ["SD195"]),
    (PreflightState(None, (), (("the source build", "/tmp", GIB, BUILD_NEEDS_BYTES),
                               ("the venv's new files", "/r/.venv", None, GIB))), ["SD198"]),
])
def test_preflight_decides_over_what_it_found(state: PreflightState, codes: list[str]) -> None:
    found = preflight_findings(_plan(BUILD, EDIT), state)
    assert [f.code for f in found] == codes
    assert all(f.severity == "error" and f.fix for f in found)


def test_the_disk_finding_says_how_much_is_free_and_needed() -> None:
    state = PreflightState(None, (), (("the source build", "/tmp", GIB, BUILD_NEEDS_BYTES),))
    (found,) = preflight_findings(_plan(BUILD), state)
    assert found.detail == "the source build: 1.0 GiB free in /tmp, 3.0 GiB needed"


@pytest.mark.parametrize(("text", "problem"), [
    ("schema_version: 4.0.3\nattention_type: auto\n", None),
    ("schema_version: 4.0.3\nattention_type: auto\nattention_type: sliced\n", "duplicate"),
    ("schema_version: [unclosed\n", "not valid YAML"),
    (b"schema_version: \xff\xfe\n", "not UTF-8"),
])
def test_the_config_must_read_and_round_trip(tmp_path: Path, text: str | bytes,
                                              problem: str | None) -> None:
    path = tmp_path / "Invoke ü" / "invokeai.yaml"
    path.parent.mkdir()
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    state = config_state(path, (("attention_backend", "sage"),))
    if problem is None:
        assert state.problem is None
    else:
        assert state.problem is not None and problem in state.problem, state.problem
    assert state.root_markers == ("invokeai.yaml",) and state.writable
    assert path.read_bytes() == (text if isinstance(text, bytes) else text.encode())


def test_a_folder_in_place_of_the_config_and_a_folder_that_is_no_root(tmp_path: Path) -> None:
    folder = tmp_path / "root"
    (folder / "invokeai.yaml").mkdir(parents=True)
    assert "is a folder" in (config_state(folder / "invokeai.yaml", ()).problem or "")
    empty = tmp_path / "Downloads"
    empty.mkdir()
    state = config_state(empty / "invokeai.yaml", (("attention_backend", "sage"),))
    assert (state.exists, state.problem, state.root_markers) == (False, None, ())


def test_check_finds_a_duplicate_key_that_safe_load_would_hide() -> None:
    facts = InvokeAIFacts("/r", "--root", True, "/r/.venv", "/r/invokeai.yaml", True)
    parsed = parse_config(facts, b"schema_version: 4.0.3\nattention_type: auto\n"
                                 b"attention_type: sliced\n")
    assert parsed.config_error is not None
    assert "duplicate key 'attention_type' (line 3)" in parsed.config_error
    assert parse_config(facts, b"schema_version: 4.0.3\n").config_error is None


@pytest.fixture
def invokeai_web(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    """A real process started as the launcher starts InvokeAI: <venv>/bin/invokeai-web."""
    import sys

    venv = tmp_path / "invoke root" / ".venv"
    (venv / "bin").mkdir(parents=True)
    script = venv / "bin" / "invokeai-web"
    script.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(120)\n", encoding="utf-8")
    script.chmod(0o755)
    proc = subprocess.Popen([str(script)])
    try:
        yield venv, proc
    finally:
        proc.kill()
        proc.wait()


def test_a_running_invokeai_web_is_found_and_refused(
        invokeai_web: tuple[Path, subprocess.Popen[bytes]], tmp_path: Path) -> None:
    venv, proc = invokeai_web
    plan = _plan(Step("bundle-runtime", "Runtime", "why", ("sagedoctor-runtime",)),
                 prefix=str(venv))
    state = gather_state(plan, tmp_path / "work", tmp_path / "state")
    assert [p.pid for p in state.running] == [proc.pid]
    with pytest.raises(PreflightRefused) as info:
        run_preflight(plan, tmp_path / "work", tmp_path / "state")
    assert "SD196" in info.value.message and str(proc.pid) in info.value.message
    assert info.value.exit_status == 1
    assert info.value.fix == ("SD196: Stop InvokeAI, then run the install again. "
                              "Nothing was changed.")
    # a plan that only verifies touches nothing: no refusal for that
    verify_only = _plan(Step("verify", "Verify", "why"), prefix=str(venv))
    assert gather_state(verify_only, tmp_path / "work", tmp_path / "state",
                        running_processes).running == ()


def test_install_refuses_a_running_invokeai_before_fetching_the_source(
        tmp_path: Path, invokeai_web: tuple[Path, subprocess.Popen[bytes]]) -> None:
    from tests.test_install_kit import serving
    from tests.test_install_steps import source_archive
    from tests.test_post_update import fake_toolkit

    venv, _proc = invokeai_web
    site = _python_venv(venv)
    add_torch(site, (H200 / "torch-version.py").read_text(encoding="utf-8"))
    _add(site, "triton", "3.6.0")
    home, tools = fake_toolkit(tmp_path)
    fake_nvidia_smi(tools, "replay", (H200 / "nvidia-smi-query.csv").read_text(encoding="utf-8"))
    env = clean_env(tmp_path, tools)
    env["CUDA_HOME"] = str(home)
    before = sorted(p.name for p in site.iterdir())
    with serving() as served:
        served.routes["/SageAttention.tar.gz"] = source_archive(tmp_path)
        done = run_cli(["install", "--venv", str(venv), "--no-wheel-index", "--source-url",
                        served.url("/SageAttention.tar.gz")], env, timeout=300)
        requests = list(served.requests)
    assert "Build SageAttention from source" in done.stdout, done.stdout + done.stderr
    assert done.returncode == 1, done.stdout + done.stderr
    assert "SD931" in done.stderr and "SD196" in done.stderr and "InvokeAI is running" \
        in done.stderr
    assert requests == []  # refused before the archive was asked for
    assert sorted(p.name for p in site.iterdir()) == before  # nothing changed


def test_install_refuses_a_root_that_is_no_root_before_anything(tmp_path: Path) -> None:
    """The same refusal, from the edit step's side: the plan is blocked by check's SD197."""
    from tests.standins import INVOKEAI_CONFIG_NEW, add_invokeai, make_venv

    root = tmp_path / "Invoke ü"
    site = make_venv(root / ".venv")
    add_torch(site, (H200 / "torch-version.py").read_text(encoding="utf-8"))
    add_invokeai(site, "6.15.0", INVOKEAI_CONFIG_NEW)
    elsewhere = tmp_path / "Downloads"
    elsewhere.mkdir()
    fake_nvidia_smi(tmp_path / "bin", "replay",
                    (H200 / "nvidia-smi-query.csv").read_text(encoding="utf-8"))
    env = clean_env(tmp_path, tmp_path / "bin")
    done = run_cli(["plan", "--json", "--venv", str(root / ".venv"), "--root", str(elsewhere)],
                   env)
    report = json.loads(done.stdout)
    assert done.returncode == 1 and report["status"] == "blocked"
    assert "SD197" in {f["code"] for f in report["findings"]}
    check = run_cli(["check", "--json", "--venv", str(root / ".venv"), "--root",
                     str(elsewhere)], env)
    sd197 = [f for f in json.loads(check.stdout)["findings"] if f["code"] == "SD197"]
    assert check.returncode == 1 and [f["severity"] for f in sd197] == ["error"]
    assert not (elsewhere / "invokeai.yaml").exists()


def test_a_duplicate_key_blocks_the_plans_edit_step(tmp_path: Path) -> None:
    from tests.standins import INVOKEAI_CONFIG_NEW, add_invokeai, make_venv

    root = tmp_path / "Invoke ü"
    site = make_venv(root / ".venv")
    add_torch(site, (H200 / "torch-version.py").read_text(encoding="utf-8"))
    add_invokeai(site, "6.15.0", INVOKEAI_CONFIG_NEW)
    text = "schema_version: 4.0.3\nattention_type: auto\nattention_type: torch-sdp\n"
    (root / "invokeai.yaml").write_text(text, encoding="utf-8")
    fake_nvidia_smi(tmp_path / "bin", "replay",
                    (H200 / "nvidia-smi-query.csv").read_text(encoding="utf-8"))
    env = clean_env(tmp_path, tmp_path / "bin")
    args = ["--venv", str(root / ".venv"), "--root", str(root)]
    check = run_cli(["check", "--json", *args], env)
    sd183 = [f for f in json.loads(check.stdout)["findings"] if f["code"] == "SD183"]
    assert [f["severity"] for f in sd183] == ["error"] and "duplicate key" in sd183[0]["detail"]
    plan = json.loads(run_cli(["plan", "--json", *args], env).stdout)
    assert plan["status"] == "blocked" and "SD183" in {f["code"] for f in plan["findings"]}
    assert (root / "invokeai.yaml").read_text(encoding="utf-8") == text


def test_an_empty_root_is_a_usage_error(tmp_path: Path) -> None:
    for command in (["check"], ["plan"], ["install", "--dry-run"]):
        done = run_cli([*command, "--root", ""], clean_env(tmp_path))
        assert done.returncode == 64, (command, done.stderr)
        assert "--root" in done.stderr and "empty" in done.stderr


def _python_venv(venv: Path) -> Path:
    """Turn the folder holding bin/invokeai-web into a real venv; returns its site-packages."""
    import sys

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    return next(venv.glob("lib/python3*/site-packages"))


def _add(site: Path, name: str, version: str) -> None:
    from tests.standins import add_dist

    add_dist(site, name, version)
