"""post-update's pure decisions and its file reads, without torch: the venv's Python from
pyvenv.cfg (venv and uv write it differently), when a rebuild is due, and when the launcher
markers are newer than the last verify."""

from __future__ import annotations

from pathlib import Path

import pytest

from sagedoctor.commands.post_update import PostUpdateOptions, venv_prefix_of
from sagedoctor.decide.checks.apps import launcher_update_findings
from sagedoctor.facts import InvokeAIFacts, VerificationFacts
from sagedoctor.hook import needs_rebuild, unchanged_since_verify
from sagedoctor.state import venv_python_version


@pytest.mark.parametrize(("text", "expected"), [
    ("home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.12.3\n", "3.12.3"),
    ("home = C:\\uv\\python\nimplementation = CPython\nuv = 0.9.0\nversion_info = 3.12.10\n"
     "include-system-site-packages = false\nprompt = invoke\n", "3.12.10"),
    ("home = /usr/bin\n", None),
    ("version = three\n", None),
])
def test_the_venv_python_comes_from_pyvenv_cfg(tmp_path: Path, text: str,
                                               expected: str | None) -> None:
    (tmp_path / "pyvenv.cfg").write_text(text, encoding="utf-8")
    assert venv_python_version(tmp_path) == expected


def test_the_prefix_is_known_without_the_interpreter_only_inside_a_venv(tmp_path: Path) -> None:
    venv = tmp_path / "vénv 1"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("version = 3.12.3\n", encoding="utf-8")
    assert venv_prefix_of(PostUpdateOptions(python=venv / "bin" / "python")) == venv
    assert venv_prefix_of(PostUpdateOptions(venv=venv)) == venv
    # an embedded or base Python (ComfyUI portable's python_embeded): ask the interpreter
    assert venv_prefix_of(PostUpdateOptions(python=tmp_path / "python_embeded" / "python.exe")
                          ) is None


def test_no_record_or_a_failing_one_takes_the_slow_path(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    (tmp_path / "pyvenv.cfg").write_text("version = 3.12.3\n", encoding="utf-8")
    same, why = unchanged_since_verify(tmp_path)
    assert not same and why == "no verify record"


def test_a_fifo_arming_record_takes_the_slow_path_and_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A FIFO at verified.json hung post-update's fast path (issue 20): read unblocked."""
    import os
    import threading

    from sagedoctor.state import VerifyRecord, save_record, venv_record_path

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    venv = tmp_path / "vénv"
    venv.mkdir()
    (venv / "pyvenv.cfg").write_text("version = 3.12.3\n", encoding="utf-8")
    save_record(venv, VerifyRecord("routing", "2026-01-01T00:00:00Z", {"python": "3.12.3"}))
    venv_record_path(venv).unlink()
    os.mkfifo(venv_record_path(venv))
    found: list[tuple[bool, str]] = []
    reader = threading.Thread(target=lambda: found.append(unchanged_since_verify(venv)),
                              daemon=True)
    reader.start()
    reader.join(30)
    assert found, "unchanged_since_verify blocked on the FIFO"
    same, why = found[0]
    assert not same and "is a FIFO, not a file" in why


@pytest.mark.parametrize(("verdict", "crashed", "sage", "expected"), [
    ("broken", False, True, True),  # it no longer imports: rebuild
    (None, True, True, True),  # the self-test died: rebuild
    ("sdpa-only", False, True, False),  # imports; a wrong sageattn() is the plan's business
    ("broken", False, False, False),  # nothing installed to rebuild
])
def test_a_build_that_no_longer_imports_is_rebuilt(verdict: str | None, crashed: bool,
                                                    sage: bool, expected: bool) -> None:
    assert needs_rebuild(verdict, crashed, sage) is expected


def _inv(first_run: str | None, bootstrap: str | None) -> InvokeAIFacts:
    return InvokeAIFacts("C:\\Users\\Ana M\\invokeai", "INVOKEAI_ROOT", True,
                         "C:\\Users\\Ana M\\invokeai\\.venv", None, False,
                         first_run_at=first_run, bootstrap_changed_at=bootstrap)


def test_launcher_markers_newer_than_the_verify_are_warnings_with_the_command() -> None:
    record = VerificationFacts("verified", "routing", "2026-12-01T18:00:00+00:00")
    after, before = "2026-12-03T09:30:00+00:00", "2026-11-30T09:30:00+00:00"
    found = launcher_update_findings(_inv(after, after), record, "windows")
    assert [f.code for f in found] == ["SD187", "SD188"]
    assert found[0].fix == 'sagedoctor post-update --venv "C:\\Users\\Ana M\\invokeai\\.venv"'
    assert launcher_update_findings(_inv(before, before), record, "windows") == []
    assert launcher_update_findings(_inv(None, None), record, "windows") == []
    # no verify at all: .first_run is still worth saying, the bootstrap has nothing to compare
    unverified = VerificationFacts("unverified")
    assert [f.code for f in launcher_update_findings(_inv(after, after), unverified,
                                                     "windows")] == ["SD187"]


def test_a_missing_venv_is_an_error_with_the_fix(tmp_path: Path) -> None:
    from tests.standins import clean_env, run_cli

    done = run_cli(["post-update", "--venv", str(tmp_path / "no such venv")], clean_env(tmp_path))
    assert done.returncode == 1, done.stdout + done.stderr  # as check's SD190 for it
    assert "sagedoctor: error SD9" in done.stderr and "fix:" in done.stderr
