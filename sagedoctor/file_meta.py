"""A file sagedoctor rewrites (invokeai.yaml) keeps its mode, owner and group: an atomic
replace writes a new inode, which would otherwise be 0600 and ours (0640 root:daemon, read by
a service account, would become unreadable to it). Rollbacks put the same back."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class FileMeta:
    mode: int  # the permission bits (stat.S_IMODE)
    uid: int | None  # None where the platform has no owners (Windows)
    gid: int | None

    def to_dict(self) -> dict[str, int | None]:
        return {"mode": self.mode, "uid": self.uid, "gid": self.gid}

    @classmethod
    def from_dict(cls, data: object) -> FileMeta | None:
        """From a journal or an edit record; None where it holds none (an older record)."""
        mode = data.get("mode") if isinstance(data, dict) else None
        if not isinstance(mode, int) or not 0 <= mode <= 0o7777:
            return None
        assert isinstance(data, dict)
        uid, gid = data.get("uid"), data.get("gid")
        return cls(int(data["mode"]), uid if isinstance(uid, int) else None,
                   gid if isinstance(gid, int) else None)


def meta_of(path: Path) -> FileMeta | None:
    """The file's mode, owner and group (the link's target's), or None if it is not there."""
    try:
        info = path.stat()
    except OSError:
        return None
    owned = hasattr(os, "fchown")
    return FileMeta(stat.S_IMODE(info.st_mode), info.st_uid if owned else None,
                    info.st_gid if owned else None)


def _give(fd: int, meta: FileMeta) -> bool:
    """Owner and group first (a chown may clear set-id bits), then the mode; False where this
    user may not give the file that owner or group."""
    kept = True
    if meta.uid is not None and meta.gid is not None and hasattr(os, "fchown"):
        now = os.fstat(fd)
        if (now.st_uid, now.st_gid) != (meta.uid, meta.gid):
            try:
                os.fchown(fd, meta.uid, meta.gid)
            except PermissionError:
                kept = False
    if hasattr(os, "fchmod"):
        os.fchmod(fd, meta.mode)
    return kept


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.fsync(fd)


def write_keeping_meta(path: Path, data: bytes, meta: FileMeta | None, *,
                       in_place_where_foreign: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically (a temporary file beside it, then a rename),
    the new file given ``meta``; None: a new file, with the mode the umask gives.

    Where this user cannot give the temporary file that owner or group (a file of another
    user it may write), the file is rewritten in place instead: not atomic, but it keeps its
    inode, so mode, owner and group cannot change (the user's invokeai.yaml). With
    ``in_place_where_foreign`` off (sagedoctor's own records) it is replaced all the same,
    keeping the mode: a record must be whole, and one of another owner in a folder this user
    may write need not be writable in place."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    fd = os.open(tmp, flags, 0o600 if meta is not None else 0o666)
    try:
        try:
            kept = True if meta is None else _give(fd, meta)
            replace = kept or not in_place_where_foreign
            if replace:
                _write_all(fd, data)
        finally:
            os.close(fd)
        if replace:
            os.replace(tmp, path)
            _sync_folder(path.parent)
            return
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.unlink(missing_ok=True)
    in_place = os.open(path, os.O_WRONLY | os.O_TRUNC | getattr(os, "O_BINARY", 0))
    try:
        _write_all(in_place, data)
    finally:
        os.close(in_place)


def _sync_folder(folder: Path) -> None:
    """The rename itself made durable (POSIX; Windows cannot open a folder, and NTFS journals
    its renames)."""
    if os.name != "posix":
        return
    with contextlib.suppress(OSError):  # some file systems refuse fsync on a folder
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def restore_meta(path: Path, meta: FileMeta) -> None:
    """Give an existing file ``meta`` again where it differs (best effort for the owner)."""
    if meta_of(path) == meta:
        return
    with contextlib.suppress(PermissionError):
        if meta.uid is not None and meta.gid is not None and hasattr(os, "chown"):
            os.chown(path, meta.uid, meta.gid)
    os.chmod(path, meta.mode)


def write_atomic(path: Path, data: bytes) -> None:
    """sagedoctor's one tmp-and-replace: ``path`` holds ``data`` whole or what it held
    before. A uniquely named temporary file in the same folder (two writers never share one),
    fsynced, then renamed over; an existing file keeps its mode, owner and group."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_keeping_meta(path, data, meta_of(path), in_place_where_foreign=False)
