"""Every step kind of the executor against a real local HTTP server, real uv and a real venv
(path with a space and non-ASCII): wheel download, triton-windows swap, index install, the
fallback build, leftovers cleanup; the smoke check rejecting a wrong kernel; the cache
(reinstall with zero requests, digests, offline); a server gone mid-download; progress on a
slow download and a long build."""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sagedoctor.install.cache import Cache
from sagedoctor.install.errors import DamagedDownload, HostileDownload, NotInCache
from sagedoctor.install.execute import Executor, installed_distributions
from sagedoctor.install.runner import Installer, InstallError
from sagedoctor.plan import Step, WheelDownload
from sagedoctor.state import read_install_record as read_record
from tests.standins import run_at_start_up
from tests.test_install_kit import (
    FAKE_SETUP,
    SAGE_GARBAGE,
    SAGE_GOOD,
    Site,
    add_installed_sage,
    fake_source,
    make_wheel,
    plan,
    sage_wheel,
    serve_index,
    serving,
    settings_for,
    torch_venv,
    tree_hashes,
)

COMMIT = "d1a57a546c3d395b1ffcbeecc66d81db76f3b4b5"


@pytest.fixture
def site() -> Iterator[Site]:
    with serving() as served:
        yield served


@pytest.fixture
def venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    monkeypatch.setenv("SAGEDOCTOR_SMOKE_DEVICE", "cpu")
    return torch_venv(tmp_path / "my venv ü")


def run(python: Path, tmp_path: Path, *steps: Step, **options: Any) -> tuple[Executor, str]:
    messages: list[str] = []
    work = tmp_path / f"work-{len(list(tmp_path.glob('work-*')))}"
    options.setdefault("github_api", "http://127.0.0.1:9")  # nothing listens: no digest
    executor = Executor(plan(python, *steps), messages.append, work, tmp_path / "logs",
                        cache_dir=tmp_path / "cache", state_root=tmp_path / "state", **options)
    try:
        executor.run("0.1.0")
    finally:
        executor.messages = messages  # type: ignore[attr-defined]
    return executor, "\n".join(messages)


def wheel_step(site: Site, wheel: Path, sha256: str | None = "auto",
               path: str | None = None) -> Step:
    route = path or f"/dl/{wheel.name}"
    site.routes[route] = wheel.read_bytes()
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest() if sha256 == "auto" else sha256
    return Step("install-wheel", f"Install {wheel.name}", "why", ("sageattention",),
                wheel=WheelDownload(wheel.name, site.url(route), digest, None))


def source_archive(tmp_path: Path, kernel: str = SAGE_GOOD, setup: str = FAKE_SETUP) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in {"setup.py": setup, "sageattention/__init__.py": kernel}.items():
            data = text.encode()
            info = tarfile.TarInfo(f"SageAttention-{COMMIT}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_wheel_step_installs_and_leftovers_are_moved_aside(venv: tuple[Path, Path],
                                                           tmp_path: Path, site: Site) -> None:
    python, packages = venv
    egg = packages / "sageattention-1.0.0-py3.11.egg"
    egg.mkdir()
    leftovers = Step("remove-leftovers", "Remove eggs", "why", paths=(str(egg),))
    step = wheel_step(site, sage_wheel(tmp_path / "w"))
    _executor, out = run(python, tmp_path, leftovers, step)
    assert installed_distributions(python)["sageattention"] == "2.2.0"
    assert not egg.exists() and (tmp_path / "logs" / "leftovers" / egg.name).is_dir()
    assert "smoke check passed: cpu" in out and "measured on first download" not in out


def test_a_failure_after_leftovers_were_moved_puts_them_back(venv: tuple[Path, Path],
                                                            tmp_path: Path, site: Site) -> None:
    python, packages = venv
    egg = packages / "sageattention-1.0.0-py3.11.egg"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("x", encoding="utf-8")
    before = tree_hashes(packages)
    leftovers = Step("remove-leftovers", "Remove eggs", "why", paths=(str(egg),))
    step = wheel_step(site, sage_wheel(tmp_path / "w", kernel=SAGE_GARBAGE))
    with pytest.raises(InstallError, match="smoke"):
        run(python, tmp_path, leftovers, step)
    assert tree_hashes(packages) == before


