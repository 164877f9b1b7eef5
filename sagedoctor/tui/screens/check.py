"""The check screen: one row per area, filled in as that area's probes finish."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from ...decide.checks import diagnose
from ...decide.findings import AREAS
from ...errors import SagedoctorError
from ...facts import Facts
from ...render.findings import summary_line
from ...render.terminal_text import one_line, printable
from ..model import AreaRow, area_row, failed_row, pending_row

if TYPE_CHECKING:
    from ..app import SagedoctorApp

# Colour only adds to the mark; NO_COLOR turns the whole app monochrome (textual's filter).
MARK_STYLES = {"ok": "bold green", "info": "cyan", "warn": "bold yellow", "error": "bold red",
               "unknown": "magenta", "pending": "dim"}


class CheckScreen(Screen[None]):
    HELP = """\
Check: every area of this machine and its venv, checked at once.
A row fills in when its probes finish:
  ✓ fine   • note   ! warning   ✗ problem   … still checking
Up/Down  select an area; its details and fix show below
Tab      to the details, to scroll a long fix (Tab: back)
c        copy the selected area's fix to the clipboard
p        the install plan     v  verify on the GPU
a        actions (InvokeAI, hook, logs, report)
r        check again          Ctrl+P  command palette
"""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("tab", "details", "Details"),
        Binding("tab", "areas", "Areas"),
        Binding("c", "copy_fix", "Copy fix"),
        Binding("p", "plan", "Plan"),
        Binding("v", "verify", "Verify"),
        Binding("a", "actions", "Actions"),
        Binding("r", "recheck", "Rerun"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, AreaRow] = {a: pending_row(a) for a in AREAS}
        self.done = False
        self.failure: SagedoctorError | None = None  # the check stopped on this

    @property
    def tui(self) -> SagedoctorApp:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="check-source", markup=False)  # a file name may hold "["
        yield DataTable(id="areas", cursor_type="row", zebra_stripes=False)
        with VerticalScroll(id="details"):
            yield Static("", id="detail-text", markup=False)
        yield Static("", id="check-summary", markup=False)
        # At 80 columns the keys fill the footer: Ctrl+P's palette is named in the help.
        yield Footer(show_command_palette=False)

    def on_mount(self) -> None:
        table = self.query_one("#areas", DataTable)
        table.add_column(" ", key="mark", width=1)
        table.add_column("Area", key="area", width=15)
        table.add_column("Result", key="line")
        for area, row in self.rows.items():
            table.add_row(*self._cells(row), key=area)
        table.focus()
        self._start()

    def _start(self) -> None:
        self.done = False
        self.query_one("#check-source", Static).update(
            one_line(f"Checking {self.tui.session.source}…"))
        self.run_check()

    @work(thread=True, exclusive=True, group="check")
    def run_check(self) -> None:
        session = self.tui.session
        try:
            findings = session.check(
                lambda area, facts: self.app.call_from_thread(self._area_done, area, facts))
        except SagedoctorError as exc:
            self.app.call_from_thread(self._failed, exc)
            return
        except Exception as exc:  # a bug: said on the screen, the app stays up
            self.app.call_from_thread(self._failed, SagedoctorError(
                f"internal error: {type(exc).__name__}: {exc}",
                "please report it, with the file or venv that caused it"))
            return
        self.app.call_from_thread(self._all_done, findings)

    def _cells(self, row: AreaRow) -> tuple[Text, str, str]:
        # The line fits the terminal (no sideways scrolling); the details pane has it all.
        room = max(20, self.app.size.width - 26)
        line = row.line if len(row.line) <= room else row.line[:room - 1] + "…"
        return Text(row.mark, style=MARK_STYLES[row.state]), row.title, line

    def _set_row(self, row: AreaRow) -> None:
        self.rows[row.area] = row
        table = self.query_one("#areas", DataTable)
        for key, value in zip(("mark", "area", "line"), self._cells(row), strict=True):
            table.update_cell(row.area, key, value, update_width=True)
        self._show_details()

    def _area_done(self, area: str, facts: Facts) -> None:
        self._set_row(area_row(area, diagnose(facts)))

    def _all_done(self, findings: list[object]) -> None:
        session = self.tui.session
        for area in AREAS:
            self._set_row(area_row(area, session.findings))
        self.done = True
        self.query_one("#check-source", Static).update(one_line(
            f"sagedoctor {session.facts.sagedoctor_version if session.facts else ''} check: "
            f"{session.source}"))
        self.query_one("#check-summary", Static).update(summary_line(session.findings))

    def _failed(self, exc: SagedoctorError) -> None:
        """The error screen: no row is left 'checking…', the error and its fix say why."""
        self.done = True
        self.failure = exc  # before the rows: their details show it
        for area in AREAS:
            if self.rows[area].state == "pending":
                self._set_row(failed_row(area, exc.code))
        self.query_one("#check-source", Static).update(one_line(
            f"Could not check {self.tui.session.source}: error {exc.code}"))
        self.query_one("#check-summary", Static).update(printable(
            f"error {exc.code}: {exc.message}" + (f"\nfix: {exc.fix}" if exc.fix else "")))

    def _selected(self) -> AreaRow:
        table = self.query_one("#areas", DataTable)
        return self.rows[AREAS[max(table.cursor_row, 0)]]

    def _show_details(self) -> None:
        row = self._selected()
        text = row.details()
        if self.failure is not None and not row.findings:  # room for the whole error and fix
            exc = self.failure
            text += "\n" + printable(f"error {exc.code}: {exc.message}"
                                     + (f"\nfix: {exc.fix}" if exc.fix else ""))
        self.query_one("#detail-text", Static).update(text)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Tab's label says where it goes: to the details (to scroll a long fix), or back."""
        if action in ("details", "areas"):
            on_areas = getattr(self.focused, "id", None) == "areas"  # also before mount
            return on_areas == (action == "details")
        return True

    def on_descendant_focus(self) -> None:
        self.refresh_bindings()

    def action_details(self) -> None:
        self.query_one("#details", VerticalScroll).focus()

    def action_areas(self) -> None:
        self.query_one("#areas", DataTable).focus()

    def on_data_table_row_highlighted(self, _event: DataTable.RowHighlighted) -> None:
        self._show_details()

    def action_copy_fix(self) -> None:
        row = self._selected()
        if not row.fix:
            self.notify(f"{row.title}: nothing to fix.")
            return
        self.app.copy_to_clipboard(row.fix)
        self.notify(f"Copied: {row.fix}", title="Fix copied")

    def _ready(self) -> bool:
        if not self.done or self.tui.session.facts is None:
            self.notify("The check is still running.", severity="warning")
            return False
        return True

    def action_plan(self) -> None:
        if self._ready():
            from .plan import PlanScreen

            self.app.push_screen(PlanScreen())

    def action_verify(self) -> None:
        if self._ready():
            from .verify import VerifyScreen

            self.app.push_screen(VerifyScreen())

    def action_actions(self) -> None:
        if self._ready():
            from .actions import ActionsScreen

            self.app.push_screen(ActionsScreen())

    def action_recheck(self) -> None:
        if self.tui.session.preview_only:  # facts from a file: nothing here to look at again
            self.notify("These facts come from a file (--facts): there is nothing on this "
                        "machine to check again.", severity="warning")
            return
        if not self.done:
            self.notify("The check is still running.")
            return
        self.failure = None
        for area in AREAS:
            self._set_row(pending_row(area))
        self.query_one("#check-summary", Static).update("")
        self._start()
