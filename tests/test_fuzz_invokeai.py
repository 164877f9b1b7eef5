"""Fuzzing invokeai.yaml: what `check` reads (PyYAML safe_load, size-capped) and what the
install's InvokeAI step edits (ruamel.yaml round trip). BOM, tabs, non-UTF-8 bytes, a huge
file, duplicate keys, anchor/alias and merge-key bombs, deep nesting, and a folder or a FIFO
where the file should be: each is read, or said as `config_error` (finding SD183) by check
and refused as SD942 (or SD943: the edited copy does not load) by the edit; never a crash
or a hang."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from sagedoctor.apps.invokeai import _read, edited_text, prove_loads
from sagedoctor.facts import InvokeAIFacts
from sagedoctor.probe.invokeai import parse_config, read_config
from tests.fuzz_support import TRICKY, byte_mutations, fuzz, mutations, outcome

CONFIG = """\
# Internal metadata - do not edit:
schema_version: 4.0.3

# Put user settings here - see https://invoke-ai.github.io/InvokeAI/features/CONFIGURATION/:
host: 0.0.0.0
attention_type: auto
precision: float16
enable_partial_loading: true
remote_api_tokens:
  - url_regex: civitai.com
    token: abc
"""

LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}]\n" for i in range(8)) + "attention_type: *i\n"
MERGE_BOMB = "base: &b {k0: 0, k1: 1}\n" + "".join(
    f"m{i}: &m{i} {{<<: [*{'b' if i == 0 else f'm{i - 1}'}], x{i}: {i}}}\n"
    for i in range(30)) + "schema_version: 4.0.3\n"

SPECIAL = [
    "\ufeff" + CONFIG,  # a BOM (Windows Notepad)
    CONFIG.replace("  - ", "\t- "),  # a tab for indentation
    CONFIG + "attention_type: sliced\nattention_type: sage\n",  # a duplicate key
    LAUGHS,
    MERGE_BOMB,
    "[" * 10_000 + "]" * 10_000,  # nested too deeply
    "schema_version: 2026-13-45\n",  # a timestamp that is no date
    "attention_type: !!python/object/apply:os.system [echo hi]\n",  # an unsafe tag
    "attention_type: !!binary '@@@'\n",
    "attention_type: 1e99999\nschema_version: 0x\n",
    "- a list\n- not a mapping\n",
    "? [complex, key]\n: value\n",
    "&a a: *a\n",
    "%YAML 9.9\n---\nx: 1\n",
    "---\na: 1\n---\nb: 2\n",  # two documents
    "attention_type: \"\\ud800\"\n",  # a lone surrogate escape
]


def _yaml_texts() -> st.SearchStrategy[str]:
    line = st.tuples(st.sampled_from(["schema_version", "attention_type", "attention_backend",
                                      "host", "<<", "?", "-", "&a", "*a", "!!str", "'", "\""]),
                     st.sampled_from([": ", ":", " : ", ":\t", " "]),
                     st.text(alphabet=TRICKY + "abc019", max_size=12)).map("".join)
    return st.one_of(st.sampled_from(SPECIAL), mutations(CONFIG),
                     st.lists(line, max_size=8).map("\n".join), st.text(max_size=200))


def facts_for(path: Path) -> InvokeAIFacts:
    return InvokeAIFacts(str(path.parent), "--root", True, None, str(path), True)


def check_reads(parse_result: InvokeAIFacts) -> str:
    if parse_result.config_error is not None:
        assert parse_result.config_error.strip()
        return "config_error"
    for value in (parse_result.schema_version, parse_result.attention_type,
                  parse_result.attention_backend):
        assert value is None or isinstance(value, str)
    return "parsed"


@fuzz(300)
@given(st.one_of(_yaml_texts().map(lambda t: t.encode("utf-8", "surrogatepass")),
                 byte_mutations(CONFIG.encode()), st.binary(max_size=300)))
@example(b"\xff\xfeattention_type: sage\n")  # not UTF-8
@example(CONFIG.encode("utf-16"))
@example(LAUGHS.encode())
@example(MERGE_BOMB.encode())
def test_check_reads_invokeai_yaml_or_says_config_error(raw: bytes) -> None:
    start = time.monotonic()
    outcome("invokeai.yaml (check)",
            lambda: check_reads(parse_config(facts_for(Path("/r/invokeai.yaml")), raw)))
    assert time.monotonic() - start < 15, "a bomb must not take long"  # unguarded: minutes


@fuzz(150)
@given(st.one_of(_yaml_texts().map(lambda t: t.encode("utf-8", "surrogatepass")),
                 byte_mutations(CONFIG.encode())))
@example(("\ufeff" + CONFIG).encode())
@example(b"schema_version: 2026-13-45\n")  # ruamel builds the date: ValueError
@example(CONFIG.replace("\n", "\r\n").encode())
@example(b"a: 1\na: 2\n")  # ruamel refuses duplicate keys
@example(b"[" * 10_000)
@example(LAUGHS.encode())
@example("\ufeffattention_type: \"\\ud800\"\n".encode())
def test_the_install_step_edits_invokeai_yaml_or_refuses_it(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "invokeai.yaml"
        path.write_bytes(raw)

        def edit() -> None:
            _bom, text, _newline = _read(path)
            out = edited_text(text, {"attention_type": "sage"}, path)
            # As the step does: the edited copy must load (no InvokeAI in this interpreter,
            # so a strict YAML parse is the proof) before anything is written.
            prove_loads(Path(sys.executable), out, {"attention_type": "sage"}, path)
            assert yaml.safe_load(out)["attention_type"] == "sage"

        start = time.monotonic()
        outcome("invokeai.yaml (install edit)", edit)
        assert time.monotonic() - start < 15, "a bomb must not take long"  # unguarded: minutes
        assert path.read_bytes() == raw  # reading and editing in memory wrote nothing


def test_a_huge_config_is_refused_by_both_without_reading_it(tmp_path: Path) -> None:
    path = tmp_path / "invokeai.yaml"
    with path.open("wb") as handle:
        handle.truncate(64 * 1024 * 1024)  # sparse: 64 MB of nothing
    assert "larger than 1 MB" in (read_config(facts_for(path)).config_error or "")
    assert outcome("invokeai.yaml (install edit)", lambda: _read(path)) == "SD942"


@pytest.mark.parametrize("kind", ["folder", "fifo", "dangling link", "unreadable"])
def test_something_else_in_the_configs_place_is_said_not_read(tmp_path: Path,
                                                             kind: str) -> None:
    path = tmp_path / "invokeai.yaml"
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dangling link":
        path.symlink_to(tmp_path / "gone.yaml")
    else:
        path.write_text("attention_type: sage\n", encoding="utf-8")
        path.chmod(0)
        if os.access(path, os.R_OK):
            pytest.skip("running as root: every file is readable")
    start = time.monotonic()
    error = read_config(facts_for(path)).config_error
    assert error is not None and str(path) in error
    assert outcome("invokeai.yaml (install edit)", lambda: _read(path)) == "SD942"
    assert time.monotonic() - start < 5  # a FIFO is never opened for reading