def test_triton_windows_swap_from_an_index(venv: tuple[Path, Path], tmp_path: Path,
                                           site: Site) -> None:
    python, packages = venv
    plain = make_wheel(tmp_path / "plain", "triton", "3.6.0", {"triton/__init__.py": "PLAIN\n"})
    Installer.for_target(python).install([str(plain)])  # a real install, with a full RECORD
    wheel = make_wheel(tmp_path / "w", "triton-windows", "3.6.0.post21",
                       {"triton/__init__.py": "WINDOWS = True\n"})
    index = serve_index(site, wheel, "triton-windows")
    steps = (Step("uninstall", "Uninstall triton", "why", ("triton",)),
             Step("install", "Install triton-windows", "why", ("triton-windows",),
                  requirement="triton-windows>=3.6,<3.7", index_url=index))
    run(python, tmp_path, *steps)
    dists = installed_distributions(python)
    assert "triton" not in dists and dists["triton-windows"] == "3.6.0.post21"
    assert (packages / "triton" / "__init__.py").read_text() == "WINDOWS = True\n"


def test_index_install_with_its_sha256(venv: tuple[Path, Path], tmp_path: Path,
                                       site: Site) -> None:
    python, _packages = venv
    index = serve_index(site, sage_wheel(tmp_path / "w"), "sageattention")
    step = Step("install-from-index", "Install from index", "why", ("sageattention",),
                requirement="sageattention==2.2.0", index_url=index)
    _executor, out = run(python, tmp_path, step)
    assert installed_distributions(python)["sageattention"] == "2.2.0"
    assert "matches the index" in out


def test_index_unreachable_builds_before_touching_the_venv(venv: tuple[Path, Path],
                                                           tmp_path: Path, site: Site) -> None:
    python, _packages = venv
    step = Step("install-from-index", "Install from index", "why", ("sageattention",),
                requirement="sageattention==2.2.0", index_url=site.url("/simple/"),
                build=settings_for(str(fake_source(tmp_path / "src"))))
    _executor, out = run(python, tmp_path, step)
    assert "HTTP 404); building from source before changing anything" in out
    assert out.index("built sageattention-2.2.0") < out.index("[1/1] Install from index")
    assert installed_distributions(python)["sageattention"] == "2.2.0"


def test_a_wrong_kernel_from_the_index_is_rolled_back_and_the_source_build_follows(
        venv: tuple[Path, Path], tmp_path: Path, site: Site) -> None:
    python, packages = venv
    index = serve_index(site, sage_wheel(tmp_path / "w", kernel=SAGE_GARBAGE), "sageattention")
    step = Step("install-from-index", "Install from index", "why", ("sageattention",),
                requirement="sageattention==2.2.0", index_url=index,
                build=settings_for(str(fake_source(tmp_path / "src"))))
    executor, out = run(python, tmp_path, step)
    assert "failed the smoke check, so it was rolled back; taking the next route" in out
    assert "[wrong]" in executor.fallback_reasons[0]
    assert "smoke check passed" in out.split("taking the next route")[1]
    assert executor.messages[-1].startswith(  # type: ignore[attr-defined]
        "installed by the source build of the pinned commit, because the wheel from "
        f"{index} failed the smoke check: ")
    assert installed_distributions(python)["sageattention"] == "2.2.0"
    assert json.loads((packages / "sageattention" / "build_env.json").read_text())


def test_a_built_wheel_that_fails_the_smoke_check_leaves_the_cache(
        venv: tuple[Path, Path], tmp_path: Path, site: Site) -> None:
    python, packages = venv
    site.routes[f"/archive/{COMMIT}.tar.gz"] = source_archive(tmp_path, kernel=SAGE_GARBAGE)
    build = settings_for(site.url(f"/archive/{COMMIT}.tar.gz"), commit=COMMIT)
    step = Step("build-from-source", "Build", "why", ("sageattention",), build=build)
    before = tree_hashes(packages)
    for _ in range(2):  # the second run builds again: nothing wrong is kept "from the cache"
        with pytest.raises(InstallError, match="smoke"):
            run(python, tmp_path, step)
        assert tree_hashes(packages) == before
        assert not list((tmp_path / "cache" / "built").rglob("*.whl"))


