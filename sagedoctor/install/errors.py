"""Errors of the install transaction (SD911-SD919). InstallError (SD910) stays in runner.py."""

from __future__ import annotations

from .runner import InstallError


class InstallLocked(InstallError):
    code = "SD911"


class InstallInterrupted(InstallError):
    """A signal (SIGTERM, SIGHUP) arrived; raised in the main thread so the rollback runs."""

    code = "SD912"


class RollbackIncomplete(InstallError):
    code = "SD913"


class RecoveredInterruptedRun(InstallError):
    code = "SD914"


class NotInCache(InstallError):
    code = "SD915"


class HostileDownload(InstallError):
    code = "SD916"


class HostileWheel(InstallError):
    code = "SD917"


class SmokeCheckFailed(InstallError):
    code = "SD918"
