"""A probe failure that knows its fix (`message (fix: ...)`, as every SagedoctorError a probe
raises is recorded) gives SD190 that fix, not the catalog's "Run with -v for details", which
-v could not keep: it printed the same."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from sagedoctor.decide.checks import diagnose
from sagedoctor.decide.findings import CATALOG
from sagedoctor.facts import ProbeFailure, load_facts_file

PROFILE = Path(__file__).parent / "profiles" / "linux-h200-ready.json"


def sd190(message: str) -> tuple[str, str]:
    facts = replace(load_facts_file(PROFILE), target=None,
                    probe_failures=(ProbeFailure("target", message),))
    (found,) = [f for f in diagnose(facts) if f.code == "SD190"]
    assert found.area == "python"
    return found.detail, found.fix


def test_the_failures_own_fix_is_the_fix() -> None:
    assert sd190("/v/bin/python failed to report (exit 1): boom (fix: recreate the venv)") == (
        "/v/bin/python failed to report (exit 1): boom", "recreate the venv")


def test_a_failure_without_one_keeps_the_catalog_fix() -> None:
    assert sd190("the target probe crashed: KeyError: 'x'") == (
        "the target probe crashed: KeyError: 'x'", CATALOG["SD190"].fix)
    assert sd190("odd (fix: unclosed") == ("odd (fix: unclosed", CATALOG["SD190"].fix)