# --- the cache ----------------------------------------------------------------------------------

def full_plan(tmp_path: Path, site: Site) -> tuple[Step, ...]:
    """A fork wheel (runtime aside), an index wheel and a pinned source build, all served."""
    triton = make_wheel(tmp_path / "w", "triton-windows", "3.6.0",
                        {"triton/__init__.py": "WINDOWS = True\n"})
    index = serve_index(site, triton, "triton-windows")
    site.routes[f"/archive/{COMMIT}.tar.gz"] = source_archive(tmp_path)
    build = settings_for(site.url(f"/archive/{COMMIT}.tar.gz"), commit=COMMIT)
    return (Step("install", "Install triton-windows", "why", ("triton-windows",),
                 requirement="triton-windows==3.6.0", index_url=index),
            Step("build-from-source", "Build", "why", ("sageattention",), build=build),
            Step("bundle-runtime", "Runtime", "why", ("sagedoctor-runtime",)))


def test_reinstall_comes_from_the_cache_with_zero_requests(venv: tuple[Path, Path],
                                                           tmp_path: Path, site: Site) -> None:
    python, _packages = venv
    steps = full_plan(tmp_path, site)
    first, out = run(python, tmp_path, *steps)
    assert site.requests and first.downloaded_bytes > 0 and "building:" in out
    site.requests.clear()
    again, out = run(python, tmp_path, *steps)
    assert site.requests == []
    assert again.downloaded_bytes == 0
    assert "building:" not in out and "(from the cache)" in out
    assert "(no index request)" in out
    run(python, tmp_path, *steps, offline=True)
    assert site.requests == []


def test_a_cxx20_build_is_keyed_labelled_and_recorded_the_same_from_the_cache(
        venv: tuple[Path, Path], tmp_path: Path, site: Site) -> None:
    """The C++ standard a build was raised to is part of its cache key and its label, and a
    wheel taken from the cache leaves the same install record as the build that made it."""
    python, _packages = venv
    upstream_like = 'CXX_FLAGS = ["-O3", "-std=c++17"]\n' + FAKE_SETUP
    site.routes[f"/archive/{COMMIT}.tar.gz"] = source_archive(tmp_path, setup=upstream_like)
    build = replace(settings_for(site.url(f"/archive/{COMMIT}.tar.gz"), commit=COMMIT),
                    cxx_standard=20)
    step = Step("build-from-source", "Build", "why", ("sageattention",), build=build)
    note = {"sageattention": "source build, C++ standard of torch's headers: "
                             "setup.py: -std=c++17 -> -std=c++20 (1x)"}
    _first, out = run(python, tmp_path, step)
    assert "building:" in out
    built = read_record(python.parent.parent)
    assert built is not None and built.built == note
    _again, out = run(python, tmp_path, step)
    assert "building:" not in out and "archs 8.6;8.9, C++20 (from the cache)" in out
    cached = read_record(python.parent.parent)
    assert cached is not None and cached.built == note
    # the same commit built as upstream wrote it is another wheel, not that cache entry
    plain = Step("build-from-source", "Build", "why", ("sageattention",),
                 build=replace(build, cxx_standard=None))
    _plain, out = run(python, tmp_path, plain)
    assert "building:" in out and "(from the cache)" not in out
    unpatched = read_record(python.parent.parent)
    assert unpatched is not None and unpatched.built == {}


