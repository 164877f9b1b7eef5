"""HTTPS downloads with a digest check; nothing unverified is ever installed silently."""

from __future__ import annotations

import hashlib
import tarfile
from pathlib import Path
from urllib.parse import urlsplit

from .runner import InstallError


def download(url: str, dest: Path, sha256: str | None, *, allow_http_host: str | None = None,
             timeout: float = 60.0) -> str:
    """Stream `url` to `dest`; returns the sha256. A known digest must match."""
    import httpx

    parts = urlsplit(url)
    if parts.scheme != "https" and not (parts.scheme == "http"
                                        and parts.hostname == allow_http_host):
        raise InstallError(f"refusing to download over {parts.scheme}: {url}",
                           "only https URLs are used")
    digest = hashlib.sha256()
    partial = dest.with_name(dest.name + ".part")
    try:
        with httpx.stream("GET", url, follow_redirects=True, timeout=timeout) as response, \
                partial.open("wb") as handle:
            if response.status_code != 200:
                raise InstallError(f"downloading {url}: HTTP {response.status_code}",
                                   "check the network, or pass --source DIR")
            for chunk in response.iter_bytes():
                digest.update(chunk)
                handle.write(chunk)
    except httpx.HTTPError as exc:
        partial.unlink(missing_ok=True)
        raise InstallError(f"downloading {url}: {exc}", "check the network") from exc
    got = digest.hexdigest()
    if sha256 is not None and got != sha256:
        partial.unlink(missing_ok=True)
        raise InstallError(f"{url}: sha256 {got} does not match the index's {sha256}",
                           "the file differs from the one the index names; nothing was "
                           "installed")
    partial.replace(dest)
    return got


def extract_source(archive: Path, dest: Path) -> Path:
    """Unpack a source .tar.gz safely (no absolute paths, links out or devices)."""
    try:
        with tarfile.open(archive, "r:gz") as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, filter="data")
            else:  # Python < 3.10.12 / 3.11.4: the same rules by hand
                for member in tar.getmembers():
                    parts = Path(member.name).parts
                    if (member.name.startswith(("/", "\\")) or ".." in parts
                            or not (member.isfile() or member.isdir())):
                        raise tarfile.TarError(f"unsafe member {member.name!r}")
                tar.extractall(dest)
    except (tarfile.TarError, OSError) as exc:
        raise InstallError(f"{archive.name} could not be unpacked safely: {exc}",
                           "nothing was installed; the archive may be damaged or hostile") \
            from exc
    roots = [p for p in dest.iterdir() if p.is_dir()]
    if len(roots) != 1:
        raise InstallError(f"{archive.name} does not hold one source folder", "")
    return roots[0]
