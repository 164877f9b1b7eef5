"""The Textual app: one screen per stage, pushed in order check -> plan -> install -> verify.
Styles live in sagedoctor.tcss; every long call runs in a worker thread."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import ClassVar

from textual.app import App
from textual.binding import Binding, BindingType

from .screens.check import CheckScreen
from .screens.help import HelpScreen
from .session import Session, TuiOptions


class SagedoctorApp(App[int]):
    CSS_PATH = "sagedoctor.tcss"
    TITLE = "sagedoctor"
    SUB_TITLE = "SageAttention, installed correctly and proven"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("q", "quit_app", "Quit"),
    ]

    def __init__(self, options: TuiOptions, *, clock: Callable[[], float] = time.monotonic,
                 session: Session | None = None) -> None:
        super().__init__()
        self.session = session or Session(options)
        self.clock = clock  # tests pass a fixed clock so screenshots do not change
        self.install_running = False

    def on_mount(self) -> None:
        self.push_screen(CheckScreen())

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(getattr(self.screen, "HELP", "")))

    async def action_quit(self) -> None:
        self.action_quit_app()  # ctrl+q too: never walk away from a running install

    def action_quit_app(self) -> None:
        if self.install_running:
            self.notify("An install is running: cancel it first (Esc), then quit.",
                        severity="warning")
            return
        self.exit(0)