def test_a_built_wheel_is_not_taken_for_an_index_pinning_another_archive(
        venv: tuple[Path, Path], tmp_path: Path, site: Site) -> None:
    """D2: a wheel built from a measured archive is cached; an index that then pins another
    archive_sha256 for that commit must not get it "from the cache": the pin is checked, as
    it is without the built wheel (refused), and the same pin as measured is a cache hit."""
    python, packages = venv
    archive = source_archive(tmp_path)
    site.routes[f"/archive/{COMMIT}.tar.gz"] = archive
    url = site.url(f"/archive/{COMMIT}.tar.gz")
    measured = Step("build-from-source", "Build", "why", ("sageattention",),
                    build=settings_for(url, commit=COMMIT))
    _first, out = run(python, tmp_path, measured)
    assert "building:" in out and list((tmp_path / "cache" / "built").rglob("*.whl"))
    installed = tree_hashes(packages)
    other = hashlib.sha256(b"another archive").hexdigest()
    pinned = Step("build-from-source", "Build", "why", ("sageattention",),
                  build=settings_for(url, commit=COMMIT, sha256=other))
    with pytest.raises(InstallError) as info:
        run(python, tmp_path, pinned)
    assert f"does not match the index's {other}" in info.value.message
    assert tree_hashes(packages) == installed
    same = Step("build-from-source", "Build", "why", ("sageattention",),
                build=settings_for(url, commit=COMMIT,
                                   sha256=hashlib.sha256(archive).hexdigest()))
    _again, out = run(python, tmp_path, same)
    assert "building:" not in out and "(from the cache)" in out


def test_offline_with_a_cold_cache_says_what_is_missing(venv: tuple[Path, Path],
                                                        tmp_path: Path, site: Site) -> None:
    python, packages = venv
    before = tree_hashes(packages)
    with pytest.raises(NotInCache, match="--offline"):
        run(python, tmp_path, wheel_step(site, sage_wheel(tmp_path / "w")), offline=True)
    assert site.requests == [] and tree_hashes(packages) == before


def test_digest_mismatch_installs_nothing_and_caches_nothing(
        venv: tuple[Path, Path], tmp_path: Path, site: Site) -> None:
    python, packages = venv
    add_installed_sage(packages)
    before = tree_hashes(packages)
    with pytest.raises(InstallError, match="does not match the index"):
        run(python, tmp_path, wheel_step(site, sage_wheel(tmp_path / "w"), sha256="0" * 64))
    assert tree_hashes(packages) == before
    assert not list((tmp_path / "cache").rglob("*.whl"))


def test_server_gone_mid_download_leaves_no_partial_file(venv: tuple[Path, Path],
                                                         tmp_path: Path, site: Site) -> None:
    python, packages = venv
    before = tree_hashes(packages)
    wheel = sage_wheel(tmp_path / "w")
    step = wheel_step(site, wheel)
    site.routes[f"/dl/{wheel.name}"] = ("drop", wheel.read_bytes()[:100])
    with pytest.raises(InstallError, match="cut short") as caught:  # SD921, not "check the network"
        run(python, tmp_path, step)
    assert tree_hashes(packages) == before
    assert not list(tmp_path.rglob("*.part")) and not list((tmp_path / "cache").rglob("*.whl"))
    # The log ends with the error and what became of the venv, not at "downloading ...".
    (log,) = (tmp_path / "logs").glob("install-*.log")
    last = log.read_text(encoding="utf-8").splitlines()[-1]
    assert f"stopped: error {caught.value.code}: {caught.value.message}" in last
    assert "The venv was not changed" in last
    # The fix ends as a sentence before the next begins (SD910 ran them together).
    assert re.search(r"\w[.!?] The venv was not changed: ", caught.value.fix), caught.value.fix


def test_githubs_asset_digest_is_checked_on_first_download(venv: tuple[Path, Path],
                                                           tmp_path: Path, site: Site) -> None:
    python, _packages = venv
    wheel = sage_wheel(tmp_path / "w")
    path = f"/woct0rdho/SageAttention/releases/download/v2.2.0-windows.post6/{wheel.name}"
    api = "/repos/woct0rdho/SageAttention/releases/tags/v2.2.0-windows.post6"
    step = wheel_step(site, wheel, sha256=None, path=path)
    site.routes[api] = ("json", json.dumps({"assets": [
        {"name": wheel.name, "digest": "sha256:" + "1" * 64}]}).encode())
    with pytest.raises(InstallError, match="does not match"):
        run(python, tmp_path, step, github_api=site.url(""))
    real = hashlib.sha256(wheel.read_bytes()).hexdigest()
    site.routes[api] = ("json", json.dumps({"assets": [
        {"name": wheel.name, "digest": f"sha256:{real}"}]}).encode())
    _executor, out = run(python, tmp_path, step, github_api=site.url(""))
    assert "matches GitHub's asset digest" in out


