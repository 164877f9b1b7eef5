"""Errors of the install transaction (SD911-SD919, SD921). InstallError (SD910) stays in
runner.py."""

from __future__ import annotations

from .runner import InstallError


class InstallLocked(InstallError):
    code = "SD911"


class InstallInterrupted(InstallError):
    """A signal (SIGTERM, SIGHUP) arrived; raised in the main thread so the rollback runs.
    Exits 130, as Ctrl+C does (README): interrupted, and rolled back first."""

    code = "SD912"


class RollbackIncomplete(InstallError):
    code = "SD913"


class RecoveredInterruptedRun(InstallError):
    code = "SD914"


class PlanOutdated(InstallError):
    """The venv changed between the plan and the lock (an uninstall or another install ran
    in between): the plan made before is not carried out."""

    code = "SD919"


class NotInCache(InstallError):
    code = "SD915"


class HostileDownload(InstallError):
    code = "SD916"


class HostileWheel(InstallError):
    code = "SD917"


class SmokeCheckFailed(InstallError):
    code = "SD918"


class DamagedDownload(InstallError):
    """A download that is not whole: shorter than its Content-Length, or an archive that ends
    early or fails its CRC. Never cached; a damaged cache entry is dropped and fetched again."""

    code = "SD921"
