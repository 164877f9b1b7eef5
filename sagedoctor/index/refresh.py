"""`sagedoctor index refresh`: read the fork's releases from the GitHub API and write an
updated index to the user's config folder (never the shipped file).

The API answer is hostile input: only assets whose name is a SageAttention win_amd64 wheel and
whose URL is exactly the release download URL are taken; digests must look like sha256.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ..decide.versions import parse_sage_local
from ..errors import SagedoctorError
from ..file_meta import write_atomic
from . import (
    TomlTable,
    WheelIndex,
    WindowsWheel,
    load_index_file,
    parse_index,
    parse_toml,
    parse_windows_wheel,
    spec_text,
)

GITHUB_API = "https://api.github.com"
PYPI_SIMPLE = "https://pypi.org/simple"
MAX_VERSIONS = 20000
RELEASES_PATH = "/repos/woct0rdho/SageAttention/releases"
MAX_PAGES = 10


class RefreshError(SagedoctorError):
    code = "SD904"


REFRESH_TIMEOUT_ENV = "SAGEDOCTOR_REFRESH_TIMEOUT"
REFRESH_TIMEOUT_S = 120.0  # the whole refresh: every request, every page
_T = TypeVar("_T")


def within(deadline: float, budget: float, what: str, work: Callable[[], _T]) -> _T:
    """``work()``, or RefreshError once ``deadline`` (time.monotonic) passes: httpx's
    timeout is per read, so a server sending a byte a second would hold a request forever.
    The request left behind runs in a daemon thread, which ends with the process."""
    import threading
    import time

    done: list[_T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(work())
        except BaseException as exc:  # handed to the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(max(0.0, deadline - time.monotonic()))
    if thread.is_alive():
        raise RefreshError(f"{what}: no whole answer within {budget:g} s (a stalled or very "
                           "slow server); nothing was written",
                           f"check the network; {REFRESH_TIMEOUT_ENV} sets the limit in seconds")
    if failed:
        raise failed[0]
    return done[0]


def _check_api(api: str) -> str:
    parts = urlsplit(api)
    # Plain http only for a server on this machine (tests, a local mirror).
    if parts.scheme == "https" or (parts.scheme == "http"
                                   and parts.hostname in ("127.0.0.1", "localhost", "::1")):
        return api.rstrip("/")
    raise RefreshError(f"{api}: the API must be https", "pass an https URL with --api")


def fetch_releases(api: str = GITHUB_API, timeout: float = 30.0) -> list[Any]:
    import httpx

    base = _check_api(api)
    headers = {"Accept": "application/vnd.github+json", "User-Agent": "sagedoctor"}
    token = os.environ.get("GITHUB_TOKEN")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    releases: list[Any] = []
    url: str | None = f"{base}{RELEASES_PATH}?per_page=100"
    pages = 0
    with httpx.Client(timeout=timeout, headers=headers, follow_redirects=False) as client:
        while url and pages < MAX_PAGES:
            try:
                response = client.get(url)
            except httpx.HTTPError as exc:
                raise RefreshError(f"GitHub API: {exc}", "check the network, or set "
                                   "GITHUB_TOKEN if you hit the rate limit") from exc
            if response.status_code != 200:
                raise RefreshError(f"GitHub API answered HTTP {response.status_code} for {url}",
                                   "set GITHUB_TOKEN if this is the rate limit (403)")
            try:
                page = response.json()
            except (ValueError, RecursionError) as exc:  # also not UTF-8, or nested too deeply
                raise RefreshError("GitHub API answered something that is not JSON", "") \
                    from exc
            if not isinstance(page, list):
                raise RefreshError("GitHub API answer is not a list of releases", "")
            releases += page
            pages += 1
            next_link = response.links.get("next", {}).get("url")
            url = next_link if next_link and next_link.startswith(base) else None
    return releases


def fetch_versions(name: str, base: str = PYPI_SIMPLE, timeout: float = 30.0) -> list[str]:
    """A project's versions from PyPI's simple API in its JSON form (PEP 691, `versions` of
    PEP 700): one small request, no wheel is downloaded."""
    import httpx

    root = _check_api(base)
    url = f"{root}/{name}/"
    try:
        with httpx.Client(timeout=timeout, follow_redirects=False, headers={
                "Accept": "application/vnd.pypi.simple.v1+json",
                "User-Agent": "sagedoctor"}) as client:
            response = client.get(url)
    except httpx.HTTPError as exc:
        raise RefreshError(f"{url}: {exc}", "check the network, or pass --pypi URL") from exc
    if response.status_code != 200:
        raise RefreshError(f"{url} answered HTTP {response.status_code}", "pass --pypi URL")
    try:
        data = response.json()
    except (ValueError, RecursionError) as exc:
        raise RefreshError(f"{url} answered something that is not JSON", "") from exc
    versions = data.get("versions") if isinstance(data, dict) else None
    if not isinstance(versions, list) or len(versions) > MAX_VERSIONS:
        raise RefreshError(f"{url}: no list of versions in the answer", "")
    return [v for v in versions if isinstance(v, str) and len(v) < 100]


def released_minors(versions: list[str]) -> list[tuple[int, int]]:
    """The minors with a final release (no pre-releases, local labels ignored), sorted."""
    out: set[tuple[int, int]] = set()
    for text in versions:
        try:
            version = Version(text)
        except InvalidVersion:
            continue
        if not (version.is_prerelease or version.is_devrelease) and len(version.release) >= 2:
            out.add((version.release[0], version.release[1]))
    return sorted(out)


@dataclass(frozen=True)
class Coverage:
    """What the index does not cover yet, against the registry and the fork's releases."""

    torch_without_row: tuple[str, ...]  # torch minors on PyPI with no [[triton.pairs]] row
    torch_without_windows: tuple[str, ...]  # a row, but no triton-windows pairing in it
    triton_windows_new: tuple[str, ...]  # triton-windows minors newer than every row
    new_wheels: tuple[str, ...]  # fork wheels the index did not list

    def as_dict(self) -> dict[str, list[str]]:
        return {"torch_minors_without_row": list(self.torch_without_row),
                "torch_minors_without_windows_pairing": list(self.torch_without_windows),
                "triton_windows_minors_newer_than_the_table": list(self.triton_windows_new),
                "new_fork_wheels": list(self.new_wheels)}


