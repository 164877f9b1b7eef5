"""HTTPS downloads with a digest check and a size bound; nothing unverified is ever installed
silently. Redirects are followed by hand: only to the same host, or to the one download host a
known site hands files to (GitHub releases, PyPI)."""

from __future__ import annotations

import hashlib
import re
import tarfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

from .errors import DamagedDownload, HostileDownload
from .integrity import archive_problem
from .runner import InstallError

MAX_DOWNLOAD_BYTES = 2 << 30  # 2 GiB: SageAttention wheels are tens of MB
MAX_PAGE_BYTES = 16 << 20
_MAX_REDIRECTS = 5
# Hosts a site hands its files to; any other cross-host redirect is refused.
TRUSTED_REDIRECTS = {
    "github.com": frozenset({"objects.githubusercontent.com",
                             "release-assets.githubusercontent.com", "codeload.github.com"}),
    "api.github.com": frozenset({"github.com"}),
    "pypi.org": frozenset({"files.pythonhosted.org"}),
}
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost"})


def check_url(url: str, allow_http_host: str | None = None) -> None:
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return
    if parts.scheme == "http" and parts.hostname is not None and (
            parts.hostname == allow_http_host):
        return
    raise InstallError(f"refusing to download over {parts.scheme or 'no scheme'}: {url}",
                       "only https URLs are used (http only for 127.0.0.1 or localhost)")


def redirect_allowed(source: str, target: str) -> bool:
    try:
        a, b = urlsplit(source), urlsplit(target)
        if b.scheme not in ("https", a.scheme):
            return False
        if (a.hostname, a.port) == (b.hostname, b.port):
            return True
    except ValueError:  # "http://[::1", a port past 65535: no URL we may go to
        return False
    return b.hostname in TRUSTED_REDIRECTS.get(a.hostname or "", frozenset())


def _open(client: Any, url: str, headers: dict[str, str]) -> Any:
    """A streaming response after same-host redirects; the caller closes it."""
    current = url
    for _ in range(_MAX_REDIRECTS + 1):
        response = client.send(client.build_request("GET", current, headers=headers),
                               stream=True)
        if response.status_code not in (301, 302, 303, 307, 308):
            return response
        location = response.headers.get("location", "")
        response.close()
        target = urljoin(current, location)
        if not redirect_allowed(current, target):
            raise HostileDownload(f"{url} redirects to another host: {target}",
                                  "refused; nothing was written. Check the index entry")
        current = target
    raise HostileDownload(f"{url}: more than {_MAX_REDIRECTS} redirects", "refused")


def download(url: str, dest: Path, sha256: str | None, *, allow_http_host: str | None = None,
             timeout: float = 60.0, max_bytes: int = MAX_DOWNLOAD_BYTES,
             report: Callable[[int, int | None], None] | None = None,
             report_every: float = 15.0,
             on_bytes: Callable[[int, int | None], None] | None = None) -> str:
    """Stream `url` to `dest`; returns the sha256. A known digest must match.

    `report(bytes so far, declared size or None)` is called every `report_every` seconds;
    on_bytes(received, declared size or None) as the body arrives (it may raise to stop the
    download: the partial file is removed)."""
    import httpx

    check_url(url, allow_http_host)
    digest = hashlib.sha256()
    partial = dest.with_name(dest.name + ".part")
    size = 0
    expected_size: int | None = None
    last_report = time.monotonic()
    try:
        with httpx.Client(timeout=timeout, follow_redirects=False) as client:
            response = _open(client, url, {})
            try:
                if response.status_code != 200:
                    raise InstallError(f"downloading {url}: HTTP {response.status_code}",
                                       "check the network, or pass --source DIR")
                declared = response.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > max_bytes:
                    raise HostileDownload(f"{url} is {int(declared)} bytes, over the bound of "
                                          f"{max_bytes}", "refused; nothing was installed")
                total = int(declared) if declared.isdigit() else None
                # A content-encoding's length is of the encoded body, not of what we store.
                encoded = response.headers.get("content-encoding", "identity").strip().lower()
                expected_size = total if encoded in ("", "identity") else None
                if on_bytes is not None:
                    on_bytes(0, total)
                with partial.open("wb") as handle:
                    for chunk in response.iter_bytes():
                        size += len(chunk)
                        if size > max_bytes:
                            raise HostileDownload(
                                f"{url} sent more than {max_bytes} bytes", "refused (an endless "
                                "download?); nothing was installed")
                        digest.update(chunk)
                        handle.write(chunk)
                        if report is not None and time.monotonic() - last_report >= report_every:
                            last_report = time.monotonic()
                            report(size, total)
                        if on_bytes is not None:
                            on_bytes(size, total)
            finally:
                response.close()
    except httpx.HTTPError as exc:
        partial.unlink(missing_ok=True)
        if expected_size is not None and size < expected_size:  # the server went away early
            raise _cut_short(url, size, expected_size) from exc
        raise InstallError(f"downloading {url}: {exc or type(exc).__name__}",
                           "check the network; nothing was installed") from exc
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    got = digest.hexdigest()
    if expected_size is not None and size != expected_size:
        partial.unlink(missing_ok=True)
        raise _cut_short(url, size, expected_size)
    if sha256 is not None and got != sha256:
        partial.unlink(missing_ok=True)
        raise InstallError(f"{url}: sha256 {got} does not match the index's {sha256}",
                           "the file differs from the one the index names; nothing was "
                           "installed")
    problem = archive_problem(partial, dest.name)
    if problem is not None:
        partial.unlink(missing_ok=True)
        pinned = ("; its sha256 is the one the index pins, so the index names a damaged file"
                  if sha256 is not None else "")
        raise DamagedDownload(f"{url}: the download is damaged: {problem}{pinned}",
                              "nothing was installed or cached; run again once the server "
                              "serves the whole file (or pass --source DIR)")
    partial.replace(dest)
    return got


