"""Choosing one wheel for the target from a PEP 503/691 simple index, so it can be downloaded
into the cache (digest-checked) before the venv is touched. Every link is hostile: its file
name must be one plain component and its host the index's own (or PyPI's file host)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from .cache import safe_file_name
from .errors import HostileDownload
from .fetch import get_json, redirect_allowed
from .runner import InstallError


@dataclass(frozen=True)
class IndexFile:
    name: str
    url: str
    sha256: str | None


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, bool]] = []  # (href, yanked)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            values = dict(attrs)
            if values.get("href"):
                self.links.append((str(values["href"]), "data-yanked" in values))


def _files(page: Any, kind: str, base: str) -> list[IndexFile]:
    raw: list[tuple[str, str | None, bool]] = []  # (url, sha256, yanked)
    if "json" in kind and isinstance(page, dict):
        for item in page.get("files") or []:
            if not isinstance(item, dict) or not isinstance(item.get("url"), str):
                continue
            hashes = item.get("hashes")
            sha = hashes.get("sha256") if isinstance(hashes, dict) else None
            sha = sha if isinstance(sha, str) else None
            try:
                url = urljoin(base, item["url"])
            except ValueError:
                continue
            raw.append((url, sha, bool(item.get("yanked"))))
    elif isinstance(page, str):
        parser = _Links()
        parser.feed(page)
        for href, yanked in parser.links:
            try:
                url = urljoin(base, href)
                fragment = urlsplit(url).fragment
            except ValueError:  # "http://[::1": not a link anything could be fetched from
                continue
            sha = fragment[7:] if fragment.startswith("sha256=") else None
            raw.append((url, sha, yanked))
    out = []
    for url, sha, yanked in raw:
        try:
            parts = urlsplit(url)
        except ValueError:
            continue
        clean = urlunsplit((parts.scheme, parts.netloc, parts.path, parts.query, ""))
        name = unquote(parts.path.rsplit("/", 1)[-1])
        if yanked or not name.endswith(".whl"):
            continue
        if not redirect_allowed(base, clean):
            raise HostileDownload(f"{base} links {name} on another host ({parts.hostname})",
                                  "refused; nothing was downloaded")
        if sha is not None and not (len(sha) == 64 and all(c in "0123456789abcdef"
                                                           for c in sha.lower())):
            sha = None
        out.append(IndexFile(safe_file_name(name, base), clean, sha.lower() if sha else None))
    return out


def choose_wheel(files: Sequence[IndexFile], requirement: str,
                 target_tags: Sequence[str]) -> IndexFile | None:
    """The newest matching version; among its files the one with the most preferred tag."""
    req = Requirement(requirement)
    want = canonicalize_name(req.name)
    rank = {tag: i for i, tag in enumerate(target_tags)}
    best: tuple[Any, int, IndexFile] | None = None
    for item in files:
        try:
            name, version, _build, tags = parse_wheel_filename(item.name)
        except InvalidWheelFilename:
            continue
        if name != want or not req.specifier.contains(version, prereleases=True):
            continue
        score = min((rank[str(t)] for t in tags if str(t) in rank), default=None)
        if score is None:
            continue
        key = (version, -score, item)
        if best is None or key[:2] > best[:2]:
            best = key
    return best[2] if best else None


def resolve_from_index(index_url: str, requirement: str, target_tags: Sequence[str],
                       allow_http_host: str | None = None) -> IndexFile:
    try:
        name = canonicalize_name(Requirement(requirement).name)
    except InvalidRequirement as exc:
        raise InstallError(f"not a requirement: {requirement!r}", "") from exc
    base = index_url.rstrip("/") + f"/{name}/"
    page, kind = get_json(base, allow_http_host=allow_http_host, headers={
        "Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"})
    chosen = choose_wheel(_files(page, kind, base), requirement, target_tags)
    if chosen is None:
        raise InstallError(f"{index_url} has no wheel of {requirement} for this Python",
                           "check the index, or build from source")
    return chosen
