"""Running external tools: argument lists only, a hard timeout, the whole process tree killed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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


class ToolOutputTooLarge(Exception):
    def __init__(self, argv: Sequence[str], max_bytes: int) -> None:
        super().__init__(f"`{argv[0]}` printed more than {max_bytes:,} bytes; "
                         "it was stopped and its answer ignored")


def run_tool(
    argv: Sequence[str],
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    input_text: str | None = None,
    max_output_bytes: int | None = None,
    answer_frame: bytes | None = None,
) -> ToolResult:
    """Run ``argv`` and capture its output as text.

    On timeout the tool's whole process group is killed, so a wrapper script that started a
    child cannot keep our pipes open (plain ``subprocess.run`` would then wait forever).
    With ``max_output_bytes``, a tool that prints more (on stdout or stderr) is killed the same
    way and ToolOutputTooLarge raised: its output is never held in memory beyond the cap.
    With ``answer_frame`` (target_answer's token), reading stops once stdout holds two copies
    of it and the tool itself has exited: a child its start-up left holding stdout (a daemon
    started by a .pth line) would otherwise keep the pipe open until the timeout.
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
    data = input_text.encode() if input_text else None
    try:
        if max_output_bytes is not None or answer_frame is not None:
            out, err = _communicate_capped(proc, argv, data, limit, max_output_bytes,
                                           answer_frame)
        else:
            try:
                out, err = proc.communicate(input=data, timeout=limit)
            except subprocess.TimeoutExpired:
                _kill_tree(proc)
                proc.communicate()
                raise ToolTimeout(argv, limit) from None
    except (ToolTimeout, ToolOutputTooLarge):
        raise  # the tree is killed already
    except BaseException:
        # Ctrl+C, or a signal handler that raises: the tool runs in its own session, so no
        # signal reaches it, and nothing would stop it once we are gone.
        _kill_tree(proc)
        with contextlib.suppress(Exception):
            proc.wait(timeout=5)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        raise
    return ToolResult(
        tuple(argv),
        proc.returncode,
        out.decode("utf-8", errors="replace"),
        err.decode("utf-8", errors="replace"),
    )


def _communicate_capped(proc: subprocess.Popen[bytes], argv: Sequence[str], data: bytes | None,
                        limit: float, max_bytes: int | None,
                        frame: bytes | None = None) -> tuple[bytes, bytes]:
    """communicate() that stops reading (and kills the tree) once a pipe passes ``max_bytes``,
    and stops reading (and leaves the rest be) once stdout holds a whole ``frame`` and the tool
    has exited."""
    chunks: dict[int, list[bytes]] = {1: [], 2: []}
    over = threading.Event()
    framed = threading.Event()
    finished = threading.Condition()
    done: list[int] = []

    def pump(fd: int, key: int) -> None:
        total = 0
        seen, tail = 0, b""  # copies of the frame's token so far; the bytes that may start one
        try:
            while not over.is_set():
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                total += len(chunk)
                if max_bytes is not None and total > max_bytes:
                    over.set()
                    break
                chunks[key].append(chunk)
                if key == 1 and frame and seen < 2:
                    window = tail + chunk  # tail is shorter than the token: no double count
                    seen += window.count(frame)
                    tail = window[-(len(frame) - 1):] if len(frame) > 1 else b""
                    if seen >= 2:
                        with finished:
                            framed.set()
                            finished.notify_all()
        except OSError:
            pass
        finally:
            os.close(fd)
            with finished:
                done.append(key)
                finished.notify_all()

    def feed() -> None:
        with contextlib.suppress(OSError):
            if data:
                proc.stdin.write(data)  # type: ignore[union-attr]
            proc.stdin.close()  # type: ignore[union-attr]

    # Each reader its own copy of the descriptor: one left blocked on a pipe that something
    # the tool left behind still holds (see below) never reads a number reused meanwhile.
    readers = [threading.Thread(target=pump, args=(os.dup(stream.fileno()), key), daemon=True)
               for stream, key in ((proc.stdout, 1), (proc.stderr, 2)) if stream is not None]
    if proc.stdin is not None:
        threading.Thread(target=feed, daemon=True).start()
    for thread in readers:
        thread.start()
    deadline = time.monotonic() + limit

    def answered() -> bool:  # the whole answer is in, and the tool is gone
        return framed.is_set() and proc.poll() is not None

    with finished:
        while not (len(done) == len(readers) or over.is_set() or answered()):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            # with the frame whole, the tool's own exit is polled for (it notifies nothing);
            # else in short slices all the same: a Ctrl+C that the kernel hands to a reader
            # thread is run by Python only once this (main) thread runs again, so one long
            # wait here ignored it until the tool's timeout (300 s in the smoke check)
            finished.wait(timeout=min(left, 0.05 if framed.is_set() else 0.25))
    if answered() and len(done) < len(readers) and not over.is_set():
        # Something the tool left behind still holds a pipe: the answer is all that matters.
        # Its readers stay blocked until it closes them; the pipes go with it.
        return b"".join(list(chunks[1])), b"".join(list(chunks[2]))
    if over.is_set() or len(done) < len(readers):
        _kill_tree(proc)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        if over.is_set() and max_bytes is not None:
            raise ToolOutputTooLarge(argv, max_bytes)
        raise ToolTimeout(argv, limit)
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill_tree(proc)
        proc.wait()
        raise ToolTimeout(argv, limit) from None
    return b"".join(chunks[1]), b"".join(chunks[2])


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
    # The group takes the whole tree at once (no child can fork past it); a descendant that
    # started a session of its own has left the group, so it is found and killed by pid.
    stragglers = _descendants(proc.pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for child in stragglers:
        with contextlib.suppress(Exception):
            child.kill()  # psutil checks the pid was not reused


def _descendants(pid: int) -> list[Any]:
    try:
        import psutil

        return list(psutil.Process(pid).children(recursive=True))
    except Exception:  # psutil missing, or the tool already gone
        return []


MAX_PID = 2**32 - 1  # no OS has a PID beyond it; os.kill overflows past a C int


def pid_alive(pid: int) -> bool:
    if pid <= 0 or pid > MAX_PID:  # a journal's number from a hostile or damaged file
        return False
    if sys.platform == "win32":  # os.kill(pid, 0) would terminate the process there
        return _windows_pid_alive(pid)
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    return True


def _windows_pid_alive(pid: int) -> bool:
    import ctypes

    kernel32 = ctypes.windll.kernel32  # type: ignore[attr-defined, unused-ignore]
    handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
    if not handle:
        return False
    try:
        code = ctypes.c_ulong()
        kernel32.GetExitCodeProcess(handle, ctypes.byref(code))
        return code.value == 259  # STILL_ACTIVE
    finally:
        kernel32.CloseHandle(handle)
