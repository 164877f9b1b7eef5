"""Errors a user can meet. Each carries what went wrong and how to fix it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .decide.findings import ERRORS


class SagedoctorError(Exception):
    """A failure the user can act on; the CLI prints it without a traceback.

    A subclass names its code (`code = "SD9xx"`), which must be an entry of the one catalogue
    (decide/findings.ERRORS): its title and exit status come from there. A subclass that
    keeps its parent's code may set its own exit status (verify's cannot-work and target
    errors, SD920)."""

    code = "SD000"
    title = ERRORS["SD000"].title
    # Where the CLI's exit code comes from (sagedoctor/exit_codes.py has the table).
    exit_status = ERRORS["SD000"].exit_status

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "code" not in vars(cls):
            return
        kind = ERRORS.get(cls.code)
        if kind is None:
            raise TypeError(f"{cls.__qualname__}: {cls.code} is not in decide/findings.ERRORS")
        cls.title = kind.title
        cls.exit_status = kind.exit_status

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix


class FactsFileError(SagedoctorError):
    code = "SD901"

    def __init__(self, source: str, problem: str) -> None:
        super().__init__(
            f"{source}: {problem}",
            "pass a file written by `sagedoctor check --json` of this sagedoctor version",
        )


class TargetError(SagedoctorError):
    """The target cannot be inspected: a fixable problem, as `check`'s SD190 is."""

    code = "SD902"


class SettingError(SagedoctorError):
    """A SAGEDOCTOR_* environment variable holds a value sagedoctor cannot use."""

    code = "SD905"

    def __init__(self, variable: str, value: str, expected: str) -> None:
        super().__init__(
            f"the environment variable {variable}={value!r:.80} is not {expected}",
            f"fix or unset {variable}",
        )
        self.variable = variable


def disk_full(exc: BaseException) -> bool:
    """ENOSPC, or a disk quota used up (EDQUOT): the same remedy."""
    import errno

    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC,
                                                      getattr(errno, "EDQUOT", errno.ENOSPC))


def not_writable(exc: BaseException) -> bool:
    """Permission denied, or a read-only file system (EROFS): this user cannot write there."""
    import errno

    return isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS)


class NotWritable(SagedoctorError):
    """A file sagedoctor must change is not this user's to write: another user's venv, a
    read-only mount. SD132 as an error of the command that met it."""

    code = "SD932"

    def __init__(self, path: object, read_only: bool = False,
                 done: str = "nothing was changed", state: str = "not writable") -> None:
        why = "a read-only file system" if read_only else "permission denied"
        super().__init__(
            f"{path} is {state} by this user ({why}); {done}",
            "run as the user who owns the venv, or fix its permissions (a read-only mount: "
            "remount it read-write)")

    @classmethod
    def from_error(cls, path: object, exc: OSError, done: str,
                   state: str = "not writable") -> NotWritable:
        import errno

        return cls(path, exc.errno == errno.EROFS, done, state)


class OutOfSpace(SagedoctorError):
    """A disk sagedoctor writes to (its state, logs, backups or cache) is full."""

    code = "SD922"

    def __init__(self, path: object, what: str = "") -> None:
        where = f" ({what})" if what else ""
        super().__init__(
            f"no space left on the disk holding {path}{where}",
            "free some space on that disk, then run again; an install that stopped on it "
            "was rolled back, and its log says what was done")


class OutputClosed(SagedoctorError):
    """Standard output went away (the reader of a pipe quit, or it was closed): the rest of
    the output is dropped quietly, the work goes on, the exit status is the command's own."""

    code = "SD923"


class OutputFailed(SagedoctorError):
    """Standard output could not be written (a full disk under a redirect, an I/O error):
    what was written is incomplete, so the command fails (exit 3) and says so on stderr."""

    code = "SD924"


@contextlib.contextmanager
def room_needed(path: object, what: str) -> Iterator[None]:
    """A full disk while writing ``path`` becomes OutOfSpace naming it (an OSError raised at
    write or flush carries no file name of its own)."""
    try:
        yield
    except OSError as exc:
        if disk_full(exc):
            raise OutOfSpace(path, what) from exc
        raise
