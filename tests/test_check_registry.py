"""The check registry (decide/checks): every area has a check in CHECKS, they run in report
order, and a check that raises becomes its area's SD190 while every other area is still
checked (a bug in one rule must not hide the rest, nor end in "internal error")."""

from __future__ import annotations

from pathlib import Path

from sagedoctor.decide.checks import CHECKS, Check, CheckInput, diagnose
from sagedoctor.decide.findings import AREAS, CATALOG, Finding
from sagedoctor.facts import load_facts_file
from sagedoctor.index import shipped_index

PROFILES = Path(__file__).parent / "profiles"
FACTS = load_facts_file(PROFILES / "windows-sageattention1.json")


def test_every_area_has_a_check_and_they_run_in_report_order() -> None:
    areas = [c.area for c in CHECKS]
    assert set(areas) == set(AREAS)
    assert areas == sorted(areas, key=AREAS.index)


def test_the_registry_gives_what_diagnose_gives() -> None:
    findings = diagnose(FACTS, shipped_index())
    assert {f.code for f in findings} >= {"SD162"}
    assert [f.area for f in findings] == sorted((f.area for f in findings), key=AREAS.index)


def _boom(c: CheckInput) -> list[Finding]:
    raise KeyError("no such field")


def test_a_check_that_raises_becomes_its_areas_finding_and_the_rest_still_run() -> None:
    whole = diagnose(FACTS, shipped_index())
    broken = tuple(Check("triton", _boom) if c.area == "triton" else c for c in CHECKS)
    findings = diagnose(FACTS, shipped_index(), checks=broken)
    crashed = [f for f in findings if f.area == "triton"]
    assert [(f.code, f.severity, f.title) for f in crashed] == [
        ("SD190", "error", "Could not check triton")]
    assert "KeyError" in crashed[0].detail and "no such field" in crashed[0].detail
    assert "SD190" in CATALOG
    # every other area says what it said before
    assert [f for f in findings if f.area != "triton"] == [f for f in whole if f.area != "triton"]


def test_each_check_sees_what_the_checks_before_it_found() -> None:
    seen: list[tuple[str, ...]] = []

    def spy(c: CheckInput) -> list[Finding]:
        seen.append(tuple(f.code for f in c.so_far))
        return []

    diagnose(FACTS, shipped_index(), checks=(*CHECKS[:-1], Check("comfyui", spy)))
    # diagnose sorts by area at its end; the checks are registered in area order, so that is
    # also the order they were found in
    before = diagnose(FACTS, shipped_index(), checks=CHECKS[:-1])
    assert FACTS.probe_failures == () and seen == [tuple(f.code for f in before)]
