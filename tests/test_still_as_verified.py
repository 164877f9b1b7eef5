"""One answer to "is this venv still what verify proved?" (issue 20): `state.still_as_verified`,
which check, post-update, enable and the TUI share. Before, a corrupt `<venv>/sagedoctor/
verified.json` kept the hook off while `check` read the user-state copy and said nothing, and
`enable` armed a venv whose torch had changed since the verify. Real venvs with stand-in
dist-infos; the CLI runs as a user would run it."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from sagedoctor.file_meta import write_atomic
from sagedoctor.runtime.hook import dist_stats
from sagedoctor.state import (
    VenvFiles,
    VerifyRecord,
    save_record,
    still_as_verified,
    venv_python_version,
    venv_site_dirs,
)
from tests.standins import (
    add_dist,
    add_sageattention,
    add_torch,
    clean_env,
    make_venv,
    record_passing_verify,
    run_cli,
)

TORCH_PY = "__version__ = '2.11.0+cu130'\ncuda = '13.0'\nhip = None\n"
WHEN = "2026-12-01T00:00:00+00:00"


def verified_venv(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A venv with torch, SageAttention and the runtime, and a passing verify of exactly it
    (both copies, the user-state one under the CLI's HOME)."""
    prefix = tmp_path / "app venv é"
    site = make_venv(prefix)
    add_torch(site, TORCH_PY, "2.11.0")
    add_sageattention(site, "2.2.0", ("_fused", "_qattn_sm90"))
    add_dist(site, "sagedoctor-runtime", "0.1.0")
    env = clean_env(tmp_path)
    record_passing_verify(prefix, fingerprint_of(prefix), Path(env["HOME"]), WHEN)
    return prefix, site, env


def fingerprint_of(prefix: Path) -> dict:
    return {"python": venv_python_version(prefix),
            "dists": {"torch": "2.11.0", "sageattention": "2.2.0"},
            "stat": dist_stats(venv_site_dirs(prefix))}


@pytest.fixture
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "home" / ".local" / "state"))
    return tmp_path / "home"


def test_the_answer_for_each_way_a_venv_can_differ(tmp_path: Path, state_home: Path) -> None:
    prefix, site, _ = verified_venv(tmp_path)
    assert still_as_verified(prefix) == (True, ())

    files = VenvFiles(prefix)
    good = files.verified.read_bytes()
    files.verified.write_bytes(b"\xff{not json")
    same, why = still_as_verified(prefix)
    assert not same and "arming record" in why[0] and "does not parse" in why[0]
    files.verified.unlink()
    assert "is missing" in still_as_verified(prefix)[1][0]
    files.verified.write_bytes(good.replace(WHEN.encode(), b"2026-11-01T00:00:00+00:00"))
    assert "from another verify" in still_as_verified(prefix)[1][0]
    files.verified.write_bytes(good)
    assert still_as_verified(prefix) == (True, ())

    cfg = prefix / "pyvenv.cfg"
    text = cfg.read_text(encoding="utf-8")
    python = venv_python_version(prefix)
    assert python is not None
    cfg.write_text(text.replace(python, "3.99.1"), encoding="utf-8")
    assert still_as_verified(prefix) == (False, (f"python {python} -> 3.99.1",))
    cfg.write_text(text, encoding="utf-8")

    record = site / "torch-2.11.0.dist-info" / "RECORD"
    record.write_text(record.read_text(encoding="utf-8") + "torch/new.py,,\n", encoding="utf-8")
    assert still_as_verified(prefix) == (False, ("torch",))  # rewritten by an upgrade


def test_a_failing_verdict_or_no_record_is_never_still_verified(tmp_path: Path,
                                                                state_home: Path) -> None:
    prefix = tmp_path / "vénv"
    make_venv(prefix)
    assert still_as_verified(prefix) == (False, ("no verify record",))
    save_record(prefix, VerifyRecord("sdpa-only", WHEN, fingerprint_of(prefix)))
    assert still_as_verified(prefix) == (False, ("the last verify's verdict was sdpa-only",))
    assert not VenvFiles(prefix).verified.exists()  # the hook's copy: only for 'routing'


def test_check_sees_the_corrupt_arming_copy_that_keeps_the_hook_off(tmp_path: Path) -> None:
    prefix, site, env = verified_venv(tmp_path)
    (site / "sagedoctor-runtime.pth").write_text("import sys\n", encoding="utf-8")  # hooked

    def sd168() -> list[dict]:
        done = run_cli(["check", "sageattention", "--venv", str(prefix), "--json"], env)
        return [f for f in json.loads(done.stdout)["findings"] if f["code"] == "SD168"]

    assert sd168() == []
    VenvFiles(prefix).verified.write_bytes(b"\x00\x01 garbage")
    found = sd168()
    assert len(found) == 1 and found[0]["severity"] == "error"
    assert "arming record" in found[0]["detail"] and "stays off" in found[0]["detail"]
    assert "sagedoctor verify" in found[0]["fix"]


