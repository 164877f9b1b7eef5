"""The plan screen: the resolver's Plan, every step with its reason; confirm or go back."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Static

from ...errors import SagedoctorError
from ...plan import Blocked, Plan
from ...render.plan import blocked_headline
from ...render.terminal_text import one_line, printable
from ..model import MARKS, downloads_summary, plan_summary, step_lines

if TYPE_CHECKING:
    from ..app import SagedoctorApp


class PlanScreen(Screen[None]):
    HELP = """\
Plan: what an install would do, step by step, and why.
It is the plan `sagedoctor plan` prints and `install` carries
out; torch is never changed.
Up/Down, PgUp/PgDn  scroll
i                   install (confirm)
Esc                 back to the check, nothing changed
"""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("i", "install", "Install"),
        Binding("escape", "back", "Back"),
    ]

    @property
    def tui(self) -> SagedoctorApp:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("Resolving the plan…", id="plan-head", markup=False)
        with VerticalScroll(id="plan-body"):
            yield Static("", id="plan-steps", markup=False)
        yield Static("", id="plan-changes", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#plan-body").focus()
        self.resolve()

    @work(thread=True, exclusive=True, group="plan")
    def resolve(self) -> None:
        try:
            result = self.tui.session.resolve()
        except SagedoctorError as exc:
            self.app.call_from_thread(self._show_error, exc)
            return
        self.app.call_from_thread(self._show, result)

    def _show_error(self, exc: SagedoctorError) -> None:
        self.refresh_bindings()
        self.query_one("#plan-head", Static).update(
            one_line(f"No plan: error {exc.code}: {exc.message}"))
        self.query_one("#plan-changes", Static).update(one_line(f"fix: {exc.fix}")
                                                        if exc.fix else "")

    def _show(self, result: Plan | Blocked) -> None:
        self.refresh_bindings()  # the footer offers `i Install` only where it can run
        head = self.query_one("#plan-head", Static)
        steps = self.query_one("#plan-steps", Static)
        changes = self.query_one("#plan-changes", Static)
        if isinstance(result, Blocked):
            head.update(blocked_headline(result))
            lines = []
            for f in result.findings:
                lines.append(f"{MARKS[f.severity]} {f.code} {f.title}"
                             + (f": {f.detail}" if f.detail else ""))
                if f.fix:
                    lines.append(f"    fix: {f.fix}")
            steps.update(_shown(lines))
            changes.update("Nothing will be changed. Esc: back to the check.")
            return
        head.update(one_line(f"Plan for {result.prefix} ({result.os}); torch is never changed:"))
        lines = []
        cached = self.tui.session.cached
        for number, step in enumerate(result.steps, 1):
            lines += step_lines(number, step, cached)
        lines += [f"note: {note}" for note in result.notes]
        steps.update(_shown(lines))
        tail = plan_summary(result)
        if result.steps:
            tail += "\n" + downloads_summary(result, cached)
        if self.tui.session.preview_only:
            tail += "\nPreview only: these facts are of another machine."
        elif result.steps:
            tail += "\ni: install now   Esc: back"
        changes.update(printable(tail))

    def action_back(self) -> None:
        self.app.pop_screen()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """`i Install` is offered only for a plan this machine can carry out: not in a
        preview of another machine's facts, not for a blocked plan or one with no steps."""
        if action != "install":
            return True
        result = self.tui.session.plan
        return (isinstance(result, Plan) and bool(result.steps)
                and not self.tui.session.preview_only)

    def action_install(self) -> None:
        result = self.tui.session.plan
        if not isinstance(result, Plan):
            self.notify("There is no plan to carry out.", severity="warning")
            return
        if self.tui.session.preview_only:
            self.notify("These facts describe another machine: the plan is a preview only.",
                        severity="warning")
            return
        if not result.steps:
            self.notify("Nothing to do.")
            return
        from .install import InstallScreen

        self.app.push_screen(InstallScreen(result))


def _shown(lines: list[str]) -> str:
    """Lines holding paths, URLs and titles from outside: each on its own, no escapes."""
    return "\n".join(one_line(line) for line in lines)
