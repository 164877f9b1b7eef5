"""Load and validate `wheels_index.toml`, the curated compatibility index.

The file is treated as hostile: unknown keys, non-https URLs, bad specifiers and wheel names
that disagree with their own fields are errors that name the file and the entry.
"""

from __future__ import annotations

import math
import re
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from ..decide.versions import cc_tuple, minor_of, parse_sage_local, parse_version
from ..errors import SagedoctorError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[import-not-found, no-redef, unused-ignore]

INDEX_SCHEMA_VERSION = 1
SHIPPED_INDEX = Path(__file__).parent.parent / "wheels_index.toml"
SHA256_SOURCES = ("third-party", "github-api", "measured")


class IndexError_(SagedoctorError):
    code = "SD903"

    def __init__(self, source: str, where: str, problem: str) -> None:
        # A file that cannot be read at all has no entry to fix.
        fix = ("pass an index file that exists and is readable TOML with --index FILE, or "
               "leave --index out for the shipped index (docs: index-format.md)"
               if where == "file" else
               "fix that entry, or pass another index with --index FILE "
               "(docs: index-format.md)")
        super().__init__(f"{source}: {where}: {problem}" if where else f"{source}: {problem}",
                         fix)


@dataclass(frozen=True)
class TritonPair:
    torch: tuple[int, int]
    windows: SpecifierSet | None  # triton-windows specifier; None: unknown
    linux: tuple[int, int] | None  # the triton minor torch pins on Linux

    @property
    def windows_minor(self) -> tuple[int, int] | None:
        """The minor a '>=3.6,<3.7' specifier names."""
        for spec in self.windows or ():
            if spec.operator == ">=":
                release = Version(spec.version).release
                return (release[0], release[1] if len(release) > 1 else 0)
        return None


@dataclass(frozen=True)
class TritonRules:
    windows_package: str
    turing_spec: SpecifierSet
    windows_unknown: tuple[tuple[int, int], ...]
    pairs: tuple[TritonPair, ...]
    # triton-windows minors released on PyPI; a derived pairing must name one of them
    windows_releases: tuple[tuple[int, int], ...] = ()

    def pair_for(self, torch_version: str) -> TritonPair | None:
        minor = minor_of(torch_version)
        return next((p for p in self.pairs if p.torch == minor), None)


@dataclass(frozen=True)
class WindowsWheel:
    file: str
    release: str
    url: str
    version: str  # "2.2.0+cu130torch2.10.0andhigher.post6"
    cuda: str  # "13.0"
    cuda_major: int
    torch: SpecifierSet
    and_higher: bool
    post: int | None
    tags: frozenset[str]  # "cp310-abi3-win_amd64", ...
    python_min: tuple[int, int]
    sha256: str | None = None
    sha256_source: str | None = None
    problems: tuple[str, ...] = ()
    broken_archs: tuple[str, ...] = ()  # compute capabilities its kernels are wrong on


@dataclass(frozen=True)
class RejectedRef:
    ref: str
    commit: str
    reason: str


@dataclass(frozen=True)
class SourceSpec:
    repository: str
    commit: str
    archive: str
    archs: tuple[str, ...]
    min_nvcc: dict[str, str] = field(hash=False)
    build_requires: tuple[str, ...]
    gib_per_nvcc_thread: float
    reserve_gib: float
    archive_sha256: str | None = None
    rejected: tuple[RejectedRef, ...] = ()


@dataclass(frozen=True)
class LinuxIndex:
    name: str
    url: str
    cuda: str
    torch: SpecifierSet
    version: str  # template with {cuda} and {torch} (the torch minor, "2.11")
    # Provenance: what the third party builds from, and where that build is known broken.
    source_repository: str = ""
    source_ref: str = ""
    broken_archs: tuple[str, ...] = ()
    builder: str | None = None  # the build recipe (workflow) that makes these wheels
    archs: tuple[str, ...] = ()  # TORCH_CUDA_ARCH_LIST of its builds; empty: not recorded

    def broken_on(self, archs: list[str]) -> list[str]:
        return [cc for cc in archs if cc in self.broken_archs]

    def missing_for(self, archs: list[str]) -> list[str]:
        """GPUs its builds carry no kernels for (upstream builds a module per exact arch)."""
        return [cc for cc in archs if self.archs and cc not in self.archs]

    def version_for(self, torch_version: str) -> str | None:
        minor = minor_of(torch_version)
        if minor is None:
            return None
        return self.version.format(cuda=self.cuda, torch=f"{minor[0]}.{minor[1]}")