def _text(minor: tuple[int, int]) -> str:
    return f"{minor[0]}.{minor[1]}"


def coverage(index: WheelIndex, torch_versions: list[str], triton_windows_versions: list[str],
             new_wheels: list[str]) -> Coverage:
    """Pure: the registry's torch and triton-windows minors against the index's rows."""
    rows = {p.torch: p for p in index.triton.pairs}
    torch_minors = [m for m in released_minors(torch_versions) if m >= (2, 4)]
    tabled = [p.windows_minor for p in index.triton.pairs if p.windows_minor]
    newest_tabled = max(tabled, default=(0, 0))
    return Coverage(
        torch_without_row=tuple(_text(m) for m in torch_minors if m not in rows),
        torch_without_windows=tuple(_text(m) for m in torch_minors
                                    if m in rows and rows[m].windows is None),
        triton_windows_new=tuple(_text(m) for m in released_minors(triton_windows_versions)
                                 if m > newest_tabled),
        new_wheels=tuple(new_wheels))


def with_windows_releases(index: WheelIndex, triton_windows_versions: list[str]) -> WheelIndex:
    """The index knowing every triton-windows minor PyPI has, so a derived pairing for a newer
    torch can be planned (and SD147 lifts) once triton-windows releases that minor."""
    minors = sorted(set(index.triton.windows_releases)
                    | set(released_minors(triton_windows_versions)))
    return replace(index, triton=replace(index.triton, windows_releases=tuple(minors)))


