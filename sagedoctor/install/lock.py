"""One install per venv at a time: a filelock in the state folder, with the holder's PID beside
it, and a second lock on the venv itself (two state folders, one venv). The OS frees the lock
of a dead holder; its PID file is then taken over and said so."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from ..errors import room_needed
from ..events import LockTakenOver, OnEvent
from ..proc import pid_alive
from .errors import InstallLocked


def venv_state_dir(prefix: Path, state_root: Path | None = None) -> Path:
    """<state>/venvs/<key>.install/: lock, journal and backups of one venv."""
    from ..state import VenvFiles

    return VenvFiles(Path(prefix)).install_folder(state_root)


def _read_pid(path: Path) -> int | None:
    try:
        with path.open("rb") as handle:
            raw = handle.read(32)  # a PID is a few digits; a device or a huge file is none
    except OSError:
        return None
    text = raw.decode("ascii", errors="replace").strip()
    return int(text) if text.isdigit() and len(text) < 20 else None


VENV_SIDE_LOCK = "sagedoctor-install.lock"  # Windows only: in the venv, deleted on release


@contextlib.contextmanager
def _venv_side_lock(prefix: Path) -> Iterator[None]:
    """The lock that lives with the venv itself: two installs whose state folders differ
    (another XDG_STATE_HOME or HOME, sudo) meet here. POSIX: flock on the venv's folder (no
    file is left in it); Windows: a lock file in it, which filelock removes on release."""
    if sys.platform == "win32":
        from filelock import FileLock, Timeout

        lock = FileLock(str(Path(prefix) / VENV_SIDE_LOCK))
        try:
            lock.acquire(timeout=0.5)
        except Timeout:
            raise _locked(prefix, None, "; it uses another state folder") from None
        try:
            yield
        finally:
            lock.release()
        return
    import fcntl

    try:
        fd = os.open(prefix, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # a venv folder we cannot open: uv could not install into it either
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _locked(prefix, None, "; it uses another state folder") from None
        yield
    finally:
        os.close(fd)  # frees the flock


def _locked(prefix: Path, holder: int | None, where: str = "") -> InstallLocked:
    return InstallLocked(
        f"another sagedoctor install (pid {holder or 'unknown'}{where}) is working on {prefix}",
        "wait for it to finish; two installs at once would mix their changes")


@contextlib.contextmanager
def venv_lock(folder: Path, prefix: Path, emit: OnEvent) -> Iterator[None]:
    from filelock import FileLock, Timeout

    folder.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(folder / "install.lock"))
    pid_file = folder / "install.pid"
    try:
        lock.acquire(timeout=0.5)
    except Timeout:
        raise _locked(prefix, _read_pid(pid_file)) from None
    try:
        with _venv_side_lock(prefix):
            old = _read_pid(pid_file)
            if old is not None and old != os.getpid():
                emit(LockTakenOver(old, pid_alive(old)))
            with room_needed(pid_file, "the install lock's PID file; nothing was changed"):
                pid_file.write_text(str(os.getpid()), encoding="utf-8")
            try:
                yield
            finally:
                pid_file.unlink(missing_ok=True)
    finally:
        lock.release()