def test_enable_refuses_a_venv_changed_since_the_verify(tmp_path: Path) -> None:
    prefix, site, env = verified_venv(tmp_path)
    hook = site / "sagedoctor-runtime.pth"
    record = site / "torch-2.11.0.dist-info" / "RECORD"
    record.write_text(record.read_text(encoding="utf-8") + "torch/new.py,,\n", encoding="utf-8")
    done = run_cli(["enable", "--venv", str(prefix)], env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "SD930" in done.stderr and "torch" in done.stderr and "sagedoctor verify" in done.stderr
    assert not hook.exists()
    record_passing_verify(prefix, fingerprint_of(prefix), Path(env["HOME"]), WHEN)  # verified
    done = run_cli(["enable", "--venv", str(prefix)], env)
    assert done.returncode == 0, done.stderr
    assert hook.is_file()


def test_two_writers_of_one_record_never_collide(tmp_path: Path) -> None:
    """A fixed `.tmp` name made two writers replace each other's temporary file (one then
    failed, or left half a file): each write has its own, and the file is always whole."""
    path = tmp_path / "records é" / "installed.json"
    payloads = [json.dumps({"writer": n, "pad": "x" * 50_000}).encode() for n in range(4)]
    errors: list[BaseException] = []

    def write(data: bytes) -> None:
        try:
            for _ in range(40):
                write_atomic(path, data)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(p,)) for p in payloads]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert path.read_bytes() in payloads
    assert [p.name for p in path.parent.iterdir()] == ["installed.json"]


def test_a_base_python_patch_upgrade_is_seen_by_the_interpreter_not_pyvenv_cfg(
        tmp_path: Path, state_home: Path) -> None:
    """pyvenv.cfg keeps the version the venv was made with: after the base Python's patch
    upgrade the verify (run by the new interpreter) records 3.11.9 while pyvenv.cfg still
    says 3.11.7. That must not refuse forever; the interpreter binary's stat, recorded by the
    target, is what says whether the base Python changed since."""
    from sagedoctor.runtime.hook import interpreter_stat

    prefix = tmp_path / "app venv é"
    site = make_venv(prefix)
    add_torch(site, TORCH_PY, "2.11.0")
    cfg = prefix / "pyvenv.cfg"
    made_with = venv_python_version(prefix)
    assert made_with is not None
    major_minor = ".".join(made_with.split(".")[:2])
    cfg.write_text(cfg.read_text(encoding="utf-8").replace(made_with, f"{major_minor}.7"),
                   encoding="utf-8")
    base = tmp_path / "base python ü" / "python3"
    base.parent.mkdir()
    base.write_bytes(b"\x7fELF the interpreter")
    fingerprint = {**fingerprint_of(prefix), "python": f"{major_minor}.9",
                   "interpreter": interpreter_stat(str(base))}
    save_record(prefix, VerifyRecord("routing", WHEN, fingerprint))
    assert still_as_verified(prefix) == (True, ())  # was: python 3.11.9 -> 3.11.7, forever

    base.write_bytes(b"\x7fELF the interpreter, upgraded")  # the next patch release
    same, why = still_as_verified(prefix)
    assert not same and why == (f"python {major_minor}.9: {base} was replaced since (an "
                                "upgrade of the base Python)",)
    base.unlink()  # an interpreter that is gone is no longer the one verified
    assert not still_as_verified(prefix)[0]

    # a venv made anew with another X.Y at the same path: pyvenv.cfg says so
    base.write_bytes(b"\x7fELF the interpreter")
    save_record(prefix, VerifyRecord("routing", WHEN, {
        **fingerprint, "interpreter": interpreter_stat(str(base))}))
    assert still_as_verified(prefix) == (True, ())
    cfg.write_text(cfg.read_text(encoding="utf-8").replace(f"{major_minor}.7", "3.99.1"),
                   encoding="utf-8")
    assert still_as_verified(prefix) == (False, (f"python {major_minor}.9 -> 3.99.1",))


def test_a_pyvenv_cfg_that_names_another_python_is_named_not_a_verify_loop(
        tmp_path: Path) -> None:
    """D21 (issue 34): pyvenv.cfg claiming 3.8.0 while the venv runs 3.11: verify passed (it
    runs the interpreter), then enable said SD930 "run verify", forever. The interpreter is
    the one verify ran, unchanged: pyvenv.cfg is what is wrong, and enable says so."""
    import os

    from sagedoctor.runtime.hook import interpreter_stat

    prefix, _site, env = verified_venv(tmp_path)
    python = venv_python_version(prefix)
    assert python is not None
    fingerprint = {**fingerprint_of(prefix), "python": python,
                   "interpreter": interpreter_stat(os.path.realpath(prefix / "bin" / "python"))}
    record_passing_verify(prefix, fingerprint, Path(env["HOME"]), WHEN)
    cfg = prefix / "pyvenv.cfg"
    cfg.write_text(cfg.read_text(encoding="utf-8").replace(python, "3.8.0"), encoding="utf-8")
    done = run_cli(["enable", "--venv", str(prefix)], env)
    assert done.returncode == 1 and "SD930" in done.stderr, done.stderr
    assert f"pyvenv.cfg says Python 3.8.0, but the venv's interpreter is Python {python}" \
        in done.stderr, done.stderr
    fix = done.stderr.split("fix:", 1)[1]
    assert "pyvenv.cfg" in fix and "sagedoctor verify" not in fix, fix
    (_site / "sagedoctor-runtime.pth").write_text("import sys\n", encoding="utf-8")  # hooked
    done = run_cli(["check", "sageattention", "--venv", str(prefix), "--json"], env)
    found = [f for f in json.loads(done.stdout)["findings"] if f["code"] == "SD168"]
    assert len(found) == 1 and "pyvenv.cfg says Python 3.8.0" in found[0]["detail"], found
    assert "pyvenv.cfg" in found[0]["fix"] and "verify" not in found[0]["fix"], found
