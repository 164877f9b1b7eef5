"""A yes/no question over the current screen, answered by one key."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str, *, yes: str = "y  yes", no: str = "n  no") -> None:
        super().__init__()
        self.question = question
        self.keys = f"{yes}     {no}"

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Static(self.question, id="confirm-question", markup=False)
            yield Static(self.keys, id="confirm-keys", markup=False)

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
