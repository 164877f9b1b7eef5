"""The download and build cache under the user's cache folder, keyed by sha256.

files/<sha256>/<file name>   a downloaded wheel or source archive, stored once
digests.json                 url -> sha256 measured on first download (for files the index
                             names without a digest), and index resolutions of pinned wheels
built/<key>/<wheel>          a wheel built from (source commit, torch build, Python tag, archs)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..events import CacheEntryDamaged, OnEvent
from ..file_meta import write_atomic
from .errors import HostileDownload
from .integrity import archive_problem

_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+\-]{0,250}")


def default_cache_dir() -> Path:
    from ..folders import app_folder

    return app_folder("cache")


def safe_file_name(name: str, where: str) -> str:
    """One path component made of ordinary characters: no separators, no '..', no drive."""
    if not _SAFE_NAME.fullmatch(name) or ".." in name:
        raise HostileDownload(f"{where}: refusing the file name {name!r}",
                              "a file name with path separators or '..' could write outside "
                              "the cache; nothing was written")
    return name


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


_PATCHES = "patches.json"  # beside a built wheel: what its build patched


def built_key(commit: str, torch_build: str, python_tag: str, arch_list: str,
              cxx_standard: int | None = None, source_sha256: str | None = None) -> str:
    """A raised C++ standard is part of what was built (a build left as upstream wrote it
    keeps the key it always had); so is the sha256 of the source it was built from: a wheel
    built from one archive is never taken for an index pinning another."""
    parts = [commit, torch_build, python_tag, arch_list]
    if cxx_standard:
        parts.append(f"c++{cxx_standard}")
    if source_sha256 is not None:
        parts.append(f"source-sha256:{source_sha256}")
    text = json.dumps(parts)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


@dataclass
class Cache:
    root: Path

    @property
    def uv_dir(self) -> Path:
        return self.root / "uv"

    def _digests_path(self) -> Path:
        return self.root / "digests.json"

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self._digests_path().read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {"measured": {}, "resolved": {}}
        if not isinstance(data, dict):
            return {"measured": {}, "resolved": {}}
        for key in ("measured", "resolved"):
            if not isinstance(data.get(key), dict):
                data[key] = {}
        return data

    def _write(self, data: dict[str, Any]) -> None:
        write_atomic(self._digests_path(),
                     (json.dumps(data, indent=1, sort_keys=True) + "\n").encode("utf-8"))

    def measured(self, url: str) -> str | None:
        value = self._read()["measured"].get(url)
        return value if isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value) else None

    def lookup(self, name: str, sha256: str | None, url: str,
               on_damaged: OnEvent | None = None) -> Path | None:
        """The cached file for a known digest (the index's, else the one measured for url);
        re-hashed and read through as an archive, so a damaged entry is a miss, never an
        install. With ``on_damaged``, a damaged entry is also removed (and said), so the
        download that follows replaces it instead of the next run finding it again."""
        digest = sha256 or self.measured(url)
        if digest is None:
            return None
        path = self.root / "files" / digest / safe_file_name(name, url)
        if not path.is_file():
            return None
        try:
            problem = (None if file_sha256(path) == digest
                       else "its sha256 is no longer the one it was stored under")
        except OSError as exc:
            problem = f"it cannot be read ({exc.strerror or exc})"
        problem = problem or archive_problem(path, name)
        if problem is None:
            return path
        if on_damaged is not None:
            self.drop(path, url)
            on_damaged(CacheEntryDamaged(name, problem))
        return None

    def drop(self, path: Path, url: str) -> None:
        """Remove a cached file, and forget the digest measured for its url and any index
        resolution that named it, so nothing points at it any more."""
        digest = path.parent.name
        path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            path.parent.rmdir()  # only once empty
        data = self._read()
        if data["measured"].get(url) == digest:
            del data["measured"][url]
        data["resolved"] = {k: v for k, v in data["resolved"].items()
                            if not (isinstance(v, dict) and v.get("sha256") == digest)}
        self._write(data)

    def store(self, downloaded: Path, name: str, sha256: str, url: str) -> Path:
        folder = self.root / "files" / sha256
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / safe_file_name(name, url)
        os.replace(downloaded, path)
        data = self._read()
        data["measured"][url] = sha256
        self._write(data)
        return path

    def resolution(self, key: str) -> dict[str, str] | None:
        value = self._read()["resolved"].get(key)
        if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
            return {str(k): str(v) for k, v in value.items()}
        return None

    def remember_resolution(self, key: str, value: dict[str, str]) -> None:
        data = self._read()
        data["resolved"][key] = value
        self._write(data)

    def built_wheel(self, key: str) -> Path | None:
        folder = self.root / "built" / key
        wheels = sorted(folder.glob("*.whl")) if folder.is_dir() else []
        return wheels[0] if len(wheels) == 1 else None

    def built_patches(self, key: str) -> list[str]:
        """What the build of a cached wheel patched in its copy of the source (none: [])."""
        try:
            data = json.loads((self.root / "built" / key / _PATCHES).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        return [p for p in data if isinstance(p, str)] if isinstance(data, list) else []

    def store_built(self, key: str, wheel: Path, patches: list[str] | None = None) -> Path:
        folder = self.root / "built" / key
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        if patches:  # a wheel from the cache is recorded as the build recorded it
            (folder / _PATCHES).write_text(json.dumps(patches), encoding="utf-8")
        target = folder / wheel.name
        shutil.copy2(wheel, target)
        return target
