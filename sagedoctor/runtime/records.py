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
from dataclasses import dataclass

from .files import CALIBRATION, record_file

MYPY = False  # typing.TYPE_CHECKING without importing typing (see hook.py)
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


# --- the typed shape of verify's record (verified.json, and the user-state copy) --------------
# The JSON is hostile (a hand edit, a crash mid-write, another sagedoctor's format): each parse
# checks every field's type and answers None where one is off, never raising. A field a record
# from an older sagedoctor lacks ("stat", "sites", "interpreter", "dists") reads as None / {};
# a field of the wrong type makes the whole record unreadable.

if MYPY:
    from collections.abc import Mapping
    from typing import Any

    FileStat = tuple[str, int, int]  # [path or dist-info name, size, mtime_ns]


@dataclass(frozen=True)
class Fingerprint:
    """What `verify` proved the venv to be: the Python, the versions of the fingerprinted
    distributions and, from newer records, their dist-info RECORD stats, the site folders
    those came from and the interpreter binary's stat."""

    python: "str | None"
    dists: "Mapping[str, str | None]"  # name -> version; None: not installed
    stat: "Mapping[str, FileStat | None] | None" = None  # None: a record before stat data
    sites: "tuple[str, ...] | None" = None  # None: a record before "sites"
    interpreter: "FileStat | None" = None

    def to_json(self) -> "dict[str, Any]":
        """The wire form (the keys live_fingerprint writes, in its order)."""
        out: dict[str, Any] = {"python": self.python, "dists": dict(self.dists)}
        if self.stat is not None:
            out["stat"] = {k: list(v) if v is not None else None for k, v in self.stat.items()}
        if self.sites is not None:
            out["sites"] = list(self.sites)
        if self.interpreter is not None:
            out["interpreter"] = list(self.interpreter)
        return out


def parse_file_stat(value: object) -> "FileStat | None":
    """[str, int, int] (JSON has no tuples) as a tuple; None where it is anything else."""
    if (isinstance(value, (list, tuple)) and len(value) == 3 and isinstance(value[0], str)
            and all(type(v) is int for v in value[1:])):
        return (value[0], value[1], value[2])
    return None


def _parse_stats(value: object) -> "dict[str, FileStat | None] | None":
    if not isinstance(value, dict):
        return None
    out: dict[str, FileStat | None] = {}
    for name, entry in value.items():
        found = parse_file_stat(entry)
        if not isinstance(name, str) or (entry is not None and found is None):
            return None
        out[name] = found
    return out


def _str_tuple(value: object) -> "tuple[str, ...] | None":
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


def parse_fingerprint(data: object) -> "Fingerprint | None":
    """A Fingerprint from hostile JSON, or None where it is no dict or a field has the
    wrong type (a field that is absent, or null, is one an older record lacks)."""
    if not isinstance(data, dict):
        return None
    python, dists = data.get("python"), data.get("dists")
    dists = {} if dists is None else dists
    raw_stat, raw_sites, raw_interpreter = (data.get("stat"), data.get("sites"),
                                            data.get("interpreter"))
    stat = _parse_stats(raw_stat) if raw_stat is not None else None
    sites = _str_tuple(raw_sites) if raw_sites is not None else None
    interpreter = parse_file_stat(raw_interpreter) if raw_interpreter is not None else None
    if (python is not None and not isinstance(python, str)) or not isinstance(dists, dict) \
            or not all(isinstance(k, str) and (v is None or isinstance(v, str))
                       for k, v in dists.items()) \
            or (raw_stat is not None and stat is None) \
            or (raw_sites is not None and sites is None) \
            or (raw_interpreter is not None and interpreter is None):
        return None
    return Fingerprint(python, dict(dists), stat, sites, interpreter)


@dataclass(frozen=True)
class ArmingRecord:
    """verified.json as the hook reads it (the user-state copy has the same fields and
    `results` beside them): what verify found, when, over which fingerprint, and the command
    the hook's opt-in auto-repair starts."""

    verdict: str
    verified_at: str
    fingerprint: Fingerprint
    post_update: "tuple[str, ...]" = ()


def parse_arming_record(data: object) -> "ArmingRecord | None":
    """An ArmingRecord from hostile JSON, or None where any of its fields is off."""
    if not isinstance(data, dict):
        return None
    verdict, when = data.get("verdict"), data.get("verified_at")
    fingerprint = parse_fingerprint(data.get("fingerprint"))
    command = data.get("post_update", [])
    if not isinstance(verdict, str) or not isinstance(when, str) or fingerprint is None \
            or not isinstance(command, list) or not all(isinstance(a, str) for a in command):
        return None
    return ArmingRecord(verdict, when, fingerprint, tuple(command))
