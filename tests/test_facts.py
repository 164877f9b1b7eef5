"""Facts files are hostile input: strict types, no unknown keys, a known schema version."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from sagedoctor.errors import FactsFileError
from sagedoctor.facts import facts_from_dict, facts_to_dict, load_facts_file

PROFILE = Path(__file__).parent / "profiles" / "linux-h200-ready.json"


def base() -> dict:
    return json.loads(PROFILE.read_text(encoding="utf-8"))


def test_a_pending_install_journal_round_trips() -> None:
    data = {**base(), "interrupted_install": {"journal": "/s/venvs/k.install/journal.json",
                                              "pid": 4242, "phase": "changing",
                                              "running": False}}
    facts = facts_from_dict(data)
    assert facts.interrupted_install is not None and facts.interrupted_install.pid == 4242
    assert facts_to_dict(facts)["interrupted_install"] == data["interrupted_install"]


def test_round_trip_is_lossless() -> None:
    facts = load_facts_file(PROFILE)
    assert facts_to_dict(facts_from_dict(facts_to_dict(facts))) == facts_to_dict(facts)
    # A report of before the verify record (the launcher markers, ComfyUI) loads with none.
    expected = {**base(), "verification": None, "comfyui": None,
                "interrupted_install": None}  # ... and the pending journal (SD199)
    # ... and a version-1 report without torch's triton pin and C++ standard (version 2).
    expected["target"]["torch"] = {**expected["target"]["torch"], "triton_pin": None,
                                   "cxx_standard": None}
    # ... and one without DIFFUSERS_ATTN_BACKEND as check saw it (issue 36).
    expected["system"] = {**expected["system"], "diffusers_attn_backend": None}
    if expected["invokeai"] is not None:
        expected["invokeai"] = {"first_run_at": None, "bootstrap_changed_at": None,
                                "marked": None, **expected["invokeai"]}
    assert facts_to_dict(facts) == expected


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda d: d.update(schema_version=99), "schema_version 99"),
    (lambda d: d["system"].update(cpu_count="16"), "facts.system.cpu_count: expected int"),
    (lambda d: d["system"].update(cpu_count=True), "expected int"),
    (lambda d: d["gpu"].update(evil=1), "unknown key(s) evil"),
    (lambda d: d.update(interrupted_install={"journal": 7}),
     "facts.interrupted_install.journal: expected str"),
    (lambda d: d.update(interrupted_install={"journal": "j", "pid": True}), "expected int"),
    (lambda d: d["target"].pop("executable"), "missing key 'executable'"),
    (lambda d: d["gpu"].update(gpus={"0": 1}), "expected a list"),
    (lambda d: d["target"]["torch"].update(cuda=13.0), "expected str"),
])
def test_bad_facts_are_rejected_with_the_place(mutate: Callable[[dict], object], message: str
                                                 ) -> None:
    data = base()
    mutate(data)
    with pytest.raises(FactsFileError) as err:
        facts_from_dict(data, "f.json")
    assert message in str(err.value)


def test_not_json_and_not_an_object(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text("{nope", encoding="utf-8")
    with pytest.raises(FactsFileError, match="not valid JSON"):
        load_facts_file(bad)
    bad.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(FactsFileError, match="JSON object"):
        load_facts_file(bad)
    with pytest.raises(FactsFileError, match="cannot read"):
        load_facts_file(tmp_path / "missing.json")
