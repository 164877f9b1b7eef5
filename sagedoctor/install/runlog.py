"""One log file per install run, named by time and PID, so two runs never share a log."""

from __future__ import annotations

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

    def write(self, message: str) -> None:
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%S")
        self._handle.write(f"{now} {message}\n")
        self._handle.flush()

    def raw(self, text: str) -> None:
        self._handle.write(text)

    def flush(self) -> None:
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()
