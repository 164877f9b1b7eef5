"""The install screen: execute_plan in a worker thread, its progress as bars (steps; the
current download's bytes with rate and elapsed, or the build's elapsed time) and a live log,
and cancel: the event callback raises InstallCancelled and the executor stops and rolls
back; a running build is stopped only once the user confirms. Afterwards the venv's files
are hashed again and compared with a snapshot taken before the run."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Footer, Header, Log, ProgressBar, Static

from ... import __version__
from ...errors import SagedoctorError
from ...events import (
    BuildFinished,
    BuildStarted,
    DigestChecked,
    DownloadProgress,
    DownloadStarted,
    Event,
    StepStarted,
    step_lines,
)
from ...install.execute import execute_plan
from ...install.runner import InstallError
from ...install.transaction import describe, files_match, snapshot_differences, take_snapshot
from ...plan import Plan
from ...render.terminal_text import printable
from ..cancel import InstallCancelled, cancelled_in
from ..model import clock_text, tilde, transfer_line
from .confirm import ConfirmScreen

if TYPE_CHECKING:
    from ..app import SagedoctorApp


PUSH_EVERY_S = 0.1  # a download's bytes reach the screen at most this often


class InstallScreen(Screen[None]):
    HELP = """\
Install: the plan, carried out step by step. Downloads and
builds come first; the venv changes only once every wheel
exists and has passed its digest check. The second bar is the
current download (bytes, rate, time) or build (time).
Esc  cancel: a download stops at once, a build after you
     confirm; what was changed is rolled back, and the screen
     says what state the venv is in (its files hashed again)
