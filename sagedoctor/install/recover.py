"""Before planning: roll back what an install killed outright left (its journal)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def recover_pending(prefix: Path, say: Callable[[str], None]) -> bool:
    """Roll back the journal a killed run left in this venv, under the venv's lock; True
    where there was one (the venv is then as before that run)."""
    from ..events import as_lines
    from .lock import venv_lock, venv_state_dir
    from .transaction import recover_interrupted

    folder = venv_state_dir(prefix)
    if not (folder / "journal.json").is_file():
        return False
    emit = as_lines(say)  # the callers (install's and post-update's flows) print text
    with venv_lock(folder, prefix, emit):
        return recover_interrupted(folder, emit)
