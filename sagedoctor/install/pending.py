"""The commands that arm the runtime (`verify`, `enable`, `post-update`) refuse a venv a killed
install left half-done, which the next install would roll back. Whether one did is read by
state.pending_install (the journal's read side); the install itself recovers it
(transaction.recover_interrupted)."""

from __future__ import annotations

from pathlib import Path

from ..decide.fixes import recovery_fix
from ..decide.requirements import describe_pending
from ..errors import SagedoctorError
from ..state import pending_install


class InstallInterrupted(SagedoctorError):
    """A journal is pending: what verify or enable would prove is the half-installed venv."""

    code = "SD199"


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
