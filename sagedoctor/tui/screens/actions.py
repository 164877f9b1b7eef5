"""The actions screen: SageAttention on or off in InvokeAI, the start-up hook on or off, the
log folder, a JSON report. Switches run in a worker (InvokeAI's loader proves each edit)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Footer, Header, Input, OptionList, Static
from textual.widgets.option_list import Option

from ...errors import SagedoctorError
from ...flows.enable import EnableOptions, disable_hook, enable_hook
from ...hook import hook_on
from ...render.terminal_text import printable
from ..invokeai_switch import state_line

if TYPE_CHECKING:
    from ..app import SagedoctorApp

REPORT_NAME = "sagedoctor-report.json"


class ActionsScreen(Screen[None]):
    HELP = """\
Actions: Up/Down choose, Enter runs the highlighted one.
InvokeAI on/off  its own attention_backend setting where the
         release has one (invokeai.yaml, backed up, checked by
         InvokeAI's loader), else the start-up hook; says which
Enable   the runtime for every Python of the target venv (a
         start-up hook; needs a passing verify)
Disable  removes the hook again
Report   writes facts and findings (as `check --json` does)
         to the file in the box: edit it, then Enter; attach
         that file to a bug report
Esc      back
"""
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "back", "Back")]
    busy = False

    @property
    def tui(self) -> SagedoctorApp:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(self._target_line(), id="actions-target", markup=False)
        yield OptionList(
            Option("Enable SageAttention in InvokeAI", id="invokeai-on"),
            Option("Disable SageAttention in InvokeAI", id="invokeai-off"),
            Option("Enable the start-up hook (route attention where verified)", id="enable"),
            Option("Disable the start-up hook", id="disable"),
            Option("Show the log folder", id="logs"),
            Option("Save a JSON report for a bug report", id="report"),
            id="actions-list")
        yield Input(REPORT_NAME, id="report-path",
                    placeholder="where to save the report")
        yield Static("", id="action-result", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#actions-list", OptionList).focus()

    def _target_line(self) -> str:
        target = self.tui.session.target
        if target is None:
            return ("No venv of this machine is selected (facts from a file): only the "
                    "report can be saved.")
        state = "on" if hook_on(target) else "off"
        facts = self.tui.session.facts
        invokeai = state_line(target, facts.invokeai if facts else None, facts,
                              self.tui.session.options.use)
        return printable(f"Target venv: {target.prefix} (start-up hook: {state})\n{invokeai}")

    def _say(self, text: str) -> None:
        self.query_one("#action-result", Static).update(printable(text))
        self.query_one("#actions-target", Static).update(self._target_line())

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        choice = event.option.id
        if choice == "logs":
            self._say(f"Logs are kept in {self.tui.session.log_dir}")
        elif choice == "report":
            self.query_one("#report-path", Input).focus()
            self._say("Edit the file name if you like, then press Enter to save.")
        elif choice in ("enable", "disable", "invokeai-on", "invokeai-off"):
            if self.tui.session.target is None:
                self._say("There is no venv of this machine to change (facts from a file).")
            elif self.busy:
                self._say("Still working on the last one…")
            else:
                self.busy = True
                self._say("Working…")
                self._switch(choice)

    @work(thread=True, exclusive=True, group="actions")
    def _switch(self, choice: str) -> None:
        session = self.tui.session
        try:
            if choice.startswith("invokeai-"):
                said = session.switch_invokeai(choice == "invokeai-on")
            else:
                target = session.target
                assert target is not None
                said = (enable_hook(EnableOptions(target)) if choice == "enable"
                        else disable_hook(target)).message
        except SagedoctorError as exc:
            said = f"error {exc.code}: {exc.message}" + (f"\nfix: {exc.fix}" if exc.fix
                                                         else "")
        self.app.call_from_thread(self._done, said)

    def _done(self, said: str) -> None:
        self.busy = False
        self._say(said)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        path = Path(event.value).expanduser().absolute()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(self.tui.session.report_json(), encoding="utf-8")
        except OSError as exc:
            self._say(f"Could not write {path}: {exc.strerror or exc}")
            return
        self._say(f"Saved the report to {path}")
        self.query_one("#actions-list", OptionList).focus()

    def action_back(self) -> None:
        self.app.pop_screen()
