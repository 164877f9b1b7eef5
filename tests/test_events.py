"""Progress as typed events (sagedoctor/events.py): step_lines() is the one text form (what
the CLI prints and the log keeps, unchanged from the prose the executor used to say), and a
real install emits the events themselves, in order, for the TUI to read without parsing."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sagedoctor.events import (
    BuildFinished,
    BuildHeartbeat,
    BuildStarted,
    CacheEntryDamaged,
    DigestChecked,
    DownloadFinished,
    DownloadProgress,
    DownloadStarted,
    Event,
    LogUnwritable,
    Note,
    RollbackFinished,
    RollbackStarted,
    SmokeResult,
    SmokeStarted,
    StepFinished,
    StepStarted,
    step_lines,
)
from sagedoctor.install.execute import Executor
from sagedoctor.plan import Step
from tests.test_install_kit import fake_source, plan, settings_for, torch_venv


@pytest.mark.parametrize(("event", "lines"), [
    (StepStarted(2, 4, "Install x", preparing=True), ("[2/4] preparing: Install x",)),
    (StepStarted(3, 4, "Install x"), ("[3/4] Install x",)),
    (StepFinished(3, 4, "Install x"), ()),
    (DownloadStarted("a.whl", "https://h/a.whl"), ("downloading https://h/a.whl",)),
    (DownloadProgress("a.whl", 3 << 20, 12 << 20, 15.4, report=True),
     ("downloading a.whl: 3.0 MiB of 12.0 MiB (25%), 15 s",)),
    (DownloadProgress("a.whl", 3 << 20, None, 15.4, report=True),
     ("downloading a.whl: 3.0 MiB, 15 s",)),
    (DownloadProgress("a.whl", 1, 2, 0.1), ()),  # a byte count: the TUI's bar only
    (DownloadFinished("a.whl", 5 << 19, 1.25), ("downloaded a.whl: 2.5 MiB in 1.2 s",)),
    (DigestChecked("ab" * 32, "matches the index"),
     (f"sha256 {'ab' * 32} (matches the index; stored in the cache)",)),
    (BuildStarted((("MAX_JOBS", "2"), ("NVCC_THREADS", "1")), 20, "/l/x.log"),
     ("building: MAX_JOBS=2 NVCC_THREADS=1 C++20 (log: /l/x.log)",)),
    (BuildStarted((("MAX_JOBS", "2"),), None, "/l/x.log"),
     ("building: MAX_JOBS=2 (log: /l/x.log)",)),
    (BuildHeartbeat(30.2, "x" * 200), (f"still building (30 s): {'x' * 120}",)),
    (BuildHeartbeat(15.0, ""), ("still building (15 s)",)),
    (BuildFinished("s-2.2.0.whl", 61.6, "; peak 1.0 GiB"),
     ("built s-2.2.0.whl in 62 s; peak 1.0 GiB",)),
    (SmokeStarted(), ("smoke check: sageattn() against SDPA on each GPU",)),
    (SmokeResult(True, "2 GPUs ok"), ("smoke check passed: 2 GPUs ok",)),
    (SmokeResult(False, "wrong on GPU 0"), ()),  # the error that follows says it
    (RollbackStarted("boom"), ("rolling back: boom",)),
    (RollbackFinished("the venv is as before"), ("the venv is as before",)),
    (CacheEntryDamaged("f.whl", "it cannot be read (Permission denied)"),
     ("f.whl in the download cache is damaged: it cannot be read (Permission denied); removed "
      "it, so it is downloaded afresh",)),
    (LogUnwritable("/l/x.log", "No space left on device"),
     ("the log /l/x.log cannot be written (No space left on device); going on without it",)),
    (Note("log: /x"), ("log: /x",)),
])
def test_step_lines_is_the_text_of_each_event(event: Event, lines: tuple[str, ...]) -> None:
    assert step_lines(event) == lines


def test_events_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        StepStarted(1, 2, "x").number = 3  # type: ignore[misc]


def test_a_source_build_install_emits_typed_events_and_their_text(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAGEDOCTOR_SMOKE_DEVICE", "cpu")  # the stand-in kernels run on the CPU
    python, _site = torch_venv(tmp_path / "venv")
    source = fake_source(tmp_path / "src")
    step = Step("build-from-source", "Build", "why", ("sageattention",),
                build=settings_for(str(source)))
    text: list[str] = []
    events: list[Event] = []
    Executor(plan(python, step), text.append, tmp_path / "work", tmp_path / "logs",
             cache_dir=tmp_path / "cache", state_root=tmp_path / "state",
             on_event=events.append).run("0.1.0")
    # the text is exactly the events' rendering, nothing else
    assert text == [line for e in events for line in step_lines(e)]
    kinds = [type(e) for e in events if not isinstance(e, Note)]
    assert kinds == [StepStarted, BuildStarted, BuildFinished, StepStarted, StepFinished,
                     SmokeStarted, SmokeResult]
    started = [e for e in events if isinstance(e, StepStarted)]
    assert [(s.number, s.total, s.preparing) for s in started] == [(1, 1, True), (1, 1, False)]
    smoke = next(e for e in events if isinstance(e, SmokeResult))
    assert smoke.passed


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (ENOSPC)")
def test_an_event_only_install_gets_every_line_as_an_event(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The flows pass no text callback: every line the CLI prints (the unwritable log's
    included) reaches them as an event, in order."""
    from tests.test_install_kit import sage_wheel, serving
    from tests.test_install_steps import wheel_step

    monkeypatch.setenv("SAGEDOCTOR_SMOKE_DEVICE", "cpu")
    python, _site = torch_venv(tmp_path / "venv")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "full.log").symlink_to("/dev/full")
    events: list[Event] = []
    with serving() as site:
        step = wheel_step(site, sage_wheel(tmp_path / "w"))
        Executor(plan(python, step), None, tmp_path / "work", logs,
                 cache_dir=tmp_path / "cache", state_root=tmp_path / "state",
                 github_api="http://127.0.0.1:9", log_name="full.log",
                 on_event=events.append).run("0.1.0")
    unwritable = [e for e in events if isinstance(e, LogUnwritable)]
    assert unwritable == [LogUnwritable(str(logs / "full.log"), "No space left on device")]
    # said before the line that found the disk full (the run's first), then never again
    assert events[:2] == [unwritable[0], Note(f"log: {logs / 'full.log'}")]
    assert [type(e) for e in events if not isinstance(e, (Note, DownloadProgress))][1:] == [
        StepStarted, DownloadStarted, DownloadFinished, DigestChecked, StepStarted,
        StepFinished, SmokeStarted, SmokeResult]
