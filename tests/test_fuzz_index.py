"""Fuzzing the wheel index loader (`--index FILE`, the refreshed copy) and the GitHub API
answers `index refresh` reads. An index loads, or is refused as SD903 naming the place; a
GitHub answer gives checked wheels and skip notes, or SD904; never a crash."""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Iterator
from functools import partial
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from sagedoctor.index import SHIPPED_INDEX, load_index_file, parse_index, shipped_index
from sagedoctor.index.refresh import fetch_releases, wheels_from_releases
from tests.fuzz_support import (
    byte_mutations,
    fuzz,
    json_values,
    mutated_json,
    mutations,
    outcome,
    text_or_junk,
)
from tests.standins import FIXTURES, local_server

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[import-not-found, no-redef, unused-ignore]

SHIPPED_TEXT = SHIPPED_INDEX.read_text(encoding="utf-8")
SHIPPED_DATA = tomllib.loads(SHIPPED_TEXT)
INDEX = shipped_index()
RELEASES = json.loads((FIXTURES / "github_releases.json").read_text(encoding="utf-8"))["pages"]

# Values a hostile index may put where a string, list or table belongs.
TOML_VALUES = [
    "https://[::1/", "https://x.org:99999/", "http://x.org/", "{cuda.real}", "{0}", "{torch!z}",
    "{cuda:d}", "{}", ">=2.9,<", "===x", "9.0", "99.99", "٩.٠", "", "0" * 5000, 1e308, -1, 0,
    True, [], {}, [1, "a"], ["8.0", "x"], "a" * 70, "v2.2.0-windows.post6",
    "sageattention-2.2.0+cu130torch2.10.0andhigher.post6-cp310-abi3-win_amd64.whl",
    "../sageattention-2.2.0+cu130torch2.10.0-cp310-abi3-win_amd64.whl", "2026-13-45",
]


@st.composite
def mutated_index(draw: st.DrawFn) -> Any:
    """The shipped index's data with a few values swapped for hostile ones."""
    import copy
    import random

    data = copy.deepcopy(SHIPPED_DATA)
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    for _ in range(draw(st.integers(1, 3))):
        node: Any = data
        while True:  # walk down to a random value
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            if not keys:
                break
            key = rng.choice(keys)
            child = node[key]
            if isinstance(child, dict | list) and child and rng.random() < 0.7:
                node = child
                continue
            choice = rng.randrange(3)
            if choice == 0 and isinstance(node, dict):
                del node[key]
            else:
                node[key] = draw(st.sampled_from(TOML_VALUES) | json_values)
            break
    return data


@fuzz(400)
@given(mutated_index())
@example({**SHIPPED_DATA, "linux_indexes": [{**SHIPPED_DATA["linux_indexes"][0],
                                               "version": "{cuda.real}"}]})
@example({**SHIPPED_DATA, "source": {**SHIPPED_DATA["source"], "archive": "https://[::1/x"}})
@example({**SHIPPED_DATA, "source": {**SHIPPED_DATA["source"], "reserve_gib": 10**400}})
def test_a_mutated_index_loads_or_is_sd903(data: Any) -> None:
    def parse() -> None:
        index = parse_index(data, "fuzz.toml")
        assert index.build.commit and all(w.url.startswith("https://")
                                          for w in index.windows_wheels)

    outcome("wheel index (TOML data)", parse)


@fuzz(120)
@given(st.one_of(byte_mutations(SHIPPED_TEXT.encode()),
                 mutations(SHIPPED_TEXT).map(lambda t: t.encode("utf-8", "surrogatepass")),
                 st.binary(max_size=500),
                 text_or_junk(st.just("schema_version = 1\n")).map(str.encode)))
@example(b"\xef\xbb\xbf" + SHIPPED_TEXT.encode())  # a BOM from a Windows editor
@example(b"a = " + b"[" * 5000)
@example(SHIPPED_TEXT.encode("utf-16"))
def test_an_index_file_of_any_bytes_loads_or_is_sd903(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "wheels_index.toml"
        path.write_bytes(raw)
        outcome("wheel index (file bytes)", lambda: load_index_file(path))


def test_an_index_path_that_is_a_folder_or_a_fifo_is_sd903(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    for path in (tmp_path, fifo, tmp_path / "missing.toml"):
        assert outcome("wheel index (file bytes)", partial(load_index_file, path)) == "SD903"


# --- GitHub API answers ------------------------------------------------------------------------

@fuzz(400)
@given(st.one_of(mutated_json(RELEASES[0]), mutated_json(RELEASES[1]),
                 st.lists(json_values, max_size=4), json_values))
@example([{"tag_name": "v2.2.0-windows.post6", "assets": 5}])  # assets not a list
@example([{"tag_name": "v1", "assets": [{"name": "sageattention-x-win_amd64.whl",
                                         "browser_download_url": 7}]}])
def test_github_release_json_gives_checked_wheels_or_skips(releases: Any) -> None:
    def parse() -> str:
        wheels, skipped = wheels_from_releases(releases if isinstance(releases, list)
                                               else [releases], INDEX)
        for wheel in wheels:
            assert wheel.url.startswith(INDEX.release_base)
            assert wheel.sha256 is None or len(wheel.sha256) == 64
        assert all(isinstance(s, str) for s in skipped)
        return "parsed" if wheels else "nothing usable"

    outcome("GitHub releases JSON", parse)


class Answer:
    """What the fake API answers next (one test at a time)."""

    body: ClassVar[bytes] = b"[]"
    headers: ClassVar[dict[str, str]] = {}


def _handler() -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            for key, value in {"Content-Type": "application/json", **Answer.headers}.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(Answer.body)))
            self.end_headers()
            self.wfile.write(Answer.body)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture(scope="module")
def api() -> Iterator[str]:
    with local_server(_handler()) as url:
        yield url


@fuzz(60)
@given(st.one_of(byte_mutations(json.dumps(RELEASES[0]).encode()), st.binary(max_size=200),
                 st.just(b"[" * 100_000), st.just(b'"\xff\xfe"')),
       st.sampled_from([{}, {"Link": '<http://[::1/x>; rel="next"'}, {"Link": "<<<>>>;;;"},
                        {"Link": '<https://evil.example/x>; rel="next"'},
                        {"Content-Type": "text/html; charset=utf-7"}]))
@example(json.dumps(RELEASES[0]).encode(), {})
@example(b"\xff\xfe[]", {})  # not UTF-8: httpx's json() raises UnicodeDecodeError
@example(b"[" * 100_000, {})  # nested too deeply
def test_a_github_api_server_answer_is_releases_or_sd904(api: str, body: bytes,
                                                         headers: dict[str, str]) -> None:
    Answer.body, Answer.headers = body, headers
    outcome("GitHub API answer (HTTP)", lambda: fetch_releases(api, timeout=10))
