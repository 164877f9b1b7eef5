"""The Textual app: one screen per stage, pushed in order check -> plan -> install -> verify.
Styles live in sagedoctor.tcss; every long call runs in a worker thread."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any, ClassVar

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
        # Ctrl+C quits as in any terminal program (Textual's own only says "press ctrl+q");
        # never while an install runs: that one asks for Esc first.
        Binding("ctrl+c", "quit_app", "Quit", show=False, priority=True),
    ]

    def __init__(self, options: TuiOptions, *, clock: Callable[[], float] = time.monotonic,
                 session: Session | None = None) -> None:
        super().__init__()
        self.session = session or Session(options)
        self.clock = clock  # tests pass a fixed clock so screenshots do not change
        self.install_running = False

    def on_mount(self) -> None:
        self.push_screen(CheckScreen())
        self._catch_hang_ups()

    # SIGHUP (the terminal window closed, an ssh session dropped) and SIGTERM take the path
    # Esc -> y takes: a running install is cancelled (its build's process group killed) and
    # rolled back, then the app exits, which gives the terminal back. Left to Python's
    # default, they would end the process at once: the build running on under pid 1, the
    # terminal left in the alternate screen.
    HANG_UPS = () if sys.platform == "win32" else (signal.SIGHUP, signal.SIGTERM)

    def _catch_hang_ups(self) -> None:
        # signal.signal, not the loop's own handlers: a Python handler runs even while the
        # main thread waits on textual's output queue (a hung-up terminal stops its writer).
        self._hang_up_loop = asyncio.get_running_loop()
        self._old_handlers: dict[int, Any] = {}
        for signum in self.HANG_UPS:
            with contextlib.suppress(ValueError, OSError):  # not the main thread
                self._old_handlers[signum] = signal.signal(signum, self._on_hang_up)

    def _on_hang_up(self, signum: int, _frame: object) -> None:
        if _terminal_gone():
            self._write_to_nowhere()
        with contextlib.suppress(RuntimeError):  # the loop is closed: the app is over
            self._hang_up_loop.call_soon_threadsafe(self.hang_up, signum)

    def on_unmount(self) -> None:
        for signum, old in getattr(self, "_old_handlers", {}).items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(signum, old)

    def hang_up(self, signum: int) -> None:
        """The exit status is 128 + the signal's number, as a shell reports a death by it."""
        from .screens.install import InstallScreen

        code = 128 + int(signum)
        name = signal.Signals(signum).name
        install = next((s for s in self.screen_stack if isinstance(s, InstallScreen)), None)
        if install is not None and install.state in ("running", "cancelling"):
            install.stop_for_signal(name, code)  # it exits the app once rolled back
            return
        self.exit(return_code=code)

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

    def _write_to_nowhere(self) -> None:
        """The terminal hung up: what textual still writes (the rest of the install's screens,
        then the restore at exit) goes to the null device, so its output thread, which died
        of EIO, cannot leave the app waiting on a full queue while the rollback runs."""
        devnull = os.open(os.devnull, os.O_RDWR)
        try:
            for fd in (0, 1, 2):
                with contextlib.suppress(OSError):
                    os.dup2(devnull, fd)
        finally:
            os.close(devnull)
        driver = getattr(self, "_driver", None)
        writer = getattr(driver, "_writer_thread", None)
        if writer is not None and not writer.is_alive():
            with contextlib.suppress(Exception):  # textual's internals: best effort
                import threading

                from textual.drivers._writer_thread import WriterThread

                fresh = WriterThread(open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115
                fresh.start()
                driver._writer_thread = fresh  # type: ignore[union-attr]
                stale = writer._queue  # what the dead writer left, and a put waiting on it

                def drain() -> None:
                    while stale.get() is not None:
                        pass

                threading.Thread(target=drain, daemon=True).start()


def _terminal_gone() -> bool:
    """Whether the controlling terminal hung up (its descriptors answer EIO), as opposed to a
    SIGHUP sent by hand to an app whose terminal is still there."""
    import errno

    try:
        import termios

        termios.tcgetattr(sys.__stderr__.fileno() if sys.__stderr__ else 2)
    except ImportError:
        return False
    except (OSError, ValueError) as exc:
        return getattr(exc, "errno", None) == errno.EIO
    except Exception as exc:  # termios.error: (errno, message)
        return bool(exc.args) and exc.args[0] == errno.EIO
    return False
