"""The index: strict loading, the pairings it encodes, precedence of a refreshed copy, and
`index refresh` against recorded GitHub API answers served by a real local HTTP server."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import pytest

from sagedoctor.index import (
    SHIPPED_INDEX,
    IndexError_,
    load_index,
    load_index_file,
    parse_index,
    parse_toml,
    shipped_index,
)
from sagedoctor.index.refresh import dump_index
from tests.standins import clean_env, local_server, run_cli

FIXTURES = Path(__file__).parent / "fixtures"


def shipped_data() -> dict[str, Any]:
    return parse_toml(SHIPPED_INDEX.read_text(encoding="utf-8"), "shipped")


def test_shipped_index_loads_with_every_wheel_of_the_facts() -> None:
    index = shipped_index()
    assert len(index.windows_wheels) == 14
    post6 = [w for w in index.windows_wheels if w.post == 6]
    assert len(post6) == 4 and all(w.sha256_source == "third-party" for w in post6)
    assert all(w.url.startswith("https://github.com/woct0rdho/SageAttention/releases/download/")
               and "%2B" in w.url for w in index.windows_wheels)
    post5 = [w for w in index.windows_wheels if w.post == 5]
    assert post5 and all(w.problems for w in post5)
    assert index.build.commit.startswith("d1a57a5")
    assert [r.ref for r in index.build.rejected] == ["v2.2.0"]


@pytest.mark.parametrize(("torch", "windows", "linux"), [
    ("2.4.1", ">=3.1,<3.2", (3, 0)), ("2.6.0", ">=3.2,<3.3", (3, 2)),
    ("2.7.1+cu128", ">=3.3,<3.4", (3, 3)), ("2.10.0", ">=3.6,<3.7", (3, 6)),
    ("2.11.0", ">=3.6,<3.7", (3, 6)), ("2.12.1", ">=3.7,<3.8", (3, 7)),
    ("2.13.0", ">=3.7,<3.8", (3, 7)), ("2.14.0", ">=3.8,<3.9", (3, 8)),
    ("2.15.0", None, (3, 9)),  # torch 2.15.0 pins triton~=3.9.0; no triton-windows 3.9 yet
])
def test_triton_pairing(torch: str, windows: str | None, linux: tuple[int, int]) -> None:
    pair = shipped_index().triton.pair_for(torch)
    assert pair is not None
    assert (str(pair.windows) if pair.windows else None) == (
        ",".join(sorted(windows.split(","))) if windows else None)
    assert pair.linux == linux


@pytest.mark.parametrize("torch", ["2.3.1", "2.99.0", "garbage"])
def test_no_pairing_for_unknown_torch(torch: str) -> None:
    assert shipped_index().triton.pair_for(torch) is None


@pytest.mark.parametrize(("cc", "nvcc"), [("8.0", "12.0"), ("8.6", "12.0"), ("8.9", "12.4"),
                                          ("9.0", "12.3"), ("12.0", "12.8"), ("7.5", "12.0"),
                                          ("12.1", "12.9")])  # sm_121a is new in CUDA 12.9
def test_min_nvcc_per_arch(cc: str, nvcc: str) -> None:
    assert shipped_index().min_nvcc_for(cc) == nvcc


def _wheel(data: dict[str, Any], i: int = 0) -> dict[str, Any]:
    return data["windows"]["wheels"][i]


BAD: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("unknown top key", lambda d: d.update(extra=1), "unknown key(s) extra"),
    ("unknown wheel key", lambda d: _wheel(d).update(colour="red"),
     r"windows.wheels\[0\] \(sageattention-2.2.0\+cu124.*unknown key\(s\) colour"),
    ("http release base", lambda d: d["windows"].update(release_base="http://x.org/"),
     "must be an https URL"),
    ("bad specifier", lambda d: _wheel(d).update(torch="~=banana"), "not a version specifier"),
    ("torch range misses the wheel's own torch", lambda d: _wheel(d).update(torch=">=2.6"),
     "does not contain 2.5.1"),
    ("not a wheel name", lambda d: _wheel(d).update(file="sageattention.zip"),
     "not a wheel file name"),
    ("another package", lambda d: _wheel(d).update(file="torch-2.5.1-cp39-abi3-win_amd64.whl"),
     "a wheel of 'torch'"),
    ("linux wheel", lambda d: _wheel(d).update(
        file="sageattention-2.2.0+cu124torch2.5.1.post3-cp39-abi3-linux_x86_64.whl"),
     "not a win_amd64 wheel"),
    ("short digest", lambda d: _wheel(d).update(sha256="abc"), "64 lower-case hex"),
    ("digest without source", lambda d: _wheel(d).pop("sha256_source"), "come together"),
    ("twice", lambda d: d["windows"]["wheels"].append(dict(_wheel(d))), "listed twice"),
    ("short commit", lambda d: d["source"].update(commit="d1a57a5"), "full 40-digit"),
    ("rejected commit pinned", lambda d: d["source"].update(
        commit="eb615cf6cf4d221338033340ee2de1c37fbdba4a"), "one of the rejected"),
    ("bad arch", lambda d: d["source"].update(archs=["sm90"]), "not a compute capability"),
    ("newer schema", lambda d: d.update(schema_version=2), "schema_version 2 is not supported"),
    ("wrong type", lambda d: d["triton"].update(turing_spec=3), "wrong type"),
    ("bad index template", lambda d: d["linux_indexes"][0].update(version="{nope}"),
     "does not make a version"),
    # Provenance of third-party wheels (issue 10): required, typed, and consistent with the
    # refs [source] rejects.
    ("index without provenance", lambda d: d["linux_indexes"][0].pop("source_ref"),
     "missing key 'source_ref'"),
    ("index source over http", lambda d: d["linux_indexes"][0].update(
        source_repository="http://github.com/x/y"), "must be an https URL"),
    ("broken arch not a cc", lambda d: d["linux_indexes"][0].update(broken_archs=["sm90"]),
     "not a compute capability"),
    ("rejected ref hidden", lambda d: d["linux_indexes"][0].update(broken_archs=[]),
     "built from v2.2.0, which .source. rejects"),
    ("wheel broken arch bad", lambda d: d["windows"]["wheels"][0].update(broken_archs=["x"]),
     "not a compute capability"),
    # D16 (issue 34): nan passed `> 0` checks (every comparison with nan is false)
    ("nan per nvcc thread", lambda d: d["source"].update(gib_per_nvcc_thread=float("nan")),
     "'gib_per_nvcc_thread' must be a finite number"),
    ("inf reserve", lambda d: d["source"].update(reserve_gib=float("inf")),
     "'reserve_gib' must be a finite number"),
    # D17: userinfo made another host read as github.com; the GitHub keys name github.com
    ("userinfo in release base", lambda d: d["windows"].update(
        release_base="https://github.com@evil.example.com/x/releases/download/"),
     "user name or password"),
    ("userinfo in archive", lambda d: d["source"].update(
        archive="https://user:pw@github.com/x/y/archive/abc.tar.gz"), "user name or password"),
    ("release base elsewhere", lambda d: d["windows"].update(
        release_base="https://evil.example.com/x/releases/download/"),
     "'release_base' must be on github.com"),
    ("builder elsewhere", lambda d: d["linux_indexes"][0].update(
        builder="https://evil.example.com/x"), "'builder' must be on github.com"),
    ("index url with userinfo", lambda d: d["linux_indexes"][0].update(
        url="https://wheels.astral.sh@evil.example.com/simple/"), "user name or password"),
    ("wheel name with a path", lambda d: d["windows"]["wheels"][0].update(
        file="../sageattention-2.2.0+cu124torch2.5.1.post3-cp39-abi3-win_amd64.whl"),
     "path separators"),
]


@pytest.mark.parametrize(("label", "mutate", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_index_is_rejected_naming_the_entry(label: str, mutate: Callable[[dict], None],
                                                message: str) -> None:
    data = shipped_data()
    mutate(data)
    with pytest.raises(IndexError_) as info:
        parse_index(data, "my-index.toml")
    assert info.value.message.startswith("my-index.toml: ")
    text = info.value.message
    assert message in text or re.search(message, text), text
    assert info.value.code == "SD903"


@pytest.mark.parametrize("entry", [
    "--index-url=http://127.0.0.1:8766/simple/", "-i http://127.0.0.1/simple/",
    "--extra-index-url", "setuptools @ http://127.0.0.1:8766/setuptools.whl",
    "setuptools @ file:///tmp/setuptools.whl", "setuptools @ git+https://x.org/s.git",
    "setuptools @ https://user:pw@x.org/s.whl", "-e .", "setuptools>=62 --hash=sha256:00",
    "", "setuptools\n--index-url=http://x", "../setuptools",
])
def test_build_requires_are_pep_508_requirements_without_options_or_plain_urls(
        entry: str) -> None:
    """D3: uv obeyed an option or an http URL given as a build requirement."""
    data = shipped_data()
    data["source"]["build_requires"] = ["wheel", entry]
    with pytest.raises(IndexError_) as info:
        parse_index(data, "my-index.toml")
    assert info.value.code == "SD903" and "build_requires" in info.value.message, \
        info.value.message


def test_build_requires_may_name_an_https_url() -> None:
    data = shipped_data()
    data["source"]["build_requires"] = ["setuptools @ https://files.example.org/s.whl",
                                        "wheel>=0.40", "packaging; python_version >= '3.9'"]
    assert parse_index(data, "my-index.toml").build.build_requires[0].startswith("setuptools @")


def test_unreadable_and_invalid_toml_files(tmp_path: Path) -> None:
    with pytest.raises(IndexError_, match="cannot read it"):
        load_index_file(tmp_path / "absent.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("schema_version = [", encoding="utf-8")
    with pytest.raises(IndexError_, match="not valid TOML"):
        load_index_file(broken)


def test_dumped_index_loads_back_equal() -> None:
    index = shipped_index()
    again = parse_index(parse_toml(dump_index(index, index.updated), "x"), index.source)
    assert again == index


def test_a_refreshed_copy_wins_only_while_it_is_newer(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    user = tmp_path / "sagedoctor" / "wheels_index.toml"
    user.parent.mkdir(parents=True)
    index = shipped_index()
    user.write_text(dump_index(index, "2099-01-01"), encoding="utf-8")
    assert load_index().source == str(user)
    user.write_text(dump_index(index, "2000-01-01"), encoding="utf-8")
    assert load_index().source == str(SHIPPED_INDEX)
    assert load_index(SHIPPED_INDEX).source == str(SHIPPED_INDEX)


# --- index refresh against a local server ---------------------------------------------------

class _Api(BaseHTTPRequestHandler):
    pages: ClassVar[list[Any]] = []
    pypi: ClassVar[dict[str, Any]] = {}
    requests: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).requests.append(self.path)
        if self.path.startswith("/simple/"):  # PyPI's simple API, JSON form
            name = self.path.split("/")[2]
            body = json.dumps({"meta": {"api-version": "1.1"}, "name": name,
                               "versions": self.pypi[name]["versions"]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        page = 2 if "page=2" in self.path else 1
        body = json.dumps(self.pages[page - 1]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if page == 1:
            port = self.server.server_address[1]  # type: ignore[index]
            self.send_header("Link", f'<http://127.0.0.1:{port}/repos/woct0rdho/SageAttention/'
                                     'releases?per_page=100&page=2>; rel="next"')
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api() -> Iterator[str]:
    _Api.pages = json.loads((FIXTURES / "github_releases.json").read_text())["pages"]
    _Api.pypi = json.loads((FIXTURES / "pypi_versions.json").read_text())
    _Api.requests = []
    with local_server(_Api) as url:
        yield url


def test_refresh_writes_the_user_index_with_github_digests(tmp_path: Path, api: str) -> None:
    env = clean_env(tmp_path)
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    before = SHIPPED_INDEX.read_bytes()
    done = run_cli(["index", "refresh", "--api", api, "--pypi", f"{api}/simple"], env)
    assert done.returncode == 0, done.stderr
    assert len([r for r in _Api.requests if r.startswith("/repos/")]) == 2  # Link: page 2
    written = tmp_path / "config" / "sagedoctor" / "wheels_index.toml"
    index = load_index_file(written)
    by_file = {w.file: w for w in index.windows_wheels}
    new = by_file["sageattention-2.2.0+cu130torch2.14.0andhigher.post7-cp310-abi3-win_amd64.whl"]
    assert (new.sha256, new.sha256_source) == ("ab" * 32, "github-api")
    assert str(new.torch) == ">=2.14"
    same = by_file["sageattention-2.2.0+cu130torch2.10.0andhigher.post6-cp310-abi3-win_amd64.whl"]
    assert same.sha256_source == "github-api"
    contradicted = by_file[
        "sageattention-2.2.0+cu128torch2.10.0andhigher.post6-cp310-abi3-win_amd64.whl"]
    assert contradicted.sha256 == "0" * 63 + "1"
    assert "differs from GitHub's" in done.stdout
    post5 = by_file["sageattention-2.2.0+cu128torch2.10.0andhigher.post5-cp310-abi3-win_amd64.whl"]
    assert post5.problems  # known problems of a release carry over to its new files
    untouched = by_file["sageattention-2.2.0+cu130torch2.9.1.post6-cp310-abi3-win_amd64.whl"]
    assert untouched.sha256_source == "third-party"  # "md5:..." is no sha256 digest
    assert "evil.example" not in written.read_text(encoding="utf-8")
    assert "skipped sageattention-2.2.0+cu128torch2.14.0andhigher.post7" in done.stdout
    assert not any("2.99.0" in w.file for w in index.windows_wheels)  # drafts are ignored
    assert SHIPPED_INDEX.read_bytes() == before
    # The refreshed index is what `plan` now uses.
    plan = run_cli(["plan", "--facts", str(Path(__file__).parent / "profiles" /
                                           "windows-sageattention1.json"), "--json"], env)
    assert json.loads(plan.stdout)["index"] == str(written)


def test_refresh_reports_what_the_index_does_not_cover_yet(tmp_path: Path, api: str) -> None:
    env = clean_env(tmp_path)
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    # PyPI today (the fixture): every torch minor has a row; 2.15 has no triton-windows yet
    done = run_cli(["index", "refresh", "--api", api, "--pypi", f"{api}/simple", "--json"],
                   env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)["not_covered"]
    assert report["torch_minors_without_row"] == []
    assert report["torch_minors_without_windows_pairing"] == ["2.15"]
    assert report["triton_windows_minors_newer_than_the_table"] == []
    assert ("sageattention-2.2.0+cu130torch2.14.0andhigher.post7-cp310-abi3-win_amd64.whl"
            in report["new_fork_wheels"])
    # tomorrow: torch 2.16 and triton-windows 3.9 appear; text output names both, and the
    # written index learns the 3.9 release, so torch 2.15 is then planned (derived)
    _Api.pypi = {"torch": {"versions": [*_Api.pypi["torch"]["versions"], "2.16.0"]},
                 "triton-windows": {"versions": [*_Api.pypi["triton-windows"]["versions"],
                                                 "3.9.0.post30", "3.10.0a0.post1"]}}
    done = run_cli(["index", "refresh", "--api", api, "--pypi", f"{api}/simple"], env)
    assert done.returncode == 0, done.stderr
    assert "torch on PyPI without a pairing row: 2.16" in done.stdout
    assert "triton-windows minors newer than the table: 3.9" in done.stdout
    written = load_index_file(tmp_path / "config" / "sagedoctor" / "wheels_index.toml")
    assert (3, 9) in written.triton.windows_releases
    assert (3, 10) not in written.triton.windows_releases  # a pre-release is no release
    from sagedoctor.decide.resolve import resolve_plan
    from sagedoctor.facts import load_facts_file
    from sagedoctor.plan import Plan

    facts = load_facts_file(Path(__file__).parent / "profiles" /
                            "windows-torch215-no-triton-windows-yet.json")
    plan = resolve_plan(facts, written)
    assert isinstance(plan, Plan)
    assert plan.steps[0].requirement == "triton-windows>=3.9,<3.10"
    assert plan.steps[0].reason.startswith("derived: torch 2.15.0+cu132 pins Triton 3.9")


def test_refresh_refuses_plain_http_to_another_host(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    done = run_cli(["index", "refresh", "--api", "http://example.org"], env)
    assert done.returncode == 3
    assert "SD904" in done.stderr and "must be https" in done.stderr
    assert not (tmp_path / "config" / "sagedoctor").exists()


def test_refresh_reports_an_api_error(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    # A port nothing listens on: the connection is refused at once.
    done = run_cli(["index", "refresh", "--api", "http://127.0.0.1:9"], env)
    assert done.returncode == 3 and "GitHub API" in done.stderr


# --- provenance: a wheel built from a known-broken ref is never planned where it is broken ---

def _linux_machine(gpus: tuple[str, ...], torch: str) -> Any:
    from tests.test_resolve import machine

    nvcc = "13.0.88" if torch.endswith("cu130") else "12.8.93"
    return machine("linux", gpus, torch, nvcc=nvcc)


@pytest.mark.parametrize("torch", ["2.7.1+cu126", "2.8.0+cu128", "2.9.1+cu128", "2.10.0+cu130",
                                   "2.11.0+cu130", "2.12.0+cu130", "2.11.0+cu126"])
@pytest.mark.parametrize("gpus", [("h200",), ("h100",), ("4090", "h100"), ("a100", "h200")])
def test_linux_plan_for_sm90_never_holds_a_wheel_built_from_v2_2_0(
        torch: str, gpus: tuple[str, ...]) -> None:
    from sagedoctor.decide.resolve import resolve_plan
    from sagedoctor.decide.resolve.steps import ResolveOptions
    from sagedoctor.plan import Plan

    index = shipped_index()
    from_rejected = {e.url for e in index.linux_indexes
                     if e.source_ref in {r.ref for r in index.build.rejected}}
    assert from_rejected, "the shipped index names Astral's v2.2.0 builds"
    plan = resolve_plan(_linux_machine(gpus, torch), index, ResolveOptions())
    assert isinstance(plan, Plan), plan
    assert not [s for s in plan.steps if s.index_url in from_rejected]
    assert plan.steps[0].action == "build-from-source"
    assert any("known broken on sm90" in n for n in plan.notes)


def test_the_same_index_is_still_planned_where_its_wheels_work() -> None:
    from sagedoctor.decide.resolve import resolve_plan
    from sagedoctor.decide.resolve.steps import ResolveOptions
    from sagedoctor.plan import Plan

    plan = resolve_plan(_linux_machine(("3090",), "2.11.0+cu130"), shipped_index(),
                        ResolveOptions())
    assert isinstance(plan, Plan)
    assert plan.steps[0].action == "install-from-index"
    # the current version template ("+cu.13.0.torch.2.11"), which parse_sage_local reads
    assert plan.steps[0].requirement == "sageattention==2.2.0+cu.13.0.torch.2.11"


def test_plan_with_a_nan_in_the_index_is_sd903_not_an_internal_error(tmp_path: Path) -> None:
    """D16 (issue 34): `gib_per_nvcc_thread = nan` passed validation; plan then crashed."""
    from sagedoctor.index import SHIPPED_INDEX

    text = SHIPPED_INDEX.read_text(encoding="utf-8")
    assert "gib_per_nvcc_thread = 5.0" in text
    index = tmp_path / "index.toml"
    index.write_text(text.replace("gib_per_nvcc_thread = 5.0", "gib_per_nvcc_thread = nan"),
                     encoding="utf-8")
    done = run_cli(["plan", "--index", str(index)], clean_env(tmp_path))
    assert "internal error" not in done.stderr, done.stderr
    assert "SD903" in done.stderr and "gib_per_nvcc_thread" in done.stderr, done.stderr


class _Trickle(BaseHTTPRequestHandler):
    """A server that answers one byte a second: each read is quick, the answer never ends."""

    def do_GET(self) -> None:
        import time

        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "100000")
        self.end_headers()
        try:
            for _ in range(600):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(1)
        except OSError:  # the client gave up
            pass

    def log_message(self, *args: Any) -> None:
        pass


def test_refresh_against_a_trickling_server_stops_at_its_deadline(tmp_path: Path) -> None:
    """D14 (issue 34): `index refresh --api` against a 1-byte/s server ran on past 120 s
    (each read came within httpx's timeout): the refresh as a whole has a deadline."""
    import time

    env = clean_env(tmp_path)
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    env["SAGEDOCTOR_REFRESH_TIMEOUT"] = "3"
    with local_server(_Trickle) as url:
        began = time.monotonic()
        done = run_cli(["index", "refresh", "--api", url, "--pypi", f"{url}/simple"], env,
                       timeout=90)
        took = time.monotonic() - began
    assert done.returncode == 3, done.stdout + done.stderr
    assert "SD904" in done.stderr and "within 3 s" in done.stderr, done.stderr
    assert took < 30, took
    assert not (tmp_path / "config" / "sagedoctor").exists()