@dataclass(frozen=True)
class WheelIndex:
    source: str  # the file it came from
    updated: str
    triton: TritonRules
    release_base: str
    windows_wheels: tuple[WindowsWheel, ...]
    windows_archs: tuple[str, ...]
    windows_archs_cuda_12_8: tuple[str, ...]
    build: SourceSpec
    linux_indexes: tuple[LinuxIndex, ...] = ()
    windows_source: str = ""  # the repository the Windows wheels are built from

    def min_nvcc_for(self, cc: str) -> str:
        return self.build.min_nvcc.get(cc, "12.0")


# --- strict table reading ----------------------------------------------------------------

class TomlTable:
    """Reads keys from one TOML table, then rejects whatever was not read."""

    def __init__(self, data: object, where: str, source: str) -> None:
        if not isinstance(data, dict):
            raise IndexError_(source, where, "expected a table")
        self.data: dict[str, Any] = data
        self.where = where
        self.source = source
        self.seen: set[str] = set()

    def fail(self, problem: str) -> IndexError_:
        return IndexError_(self.source, self.where, problem)

    def _get(self, key: str, kind: type | tuple[type, ...], required: bool) -> Any:
        self.seen.add(key)
        if key not in self.data:
            if required:
                raise self.fail(f"missing key {key!r}")
            return None
        value = self.data[key]
        if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
            raise self.fail(f"{key!r} has the wrong type ({type(value).__name__})")
        return value

    def text(self, key: str, required: bool = True) -> Any:
        return self._get(key, str, required)

    def number(self, key: str) -> float:
        try:
            value = float(self._get(key, (int, float), True))
        except OverflowError:  # an integer of 400 digits
            raise self.fail(f"{key!r} is out of range") from None
        if not math.isfinite(value):  # nan passes every `> 0` check: each compare is false
            raise self.fail(f"{key!r} must be a finite number, got {value}")
        return value

    def texts(self, key: str, required: bool = True) -> tuple[str, ...]:
        value = self._get(key, list, required)
        if value is None:
            return ()
        if not all(isinstance(v, str) for v in value):
            raise self.fail(f"{key!r} must be a list of strings")
        return tuple(value)

    def table(self, key: str, required: bool = True) -> TomlTable | None:
        value = self._get(key, dict, required)
        return None if value is None else TomlTable(value, f"{self.where}.{key}".lstrip("."),
                                                 self.source)

    def tables(self, key: str, required: bool = True) -> list[TomlTable]:
        value = self._get(key, list, required) or []
        return [TomlTable(v, f"{self.where}.{key}[{i}]".lstrip("."), self.source)
                for i, v in enumerate(value)]

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.seen)
        if unknown:
            raise self.fail(f"unknown key(s) {', '.join(unknown)}")


# Where the index's GitHub links must point: a release, a repository, an archive of a commit.
GITHUB_HOSTS = frozenset({"github.com"})


def _https(table: TomlTable, key: str, url: str, hosts: frozenset[str] | None = None) -> str:
    try:
        parts = urlsplit(url)
        host, _port = parts.hostname, parts.port  # a port that is no number raises here
    except ValueError:  # "https://[::1": urlsplit refuses it
        raise table.fail(f"{key!r} must be an https URL, got {url!r}") from None
    if parts.scheme != "https" or not parts.netloc or not host:
        raise table.fail(f"{key!r} must be an https URL, got {url!r}")
    if "@" in parts.netloc:  # https://github.com@evil.example.com/ reads as github.com
        raise table.fail(f"{key!r} must not carry a user name or password, got {url!r}")
    if hosts is not None and host not in hosts:
        raise table.fail(f"{key!r} must be on {', '.join(sorted(hosts))}, got {url!r}")
    return url


def _spec(table: TomlTable, key: str, text: str) -> SpecifierSet:
    try:
        return SpecifierSet(text)
    except InvalidSpecifier:
        raise table.fail(f"{key!r} is not a version specifier: {text!r}") from None


def _minor(table: TomlTable, key: str, text: str) -> tuple[int, int]:
    match = re.fullmatch(r"(\d+)\.(\d+)", text)
    if match is None:
        raise table.fail(f"{key!r} must be MAJOR.MINOR, got {text!r}")
    return int(match.group(1)), int(match.group(2))


