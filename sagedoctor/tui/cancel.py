"""The cancel contract with the install executor: the TUI's progress callback raises this
once after the user pressed cancel, and the executor stops (and rolls back what it changed).
An interruption, so the executor takes no fallback route after it."""

from __future__ import annotations

from ..install.errors import InstallInterrupted


class InstallCancelled(InstallInterrupted):
    code = "SD970"

    def __init__(self, during: str, fix: str = "nothing more was started after the cancel"
                 ) -> None:
        # The executor re-raises step errors as type(exc)(message, fix): keep that form.
        message = during if during.startswith(("cancelled by the user", "step ")) \
            else f"cancelled by the user during: {during}"
        super().__init__(message, fix)


def cancelled_in(exc: BaseException) -> bool:
    """Whether a cancel caused this error (the executor wraps step errors in its own)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, InstallCancelled):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False
