"""The help overlay: this screen's keys and what each stage does."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

# One line per paragraph: the overlay wraps it at its own width (a hard break at 80 columns
# left "selects," alone on a line).
GENERAL = (
    "Every screen works with the keyboard alone: arrows or Tab move, Enter selects, Esc goes "
    "back, ? opens this help, q or Ctrl+C quits (not while an install runs). The footer "
    "always lists the keys of the screen you are on.\n")


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,q", "dismiss", "Close", key_display="Esc")]

    def __init__(self, screen_help: str) -> None:
        super().__init__()
        self.screen_help = screen_help

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static("Help", id="help-title")
            yield Static(self.screen_help.strip() + "\n\n" + GENERAL, id="help-text",
                         markup=False)

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(None)
