"""Progress as data: what a running install (or uninstall, or repair) reports, as frozen
dataclasses. The executor emits them; `step_lines()` is the one text rendering (the CLI's
lines, the run's log, the TUI's log pane), and the TUI reads the events themselves for its
bars, so no front end parses another's text. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


def mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


@dataclass(frozen=True)
class StepStarted:
    """Step `number` of `total` begins: preparing it (a download or a build, before the venv
    is touched), or carrying it out (the venv changes)."""

    number: int
    total: int
    title: str
    preparing: bool = False


@dataclass(frozen=True)
class StepFinished:
    number: int
    total: int
    title: str


@dataclass(frozen=True)
class DownloadStarted:
    name: str
    url: str


@dataclass(frozen=True)
class DownloadProgress:
    """Bytes of a download so far. `report`: the periodic line a long download prints so it
    never looks hung (every byte count is also an event, shown by the TUI's bar only)."""

    name: str
    received: int
    size: int | None
    elapsed_s: float
    report: bool = False


@dataclass(frozen=True)
class DownloadFinished:
    name: str
    size: int
    elapsed_s: float


@dataclass(frozen=True)
class DigestChecked:
    """A download's sha256, and how it was checked, once it is stored in the cache."""

    sha256: str
    how: str


@dataclass(frozen=True)
class BuildStarted:
    """A source build begins: its environment (`K=V` pairs), C++ standard and log."""

    env: tuple[tuple[str, str], ...]
    cxx_standard: int | None
    log_path: str


@dataclass(frozen=True)
class BuildHeartbeat:
    elapsed_s: float
    latest_line: str  # the build's last output line ("" before any)


@dataclass(frozen=True)
class BuildFinished:
    wheel: str
    elapsed_s: float
    peak: str  # "; peak memory ..." or ""


@dataclass(frozen=True)
class SmokeStarted:
    pass


@dataclass(frozen=True)
class SmokeResult:
    passed: bool
    summary: str


@dataclass(frozen=True)
class RollbackStarted:
    reason: str


@dataclass(frozen=True)
class RollbackFinished:
    state: str  # what the venv is now, proven by sha256


@dataclass(frozen=True)
class LockTakenOver:
    """The venv's install lock was left by a process that is gone (or alive but no longer
    holding it): this run takes it over."""

    pid: int
    running: bool


@dataclass(frozen=True)
class RecoveryStarted:
    """A journal left by a killed run: it is finished (rolled back) before anything else."""

    pid: int | None


@dataclass(frozen=True)
class BuildStopped:
    """The killed run's build was still running (same boot): its process group was killed."""

    pgid: int


@dataclass(frozen=True)
class WorkFolderRemoved:
    path: str


@dataclass(frozen=True)
class NothingToUndo:
    """The killed run had not reached its change phase: the venv is as it was."""


@dataclass(frozen=True)
class FileRemoved:
    """The rollback removed a file the install had created (an edited config)."""

    path: str


@dataclass(frozen=True)
class FileRestored:
    """The rollback put an edited file back from its backup, proven by its sha256."""

    path: str
    sha256: str


@dataclass(frozen=True)
class ConfigEdited:
    """The install set `settings` in an app's config file (invokeai.yaml), checked by the
    app's own loader; `backup`: None where the file is new."""

    path: str
    settings: tuple[tuple[str, str], ...]
    validated_by: str
    backup: str | None


@dataclass(frozen=True)
class CacheEntryDamaged:
    """A cached download failed its re-check (`problem`): it was removed, so it is downloaded
    afresh instead of the next run finding it again."""

    name: str
    problem: str


@dataclass(frozen=True)
class LogUnwritable:
    """The run's log file could not be written (`reason`): the run goes on without it."""

    path: str
    reason: str


@dataclass(frozen=True)
class Note:
    """Any other line of progress: a cache hit, a lock taken over, a file restored."""

    text: str


Event = (StepStarted | StepFinished | DownloadStarted | DownloadProgress | DownloadFinished
         | DigestChecked | BuildStarted | BuildHeartbeat | BuildFinished | SmokeStarted
         | SmokeResult | RollbackStarted | RollbackFinished | LockTakenOver | RecoveryStarted
         | BuildStopped | WorkFolderRemoved | NothingToUndo | FileRemoved | FileRestored
         | ConfigEdited | CacheEntryDamaged | LogUnwritable | Note)
OnEvent = Callable[[Event], None]


def as_lines(say: Callable[[str], None]) -> OnEvent:
    """An event callback that hands each event's text (step_lines) to `say`: for a caller
    whose output is text only (the CLI's commands)."""

    def emit(event: Event) -> None:
        for line in step_lines(event):
            say(line)

    return emit


def step_lines(event: Event) -> tuple[str, ...]:
    """The text of an event, as the CLI prints it and the log keeps it ("" events: none)."""
    if isinstance(event, Note):
        return (event.text,)
    if isinstance(event, StepStarted):
        doing = "preparing: " if event.preparing else ""
        return (f"[{event.number}/{event.total}] {doing}{event.title}",)
    if isinstance(event, DownloadStarted):
        return (f"downloading {event.url}",)
    if isinstance(event, DownloadProgress):
        if not event.report:
            return ()
        of = (f" of {mib(event.size)} ({100 * event.received / event.size:.0f}%)"
              if event.size else "")
        return (f"downloading {event.name}: {mib(event.received)}{of}, "
                f"{event.elapsed_s:.0f} s",)
    if isinstance(event, DownloadFinished):
        return (f"downloaded {event.name}: {mib(event.size)} in {event.elapsed_s:.1f} s",)
    if isinstance(event, DigestChecked):
        return (f"sha256 {event.sha256} ({event.how}; stored in the cache)",)
    if isinstance(event, BuildStarted):
        standard = f" C++{event.cxx_standard}" if event.cxx_standard else ""
        return ("building: " + " ".join(f"{k}={v}" for k, v in event.env) + standard
                + f" (log: {event.log_path})",)
    if isinstance(event, BuildHeartbeat):
        line = f": {event.latest_line[:120]}" if event.latest_line else ""
        return (f"still building ({event.elapsed_s:.0f} s){line}",)
    if isinstance(event, BuildFinished):
        return (f"built {event.wheel} in {event.elapsed_s:.0f} s{event.peak}",)
    if isinstance(event, SmokeStarted):
        return ("smoke check: sageattn() against SDPA on each GPU",)
    if isinstance(event, SmokeResult):
        return (f"smoke check passed: {event.summary}",) if event.passed else ()
    if isinstance(event, RollbackStarted):
        return (f"rolling back: {event.reason}",)
    if isinstance(event, RollbackFinished):
        return (event.state,)
    return _recovery_lines(event)


def _recovery_lines(event: Event) -> tuple[str, ...]:
    """The text of the lock's, the recovery's and the config edit's events."""
    if isinstance(event, LockTakenOver):
        state = "still running, unlocked" if event.running else "no longer running"
        return (f"taking over the install lock of pid {event.pid} ({state})",)
    if isinstance(event, RecoveryStarted):
        return (f"an earlier install (pid {event.pid}) was interrupted; recovering before "
                "anything else",)
    if isinstance(event, BuildStopped):
        return (f"stopped its build (process group {event.pgid})",)
    if isinstance(event, WorkFolderRemoved):
        return (f"removed its temporary folder {event.path}",)
    if isinstance(event, NothingToUndo):
        return ("it had not changed the venv yet",)
    if isinstance(event, FileRemoved):
        return (f"removed {event.path} (the install had created it)",)
    if isinstance(event, FileRestored):
        return (f"restored {event.path} (sha256 {event.sha256[:12]}..., mode, owner and group "
                "as before the install)",)
    if isinstance(event, ConfigEdited):
        what = ", ".join(f"{k}: {v}" for k, v in event.settings)
        return (f"set {what} in {event.path} (checked by {event.validated_by}; backup "
                f"{event.backup or 'none: the file is new'})",)
    if isinstance(event, CacheEntryDamaged):
        return (f"{event.name} in the download cache is damaged: {event.problem}; removed it, "
                "so it is downloaded afresh",)
    if isinstance(event, LogUnwritable):
        return (f"the log {event.path} cannot be written ({event.reason}); going on without "
                "it",)
    return ()  # StepFinished: the next step's line says it
