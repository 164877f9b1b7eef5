"""The install screen: execute_plan in a worker thread, its progress as a bar and a live log,
and cancel (the progress callback raises InstallCancelled; the executor stops there)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Footer, Header, Log, ProgressBar, Static

from ... import __version__
from ...install.execute import execute_plan
from ...install.runner import InstallError
from ...resolve import Plan
from ..cancel import InstallCancelled, cancelled_in
from ..model import step_progress

if TYPE_CHECKING:
    from ..app import SagedoctorApp


def _clock_text(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}:{secs:02d}"


class InstallScreen(Screen[None]):
    HELP = """\
Install: the plan, carried out step by step. Downloads and
builds come first; the venv changes only once every wheel
exists and has passed its digest check.
Esc  cancel: the current download or build stops at its next
     event, nothing more is started, and the screen says what
     state the venv is in
v    verify on the GPU (once done)     b  back (once done)
"""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("v", "verify", "Verify"),
        Binding("b", "back", "Back"),
    ]

    def __init__(self, plan: Plan) -> None:
        super().__init__()
        self.plan = plan
        self.cancel_requested = threading.Event()
        self.state = "running"  # running, cancelling, done, cancelled, failed
        self.current = "starting"
        self.started = 0.0
        self.finished_at: float | None = None
        self._worker_thread: int | None = None
        self.changing: list[str] = []  # steps that began changing the venv

    @property
    def tui(self) -> SagedoctorApp:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(f"Installing into {self.plan.prefix}", id="install-state", markup=False)
        yield ProgressBar(total=len(self.plan.steps), show_eta=False, id="install-progress")
        yield Static("", id="install-elapsed", markup=False)
        yield Log(id="install-log", auto_scroll=True)
        yield Footer()

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
            f"{label} {_clock_text(end - self.started)}   step: {self.current}")

    @work(thread=True, exclusive=True, group="install")
    def run_install(self) -> None:
        self._worker_thread = threading.get_ident()
        try:
            execute_plan(self.plan, self._progress, self.tui.session.log_dir, __version__)
        except InstallError as exc:
            self.app.call_from_thread(self._finished, exc)
            return
        except Exception as exc:  # e.g. an unwritable log folder: say so, keep the app up
            error = InstallError(f"the install stopped: {type(exc).__name__}: {exc}",
                                 f"the logs are in {self.tui.session.log_dir}")
            self.app.call_from_thread(self._finished, error)
            return
        self.app.call_from_thread(self._finished, None)

    def _progress(self, message: str) -> None:
        """Called by the executor (and its build heartbeat thread) for each event."""
        if self.cancel_requested.is_set() and threading.get_ident() == self._worker_thread:
            # Only the executor's own thread may raise: a heartbeat thread would just die.
            raise InstallCancelled(self.current)
        self.app.call_from_thread(self._log, message)

    def _log(self, message: str) -> None:
        self.query_one("#install-log", Log).write_line(message)
        found = step_progress(message)
        if found is not None:
            number, _total = found
            self.current = message.split("] ", 1)[-1]
            if not self.current.startswith("preparing: "):
                self.changing.append(self.current)
            self.query_one("#install-progress", ProgressBar).update(progress=number - 1)
        self._tick()

    def _finished(self, exc: InstallError | None) -> None:
        self.tui.install_running = False
        self.finished_at = self.tui.clock()
        state = self.query_one("#install-state", Static)
        log = self.query_one("#install-log", Log)
        bar = self.query_one("#install-progress", ProgressBar)
        if exc is None:
            self.state = "done"
            bar.update(progress=len(self.plan.steps))
            verify = any(s.action == "verify" for s in self.plan.steps)
            state.update(f"Installed into {self.plan.prefix}."
                         + (" v: verify on the GPU now." if verify else ""))
            log.write_line("done: every step finished; nothing outside the plan changed")
        elif cancelled_in(exc):
            self.state = "cancelled"
            touched = ("The venv was not touched: the cancel came before the first change."
                       if not self.changing else
                       "Steps that had begun to change the venv: " + "; ".join(self.changing))
            state.update(f"Cancelled. {touched}")
            log.write_line(f"cancelled: {exc.message}")
            log.write_line(f"executor: {exc.fix}")
            log.write_line(touched)
        else:
            self.state = "failed"
            state.update(f"Failed: error {exc.code}: {exc.message}")
            log.write_line(f"failed: {exc.message}")
            if exc.fix:
                log.write_line(f"fix: {exc.fix}")
            log.write_line(f"logs: {self.tui.session.log_dir}")
        self._tick()

    def action_cancel(self) -> None:
        if self.state == "running":
            self.state = "cancelling"
            self.cancel_requested.set()
            self.query_one("#install-state", Static).update(
                "Cancelling: the current step stops at its next event; nothing more is "
                "started.")
            self.query_one("#install-log", Log).write_line("cancel requested")
        elif self.state != "cancelling":
            self.action_back()

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
