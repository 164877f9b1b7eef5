"""A hostile index or server (issue 11, item 4): a link to another host, path separators or
'..' in file names, a wheel whose RECORD lies, zip entries escaping the target, an endless
download. Each is refused and nothing is written outside the cache."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from sagedoctor.events import as_lines
from sagedoctor.install.cache import Cache, safe_file_name
from sagedoctor.install.errors import HostileDownload, HostileWheel
from sagedoctor.install.fetch import download
from sagedoctor.install.simple_index import resolve_from_index
from sagedoctor.install.wheelcheck import check_wheel, landing_paths
from tests.test_install_kit import Site, make_wheel, sage_wheel, serve_index, serving

TAGS = ["py3-none-any"]


@pytest.fixture
def site() -> Iterator[Site]:
    with serving() as served:
        yield served


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.mark.parametrize("name", ["../evil-1.0-py3-none-any.whl", "a/b.whl", "a\\b.whl",
                                  "..", "C:evil.whl", "", ".hidden.whl"])
def test_file_names_with_separators_or_dotdot_are_refused(name: str) -> None:
    with pytest.raises(HostileDownload, match="refusing the file name"):
        safe_file_name(name, "index")


def test_an_index_link_with_dotdot_in_its_name_is_refused(site: Site, tmp_path: Path) -> None:
    wheel = sage_wheel(tmp_path / "w")
    index = serve_index(site, wheel, "sageattention",
                        href="/files/..%2F..%2Fsageattention-2.2.0-py3-none-any.whl")
    with pytest.raises(HostileDownload, match="refusing the file name"):
        resolve_from_index(index, "sageattention==2.2.0", TAGS, "127.0.0.1")


def test_an_index_link_to_another_host_is_refused(site: Site, tmp_path: Path) -> None:
    wheel = sage_wheel(tmp_path / "w")
    other = site.url(f"/files/{wheel.name}").replace("127.0.0.1", "localhost")
    index = serve_index(site, wheel, "sageattention", href=other)
    with pytest.raises(HostileDownload, match="on another host"):
        resolve_from_index(index, "sageattention==2.2.0", TAGS, "127.0.0.1")


def test_an_index_picks_the_matching_version_and_tag(site: Site, tmp_path: Path) -> None:
    wheel = sage_wheel(tmp_path / "w")
    index = serve_index(site, wheel, "sageattention")
    chosen = resolve_from_index(index, "sageattention==2.2.0", TAGS, "127.0.0.1")
    assert chosen.name == wheel.name
    assert chosen.sha256 == hashlib.sha256(wheel.read_bytes()).hexdigest()


def test_a_wheel_whose_record_lies_is_refused(tmp_path: Path) -> None:
    wheel = sage_wheel(tmp_path / "w", lie_about="sageattention/core.py")
    with pytest.raises(HostileWheel, match="does not match its RECORD digest"):
        check_wheel(wheel)


def test_a_wheel_with_a_file_missing_from_its_record_is_refused(tmp_path: Path) -> None:
    wheel = sage_wheel(tmp_path / "w", extra={"sageattention/hidden.py": "x"})
    with pytest.raises(HostileWheel, match="not in its RECORD"):
        check_wheel(wheel)


@pytest.mark.parametrize("entry", ["../../escape.py", "/abs/escape.py",
                                   "sageattention/../../escape.py", "C:/escape.py"])
def test_zip_entries_escaping_the_venv_are_refused(tmp_path: Path, entry: str) -> None:
    wheel = make_wheel(tmp_path / "w", "sageattention", "2.2.0",
                       {"sageattention/__init__.py": ""}, extra={entry: "x"})
    with pytest.raises(HostileWheel, match="outside the venv"):
        check_wheel(wheel)


def test_an_honest_wheel_lands_where_an_installer_puts_it(tmp_path: Path) -> None:
    wheel = sage_wheel(tmp_path / "w")
    names = check_wheel(wheel)
    site = tmp_path / "site"
    landed = landing_paths(names, site, tmp_path / "bin")
    assert site / "sageattention" / "core.py" in landed
    assert all(site in p.parents for p in landed)


def test_an_endless_download_stops_at_the_size_bound(site: Site, tmp_path: Path) -> None:
    site.routes["/endless.whl"] = ("endless", None)
    dest = tmp_path / "cache" / "endless.whl"
    dest.parent.mkdir()
    with pytest.raises(HostileDownload, match="more than 1048576 bytes"):
        download(site.url("/endless.whl"), dest, None, allow_http_host="127.0.0.1",
                 max_bytes=1 << 20)
    assert files_under(tmp_path / "cache") == set()


def test_a_declared_size_over_the_bound_is_refused_before_reading(site: Site,
                                                                  tmp_path: Path) -> None:
    site.routes["/big.whl"] = b"x" * 4096
    with pytest.raises(HostileDownload, match="over the bound"):
        download(site.url("/big.whl"), tmp_path / "big.whl", None,
                 allow_http_host="127.0.0.1", max_bytes=1024)
    assert not (tmp_path / "big.whl").exists()


def test_a_damaged_cache_entry_is_a_miss_not_an_install(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    source = tmp_path / "f.whl"
    good = sage_wheel(tmp_path / "w").read_bytes()
    source.write_bytes(good)
    digest = hashlib.sha256(good).hexdigest()
    stored = cache.store(source, "f.whl", digest, "https://x.org/f.whl")
    assert cache.lookup("f.whl", None, "https://x.org/f.whl") == stored
    stored.write_bytes(b"evil")
    assert cache.lookup("f.whl", digest, "https://x.org/f.whl") is None
    assert stored.exists()  # a plain lookup (the TUI's sizes) removes nothing
    said: list[str] = []
    assert cache.lookup("f.whl", digest, "https://x.org/f.whl",
                        on_damaged=as_lines(said.append)) is None
    assert not stored.exists() and cache.measured("https://x.org/f.whl") is None
    assert said == ["f.whl in the download cache is damaged: its sha256 is no longer the one "
                    "it was stored under; removed it, so it is downloaded afresh"]


# --- D19: hostile source archives and folders --------------------------------------------------

def _tar_gz(path: Path, members: dict[str, bytes]) -> Path:
    import io
    import tarfile

    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize("kind", ["zero bytes", "an empty tar", "only a file"])
def test_an_empty_source_archive_is_refused_plainly(tmp_path: Path, kind: str) -> None:
    from sagedoctor.install.fetch import extract_source
    from sagedoctor.install.runner import InstallError

    archive = tmp_path / "SageAttention-x.tar.gz"
    if kind == "zero bytes":
        archive.write_bytes(b"")
    else:
        _tar_gz(archive, {} if kind == "an empty tar" else {"setup.py": b"x"})
    with pytest.raises(InstallError) as info:
        extract_source(archive, tmp_path / "out")
    assert archive.name in info.value.message and "nothing was installed" in info.value.fix


def test_a_gzip_bomb_is_refused_before_it_is_unpacked(tmp_path: Path) -> None:
    from sagedoctor.install.fetch import extract_source
    from sagedoctor.install.runner import InstallError

    archive = _tar_gz(tmp_path / "bomb.tar.gz", {"src/setup.py": b"x",
                                                 "src/zeros": bytes(4 << 20)})
    assert archive.stat().st_size < 64 << 10  # 4 MiB of zeros, a few KiB compressed
    with pytest.raises(InstallError, match="unpacks to more than 1 MiB"):
        extract_source(archive, tmp_path / "out", max_bytes=1 << 20)
    assert not (tmp_path / "out" / "src" / "zeros").exists()  # nothing of it written
    with pytest.raises(InstallError, match="or 3 files"):
        extract_source(_tar_gz(tmp_path / "many.tar.gz", {f"src/{i}": b"" for i in range(5)}),
                       tmp_path / "out2", max_members=3)
    root = extract_source(archive, tmp_path / "out3", max_bytes=8 << 20)  # within bounds
    assert (root / "zeros").stat().st_size == 4 << 20


def test_a_source_folder_with_a_symlink_loop_is_copied_without_following_links(
        tmp_path: Path) -> None:
    """`loop -> .` was an internal error, and links were followed (754 MB copied)."""
    from sagedoctor.install.source_build import prepare_tree
    from tests.test_install_kit import fake_source, settings_for

    source = fake_source(tmp_path / "src")
    (source / "loop").symlink_to(".")
    data = tmp_path / "models"
    data.mkdir()
    (data / "weights.bin").write_bytes(bytes(1 << 20))
    (source / "models").symlink_to(data)
    work = tmp_path / "work"
    work.mkdir()
    tree, _patches = prepare_tree(source, work, settings_for(str(source)))
    assert (tree / "setup.py").is_file()
    assert (tree / "loop").is_symlink() and (tree / "models").is_symlink()
    copied = sum(p.stat().st_size for p in tree.rglob("*")
                 if p.is_file() and not p.is_symlink() and "loop" not in p.parts
                 and "models" not in p.parts)
    assert copied < 64 << 10


def test_a_body_cut_short_of_its_content_length_is_said_so(site: Site, tmp_path: Path) -> None:
    """Issue 34 ("Also"): a server that announced more than it sent, then closed, was SD910
    "check the network": it is a download cut short (SD921), and nothing is kept."""
    from sagedoctor.install.errors import DamagedDownload
    from sagedoctor.install.fetch import get_json

    site.routes["/cut.whl"] = ("drop", b"x" * 100)
    with pytest.raises(DamagedDownload) as caught:
        download(site.url("/cut.whl"), tmp_path / "cut.whl", None,
                 allow_http_host="127.0.0.1")
    assert "cut short" in caught.value.message and "100 of the 400 bytes" in \
        caught.value.message, caught.value.message
    assert "check the network" not in caught.value.message
    assert files_under(tmp_path) == set()

    site.routes["/simple/page/"] = ("drop", b'{"files": []}')
    with pytest.raises(DamagedDownload) as caught:
        get_json(site.url("/simple/page/"), allow_http_host="127.0.0.1")
    assert "cut short" in caught.value.message, caught.value.message
