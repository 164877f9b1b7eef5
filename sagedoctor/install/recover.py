"""Before planning: roll back what an install killed outright left (its journal)."""

from __future__ import annotations

from pathlib import Path

from ..events import OnEvent


def recover_pending(prefix: Path, on_event: OnEvent) -> bool:
    """Roll back the journal a killed run left in this venv, under the venv's lock; True
    where there was one (the venv is then as before that run)."""
    from .lock import venv_lock, venv_state_dir
    from .transaction import recover_interrupted

    folder = venv_state_dir(prefix)
    if not (folder / "journal.json").is_file():
        return False
    with venv_lock(folder, prefix, on_event):
        return recover_interrupted(folder, on_event)
