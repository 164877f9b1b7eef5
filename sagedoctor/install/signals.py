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

# Besides SIGINT (Ctrl+C): what ends an install as an interruption, rolled back, exit 130.
STOP_SIGNALS = ("SIGTERM", "SIGHUP")

_pending: list[str] = []
_deferring: list[bool] = []


def _raise(signum: int, _frame: FrameType | None) -> None:
    name = signal.Signals(signum).name
    if _deferring:
        _pending.append(name)  # raised when the uninterruptible call is over
        return
    raise InstallInterrupted(f"stopped by {name}", "run `sagedoctor install` again when ready")


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold signals (Ctrl+C included) while uv changes the venv: stopping sagedoctor then
    would leave uv running in its own session while the rollback restores files under it."""
    if sys.platform == "win32" or threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, _raise)
    _deferring.append(True)
    try:
        yield
    finally:
        _deferring.pop()
        signal.signal(signal.SIGINT, old)
    if _pending and not _deferring:
        name = _pending[0]
        _pending.clear()
        raise InstallInterrupted(f"stopped by {name}",
                                 "run `sagedoctor install` again when ready")


@contextlib.contextmanager
def interrupts_raise() -> Iterator[None]:
    if sys.platform == "win32" or threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers; a TUI worker cancels by raising
        return
    kinds = [signal.Signals[name] for name in STOP_SIGNALS]
    old = {s: signal.signal(s, _raise) for s in kinds}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
