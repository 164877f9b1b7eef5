"""SIGTERM and SIGHUP become an exception in the main thread, like SIGINT's
KeyboardInterrupt, so the transaction's rollback runs for every way a user stops an install."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

from .errors import InstallInterrupted


def _raise(signum: int, _frame: FrameType | None) -> None:
    name = signal.Signals(signum).name
    raise InstallInterrupted(f"stopped by {name}", "run `sagedoctor install` again when ready")


@contextlib.contextmanager
def interrupts_raise() -> Iterator[None]:
    if sys.platform == "win32" or threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers; a TUI worker cancels by raising
        return
    kinds = [signal.SIGTERM, signal.SIGHUP]
    old = {s: signal.signal(s, _raise) for s in kinds}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
