"""One log file per install run, named by time and PID, so two runs never share a log."""

from __future__ import annotations

import contextlib
import datetime
import os
from pathlib import Path
from typing import TextIO


class RunLog:
    def __init__(self, log_dir: Path, name: str | None = None) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        # name: a caller's own file name (the TUI's screenshot test); appended to, not replaced
        self.path = log_dir / (name or f"install-{stamp}-{os.getpid()}.log")
        self._handle: TextIO = self.path.open("a", encoding="utf-8")
        # A log that cannot be written (a full disk) is given up, never the install: a
        # rollback must not stop at its first line. The executor says so once.
        self.failure: OSError | None = None

    def write(self, message: str) -> None:
        if self.failure is not None:
            return
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%S")
        try:
            self._handle.write(f"{now} {message}\n")
            self._handle.flush()
        except OSError as exc:
            self.failure = exc

    def raw(self, text: str) -> None:
        if self.failure is None:
            try:
                self._handle.write(text)
            except OSError as exc:
                self.failure = exc

    def flush(self) -> None:
        if self.failure is None:
            try:
                self._handle.flush()
            except OSError as exc:
                self.failure = exc

    def close(self) -> None:
        with contextlib.suppress(OSError):  # what it could not write is lost already
            self._handle.close()


def default_log_dir() -> Path:
    """Where install and uninstall write their run logs (the user's log folder)."""
    from ..folders import app_folder

    return app_folder("log")
