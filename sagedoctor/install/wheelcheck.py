"""A wheel is checked before uv sees it: every zip entry stays inside the install folders, and
its RECORD tells the truth (each file listed, each digest right). Returns where its files land,
so a rollback can remove them even after a half-finished install."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import stat
import zipfile
from pathlib import Path, PurePosixPath

from .errors import HostileWheel


def _unsafe(name: str) -> bool:
    path = PurePosixPath(name)
    return (not name or name.startswith("/") or "\\" in name or ":" in path.parts[0]
            or any(part in ("..", "") for part in name.split("/")[:-1])
            or ".." in path.parts)


def check_wheel(wheel: Path) -> list[str]:
    """The wheel's file names (zip paths); raises HostileWheel if it lies or escapes."""
    try:
        archive = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as exc:
        raise HostileWheel(f"{wheel.name} is not a readable wheel: {exc}", "nothing was "
                           "installed; delete the file and download it again") from exc
    with archive:
        infos = [i for i in archive.infolist() if not i.is_dir()]
        names = [i.filename for i in infos]
        for info in infos:
            if _unsafe(info.filename):
                raise HostileWheel(f"{wheel.name}: the entry {info.filename!r} would be "
                                   "written outside the venv", "refused; nothing was installed")
            if stat.S_ISLNK(info.external_attr >> 16):
                raise HostileWheel(f"{wheel.name}: {info.filename!r} is a symbolic link",
                                   "refused; nothing was installed")
        records = [n for n in names if n.count("/") == 1 and n.endswith(".dist-info/RECORD")]
        if len(records) != 1:
            raise HostileWheel(f"{wheel.name} has {len(records)} RECORD files, not one",
                               "refused; nothing was installed")
        listed = _record_rows(wheel, archive.read(records[0]))
        _check_digests(wheel, archive, names, records[0], listed)
        missing = [n for n in listed if n not in names and n != records[0]]
        if missing:
            raise HostileWheel(f"{wheel.name}: its RECORD lists files it lacks: "
                               + ", ".join(missing[:3]), "refused; nothing was installed")
    return names


def _record_rows(wheel: Path, record: bytes) -> dict[str, str]:
    """RECORD's rows, path -> hash; a path outside the venv refuses the wheel."""
    listed: dict[str, str] = {}
    for row in csv.reader(io.StringIO(record.decode("utf-8", errors="replace"))):
        if not row:
            continue
        if _unsafe(row[0]):
            raise HostileWheel(f"{wheel.name}: its RECORD names {row[0]!r}, outside the "
                               "venv", "refused; nothing was installed")
        listed[row[0]] = row[1] if len(row) > 1 else ""
    return listed


def _check_digests(wheel: Path, archive: zipfile.ZipFile, names: list[str], record: str,
                   listed: dict[str, str]) -> None:
    """Every file of the wheel is in its RECORD with the sha256 it has."""
    for name in names:
        if name == record or name.endswith((".dist-info/RECORD.jws",
                                            ".dist-info/RECORD.p7s")):
            continue
        if name not in listed:
            raise HostileWheel(f"{wheel.name}: {name} is not in its RECORD",
                               "refused: a RECORD that lies cannot be uninstalled cleanly")
        expected = listed[name]
        if not expected.startswith("sha256="):
            raise HostileWheel(f"{wheel.name}: RECORD has no sha256 for {name}", "refused")
        got = "sha256=" + base64.urlsafe_b64encode(
            hashlib.sha256(archive.read(name)).digest()).rstrip(b"=").decode()
        if got != expected:
            raise HostileWheel(f"{wheel.name}: {name} does not match its RECORD digest",
                               "refused: the wheel was altered after it was built")


def landing_paths(names: list[str], purelib: Path, scripts: Path) -> list[Path]:
    """Where an installer puts these wheel entries (purelib/platlib and scripts)."""
    out = []
    for name in names:
        head, _, rest = name.partition("/")
        if head.endswith(".data"):
            kind, _, inner = rest.partition("/")
            if kind in ("purelib", "platlib"):
                out.append(purelib / inner)
            elif kind == "scripts":
                out.append(scripts / inner)
            continue
        out.append(purelib / name)
    return out


def _record_digest(path: Path) -> str | None:
    try:
        digest = hashlib.sha256(path.read_bytes()).digest()
    except OSError:
        return None
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def wheel_in_place(wheel: Path, purelib: Path) -> bool:
    """Whether this (checked) wheel is installed already, file for file: its one dist-info of
    that name and version in purelib, and every file it puts there with its RECORD digest.
    The same `install` run twice then changes nothing the second time."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = [i.filename for i in archive.infolist() if not i.is_dir()]
            record = next(n for n in names if n.count("/") == 1
                          and n.endswith(".dist-info/RECORD"))
            rows = list(csv.reader(io.StringIO(archive.read(record).decode(
                "utf-8", errors="replace"))))
    except (zipfile.BadZipFile, OSError, StopIteration):
        return False
    dist_info = record.split("/", 1)[0]
    project = dist_info[:-len(".dist-info")].rsplit("-", 1)[0]
    try:
        installed = sorted(p.name for p in purelib.glob(f"{project}-*.dist-info"))
    except OSError:
        return False
    if installed != [dist_info]:
        return False
    for row in rows:
        if len(row) < 2 or not row[1] or row[0].startswith(dist_info + "/"):
            continue  # RECORD's own row; the dist-info's files are the installer's to write
        if row[0].split("/", 1)[0].endswith(".data"):
            return False  # scripts and headers land elsewhere: not judged here
        if _record_digest(purelib / row[0]) != row[1]:
            return False
    return True
