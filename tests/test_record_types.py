"""The typed shape of verify's record (runtime/records.py): Fingerprint and ArmingRecord
parsed from hostile JSON, one way for the hook, check and post-update."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sagedoctor.runtime.records import (
    ArmingRecord,
    Fingerprint,
    parse_arming_record,
    parse_fingerprint,
)
from sagedoctor.state import load_status, state_path

LIVE: dict[str, Any] = {
    "python": "3.12.3",
    "dists": {"torch": "2.11.0", "triton": "3.6.0", "triton-windows": None,
              "sageattention": "2.2.0"},
    "stat": {"torch": ["torch-2.11.0.dist-info", 120, 1700000000000000000],
             "triton": ["triton-3.6.0.dist-info", 80, 1700000000000000001],
             "triton-windows": None, "sageattention": None},
    "sites": ["/v/lib/python3.12/site-packages"],
    "interpreter": ["/usr/bin/python3.12", 8000, 1600000000000000000]}


def test_a_live_fingerprint_parses_and_writes_back_the_same_json() -> None:
    found = parse_fingerprint(json.loads(json.dumps(LIVE)))
    assert found is not None
    assert found.python == "3.12.3" and found.dists["torch"] == "2.11.0"
    assert found.stat is not None
    assert found.stat["torch"] == ("torch-2.11.0.dist-info", 120, 1700000000000000000)
    assert found.stat["sageattention"] is None
    assert found.sites == ("/v/lib/python3.12/site-packages",)
    assert found.interpreter == ("/usr/bin/python3.12", 8000, 1600000000000000000)
    assert json.dumps(found.to_json()) == json.dumps(LIVE)


def test_an_older_record_lacks_the_newer_fields() -> None:
    found = parse_fingerprint({"python": "3.12.3", "dists": {"torch": "2.11.0"}})
    assert found == Fingerprint("3.12.3", {"torch": "2.11.0"}, None, None, None)
    assert parse_fingerprint({}) == Fingerprint(None, {})


@pytest.mark.parametrize("field, value", [
    ("python", 3.12), ("python", ["3.12"]), ("dists", ["torch"]), ("dists", "torch"),
    ("dists", {"torch": 2}), ("stat", [1, 2, 3]), ("stat", {"torch": ["x", 1]}),
    ("stat", {"torch": ["x", "1", 2]}), ("stat", {"torch": ["x", True, 2]}),
    ("stat", {"torch": "x"}), ("sites", "/v/lib"), ("sites", [1]), ("interpreter", "x"),
    ("interpreter", ["/usr/bin/python", 1, 2.5]), ("interpreter", [None, 1, 2])])
def test_a_field_of_the_wrong_type_makes_no_fingerprint(field: str, value: object) -> None:
    assert parse_fingerprint({**LIVE, field: value}) is None


@pytest.mark.parametrize("data", [None, 7, "fingerprint", [], [LIVE]])
def test_no_dict_is_no_fingerprint(data: object) -> None:
    assert parse_fingerprint(data) is None


RECORD: dict[str, Any] = {"schema_version": 1, "verdict": "routing",
                          "verified_at": "2026-12-03T08:00:00+00:00", "fingerprint": LIVE,
                          "results": {}, "post_update": ["sagedoctor", "post-update"],
                          "kernels": {"9.0|fp16|128": "sage_fp8_sm90"}}


def test_an_arming_record_parses() -> None:
    found = parse_arming_record(json.loads(json.dumps(RECORD)))
    assert found == ArmingRecord("routing", "2026-12-03T08:00:00+00:00",
                                 parse_fingerprint(LIVE) or Fingerprint(None, {}),
                                 ("sagedoctor", "post-update"))


@pytest.mark.parametrize("change", [
    {"verdict": 1}, {"verdict": None}, {"verified_at": None}, {"verified_at": 5},
    {"fingerprint": 7}, {"fingerprint": None}, {"fingerprint": {**LIVE, "python": 3}},
    {"post_update": "sagedoctor post-update"}, {"post_update": ["sagedoctor", 1]}])
def test_an_arming_record_with_a_field_off_is_none(change: dict[str, Any]) -> None:
    assert parse_arming_record({**RECORD, **change}) is None


def test_an_arming_record_without_a_required_field_is_none() -> None:
    for key in ("verdict", "verified_at", "fingerprint"):
        assert parse_arming_record({k: v for k, v in RECORD.items() if k != key}) is None


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=12), inner, max_size=5), max_leaves=20)


@given(st.dictionaries(st.sampled_from(sorted(LIVE)), JSON, max_size=5), JSON)
def test_hostile_json_parses_or_is_none_never_raises(fields: dict[str, Any],
                                                     other: object) -> None:
    for data in ({**LIVE, **fields}, fields, other):
        found = parse_fingerprint(data)
        assert found is None or parse_fingerprint(found.to_json()) == found
        assert parse_arming_record({**RECORD, "fingerprint": data}) is None or found


def test_a_user_state_record_with_a_bad_fingerprint_reads_as_corrupt(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    prefix = tmp_path / "venv"
    path = state_path(prefix)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({**RECORD, "fingerprint": {**LIVE, "stat": {"torch": 1}}}),
                    encoding="utf-8")
    assert load_status(prefix) == ("corrupt", None)
    path.write_text(json.dumps(RECORD), encoding="utf-8")
    status, record = load_status(prefix)
    assert status == "verified" and record is not None
    assert record.typed_fingerprint == parse_fingerprint(LIVE)
