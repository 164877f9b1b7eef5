"""Fuzzing the verify record `check` reads back from the user's state folder (a file any
crash, disk error or hand edit may have left half-written): it reads as verified, or as
'corrupt' (finding SD169), never as a crash."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from sagedoctor.probe.verification import read_verification
from sagedoctor.state import state_path
from tests.fuzz_support import byte_mutations, fuzz, mutated_json, outcome

RECORD = {"schema_version": 1, "verdict": "sdpa-only", "verified_at": "2026-12-02T10:00:00Z",
          "fingerprint": {"dists": {"sageattention": "2.2.0", "torch": "2.11.0"}},
          "results": {"gpus": {"GPU-1": {"name": "NVIDIA H200", "arch": "9.0", "sageattn_auto": {
              "fp16-128": {"passed": False, "kernel": "sage_fp8_sm90"}}}}},
          "post_update": ["sagedoctor", "verify"]}


@pytest.fixture(scope="module")
def prefix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("state")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(home))
        venv = home / "venv"
        venv.mkdir()
        yield venv


@fuzz(200)
@given(st.one_of(mutated_json(RECORD).map(lambda d: json.dumps(d).encode()),
                 byte_mutations(json.dumps(RECORD).encode()), st.binary(max_size=200)))
@example(b"[" * 100_000)  # nested too deeply: json raises RecursionError
@example(json.dumps(RECORD).encode())
@example(b"\xff\xfe{}")
def test_a_damaged_verify_record_reads_as_corrupt(prefix: Path, raw: bytes) -> None:
    path = state_path(prefix)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(raw)

    def read() -> str:
        facts = read_verification(prefix)
        assert facts.status in ("verified", "corrupt")
        if facts.status == "verified":
            assert facts.verdict in ("routing", "sdpa-only", "broken")
        return facts.status

    outcome("verify record (state file)", read)
