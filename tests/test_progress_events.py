"""The lock's, the recovery's, the rollback's and InvokeAI's edit progress as typed events
(sagedoctor/events.py): emitted as data, and their text (step_lines) is the lines the CLI
printed before they were events."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from sagedoctor.events import (
    BuildStopped,
    ConfigEdited,
    Event,
    FileRemoved,
    FileRestored,
    LockTakenOver,
    Note,
    NothingToUndo,
    RecoveryStarted,
    WorkFolderRemoved,
    as_lines,
    step_lines,
)
from sagedoctor.install.lock import venv_lock
from sagedoctor.install.transaction import Journal, recover_interrupted, restore_edited_files

SHA = "0123456789abcdef" * 4


def test_each_new_event_says_the_line_the_cli_printed() -> None:
    assert [line for event in (
        LockTakenOver(41, running=False), LockTakenOver(42, running=True),
        RecoveryStarted(43), RecoveryStarted(None), BuildStopped(44),
        WorkFolderRemoved("/tmp/sagedoctor-x"), NothingToUndo(), FileRemoved("/r/invokeai.yaml"),
        FileRestored("/r/invokeai.yaml", SHA),
        ConfigEdited("/r/invokeai.yaml", (("attention_type", "sage"),), "InvokeAI 6.9",
                     "/r/invokeai.yaml.bak"),
        ConfigEdited("/r/invokeai.yaml", (("a", "1"), ("b", "2")), "InvokeAI 6.9", None))
        for line in step_lines(event)] == [
        "taking over the install lock of pid 41 (no longer running)",
        "taking over the install lock of pid 42 (still running, unlocked)",
        "an earlier install (pid 43) was interrupted; recovering before anything else",
        "an earlier install (pid None) was interrupted; recovering before anything else",
        "stopped its build (process group 44)",
        "removed its temporary folder /tmp/sagedoctor-x",
        "it had not changed the venv yet",
        "removed /r/invokeai.yaml (the install had created it)",
        "restored /r/invokeai.yaml (sha256 0123456789ab..., mode, owner and group as before "
        "the install)",
        "set attention_type: sage in /r/invokeai.yaml (checked by InvokeAI 6.9; backup "
        "/r/invokeai.yaml.bak)",
        "set a: 1, b: 2 in /r/invokeai.yaml (checked by InvokeAI 6.9; backup none: the file "
        "is new)"]


def test_as_lines_hands_each_events_text_to_a_text_caller() -> None:
    said: list[str] = []
    emit = as_lines(said.append)
    emit(Note("one"))
    emit(NothingToUndo())
    assert said == ["one", "it had not changed the venv yet"]


def dead_pid() -> int:
    done = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
    return int(done.stdout)


def test_the_lock_of_a_dead_holder_is_taken_over_as_an_event(tmp_path: Path) -> None:
    folder, prefix = tmp_path / "state", tmp_path / "venv"
    folder.mkdir()
    gone = dead_pid()
    (folder / "install.pid").write_text(str(gone), encoding="utf-8")
    events: list[Event] = []
    with venv_lock(folder, prefix, events.append):
        assert (folder / "install.pid").read_text(encoding="utf-8") == str(os.getpid())
    assert events == [LockTakenOver(gone, running=False)]


def test_a_journal_killed_before_its_changes_is_recovered_as_events(tmp_path: Path) -> None:
    folder, work = tmp_path / "state", tmp_path / "old work"
    folder.mkdir()
    work.mkdir()
    (folder / "journal.json").write_text(json.dumps(
        {"pid": 4242, "work": str(work), "phase": "preparing", "boot": "an earlier boot",
         "build_pgid": 4242}), encoding="utf-8")
    events: list[Event] = []
    assert recover_interrupted(folder, events.append)
    assert events == [RecoveryStarted(4242), WorkFolderRemoved(str(work)), NothingToUndo()]
    assert not work.exists() and not Journal(folder).exists()
    assert not recover_interrupted(folder, events.append)  # nothing left: no event
    assert len(events) == 3


def test_restoring_edited_files_reports_each_as_an_event(tmp_path: Path) -> None:
    import hashlib

    created, edited, backup = tmp_path / "new.yaml", tmp_path / "invokeai.yaml", tmp_path / "b"
    created.write_text("made by the install", encoding="utf-8")
    backup.write_text("the user's", encoding="utf-8")
    edited.write_text("edited", encoding="utf-8")
    before = hashlib.sha256(b"the user's").hexdigest()
    events: list[Event] = []
    count = restore_edited_files([
        {"path": str(edited), "backup": str(backup), "sha256_before": before, "meta": None},
        {"path": str(created), "sha256_before": None}], events.append)
    assert count == 2
    assert events == [FileRemoved(str(created)), FileRestored(str(edited), before)]
    assert not created.exists() and edited.read_text(encoding="utf-8") == "the user's"