def _cc(table: TomlTable, key: str, values: tuple[str, ...]) -> tuple[str, ...]:
    for value in values:
        if cc_tuple(value) is None:
            raise table.fail(f"{key!r}: {value!r} is not a compute capability like 8.9")
    return values


# --- sections ------------------------------------------------------------------------------

def _triton(table: TomlTable) -> TritonRules:
    pairs = []
    for row in table.tables("pairs"):
        torch = _minor(row, "torch", row.text("torch"))
        windows = row.text("windows", required=False)
        linux = row.text("linux", required=False)
        pairs.append(TritonPair(
            torch=torch,
            windows=_spec(row, "windows", windows) if windows is not None else None,
            linux=_minor(row, "linux", linux) if linux is not None else None,
        ))
        row.done()
    rules = TritonRules(
        windows_package=table.text("windows_package"),
        turing_spec=_spec(table, "turing_spec", table.text("turing_spec")),
        windows_unknown=tuple(_minor(table, "windows_unknown", v)
                              for v in table.texts("windows_unknown", required=False)),
        pairs=tuple(pairs),
        windows_releases=tuple(_minor(table, "windows_releases", v)
                               for v in table.texts("windows_releases", required=False)),
    )
    table.done()
    return rules


def parse_windows_wheel(row: TomlTable, release_base: str) -> WindowsWheel:
    file = row.text("file")
    row.where = f"{row.where} ({file})"
    if "/" in file or "\\" in file or ".." in file:
        raise row.fail("a file name must not hold path separators or '..'")
    try:
        name, version, _build, tags = parse_wheel_filename(file)
    except InvalidWheelFilename as exc:
        raise row.fail(f"not a wheel file name: {exc}") from None
    if name != "sageattention":
        raise row.fail(f"a wheel of {name!r}, not sageattention")
    label = parse_sage_local(str(version))
    if label is None:
        raise row.fail("its version has no cuXXXtorchA.B.C label")
    tag_names = frozenset(str(t) for t in tags)
    if not all(t.platform == "win_amd64" for t in tags):
        raise row.fail("not a win_amd64 wheel")
    pythons = []
    for tag in tags:
        match = re.fullmatch(r"cp3(\d+)", tag.interpreter)
        if match is None:
            raise row.fail(f"unexpected interpreter tag {tag.interpreter!r}")
        pythons.append((3, int(match.group(1))))
    release = row.text("release")
    if not re.fullmatch(r"v[\w.\-]+", release):
        raise row.fail(f"bad release tag {release!r}")
    torch = _spec(row, "torch", row.text("torch"))
    built_for = ".".join(map(str, label.torch))
    if not torch.contains(built_for):
        raise row.fail(f"torch range {torch} does not contain {built_for}, the torch it names")
    sha256 = row.text("sha256", required=False)
    if sha256 is not None and not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise row.fail("sha256 must be 64 lower-case hex digits")
    sha256_source = row.text("sha256_source", required=False)
    if (sha256 is None) != (sha256_source is None):
        raise row.fail("sha256 and sha256_source come together")
    if sha256_source is not None and sha256_source not in SHA256_SOURCES:
        raise row.fail(f"sha256_source must be one of {', '.join(SHA256_SOURCES)}")
    problems = row.texts("problems", required=False)
    broken_archs = _cc(row, "broken_archs", row.texts("broken_archs", required=False))
    row.done()
    major = label.cuda_major
    cuda_minor = label.cuda_label[len(f"cu{major}"):]
    return WindowsWheel(
        file=file, release=release,
        url=f"{release_base}{release}/{quote(file, safe='')}",
        version=str(version), cuda=f"{major}.{cuda_minor}", cuda_major=major,
        torch=torch, and_higher=label.and_higher, post=label.post, tags=tag_names,
        python_min=min(pythons), sha256=sha256, sha256_source=sha256_source,
        problems=problems, broken_archs=broken_archs,
    )


