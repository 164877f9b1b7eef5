"""Reading the per-venv records (verified.json, calibration.json) without trusting what is at
their path: only a regular file, at most `limit` bytes, opened so that it cannot block. A FIFO
there would otherwise hang every Python of the venv at `import torch.nn.functional`, and 80 MB
of garbage would be parsed at every start. Standard library only (the hook imports this).

No `from __future__ import annotations` here (see hook.py): the hook loads this module.
"""

import errno
import os
import stat
import sys

from .files import CALIBRATION, record_file

MAX_RECORD_BYTES = 8 * 1024 * 1024
CALIBRATION_ENV = "SAGEDOCTOR_CALIBRATION"  # a calibration file of the user's choice


def venv_calibration_path(prefix: str) -> str:
    """The calibration.json `sagedoctor verify` writes into the venv at `prefix`."""
    return record_file(prefix, CALIBRATION)


def calibration_path(prefix: "str | None" = None) -> str:
    """Where the router reads its decisions: SAGEDOCTOR_CALIBRATION, else the venv's own
    file (this Python's venv by default). The one computation the router, the hook's check
    and the self-test share; the tool names the venv's file (venv_calibration_path)."""
    return os.environ.get(CALIBRATION_ENV) or venv_calibration_path(prefix or sys.prefix)


class RecordUnreadable(OSError):
    """What is at a record's path cannot be read as one; str() says why in a few words."""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def read_record_bytes(path: str, limit: int = MAX_RECORD_BYTES) -> bytes:
    """The file's bytes. FileNotFoundError where nothing is there; RecordUnreadable where it
    is not a regular file or is over `limit` bytes; another OSError where it cannot be read."""
    # O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting for one
    # (Windows has neither FIFOs nor the flag). fstat after open: no swap between the checks.
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except IsADirectoryError:
        raise RecordUnreadable(f"{path} is a folder, not a file") from None
    except PermissionError:
        if os.path.isdir(path):  # Windows refuses to open a folder
            raise RecordUnreadable(f"{path} is a folder, not a file") from None
        raise
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise RecordUnreadable(f"{path} is {_kind(found.st_mode)}, not a file")
        if found.st_size > limit:
            raise RecordUnreadable(f"{path} is {found.st_size} bytes, over the "
                                   f"{limit // (1024 * 1024)} MB a record may be")
        chunks = []
        left = limit + 1  # a file that grows while it is read is refused too
        while left > 0:
            chunk = os.read(fd, min(left, 1024 * 1024))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        if left <= 0:
            raise RecordUnreadable(f"{path} is over the {limit // (1024 * 1024)} MB a record "
                                   "may be")
        return b"".join(chunks)
    finally:
        os.close(fd)


def record_problem(path: str, limit: int = MAX_RECORD_BYTES) -> "str | None":
    """Why what is at a record's path cannot be read as one (a folder, a FIFO, a device, a
    symlink loop, over `limit` bytes), from a stat (which never waits on a FIFO); None where
    it is a regular file within the limit, or nothing is there."""
    try:
        found = os.stat(path)
        if stat.S_ISREG(found.st_mode) and found.st_size <= limit:
            return None
        read_record_bytes(path, limit)  # raises, saying what is there, without blocking
    except FileNotFoundError:
        return None
    except OSError as exc:  # RecordUnreadable too
        if exc.errno == errno.ELOOP:
            return f"{path} is a symlink loop"
        return str(exc)
    return None