def _torch_range(file: str) -> str | None:
    try:
        _name, version, _build, _tags = parse_wheel_filename(file)
    except InvalidWheelFilename:
        return None
    label = parse_sage_local(str(version))
    if label is None:
        return None
    major, minor, _patch = label.torch
    return f">={major}.{minor}" if label.and_higher else f">={major}.{minor},<{major}.{minor + 1}"


def wheels_from_releases(releases: list[Any], index: WheelIndex) -> tuple[list[WindowsWheel],
                                                                          list[str]]:
    """Wheels the API lists, each checked like an index entry, and what was skipped."""
    out: list[WindowsWheel] = []
    skipped: list[str] = []
    problems_by_release = {w.release: w.problems for w in index.windows_wheels if w.problems}
    for release in releases:
        if not isinstance(release, dict) or not isinstance(release.get("tag_name"), str):
            skipped.append("a release without a tag name")
            continue
        tag = release["tag_name"]
        if release.get("draft") is True:
            continue
        assets = release.get("assets") or []
        if not isinstance(assets, list):
            skipped.append(f"release {tag}: its assets are not a list")
            continue
        for asset in assets:
            if not isinstance(asset, dict) or not isinstance(asset.get("name"), str):
                continue
            name = asset["name"]
            if not (name.startswith("sageattention-") and name.endswith("-win_amd64.whl")):
                continue
            expected_url = f"{index.release_base}{tag}/{quote(name, safe='')}"
            url = asset.get("browser_download_url")
            if not isinstance(url, str) or url.replace("+", "%2B") != expected_url:
                skipped.append(f"{name}: unexpected download URL {url!r:.120}")
                continue
            torch_range = _torch_range(name)
            if torch_range is None:
                skipped.append(f"{name}: no cuXXXtorchA.B.C label")
                continue
            entry: dict[str, Any] = {"file": name, "release": tag, "torch": torch_range}
            digest = asset.get("digest")
            if isinstance(digest, str) and re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
                entry.update(sha256=digest.split(":", 1)[1], sha256_source="github-api")
            if tag in problems_by_release:
                entry["problems"] = list(problems_by_release[tag])
            try:
                out.append(parse_windows_wheel(TomlTable(entry, f"release {tag}", "GitHub API"),
                                          index.release_base))
            except SagedoctorError as exc:
                skipped.append(f"{name}: {exc.message}")
    return out, skipped


def merge_wheels(index: WheelIndex, found: list[WindowsWheel]) -> tuple[WheelIndex, list[str]]:
    """Known wheels keep their curated torch range and problems and gain GitHub's digest;
    new ones are added. A third-party digest that GitHub contradicts is replaced, and said."""
    notes: list[str] = []
    by_file = {w.file: w for w in index.windows_wheels}
    merged = dict(by_file)
    for wheel in found:
        known = by_file.get(wheel.file)
        if known is None:
            merged[wheel.file] = wheel
            notes.append(f"new: {wheel.file}")
            continue
        if wheel.sha256 and known.sha256 and known.sha256 != wheel.sha256:
            notes.append(f"{wheel.file}: the {known.sha256_source} digest {known.sha256[:12]}… "
                         f"differs from GitHub's {wheel.sha256[:12]}…; GitHub's is kept")
        if wheel.sha256:
            merged[wheel.file] = replace(known, sha256=wheel.sha256, sha256_source="github-api")
    return replace(index, windows_wheels=tuple(merged.values())), notes


# --- writing an index back as TOML -----------------------------------------------------------