def test_a_redirect_to_another_host_is_refused(venv: tuple[Path, Path], tmp_path: Path,
                                               site: Site) -> None:
    python, _packages = venv
    wheel = sage_wheel(tmp_path / "w")
    step = wheel_step(site, wheel)
    other = site.url(f"/dl/{wheel.name}").replace("127.0.0.1", "localhost")
    site.routes[f"/dl/{wheel.name}"] = ("redirect", other)
    with pytest.raises(HostileDownload, match="redirects to another host"):
        run(python, tmp_path, step)
    assert not list((tmp_path / "cache").rglob("*.whl"))


def test_a_truncated_source_archive_is_never_cached_and_the_fixed_mirror_installs(
        venv: tuple[Path, Path], tmp_path: Path, site: Site) -> None:
    python, packages = venv
    before = tree_hashes(packages)
    good = source_archive(tmp_path)
    route = f"/archive/{COMMIT}.tar.gz"
    site.routes[route] = good[:len(good) // 2]  # the mirror serves half, with its length
    step = Step("build-from-source", "Build", "why", ("sageattention",),
                build=settings_for(site.url(route), commit=COMMIT))  # no digest pinned
    for _ in range(2):  # the second run downloads again: nothing damaged was kept
        with pytest.raises(DamagedDownload, match="damaged: it ends early"):
            run(python, tmp_path, step)
        assert tree_hashes(packages) == before
        assert not list((tmp_path / "cache" / "files").rglob("*.tar.gz"))
    assert site.requests.count(route) == 2
    site.routes[route] = good  # the mirror is fixed
    _executor, out = run(python, tmp_path, step)
    assert "building:" in out and installed_distributions(python)["sageattention"] == "2.2.0"


def test_a_damaged_archive_in_the_cache_is_dropped_and_fetched_again(
        venv: tuple[Path, Path], tmp_path: Path, site: Site) -> None:
    python, _packages = venv
    good = source_archive(tmp_path)
    route = f"/archive/{COMMIT}.tar.gz"
    name = f"SageAttention-{COMMIT}.tar.gz"
    # What an older sagedoctor left: the truncated archive, cached under the digest it measured.
    truncated = tmp_path / name
    truncated.write_bytes(good[:len(good) // 2])
    cache = Cache(tmp_path / "cache")
    cached = cache.store(truncated, name, hashlib.sha256(good[:len(good) // 2]).hexdigest(),
                         site.url(route))
    site.routes[route] = good
    step = Step("build-from-source", "Build", "why", ("sageattention",),
                build=settings_for(site.url(route), commit=COMMIT))
    _executor, out = run(python, tmp_path, step)
    assert f"{name} in the download cache is damaged: it ends early (truncated); removed it" \
        in out
    assert site.requests == [route] and not cached.exists()
    assert installed_distributions(python)["sageattention"] == "2.2.0"
    assert cache.measured(site.url(route)) == hashlib.sha256(good).hexdigest()


def test_a_truncated_wheel_without_a_digest_is_refused_and_not_cached(
        venv: tuple[Path, Path], tmp_path: Path, site: Site) -> None:
    python, packages = venv
    before = tree_hashes(packages)
    wheel = sage_wheel(tmp_path / "w")
    step = wheel_step(site, wheel, sha256=None)
    site.routes[f"/dl/{wheel.name}"] = wheel.read_bytes()[:-200]
    with pytest.raises(DamagedDownload, match="not a whole zip archive"):
        run(python, tmp_path, step)
    assert tree_hashes(packages) == before
    assert not list((tmp_path / "cache").rglob("*.whl")) and not list(tmp_path.rglob("*.part"))
    assert Cache(tmp_path / "cache").measured(step.wheel.url) is None  # type: ignore[union-attr]


# --- progress on long work ------------------------------------------------------------------------

def test_a_slow_download_reports_its_bytes_as_it_goes(venv: tuple[Path, Path], tmp_path: Path,
                                                      site: Site) -> None:
    python, _packages = venv
    wheel = make_wheel(tmp_path / "w", "sageattention", "2.2.0",
                       {"sageattention/__init__.py": SAGE_GOOD,
                        "sageattention/kernels.bin": "x" * (4 << 20)})  # stored: 4 MiB
    step = wheel_step(site, wheel)
    site.routes[f"/dl/{wheel.name}"] = ("trickle", wheel.read_bytes())
    _executor, out = run(python, tmp_path, step, report_every=0.3)
    reports = re.findall(rf"downloading {re.escape(wheel.name)}: ([\d.]+) MiB of "
                         r"([\d.]+) MiB \((\d+)%\), \d+ s", out)
    assert len(reports) >= 2, out  # about 1.2 s of trickle, a report every 0.3 s
    done = [float(r[0]) for r in reports]
    assert done == sorted(done) and done[0] < done[-1] < 4.1
    assert {r[1] for r in reports} == {f"{wheel.stat().st_size / (1 << 20):.1f}"}
    assert re.search(rf"downloaded {re.escape(wheel.name)}: 4\.0 MiB in [\d.]+ s", out), out
    assert installed_distributions(python)["sageattention"] == "2.2.0"


def test_a_long_build_says_its_time_and_latest_line(venv: tuple[Path, Path],
                                                    tmp_path: Path) -> None:
    python, _packages = venv
    step = Step("build-from-source", "Build", "why", ("sageattention",),
                build=settings_for(str(fake_source(tmp_path / "src", pause=1.5))))
    _executor, out = run(python, tmp_path, step, report_every=0.4)
    beats = re.findall(r"still building \((\d+) s\): (.*)", out)
    assert len(beats) >= 2, out
    assert [int(b[0]) for b in beats] == sorted(int(b[0]) for b in beats)
    assert "[1/2] compiling the stand-in kernel" in {line for _s, line in beats}
    assert out.index("still building") < out.index("built sageattention-2.2.0")


def test_a_venv_that_prints_at_start_up_is_installed_into_or_refused_with_the_reason(
        venv: tuple[Path, Path], tmp_path: Path, site: Site) -> None:
    """sagedoctor's own queries ignore the noise. Whether uv copes with an interpreter that
    prints depends on uv's version (0.13 does; older ones could not read the interpreter), so
    either the install completes, or it stops at uv's first call, says why and changes nothing:
    never a half-changed venv, never an unexplained error."""
    python, packages = venv
    sitecustomize = run_at_start_up(packages, "print('hello from sitecustomize')\n")
    before = tree_hashes(packages)
    try:
        _executor, out = run(python, tmp_path, wheel_step(site, sage_wheel(tmp_path / "w")))
    except InstallError as refused:
        assert "prints something of its own at start-up" in refused.message
        assert "make that start-up code quiet" in refused.fix
        assert tree_hashes(packages) == before
    else:
        assert installed_distributions(python)["sageattention"] == "2.2.0"
        assert "smoke check passed: cpu" in out
        assert sitecustomize.read_text(encoding="utf-8") == "print('hello from sitecustomize')\n"



@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_installed_json_that_is_no_file_is_refused_before_anything_changes(
        venv: tuple[Path, Path], tmp_path: Path, site: Site, kind: str) -> None:
    """D20: installed.json a folder: the install committed, then ended in an internal error
    at the record, with no word on the venv. The preflight finds it first now."""
    import os

    from sagedoctor.install.preflight import PreflightRefused

    python, packages = venv
    record = python.parent.parent / "sagedoctor" / "installed.json"
    record.parent.mkdir()
    if kind == "folder":
        record.mkdir()
    else:
        os.mkfifo(record)
    before = tree_hashes(packages)
    with pytest.raises(PreflightRefused) as info:
        run(python, tmp_path, wheel_step(site, sage_wheel(tmp_path / "w")))
    assert "SD135" in info.value.message and str(record) in info.value.message
    assert site.requests == [] and tree_hashes(packages) == before


def test_a_record_path_taken_after_the_preflight_says_the_install_was_committed(
        venv: tuple[Path, Path], tmp_path: Path, site: Site) -> None:
    """D20: the folder appears at installed.json while the install runs: a plain error that
    says the venv has the install, not an internal error."""
    python, _packages = venv
    record = python.parent.parent / "sagedoctor" / "installed.json"
    step = wheel_step(site, sage_wheel(tmp_path / "w"))

    def progress(message: str) -> None:
        if message.startswith("smoke check:"):
            record.mkdir(parents=True)

    with pytest.raises(InstallError) as info:
        Executor(plan(python, step), progress, tmp_path / "work", tmp_path / "logs",
                 cache_dir=tmp_path / "cache", state_root=tmp_path / "state",
                 github_api="http://127.0.0.1:9").run("0.1.0")
    assert "the install was committed" in info.value.message, info.value.message
    assert str(record) in info.value.message and "move" in info.value.fix
    assert installed_distributions(python)["sageattention"] == "2.2.0"


def test_the_same_source_folder_installed_twice_changes_nothing_the_second_time(
        venv: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`install --source DIR` run twice rebuilt (161 s on an H100) and reinstalled: the
    built wheel is cached by the folder's files, and a wheel in place file for file is not
    installed again (no snapshot, no uv, no smoke check). A changed file builds again."""
    python, packages = venv
    source = fake_source(tmp_path / "my source")
    step = Step("build-from-source", "Build", "why", ("sageattention",),
                build=settings_for(str(source)))
    _first, out = run(python, tmp_path, step)
    assert "building:" in out and "smoke check:" in out
    installed = tree_hashes(packages)
    # the verify that followed the first run passed: check's answer must outlive the second
    from sagedoctor.runtime.hook import dist_stats
    from sagedoctor.state import still_as_verified, venv_python_version, venv_site_dirs
    from tests.standins import record_passing_verify

    prefix = python.parent.parent
    home = tmp_path / "home"
    record_passing_verify(prefix, {"python": venv_python_version(prefix),
                                   "stat": dist_stats(venv_site_dirs(prefix))}, home)
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    assert still_as_verified(prefix) == (True, ())
    _again, out = run(python, tmp_path, step)
    assert "building:" not in out and f"{source} (its files unchanged)" in out, out
    assert "is installed already, every file as in the wheel: nothing to change" in out
    assert "smoke check:" not in out and "committed" not in out
    assert tree_hashes(packages) == installed
    assert still_as_verified(prefix) == (True, ())  # check still says ready
    assert not list((tmp_path / "state").rglob("journal.json"))
    (source / "sageattention" / "__init__.py").write_text(SAGE_GOOD + "\n# changed\n",
                                                           encoding="utf-8")
    _third, out = run(python, tmp_path, step)
    assert "building:" in out and "committed" in out
    assert not still_as_verified(prefix)[0]  # a reinstall is seen: the answer above can fail


def test_a_folder_at_the_hook_path_is_moved_aside_by_the_install(
        venv: tuple[Path, Path], tmp_path: Path) -> None:
    """check says SD136 for a folder at the start-up hook's path (the hook is off): the plan's
    remove-hook step removes it (as `disable` does), and nothing else of the venv changes."""
    python, packages = venv
    hook = packages / "sagedoctor-runtime.pth"
    hook.mkdir()
    (hook / "kept.txt").write_text("someone's file\n", encoding="utf-8")
    before = tree_hashes(packages)
    step = Step("remove-hook", "Move aside what is at the start-up hook's path", "why",
                paths=(str(hook),))
    _executor, out = run(python, tmp_path, step)
    assert not hook.exists()
    assert f"removed {hook}" in out
    assert {k: v for k, v in before.items() if "sagedoctor-runtime.pth" not in k} \
        == {k: v for k, v in tree_hashes(packages).items()
            if not k.startswith("sagedoctor/")}