v    verify on the GPU (once done)     b  back (once done)
"""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("escape", "leave", "Back", show=False),  # once the install has ended
        Binding("v", "verify", "Verify"),
        Binding("b", "back", "Back"),
    ]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The footer offers what works now: `esc Cancel` while the install runs, `v Verify`
        only after one that finished (a failed or cancelled one offered both)."""
        if action == "cancel":
            return self.state in ("running", "cancelling")
        if action == "leave":
            return self.state not in ("running", "cancelling")
        if action == "verify":
            return self.state == "done"
        return True

    def action_leave(self) -> None:
        self.action_back()

    def __init__(self, plan: Plan, *, log_name: str | None = None) -> None:
        super().__init__()
        self.plan = plan
        self.log_name = log_name  # None: the executor's install-<time>-<pid>.log
        self.cancel_requested = threading.Event()
        self.state = "running"  # running, cancelling, done, cancelled, failed
        self.current = "starting"
        self.started = 0.0
        self.finished_at: float | None = None
        self._worker_thread: int | None = None
        self.changing: list[str] = []  # steps that began changing the venv
        self.stop_build = threading.Event()  # set once the user confirms stopping a build
        self.build_started: float | None = None  # the build's start (tui clock), while it runs
        self.transfer: tuple[str, int, int | None, float] | None = None  # name, got, size, t0
        self._pushed = 0.0
        self.venv_check = ""  # what the hashes said after a cancel or failure
        self.downloading = False
        self._cancel_raised = False
        self.built = False  # a build ran (and ended)
        self.exit_code_when_done: int | None = None  # a signal asked the app to end

    @property
    def tui(self) -> SagedoctorApp:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(self._short(f"Installing into {self.plan.prefix}"), id="install-state",
                     markup=False)
        yield ProgressBar(total=len(self.plan.steps), show_eta=False, id="install-progress")
        yield Static("", id="install-elapsed", markup=False)
        with Horizontal(id="transfer"):
            yield ProgressBar(total=1, show_eta=False, id="transfer-bar")
            yield Static("no download or build yet", id="transfer-text", markup=False)
        yield Log(id="install-log", auto_scroll=True)
        yield Footer()

    def _short(self, text: str) -> str:
        # Every line here names paths, URLs or a tool's output: shown without escapes.
        text = printable(text)
        return tilde(text, str(Path.home())) if os.name == "posix" else text

    def on_mount(self) -> None:
        self.started = self.tui.clock()
        self._tick()
        self.set_interval(1.0, self._tick)
        self.tui.install_running = True
        self.query_one("#install-log", Log).focus()
        self.run_install()

    def _tick(self) -> None:
        end = self.finished_at if self.finished_at is not None else self.tui.clock()
        label = "took" if self.finished_at is not None else "elapsed"
        self.query_one("#install-elapsed", Static).update(
            f"{label} {clock_text(end - self.started)}   step: {self.current}")
        if self.transfer is not None and self.finished_at is None and self.downloading:
            self._show_transfer()  # a stalled download shows its count and a falling rate
        if self.build_started is not None:
            self.query_one("#transfer-text", Static).update(
                f"building  {clock_text(end - self.build_started)}  (output in the log file)")

    @work(thread=True, exclusive=True, group="install")
    def run_install(self) -> None:
        self._worker_thread = threading.get_ident()
        before = self._snapshot()
        try:
            execute_plan(self.plan, None, self.tui.session.log_dir, __version__,
                         on_event=self._event, cancel=self.stop_build,
                         log_name=self.log_name)
        except SagedoctorError as exc:  # the executor's, or a full disk (SD922)
            self.venv_check = self._compare(before)
            self.app.call_from_thread(self._finished, exc)
            return
        except Exception as exc:  # e.g. an unwritable log folder: say so, keep the app up
            error = InstallError(f"the install stopped: {type(exc).__name__}: {exc}",
                                 f"the logs are in {self.tui.session.log_dir}")
            self.venv_check = self._compare(before)
            self.app.call_from_thread(self._finished, error)
            return
        self.app.call_from_thread(self._finished, None)

    def _snapshot(self) -> dict[str, Any] | None:
        """The sha256 of every file of the distributions the plan touches (torch: its RECORD),
        as the transaction takes it, to prove the state after a cancel or failure."""
        try:
            return take_snapshot(Path(self.plan.python), self.plan.changed_distributions)
        except InstallError:
            return None

    def _compare(self, before: dict[str, Any] | None) -> str:
        after = self._snapshot() if before is not None else None
        if before is None or after is None:
            return "The venv's files could not be read to check them."
        differences = snapshot_differences(before, after)
        if differences:
            return "The venv differs from before: " + "; ".join(differences)
        return (f"Checked: the venv is as before ({describe(before)}); "
                f"{files_match(before)} their sha256 from before.")

    def _event(self, event: Event) -> None:
        """Each event, from the executor and its build heartbeat thread: its text
        (events.step_lines) a line of the log pane, its data the bars and the current step."""
        for line in step_lines(event):
            if self._should_stop():
                raise InstallCancelled(self.current)
            self.app.call_from_thread(self._log, line)
        if isinstance(event, DownloadProgress):
            self._bytes(event.name, event.received, event.size)
            return
        if self._should_stop():
            raise InstallCancelled(self.current)
        if isinstance(event, (StepStarted, BuildStarted, BuildFinished, DownloadStarted,
                              DigestChecked)):
            self.app.call_from_thread(self._show, event)

    def _should_stop(self) -> bool:
        """Raise the cancel once, in the executor's own thread (a heartbeat thread would just
        die): every later event, the rollback's own included, must go through."""
        if (self.cancel_requested.is_set() and not self._cancel_raised
                and threading.get_ident() == self._worker_thread):
            self._cancel_raised = True
            return True
        return False

    def _bytes(self, name: str, received: int, size: int | None) -> None:
        """Called by the download as its body arrives (in the executor's thread)."""
        if self._should_stop():
            raise InstallCancelled(f"the download of {name}")
        if self.transfer is None or self.transfer[0] != name or received == 0:
            self.transfer = (name, received, size, self.tui.clock())
        else:
            self.transfer = (name, received, size, self.transfer[3])
        now = time.monotonic()
        if received == 0 or received == size or now - self._pushed >= PUSH_EVERY_S:
            self._pushed = now
            self.app.call_from_thread(self._show_transfer)

    def _show_transfer(self) -> None:
        if self.transfer is None:
            return
        _name, received, size, began = self.transfer
        bar = self.query_one("#transfer-bar", ProgressBar)
        bar.update(total=size if size else None, progress=received)
        self.query_one("#transfer-text", Static).update(
            transfer_line(received, size, self.tui.clock() - began))

    def _log(self, line: str) -> None:
        self.query_one("#install-log", Log).write_line(self._short(line))
        self._tick()

    def _show(self, event: Event) -> None:
        if isinstance(event, StepStarted):
            self.current = f"preparing: {event.title}" if event.preparing else event.title
            if not event.preparing:
                self.changing.append(self.current)
            self.query_one("#install-progress", ProgressBar).update(progress=event.number - 1)
        elif isinstance(event, BuildStarted):
            self.build_started = self.tui.clock()
            self.query_one("#transfer-bar", ProgressBar).update(total=None, progress=0)
        elif isinstance(event, BuildFinished) and self.build_started is not None:
            self._build_ended(f"built in {clock_text(self.tui.clock() - self.build_started)}")
        elif isinstance(event, DownloadStarted):
            self.downloading = True
        elif isinstance(event, DigestChecked):
            self.downloading = False
            self._show_transfer()  # the last bytes, whatever the throttle held back
        self._tick()

    def _build_ended(self, text: str) -> None:
        self.build_started = None
        self.built = True
        self.query_one("#transfer-bar", ProgressBar).update(total=1, progress=1)
        self.query_one("#transfer-text", Static).update(text)

    def _finished(self, exc: SagedoctorError | None) -> None:
        self.tui.install_running = False
        self.finished_at = self.tui.clock()
        if self.build_started is not None:
            self._build_ended("the build was stopped" if self.stop_build.is_set()
                              else "the build did not finish")
        elif self.transfer is None and not self.built:
            self.query_one("#transfer-bar", ProgressBar).display = False
            self.query_one("#transfer-text", Static).update("nothing was downloaded or built")
        state = self.query_one("#install-state", Static)
        log = self.query_one("#install-log", Log)
        bar = self.query_one("#install-progress", ProgressBar)
        if exc is None:
            self.state = "done"
            bar.update(progress=len(self.plan.steps))
            verify = any(s.action == "verify" for s in self.plan.steps)
            state.update(self._short(f"Installed into {self.plan.prefix}."
                                     + (" v: verify on the GPU now." if verify else "")))
            log.write_line("done: every step finished; nothing outside the plan changed")
        elif cancelled_in(exc) or self.cancel_requested.is_set():
            self.state = "cancelled"
            touched = ("The venv was not touched: the cancel came before the first change."
                       if not self.changing else
                       "Rolled back the steps that had begun to change the venv: "
                       + "; ".join(self.changing) + ".")
            state.update(self._short(f"Cancelled. {touched} {self.venv_check}"))
            log.write_line(self._short(f"cancelled: {exc.message}"))
            log.write_line(self._short(f"executor: {exc.fix}"))
            log.write_line(self._short(touched))
            log.write_line(self._short(self.venv_check))
        else:
            self.state = "failed"
            state.update(self._short(f"Failed: error {exc.code}: {exc.message}"))
            log.write_line(self._short(f"failed: {exc.message}"))
            if exc.fix:
                log.write_line(self._short(f"fix: {exc.fix}"))
            log.write_line(self._short(self.venv_check))
            log.write_line(self._short(f"logs: {self.tui.session.log_dir}"))
        self._tick()
        self.refresh_bindings()
        if self.exit_code_when_done is not None:
            self.app.exit(return_code=self.exit_code_when_done)

    def stop_for_signal(self, name: str, code: int) -> None:
        """SIGHUP or SIGTERM: Esc -> y without asking (nobody is there to answer); the app
        exits once the install has stopped and rolled back."""
        self.exit_code_when_done = code
        if isinstance(self.app.screen, ConfirmScreen):
            self.app.pop_screen()  # the question Esc asked is moot
        self.query_one("#install-log", Log).write_line(f"{name}: cancelling the install")
        self._cancel()
        self.stop_build.set()  # a running build is stopped at once

    def action_cancel(self) -> None:
        if self.state == "running" and self.build_started is not None:
            self.app.push_screen(self.stop_build_question(), self._confirmed)
        elif self.state == "running":
            self._cancel()
        elif self.state != "cancelling":
            self.action_back()

    def stop_build_question(self) -> ConfirmScreen:
        began = self.build_started if self.build_started is not None else self.tui.clock()
        ran = clock_text(self.tui.clock() - began)
        return ConfirmScreen(
            f"A build is running ({ran} so far). Stop it and cancel the install?\n"
            "The build's work is lost; the venv has not been changed yet, and what the "
            "install changed is rolled back.", yes="y  stop the build", no="n  keep building")

    def _confirmed(self, stop: bool | None) -> None:
        if stop and self.state == "running":
            self._cancel()
            self.stop_build.set()
            self.query_one("#transfer-text", Static).update("stopping the build…")

    def _cancel(self) -> None:
        if self.state == "running":
            self.state = "cancelling"
            self.cancel_requested.set()
            self.query_one("#install-state", Static).update(
                "Cancelling: the current step stops at its next event; nothing more is "
                "started.")
            self.query_one("#install-log", Log).write_line("cancel requested")

    def action_back(self) -> None:
        if self.state in ("running", "cancelling"):
            self.notify("The install is running: Esc cancels it.", severity="warning")
            return
        self.app.pop_screen()

    def action_verify(self) -> None:
        if self.state != "done":
            self.notify("Verify comes after a finished install.", severity="warning")
            return
        from .verify import VerifyScreen

        self.app.push_screen(VerifyScreen())