def _build_requires(table: TomlTable) -> tuple[str, ...]:
    """PEP 508 requirements, each a name with optional version, extras and marker, or a
    name @ an https URL: they reach uv's command line, where an option (--index-url=http...)
    or an http/file/VCS URL would be obeyed."""
    from packaging.requirements import InvalidRequirement, Requirement

    entries = table.texts("build_requires")
    for entry in entries:
        problem = None
        if entry != entry.strip() or entry.startswith("-") or any(
                c in entry for c in "\r\n\0"):
            problem = "is an option or holds a line break, not a requirement"
        else:
            try:
                url = Requirement(entry).url
            except InvalidRequirement:
                problem = "is not a PEP 508 requirement"
            else:
                if url is not None:
                    try:
                        parts = urlsplit(url)
                    except ValueError:
                        parts = None
                    if (parts is None or parts.scheme != "https" or not parts.hostname
                            or parts.username is not None or parts.password is not None):
                        problem = ("names a URL that is not https (or that holds a user "
                                   "or password)")
        if problem is not None:
            raise table.fail(f"build_requires: {entry[:80]!r} {problem}")
    return entries


def _source(table: TomlTable) -> SourceSpec:
    repository = _https(table, "repository", table.text("repository"), GITHUB_HOSTS)
    commit = table.text("commit")
    if not re.fullmatch(r"[0-9a-f]{40}", commit):
        raise table.fail("commit must be a full 40-digit hash")
    archive = _https(table, "archive", table.text("archive"), GITHUB_HOSTS)
    archs = _cc(table, "archs", table.texts("archs"))
    min_table = table.table("min_nvcc")
    assert min_table is not None
    min_nvcc: dict[str, str] = {}
    for cc in _cc(min_table, "min_nvcc", tuple(min_table.data)):
        value = min_table.text(cc)
        if parse_version(value) is None:
            raise min_table.fail(f"{cc}: {value!r} is not a version")
        min_nvcc[cc] = value
    min_table.done()
    rejected = []
    for row in table.tables("rejected", required=False):
        rejected.append(RejectedRef(row.text("ref"), row.text("commit"), row.text("reason")))
        row.done()
    archive_sha256 = table.text("archive_sha256", required=False)
    if archive_sha256 is not None and not re.fullmatch(r"[0-9a-f]{64}", archive_sha256):
        raise table.fail("archive_sha256 must be 64 lower-case hex digits")
    spec = SourceSpec(
        repository=repository, commit=commit, archive=archive, archs=archs, min_nvcc=min_nvcc,
        build_requires=_build_requires(table),
        gib_per_nvcc_thread=table.number("gib_per_nvcc_thread"),
        reserve_gib=table.number("reserve_gib"),
        archive_sha256=archive_sha256,
        rejected=tuple(rejected),
    )
    if spec.gib_per_nvcc_thread <= 0 or spec.reserve_gib < 0:
        raise table.fail("gib_per_nvcc_thread must be > 0 and reserve_gib >= 0")
    if any(r.commit.startswith(commit[:7]) or commit.startswith(r.commit[:7])
           for r in spec.rejected):
        raise table.fail("the pinned commit is one of the rejected ones")
    table.done()
    return spec


def _linux_index(row: TomlTable) -> LinuxIndex:
    entry = LinuxIndex(
        name=row.text("name"),
        url=_https(row, "url", row.text("url")),
        cuda=row.text("cuda"),
        torch=_spec(row, "torch", row.text("torch")),
        version=row.text("version"),
        source_repository=_https(row, "source_repository", row.text("source_repository"),
                                 GITHUB_HOSTS),
        source_ref=row.text("source_ref"),
        broken_archs=_cc(row, "broken_archs", row.texts("broken_archs")),
        builder=row.text("builder", required=False),
        archs=_cc(row, "archs", row.texts("archs", required=False)),
    )
    if entry.builder is not None:
        _https(row, "builder", entry.builder, GITHUB_HOSTS)
    if not re.fullmatch(r"[\w.\-/]+", entry.source_ref):
        raise row.fail(f"bad source_ref {entry.source_ref!r}")
    _minor(row, "cuda", entry.cuda)
    try:
        made = Version(entry.version.format(cuda="12.8", torch="2.10"))
    except (KeyError, IndexError, ValueError, AttributeError, TypeError):  # "{cuda.real}"
        raise row.fail(f"'version' template {entry.version!r} does not make a version") from None
    if parse_sage_local(str(made)) is None:
        raise row.fail(f"'version' template {entry.version!r} makes no cuXYtorchA.B label")
    row.done()
    return entry


