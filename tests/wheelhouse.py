"""A wheelhouse made of the test interpreter's own installed distributions: wheels repacked
from their installed files (a fresh RECORD, the tags their WHEEL file names), so a test can
install sagedoctor's wheel as a user would, its dependencies resolved by uv from this folder
(UV_FIND_LINKS with UV_OFFLINE) instead of PyPI: no network, nothing downloaded."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from importlib.metadata import Distribution, distribution
from pathlib import Path, PurePosixPath

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

# Installer-written files: a wheel never carries them (RECORD is written anew).
_INSTALLER_FILES = ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")


def closure(requirements: list[str]) -> list[Distribution]:
    """The installed distributions these requirements need, transitively, extras included
    (textual needs markdown-it-py[linkify])."""
    seen: dict[str, Distribution] = {}
    done: set[tuple[str, str]] = set()
    todo = [(r, "") for r in requirements]
    while todo:
        text, extra = todo.pop()
        requirement = Requirement(text)
        if requirement.marker and not requirement.marker.evaluate({"extra": extra}):
            continue
        key = canonicalize_name(requirement.name)
        dist = seen.setdefault(key, distribution(requirement.name))
        for wanted in ("", *sorted(requirement.extras)):
            if (key, wanted) not in done:
                done.add((key, wanted))
                todo.extend((r, wanted) for r in dist.requires or [])
    return list(seen.values())


def repack(dist: Distribution, out: Path) -> Path:
    name = canonicalize_name(dist.metadata["Name"]).replace("-", "_")
    wheel_file = dist.read_text("WHEEL") or ""
    tag = next(line.split(":", 1)[1].strip() for line in wheel_file.splitlines()
               if line.startswith("Tag:"))
    scripts = {ep.name for ep in dist.entry_points if ep.group in ("console_scripts",
                                                                   "gui_scripts")}
    path = out / f"{name}-{dist.version}-{tag}.whl"
    record: list[str] = []
    info_dir = ""
    with zipfile.ZipFile(path, "w") as wheel:
        for file in dist.files or ():
            parts = PurePosixPath(file.as_posix()).parts
            if "__pycache__" in parts or (parts[-1] in _INSTALLER_FILES and len(parts) == 2):
                continue
            if parts[0] == "..":
                # A script under the environment's bin/ (uv's own binary): the wheel's .data;
                # console-script launchers are written anew by the installer.
                if "bin" not in parts or parts[-1] in scripts:
                    continue
                arcname = f"{name}-{dist.version}.data/scripts/{parts[-1]}"
            else:
                arcname = "/".join(parts)
                if parts[0].endswith(".dist-info"):
                    info_dir = parts[0]
            data = Path(str(file.locate())).read_bytes()
            wheel.writestr(arcname, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{arcname},sha256={digest.decode()},{len(data)}")
        assert info_dir, f"{name}: no dist-info among its files"
        record.append(f"{info_dir}/RECORD,,")
        wheel.writestr(f"{info_dir}/RECORD", "\n".join(record) + "\n")
    return path


def wheelhouse(requirements: list[str], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    for dist in closure(requirements):
        repack(dist, out)
    return out
