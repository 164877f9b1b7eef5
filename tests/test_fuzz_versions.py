"""Fuzzing versions, local tags and wheel file names: torch's `2.13.0+cu130`, SageAttention's
`+cu130torch2.10.0andhigher.post6`, drivers, compute capabilities, and every wheel name an
index or a server may send (the TOML index's rows, GitHub's assets, a simple index's links).
Each gives a plain answer or one of our refusals, never a crash."""

from __future__ import annotations

import json

from hypothesis import example, given
from hypothesis import strategies as st

from sagedoctor.decide.matrix import (
    driver_satisfies,
    required_sage_modules,
    torch_min_cc,
)
from sagedoctor.decide.versions import (
    cc_tuple,
    minor_of,
    parse_sage_local,
    sage_serves_torch,
    torch_build,
)
from sagedoctor.index import TomlTable, shipped_index
from sagedoctor.index import parse_windows_wheel as parse_index_row
from sagedoctor.index.refresh import _torch_range
from sagedoctor.install.cache import safe_file_name
from sagedoctor.install.simple_index import _files, choose_wheel
from tests.fuzz_support import TRICKY, fuzz, mutations, outcome, text_or_junk

INDEX = shipped_index()
LOCALS = ["cu130", "cu128", "cu12", "cu1", "cu", "cpu", "cpu.cxx11.abi", "rocm7.1", "rocm",
          "cu130torch2.10.0andhigher.post6", "cu128torch2.7.1.post3", "cu13.0torch2.9",
          "872d972e41.nv24.08", "xpu", "git1234abc"]


@st.composite
def versions(draw: st.DrawFn) -> str:
    """Mostly PEP 440 shapes with odd local labels; sometimes not a version at all."""
    release = ".".join(str(draw(st.integers(0, 10**6))) for _ in range(draw(st.integers(1, 5))))
    pre = draw(st.sampled_from(["", "a0", "rc1", ".dev3", ".post1", "b"]))
    local = draw(st.sampled_from(["", *LOCALS]) | st.text(alphabet="abcuto.0123456789",
                                                          max_size=12))
    return f"{release}{pre}{'+' + local if local else ''}"


version_texts = text_or_junk(versions() | mutations("2.13.0+cu130")
                             | mutations("2.2.0+cu130torch2.10.0andhigher.post6"))


@fuzz(600)
@given(version_texts, st.none() | version_texts, st.none() | version_texts,
       st.one_of(st.none(), st.none(), st.none(), st.just("7.1.25424"), version_texts))
@example("2.13.0+cu130", "2.13.0+cu130", "13.0", None)
@example("2.10.0+rocm7.1", None, None, "7.1.25424")
@example("2.5.0a0+872d972e41.nv24.08", None, "12.6", None)
@example("2.2.0+cu130torch99999999999999999999.0andhigher", "1!2.0", "٩.٠", None)
def test_versions_and_local_tags_give_plain_answers(version: str, full: str | None,
                                                   cuda: str | None, hip: str | None) -> None:
    def parse() -> str:
        build = torch_build(version, full, cuda, hip)
        assert build.kind in ("cuda", "cpu", "rocm", "other")
        assert build.cuda_major is None or build.cuda_major >= 0
        torch_min_cc(build.cuda)
        sage = parse_sage_local(version)
        if sage is not None:
            assert sage.cuda_label.startswith("cu") and len(sage.torch) == 3
            assert isinstance(sage_serves_torch(sage, full or version), bool)
        minor_of(full)
        driver_satisfies(version, cuda or "525.60.13")
        for cc in (version, cuda, hip):
            if cc_tuple(cc) is not None:
                assert isinstance(required_sage_modules(cc or ""), tuple)
        return build.kind

    outcome("versions and local tags", parse)


@st.composite
def wheel_names(draw: st.DrawFn) -> str:
    """`{name}-{version}(-{build})?-{python}-{abi}-{platform}.whl` with hostile parts."""
    part = st.sampled_from(["sageattention", "SageAttention", "sage_attention", "torch", ""]) | \
        st.text(alphabet=TRICKY + "abc01._", max_size=10)
    version = versions() | st.text(alphabet=TRICKY + "0123456789.+", max_size=12)
    python = st.sampled_from(["cp39", "cp310", "cp312", "cp3", "py3", "cp39.cp310", "cp3²",
                              "cp3١", ""]) | st.text(max_size=6)
    abi = st.sampled_from(["abi3", "none", "cp312", ""]) | st.text(max_size=5)
    platform = st.sampled_from(["win_amd64", "manylinux_2_17_x86_64", "any", "win_amd64.any",
                                "win_arm64", ""]) | st.text(max_size=8)
    build = st.sampled_from(["", "-1", "-1abc", "-x"])
    ext = st.sampled_from([".whl", ".whl", ".WHL", ".zip", ".whl/../x.whl", ""])
    return (f"{draw(part)}-{draw(version)}{draw(build)}-{draw(python)}-{draw(abi)}-"
            f"{draw(platform)}{draw(ext)}")


