"""Fuzzing the target probe's answer: the JSON a venv's own interpreter prints about itself
(a sitecustomize or a .pth file may print anything before it, or instead of it). Each answer
becomes TargetFacts or SD902 naming the interpreter; the answer's size is capped, so 800 MB
of output cannot take gigabytes of memory."""

from __future__ import annotations

import json
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from sagedoctor.errors import FactsFileError, TargetError
from sagedoctor.facts import TargetFacts, parse_record
from sagedoctor.probe.target import MAX_ANSWER_BYTES, probe_target
from tests.fuzz_support import byte_mutations, fuzz, mutated_json, outcome

PROFILE = json.loads((Path(__file__).parent / "profiles" / "linux-h200-ready.json")
                     .read_text(encoding="utf-8"))
ANSWER: dict[str, Any] = PROFILE["target"]


@fuzz(300)
@given(mutated_json(ANSWER))
@example({**ANSWER, "torch": {"version": 2.11}})
@example({**ANSWER, "tags": "cp312-cp312-linux_x86_64"})
def test_a_mutated_answer_is_target_facts_or_refused(data: Any) -> None:
    def parse() -> None:
        facts = parse_record(TargetFacts, data, "target", "/venv/bin/python")
        assert isinstance(facts.tags, tuple) and isinstance(facts.executable, str)

    outcome("target probe answer (JSON data)", parse, (FactsFileError,))


def fake_python(folder: Path, body: str) -> Path:
    """An executable standing in for a venv's interpreter: it prints what the test says."""
    folder.mkdir(parents=True, exist_ok=True)
    python = folder / "python"
    python.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    python.chmod(0o755)
    return python


NOISE = (b"", b"hello from sitecustomize\n", b"no newline {", json.dumps(ANSWER).encode())


@fuzz(30)
@given(st.one_of(byte_mutations(json.dumps(ANSWER).encode()), st.binary(max_size=300),
                 st.just(b"[" * 200_000), st.just(b"1" * 20_000)),
       st.sampled_from([0, 0, 1, 137]), st.sampled_from(NOISE), st.booleans())
@example(json.dumps(ANSWER).encode(), 0, b"hello from sitecustomize\n", True)
@example(json.dumps(ANSWER).encode(), 0, b"", False)
def test_whatever_the_interpreter_prints_is_facts_or_sd902(answer: bytes, status: int,
                                                           noise: bytes, framed: bool) -> None:
    """`noise` is what the venv prints by itself (a sitecustomize), before the framed answer;
    an interpreter that does not frame its answer is not sagedoctor's script answering."""
    with tempfile.TemporaryDirectory() as tmp:
        payload, before = Path(tmp) / "answer", Path(tmp) / "noise"
        payload.write_bytes(answer)
        before.write_bytes(noise)
        frame = 'printf %s "$SAGEDOCTOR_ANSWER_TOKEN"\n' if framed else ""
        python = fake_python(Path(tmp) / "venv ü" / "bin",
                             f'cat "{before}"\n{frame}cat "{payload}"\n{frame}exit {status}\n')

        def probe() -> None:
            try:
                facts = probe_target(python)
            except TargetError as exc:
                assert str(python) in exc.message
                raise
            assert framed and status == 0
            assert facts.python_version == ANSWER["python_version"]

        result = outcome("target probe answer (interpreter output)", probe)
        if framed and status == 0 and answer == json.dumps(ANSWER).encode():
            assert result == "parsed"


@pytest.mark.parametrize("body", [
    f"head -c {MAX_ANSWER_BYTES + 1} /dev/zero\n",  # just past the cap
    "while :; do echo 0000000000000000000000000000000000000000000000000000; done\n",  # endless
])
def test_an_answer_past_the_cap_is_sd902_in_bounded_time_and_memory(tmp_path: Path,
                                                                     body: str) -> None:
    python = fake_python(tmp_path / "bin", body)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    start = time.monotonic()
    with pytest.raises(TargetError, match="answered with more than 8 MB") as info:
        probe_target(python)
    assert info.value.code == "SD902"
    assert time.monotonic() - start < 30
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert grown_mib < 4 * MAX_ANSWER_BYTES / 2**20, f"held {grown_mib:.0f} MiB"
    outcome("target probe answer (interpreter output)", lambda: probe_target(python))


def test_an_answer_just_under_the_cap_is_read(tmp_path: Path) -> None:
    padded = json.dumps({**ANSWER, "pip": "x" * (MAX_ANSWER_BYTES - 100_000)})
    assert len(padded) < MAX_ANSWER_BYTES
    payload = tmp_path / "answer"
    payload.write_text(padded, encoding="utf-8")
    frame = 'printf %s "$SAGEDOCTOR_ANSWER_TOKEN"\n'
    python = fake_python(tmp_path / "bin", f'{frame}cat "{payload}"\n{frame}')
    assert probe_target(python).pip == "x" * (MAX_ANSWER_BYTES - 100_000)
