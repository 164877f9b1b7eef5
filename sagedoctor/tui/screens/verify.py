"""The verify screen: the self-test's key results, a table per GPU, and a plain verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from ...errors import SagedoctorError
from ...render.terminal_text import one_line, printable
from ...verify import progress_line
from ..model import RESULT_COLUMNS, by_gpu, result_cells, verdict_line
from ..session import VerifyShown

if TYPE_CHECKING:
    from ..app import SagedoctorApp


class VerifyScreen(Screen[None]):
    HELP = """\
Verify: the runtime's self-test in the target venv. Each kernel
is checked against PyTorch SDPA (cosine, relative L2 error) and
timed over a sweep of sequence lengths.
vs SDPA  its best speed-up over PyTorch's attention
from     the length from which it is faster: only longer
         sequences go to SageAttention; never: SDPA stays
Up/Down  scroll     Esc  back
"""
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "back", "Back")]

    @property
    def tui(self) -> SagedoctorApp:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("Running the self-test on the GPU (under a minute)…", id="verdict",
                     markup=False)
        yield VerticalScroll(id="verify-body")
        yield Static("", id="verify-notes", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#verify-body").focus()
        self.run_verify()

    @work(thread=True, exclusive=True, group="verify")
    def run_verify(self) -> None:
        try:
            shown = self.tui.session.verify(progress=self._progress_from_thread)
        except SagedoctorError as exc:
            self.app.call_from_thread(self._failed, exc)
            return
        self.app.call_from_thread(self._show, shown)

    def _progress_from_thread(self, data: dict[str, Any]) -> None:
        line = one_line(f"Running the self-test on the GPU: {progress_line(data)}")
        self.app.call_from_thread(self.query_one("#verdict", Static).update, line)

    def _failed(self, exc: SagedoctorError) -> None:
        self.query_one("#verdict", Static).update(one_line(f"Could not verify: {exc.message}"))
        self.query_one("#verify-notes", Static).update(one_line(f"fix: {exc.fix}")
                                                        if exc.fix else "")

    def _show(self, shown: VerifyShown) -> None:
        self.query_one("#verdict", Static).update(
            printable(verdict_line(shown.verdict, shown.results,
                                   shown.report.get("error"))))
        body = self.query_one("#verify-body", VerticalScroll)
        for label, rows in by_gpu(shown.results):
            body.mount(Static(one_line(label), classes="gpu-label", markup=False))
            table: DataTable[str] = DataTable(cursor_type="none", classes="gpu-table")
            body.mount(table)
            table.add_columns(*RESULT_COLUMNS)
            for r in rows:
                table.add_row(*(one_line(cell) for cell in result_cells(r)))
        notes = []
        if shown.source:
            notes.append(f"report: {shown.source}")
        if shown.calibration_path:
            notes.append(f"calibration written to {shown.calibration_path}")
        if shown.verdict == "routing" and not shown.source:
            notes.append("Back on the check screen, a: actions switches the start-up hook on")
        self.query_one("#verify-notes", Static).update("\n".join(one_line(n) for n in notes))

    def action_back(self) -> None:
        self.app.pop_screen()