REAL_WHEEL = "sageattention-2.2.0+cu130torch2.10.0andhigher.post6-cp310-abi3-win_amd64.whl"
names = text_or_junk(wheel_names() | mutations(REAL_WHEEL))


@fuzz(600)
@given(names)
@example(REAL_WHEEL)
@example("sageattention-2.2.0+cu130torch2.9.0-cp3²-abi3-win_amd64.whl")
@example("sageattention-2.2.0+cu130torch2.9.0-cp3١٠-abi3-win_amd64.whl")
@example("..")
def test_wheel_names_from_an_index_or_a_server_are_parsed_or_refused(name: str) -> None:
    row = {"file": name, "release": "v2.2.0-windows.post6", "torch": ">=2.9"}

    def as_index_row() -> None:
        wheel = parse_index_row(TomlTable(dict(row), "windows.wheels[0]", "fuzz"),
                                INDEX.release_base)
        assert wheel.file == name and wheel.url.startswith(INDEX.release_base)
        assert wheel.python_min[0] == 3 and wheel.tags

    outcome("wheel name (TOML index row)", as_index_row)

    def as_release_asset() -> str:
        found = _torch_range(name)
        return "parsed" if found else "skipped"

    outcome("wheel name (GitHub asset)", as_release_asset)

    def as_cache_name() -> None:
        assert safe_file_name(name, "fuzz") == name

    outcome("wheel name (cache file)", as_cache_name)

    def as_index_choice() -> str:
        from sagedoctor.install.simple_index import IndexFile

        chosen = choose_wheel([IndexFile(name, "https://x.org/" + name, None)],
                              "sageattention>=2", ["cp310-abi3-win_amd64", "py3-none-any"])
        return "chosen" if chosen else "not chosen"

    outcome("wheel name (simple index choice)", as_index_choice)


BASE = "https://download.pytorch.org/whl/sageattention/"
PAGE_HTML = ('<html><body><a href="sageattention-2.2.0-cp312-cp312-linux_x86_64.whl#sha256='
             + "a" * 64 + '">x</a><a href="../other/x.whl" data-yanked="">y</a></body></html>')
PAGE_JSON = {"files": [{"url": "sageattention-2.2.0-py3-none-any.whl",
                        "hashes": {"sha256": "b" * 64}, "yanked": False}]}


@st.composite
def html_pages(draw: st.DrawFn) -> str:
    href = draw(st.sampled_from([
        "x-1.0-py3-none-any.whl", "http://[::1/x.whl", "https://h:99999/x.whl", "//evil/x.whl",
        "https://x.org:abc/x.whl", "/../../x.whl", "x.whl#sha256=zz", "file:///etc/x.whl",
        "%2e%2e%2fx.whl", "javascript:x.whl", "\x00.whl", "http://[v1.fe]/x.whl"])
        | st.text(alphabet=TRICKY + "abc.whl/:", max_size=30))
    return f'<a href="{href}">{draw(st.text(max_size=8))}</a>' * draw(st.integers(1, 3))


@fuzz(400)
@given(st.one_of(text_or_junk(mutations(PAGE_HTML) | html_pages()),
                 mutations(json.dumps(PAGE_JSON)).map(lambda t: ("json", t))))
@example('<a href="http://[::1/x-1.0-py3-none-any.whl">x</a>')  # urlsplit: Invalid IPv6 URL
@example('<a href="https://download.pytorch.org:99999/x-1.0-py3-none-any.whl">x</a>')  # port
def test_simple_index_pages_give_links_or_a_refusal(page: str | tuple[str, str]) -> None:
    def parse() -> None:
        if isinstance(page, tuple):
            try:
                data = json.loads(page[1])
            except ValueError:
                return
            found = _files(data, "application/vnd.pypi.simple.v1+json", BASE)
        else:
            found = _files(page, "text/html", BASE)
        for item in found:
            assert item.url.startswith("https://download.pytorch.org/")
            assert "/" not in item.name and ".." not in item.name
            assert item.sha256 is None or len(item.sha256) == 64

    outcome("simple index page (PEP 503/691)", parse)