def _q(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a TOML basic string


def _list(items: tuple[str, ...] | list[str]) -> str:
    return "[" + ", ".join(_q(i) for i in items) + "]"


def dump_index(index: WheelIndex, updated: str) -> str:
    lines = ["# Written by `sagedoctor index refresh`; the shipped index is the template.",
             "schema_version = 1", "", "[meta]", f"updated = {_q(updated)}", "", "[triton]",
             f"windows_package = {_q(index.triton.windows_package)}",
             f"turing_spec = {_q(spec_text(index.triton.turing_spec))}",
             "windows_unknown = " + _list([f"{a}.{b}" for a, b in index.triton.windows_unknown]),
             "windows_releases = " + _list([f"{a}.{b}" for a, b in
                                            index.triton.windows_releases])]
    for pair in index.triton.pairs:
        lines += ["", "[[triton.pairs]]", f"torch = {_q(f'{pair.torch[0]}.{pair.torch[1]}')}"]
        if pair.windows is not None:
            lines.append(f"windows = {_q(spec_text(pair.windows))}")
        if pair.linux is not None:
            lines.append(f"linux = {_q(f'{pair.linux[0]}.{pair.linux[1]}')}")
    lines += ["", "[windows]", f"release_base = {_q(index.release_base)}"]
    if index.windows_source:
        lines.append(f"source_repository = {_q(index.windows_source)}")
    for wheel in index.windows_wheels:
        lines += ["", "[[windows.wheels]]", f"file = {_q(wheel.file)}",
                  f"release = {_q(wheel.release)}", f"torch = {_q(spec_text(wheel.torch))}"]
        if wheel.sha256:
            lines += [f"sha256 = {_q(wheel.sha256)}",
                      f"sha256_source = {_q(wheel.sha256_source or '')}"]
        if wheel.problems:
            lines.append(f"problems = {_list(wheel.problems)}")
        if wheel.broken_archs:
            lines.append(f"broken_archs = {_list(wheel.broken_archs)}")
    build = index.build
    lines += ["", "[windows.archs]", f"all = {_list(index.windows_archs)}",
              f"cuda_12_8 = {_list(index.windows_archs_cuda_12_8)}", "", "[source]",
              f"repository = {_q(build.repository)}", f"commit = {_q(build.commit)}",
              f"archive = {_q(build.archive)}", f"archs = {_list(build.archs)}",
              f"build_requires = {_list(build.build_requires)}",
              f"gib_per_nvcc_thread = {build.gib_per_nvcc_thread!r}",
              f"reserve_gib = {build.reserve_gib!r}"]
    if build.archive_sha256:
        lines.append(f"archive_sha256 = {_q(build.archive_sha256)}")
    lines += ["", "[source.min_nvcc]"] + [f"{_q(cc)} = {_q(v)}" for cc, v in
                                          build.min_nvcc.items()]
    for ref in build.rejected:
        lines += ["", "[[source.rejected]]", f"ref = {_q(ref.ref)}", f"commit = {_q(ref.commit)}",
                  f"reason = {_q(ref.reason)}"]
    for entry in index.linux_indexes:
        lines += ["", "[[linux_indexes]]", f"name = {_q(entry.name)}", f"url = {_q(entry.url)}",
                  f"cuda = {_q(entry.cuda)}", f"torch = {_q(spec_text(entry.torch))}",
                  f"version = {_q(entry.version)}",
                  f"source_repository = {_q(entry.source_repository)}",
                  f"source_ref = {_q(entry.source_ref)}",
                  f"broken_archs = {_list(entry.broken_archs)}"]
        if entry.builder:
            lines.append(f"builder = {_q(entry.builder)}")
        if entry.archs:
            lines.append(f"archs = {_list(entry.archs)}")
    return "\n".join(lines) + "\n"


def write_index(index: WheelIndex, path: Path, updated: str) -> None:
    """Write atomically, and only what loads back as a valid index."""
    text = dump_index(index, updated)
    parse_index(parse_toml(text, str(path)), str(path))
    write_atomic(path, text.encode("utf-8"))
    load_index_file(path)


def today() -> str:
    return _dt.date.today().isoformat()
