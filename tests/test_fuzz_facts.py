"""Fuzzing `--facts FILE` (a user's saved report, replayed anywhere) and what reads it next:
any bytes load as Facts or are refused as SD901; Facts that load are diagnosed and planned
without a crash, whatever odd versions, names and numbers they hold."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from sagedoctor.decide.checks import diagnose
from sagedoctor.decide.findings import exit_code
from sagedoctor.decide.resolve import resolve_plan
from sagedoctor.errors import FactsFileError
from sagedoctor.facts import facts_from_dict, load_facts_file
from sagedoctor.index import shipped_index
from sagedoctor.plan import Blocked
from sagedoctor.render.findings import render_text
from tests.fuzz_support import byte_mutations, fuzz, mutated_json, outcome

PROFILES = Path(__file__).parent / "profiles"
LINUX = json.loads((PROFILES / "linux-h200-ready.json").read_text(encoding="utf-8"))
WINDOWS = json.loads((PROFILES / "windows-4090-unverified.json").read_text(encoding="utf-8"))
INDEX = shipped_index()

# Values that look right to a type check and wrong to everything after it.
ODD_STRINGS = ["", " ", "٩.٠", "9.0.0.0", "99999999999999999999.0", "2.13.0+cu130",
               "2.13.0+cu", "2.13.0+cu1", "2.13.0+rocm", "1!2.0", "2.2.0+cu130torch.post6",
               "2.2.0+cu130torch2.10.0andhigher.postX", "nan", "C:\\Users\\Ана\\venv",
               "../../etc", "\x00", "x" * 5000, "580", "580.", "12.0", "a.b", "-1"]


@st.composite
def odd_facts(draw: st.DrawFn) -> Any:
    """A real profile whose string leaves are swapped for odd (well-typed) strings."""
    import copy
    import random

    data = copy.deepcopy(draw(st.sampled_from([LINUX, WINDOWS])))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    leaves: list[tuple[Any, Any]] = []
    stack = [data]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in items:
            if isinstance(value, str) and key != "schema_version":
                leaves.append((node, key))
            elif isinstance(value, dict | list):
                stack.append(value)
            elif isinstance(value, int | float) and not isinstance(value, bool):
                leaves.append((node, key))
    for _ in range(draw(st.integers(1, 6))):
        node, key = rng.choice(leaves)
        if isinstance(node[key], str):
            node[key] = draw(st.sampled_from(ODD_STRINGS) | st.text(max_size=20))
        else:
            node[key] = draw(st.sampled_from([0, -1, 2**63, 10**30, 0.0, -0.5, 1e308]))
    return data


def diagnosed(data: Any) -> str:
    facts = facts_from_dict(data, "fuzz.json")
    findings = diagnose(facts)
    assert exit_code(findings) in (0, 1, 2)
    assert render_text(findings, facts.areas or ('system',), verbose=True)
    plan = resolve_plan(facts, INDEX)
    return "blocked" if isinstance(plan, Blocked) else "planned"


@fuzz(250)
@given(odd_facts())
@example({**LINUX, "system": {**LINUX["system"], "memory_gib": 10**400}})  # float(int)
@example({**LINUX, "gpu": {**LINUX["gpu"], "driver_version": "٥٨٠.١"}})
@example({**WINDOWS, "target": {**WINDOWS["target"], "python_version": "3"}})
@example({**WINDOWS, "target": {**WINDOWS["target"], "python_version": "x.y"}})
def test_odd_but_well_typed_facts_are_diagnosed_and_planned(data: Any) -> None:
    outcome("facts -> diagnose + plan", lambda: diagnosed(data))


@fuzz(250)
@given(st.one_of(mutated_json(LINUX), mutated_json(WINDOWS)))
def test_mutated_facts_load_or_are_sd901(data: Any) -> None:
    outcome("facts (JSON data)", lambda: diagnosed(data))


@fuzz(150)
@given(st.one_of(byte_mutations(json.dumps(LINUX).encode()), st.binary(max_size=400)))
@example(b"\xef\xbb\xbf" + json.dumps(LINUX).encode())  # a BOM: accepted
@example(json.dumps(LINUX).encode("utf-16"))
@example(b"[" * 100_000)
@example(b'{"schema_version": 1, "system": ' + b"1" * 5000 + b"}")  # past the digit limit
@example(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
def test_any_facts_file_loads_or_is_sd901(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "report.json"
        path.write_bytes(raw)

        def load() -> None:
            try:
                facts = load_facts_file(path)
            except FactsFileError as exc:
                assert str(path) in exc.message
                raise
            diagnose(facts)

        outcome("--facts file (bytes)", load)