def _cut_short(url: str, size: int, expected: int) -> DamagedDownload:
    return DamagedDownload(f"{url}: the download was cut short: the server sent {size} of the "
                           f"{expected} bytes it announced", "run again once the server sends "
                           "the whole file; nothing was installed or cached")


def get_json(url: str, *, allow_http_host: str | None = None, timeout: float = 30.0,
             headers: dict[str, str] | None = None) -> tuple[Any, str]:
    """(parsed JSON or text, content type) of a small page, size-bounded."""
    import json

    import httpx

    check_url(url, allow_http_host)
    body = bytearray()
    announced: int | None = None
    try:
        with httpx.Client(timeout=timeout, follow_redirects=False) as client:
            response = _open(client, url, headers or {})
            try:
                if response.status_code != 200:
                    raise InstallError(f"{url}: HTTP {response.status_code}", "check the network")
                declared = response.headers.get("content-length", "")
                encoded = response.headers.get("content-encoding", "identity").strip().lower()
                announced = int(declared) if declared.isdigit() and len(declared) < 19 \
                    and encoded in ("", "identity") else None
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > MAX_PAGE_BYTES:
                        raise HostileDownload(f"{url}: page over {MAX_PAGE_BYTES} bytes",
                                              "refused")
                kind = response.headers.get("content-type", "")
            finally:
                response.close()
    except httpx.HTTPError as exc:
        if announced is not None and len(body) < announced:  # the server went away early
            raise _cut_short(url, len(body), announced) from exc
        raise InstallError(f"{url}: {exc or type(exc).__name__}", "check the network") from exc
    text = bytes(body).decode("utf-8", errors="replace")
    if "json" in kind:
        try:
            return json.loads(text), kind
        except (ValueError, RecursionError) as exc:  # RecursionError: nested too deeply
            raise InstallError(f"{url}: not valid JSON", "") from exc
    return text, kind


_RELEASE_URL = re.compile(r"/([\w.\-]+)/([\w.\-]+)/releases/download/([^/]+)/([^/]+)")


def github_asset_digest(url: str, api: str, allow_http_host: str | None = None
                        ) -> tuple[str | None, str]:
    """(sha256 GitHub states for this release asset or None, why not)."""
    match = _RELEASE_URL.fullmatch(urlsplit(url).path)
    if match is None:
        return None, "not a GitHub release asset"
    owner, repo, tag, name = match.groups()
    try:
        data, _kind = get_json(f"{api.rstrip('/')}/repos/{owner}/{repo}/releases/tags/{tag}",
                               allow_http_host=allow_http_host,
                               headers={"Accept": "application/vnd.github+json"})
    except InstallError as exc:
        return None, f"GitHub's API could not be read ({exc.message[:100]})"
    assets = data.get("assets") if isinstance(data, dict) else None
    for asset in assets if isinstance(assets, list) else []:
        if isinstance(asset, dict) and asset.get("name") == name:
            digest = asset.get("digest")
            if isinstance(digest, str) and re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
                return digest.split(":", 1)[1], ""
            return None, "GitHub gives no digest for this asset (uploaded before June 2025)"
    return None, f"the release {tag} lists no asset {name}"


# SageAttention's source unpacks to a few MB: far above it, an archive is a bomb.
MAX_SOURCE_BYTES = 1 << 30
MAX_SOURCE_MEMBERS = 100_000


def extract_source(archive: Path, dest: Path, max_bytes: int = MAX_SOURCE_BYTES,
                   max_members: int = MAX_SOURCE_MEMBERS) -> Path:
    """Unpack a source .tar.gz safely (no absolute paths, links out or devices), bounded:
    the sizes its headers declare are summed before anything is written (a gzip bomb)."""
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members, total = [], 0
            for member in tar:  # each header is read before the data of the next
                members.append(member)
                total += max(member.size, 0)
                if total > max_bytes or len(members) > max_members:
                    raise InstallError(
                        f"{archive.name} unpacks to more than {max_bytes >> 20} MiB or "
                        f"{max_members} files: not a SageAttention source archive",
                        "nothing was unpacked or installed; the archive may be hostile")
            dest.mkdir(parents=True, exist_ok=True)
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, members=members, filter="data")
            else:  # Python < 3.10.12 / 3.11.4: the same rules by hand
                for member in members:
                    parts = Path(member.name).parts
                    if (member.name.startswith(("/", "\\")) or ".." in parts
                            or not (member.isfile() or member.isdir())):
                        raise tarfile.TarError(f"unsafe member {member.name!r}")
                tar.extractall(dest, members=members)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:  # EOFError: truncated
        raise InstallError(f"{archive.name} could not be unpacked safely: {exc}",
                           "nothing was installed; the archive may be damaged or hostile") \
            from exc
    roots = [p for p in dest.iterdir() if p.is_dir() and not p.is_symlink()]
    if len(roots) != 1:
        raise InstallError(f"{archive.name} does not hold one source folder (it holds "
                           f"{len(roots)})", "nothing was installed; pass a SageAttention "
                           "source archive")
    return roots[0]
