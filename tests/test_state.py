"""The verify record store: both copies, atomic, non-routing verdicts kept but never armed,
and a corrupt file read as unverified rather than a crash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sagedoctor import state
from sagedoctor.state import VerifyRecord, load_record, load_status, record_verification

FIXTURE = Path(__file__).parent / "fixtures" / "selftest-h200-main.json"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    return tmp_path


def test_a_routing_verify_is_stored_twice_and_read_back(home: Path) -> None:
    prefix = home / "app venv ü"
    prefix.mkdir()
    (prefix / "pyvenv.cfg").write_text("home = /usr/bin\n", encoding="utf-8")  # a venv
    report = json.loads(FIXTURE.read_text(encoding="utf-8"))
    results = {"gpus": {"GPU-0": {"sageattn_correct": True}}}
    path = record_verification(prefix, prefix / "bin" / "python", "routing",
                               report["fingerprint"], results, "2026-12-03T08:00:00+00:00")
    assert path == state.state_path(prefix) and path.is_relative_to(home / "home")
    status, record = load_status(prefix)
    assert status == "verified" and record is not None
    assert record.verdict == "routing" and record.results == results
    assert record.fingerprint["dists"]["torch"] == report["fingerprint"]["dists"]["torch"]
    assert record.post_update[-3:] == ("post-update", "--venv", str(prefix))
    hook_copy = json.loads((prefix / "sagedoctor" / "verified.json").read_text("utf-8"))
    assert hook_copy["verdict"] == "routing" and hook_copy["fingerprint"] == record.fingerprint
    assert not list(path.parent.glob("*.tmp"))


def test_a_wrong_kernel_is_remembered_but_disarms_the_hook(home: Path) -> None:
    prefix = home / "venv"
    fingerprint = {"python": "3.12.3", "dists": {"torch": "2.11.0"}}
    record_verification(prefix, prefix, "routing", fingerprint, {}, "t1")
    assert (prefix / "sagedoctor" / "verified.json").exists()
    record_verification(prefix, prefix, "sdpa-only", fingerprint, {"auto": "WRONG"}, "t2")
    assert not (prefix / "sagedoctor" / "verified.json").exists()
    record = load_record(prefix)
    assert record == VerifyRecord("sdpa-only", "t2", fingerprint, {"auto": "WRONG"},
                                  record.post_update if record else ())


@pytest.mark.parametrize("content", [b"{broken", b"\xff\xfe", b"[]",
                                     b'{"schema_version": 1, "verdict": "maybe", '
                                     b'"verified_at": "t", "fingerprint": {}}',
                                     b'{"schema_version": 2, "verdict": "routing", '
                                     b'"verified_at": "t", "fingerprint": {}}'])
def test_a_corrupt_record_reads_as_unverified(home: Path, content: bytes) -> None:
    prefix = home / "venv"
    assert load_status(prefix) == ("unverified", None)
    path = state.state_path(prefix)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    assert load_status(prefix) == ("corrupt", None)
    assert load_record(prefix) is None


def test_the_key_is_the_resolved_prefix(home: Path) -> None:
    real = home / "real"
    real.mkdir()
    link = home / "link"
    link.symlink_to(real)
    assert state.state_path(link) == state.state_path(real)
    assert state.state_path(real) != state.state_path(home / "other")


def test_the_repair_command_names_an_embedded_python_by_its_interpreter(tmp_path: Path) -> None:
    from sagedoctor.runtime.hook import post_update_hint
    from sagedoctor.state import default_post_update

    venv = tmp_path / "my venv ü"
    embedded = tmp_path / "ComfyUI_windows_portable" / "python_embeded"
    venv.mkdir()
    embedded.mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n", encoding="utf-8")
    assert default_post_update(venv, venv / "bin" / "python")[-2:] == ("--venv", str(venv))
    assert default_post_update(embedded, embedded / "python.exe")[-2:] == (
        "--python", str(embedded / "python.exe"))
    assert post_update_hint(str(venv)) == f"sagedoctor post-update --venv {venv}"
    assert post_update_hint(str(embedded)).startswith("sagedoctor post-update --python ")


@pytest.mark.parametrize("where", ["/dev/null", "a file"])
def test_a_state_home_that_is_no_folder_is_a_setting_error_not_an_internal_one(
        tmp_path: Path, where: str) -> None:
    """D18: XDG_STATE_HOME=/dev/null ended verify, install, uninstall and post-update in an
    internal error at the first mkdir under it."""
    from tests.standins import clean_env, make_venv, run_cli

    make_venv(tmp_path / "venv")
    env = clean_env(tmp_path)
    if where == "a file":
        (tmp_path / "a file").write_text("", encoding="utf-8")
        where = str(tmp_path / "a file")
    env["XDG_STATE_HOME"] = where
    for command in (["verify", "--quick"], ["install"], ["uninstall", "--yes"],
                    ["post-update", "--yes"]):
        done = run_cli([*command, "--venv", str(tmp_path / "venv")], env, timeout=120)
        said = done.stdout + done.stderr
        assert "internal error" not in said, (command, said)
        assert done.returncode == 64 and "SD905" in said and "XDG_STATE_HOME" in said, \
            (command, said)
        assert f"{where} is not a folder" in said
