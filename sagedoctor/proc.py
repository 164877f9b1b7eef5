"""Running external tools: argument lists only, a hard timeout, the whole process tree killed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

DEFAULT_TIMEOUT_S = 5.0


def probe_timeout() -> float:
    """Per-tool timeout for probes; SAGEDOCTOR_TIMEOUT overrides it (seconds)."""
    raw = os.environ.get("SAGEDOCTOR_TIMEOUT", "")
    try:
        value = float(raw)
    except ValueError:
        return DEFAULT_TIMEOUT_S
    return value if value > 0 else DEFAULT_TIMEOUT_S


@dataclass(frozen=True)
class ToolResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class ToolTimeout(Exception):
    def __init__(self, argv: Sequence[str], timeout: float) -> None:
        super().__init__(f"`{' '.join(argv)}` did not answer within {timeout:g} s")


class ToolMissing(Exception):
    pass


def run_tool(
    argv: Sequence[str],
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    input_text: str | None = None,
) -> ToolResult:
    """Run ``argv`` and capture its output as text.

    On timeout the tool's whole process group is killed, so a wrapper script that started a
    child cannot keep our pipes open (plain ``subprocess.run`` would then wait forever).
    """
    limit = probe_timeout() if timeout is None else timeout
    kwargs: dict[str, object] = {}
    if sys.platform == "win32":
        kwargs["creationflags"] = subprocess.CREATE_NEW_PROCESS_GROUP | getattr(
            subprocess, "CREATE_NO_WINDOW", 0
        )
    else:
        kwargs["start_new_session"] = True
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
            **kwargs,  # type: ignore[call-overload]
        )
    except FileNotFoundError as exc:
        raise ToolMissing(argv[0]) from exc
    except PermissionError as exc:
        raise ToolMissing(f"{argv[0]} (not executable)") from exc
    try:
        data = input_text.encode() if input_text else None
        out, err = proc.communicate(input=data, timeout=limit)
    except subprocess.TimeoutExpired:
        _kill_tree(proc)
        proc.communicate()
        raise ToolTimeout(argv, limit) from None
    return ToolResult(
        tuple(argv),
        proc.returncode,
        out.decode("utf-8", errors="replace"),
        err.decode("utf-8", errors="replace"),
    )


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    if sys.platform == "win32":
        # taskkill /T takes the children too; kill() alone would leave them holding our pipes.
        subprocess.run(
            ["taskkill", "/T", "/F", "/PID", str(proc.pid)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        proc.kill()
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
