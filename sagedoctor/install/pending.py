"""Whether a killed install left its journal behind for a venv: read-only, for `check` (SD199)
and for the commands that arm the runtime (`verify`, `enable`, `post-update`), which refuse a
half-installed venv the next install would roll back. The install itself recovers it
(transaction.recover_interrupted)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from .. import exit_codes
from ..errors import SagedoctorError
from ..facts import InterruptedInstall
from ..requirements import describe_pending, recovery_fix
from .lock import lock_held, pid_alive, venv_state_dir

MAX_JOURNAL_BYTES = 64 * 1024 * 1024  # a journal names files and backups; never gigabytes
JOURNAL_FILE = "journal.json"


class InstallInterrupted(SagedoctorError):
    """A journal is pending: what verify or enable would prove is the half-installed venv."""

    code = "SD199"
    exit_status = exit_codes.FIXABLE


def _journal_fields(path: Path) -> tuple[int | None, str | None]:
    """(pid, phase) from the journal, or (None, None) where it cannot be read: the file's
    being there is the fact; what is in it only adds detail."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_JOURNAL_BYTES:
            return None, None
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None, None
    if not isinstance(data, dict):
        return None, None
    pid, phase = data.get("pid"), data.get("phase")
    return (pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
            phase if isinstance(phase, str) else None)


def pending_install(prefix: Path, state_root: Path | None = None) -> InterruptedInstall | None:
    """The journal an install left for this venv (keyed as the install keys it), or None."""
    folder = venv_state_dir(prefix, state_root)
    path = folder / JOURNAL_FILE
    try:
        if not (path.exists() or path.is_symlink()):
            return None
    except OSError:
        return None
    pid, phase = _journal_fields(path)
    held = lock_held(folder)  # the journal's PID may be another process's by now
    running = held if held is not None else pid is not None and pid_alive(pid)
    return InterruptedInstall(journal=str(path), pid=pid, phase=phase, running=running)


def refuse_if_pending(prefix: Path, what: str, venv_arg: str,
                      state_root: Path | None = None) -> None:
    """`what` (verify, enable, post-update) must not arm a venv an install left half-done."""
    pending = pending_install(prefix, state_root)
    if pending is None:
        return
    fix = ("wait for it to finish, then run it again" if pending.running
           else "run " + recovery_fix(venv_arg))
    raise InstallInterrupted(f"{describe_pending(pending)}; {what} refuses to arm the runtime "
                             "until it is recovered", fix)