def parse_index(data: object, source: str) -> WheelIndex:
    top = TomlTable(data, "", source)
    version = top._get("schema_version", int, True)
    if version != INDEX_SCHEMA_VERSION:
        raise top.fail(f"schema_version {version} is not supported "
                       f"(this sagedoctor reads {INDEX_SCHEMA_VERSION})")
    meta = top.table("meta")
    assert meta is not None
    updated = meta.text("updated")
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", updated):
        raise meta.fail("updated must be YYYY-MM-DD")
    meta.done()
    triton_table = top.table("triton")
    assert triton_table is not None
    windows = top.table("windows")
    assert windows is not None
    release_base = _https(windows, "release_base", windows.text("release_base"), GITHUB_HOSTS)
    windows_source = windows.text("source_repository", required=False) or ""
    if windows_source:
        _https(windows, "source_repository", windows_source, GITHUB_HOSTS)
    if not release_base.endswith("/"):
        raise windows.fail("release_base must end with '/'")
    wheels = tuple(parse_windows_wheel(row, release_base) for row in windows.tables("wheels"))
    files = [w.file for w in wheels]
    if len(set(files)) != len(files):
        raise windows.fail("a wheel is listed twice")
    archs = windows.table("archs")
    assert archs is not None
    windows_archs = _cc(archs, "all", archs.texts("all"))
    cuda_12_8 = _cc(archs, "cuda_12_8", archs.texts("cuda_12_8"))
    archs.done()
    windows.done()
    source_table = top.table("source")
    assert source_table is not None
    index = WheelIndex(
        source=source, updated=updated, triton=_triton(triton_table),
        release_base=release_base, windows_wheels=wheels, windows_archs=windows_archs,
        windows_archs_cuda_12_8=cuda_12_8, build=_source(source_table),
        linux_indexes=tuple(_linux_index(row)
                            for row in top.tables("linux_indexes", required=False)),
        windows_source=windows_source,
    )
    rejected = {r.ref: r for r in index.build.rejected}
    for number, entry in enumerate(index.linux_indexes):
        if entry.source_ref in rejected and not entry.broken_archs:
            raise IndexError_(source, f"linux_indexes[{number}]",
                              f"built from {entry.source_ref}, which [source] rejects "
                              f"({rejected[entry.source_ref].reason}); name its broken_archs")
    top.done()
    return index


MAX_INDEX_BYTES = 16 * 1024 * 1024  # the shipped index is about 30 kB


def load_index_file(path: Path) -> WheelIndex:
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):  # a FIFO would block the read
            raise IndexError_(str(path), "file", "not a regular file")
        if info.st_size > MAX_INDEX_BYTES:
            raise IndexError_(str(path), "file", f"larger than {MAX_INDEX_BYTES // 2**20} MB")
        raw = path.read_bytes()
    except OSError as exc:
        raise IndexError_(str(path), "file", f"cannot read it: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise IndexError_(str(path), "file", f"not UTF-8 text (byte {exc.start})") from None
    return parse_index(parse_toml(text, str(path)), str(path))


def parse_toml(text: str, source: str) -> dict[str, Any]:
    try:
        data: dict[str, Any] = tomllib.loads(text)
        return data
    except tomllib.TOMLDecodeError as exc:
        raise IndexError_(source, "file", f"not valid TOML: {exc}") from exc
    except RecursionError:
        raise IndexError_(source, "file", "not valid TOML: nested too deeply") from None


def user_index_path() -> Path:
    from ..folders import app_folder

    return app_folder("config") / "wheels_index.toml"


def load_index(path: Path | None = None) -> WheelIndex:
    """`--index FILE` if given; else the newer of the refreshed copy and the shipped one."""
    if path is not None:
        return load_index_file(path)
    shipped = load_index_file(SHIPPED_INDEX)
    refreshed = user_index_path()
    if refreshed.is_file():
        user = load_index_file(refreshed)
        if user.updated >= shipped.updated:
            return user
    return shipped


_SHIPPED: list[WheelIndex] = []


def shipped_index() -> WheelIndex:
    """The index inside the package, loaded once (check uses it for the triton pairing)."""
    if not _SHIPPED:
        _SHIPPED.append(load_index_file(SHIPPED_INDEX))
    return _SHIPPED[0]


def spec_text(spec: SpecifierSet) -> str:
    """'>=3.6,<3.7', lower bound first (SpecifierSet's own str sorts '<' first)."""
    return ",".join(sorted((str(s) for s in spec), key=lambda s: (not s.startswith(">"), s)))


def wheel_supported_by(wheel: WindowsWheel, target_tags: tuple[str, ...]) -> bool:
    """The wheel installs on an interpreter with these tags (the packaging way: tag overlap)."""
    return any(tag in wheel.tags for tag in target_tags)
