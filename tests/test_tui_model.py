"""The TUI's pure pieces: rows, plan lines, the verdict sentence, the cancel chain, and the
probe layer's per-area callback (real probes of a stand-in venv)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sagedoctor.areas import AREAS
from sagedoctor.diagnose import diagnose
from sagedoctor.facts import Facts, load_facts_file
from sagedoctor.install.runner import InstallError
from sagedoctor.probe import ProbeOptions, collect_facts
from sagedoctor.resolve import Plan, Step
from sagedoctor.tui.cancel import InstallCancelled, cancelled_in
from sagedoctor.tui.model import area_row, plan_summary, step_progress, verdict_line
from sagedoctor.verify import key_results, verdict
from tests.standins import add_torch, fake_nvidia_smi, make_venv

PROFILES = Path(__file__).parent / "profiles"
FIXTURES = Path(__file__).parent / "fixtures"


def test_area_row_names_the_problem_and_its_fix() -> None:
    findings = diagnose(load_facts_file(PROFILES / "windows-sageattention1.json"))
    row = area_row("sageattention", findings)
    assert (row.state, row.mark) == ("error", "✗")
    sd162 = next(f for f in findings if f.code == "SD162")
    assert row.fix == sd162.fix and "SD162" in row.details()
    assert area_row("torch", findings).state == "ok"
    assert area_row("torch", []).line == "not checked"


@pytest.mark.parametrize(("message", "expected"), [
    ("[2/4] Install x", (2, 4)), ("[10/12] preparing: y", (10, 12)),
    ("downloading https://x/[1/2]", None), ("sha256 abc", None)])
def test_step_progress_reads_the_executors_step_lines(message: str,
                                                     expected: tuple[int, int] | None) -> None:
    assert step_progress(message) == expected


def test_plan_summary_counts_a_replaced_distribution_once() -> None:
    plan = Plan("py", "/venv", "linux", (
        Step("uninstall", "u", "r", ("sageattention",)),
        Step("install-wheel", "i", "r", ("sageattention",)),
        Step("uninstall", "u2", "r", ("triton",))))
    assert plan_summary(plan) == ("3 steps: installs or replaces sageattention; removes "
                                  "triton; nothing else in the venv changes.")


@pytest.mark.parametrize(("fixture", "start"), [
    ("selftest-h200-main.json", "SageAttention serves sequences above 12k tokens (24k"),
    ("selftest-h200-v2.2.0.json", "No SageAttention kernel is both correct and faster")])
def test_verdict_line_from_recorded_h200_reports(fixture: str, start: str) -> None:
    report = json.loads((FIXTURES / fixture).read_text(encoding="utf-8"))
    results = key_results(report)
    assert verdict_line(verdict(report, results), results).startswith(start)
    assert verdict_line("broken", results, "no module").startswith(
        "SageAttention does not work in this venv: no module")


def test_a_cancel_is_found_through_the_executors_wrapping() -> None:
    try:
        try:
            raise InstallCancelled("downloading")
        except InstallError as inner:
            raise InstallError("step 2 failed", "Already done: nothing.") from inner
    except InstallError as outer:
        assert cancelled_in(outer)
    assert not cancelled_in(InstallError("build failed", ""))
    assert issubclass(InstallCancelled, InstallError) and InstallCancelled.code == "SD970"


def test_collect_facts_reports_each_area_once_as_its_probes_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    venv = tmp_path / "v ü"
    add_torch(make_venv(venv), "__version__ = '2.11.0+cu130'\ncuda = '13.0'\nhip = None\n")
    bin_dir = tmp_path / "bin"
    fake_nvidia_smi(bin_dir, "fail")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin:/bin")
    monkeypatch.setenv("SAGEDOCTOR_SKIP_NVML", "1")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    seen: list[tuple[str, Facts]] = []
    facts = collect_facts(ProbeOptions(venv=venv, root=tmp_path / "none"),
                          lambda area, partial: seen.append((area, partial)))
    assert sorted(a for a, _ in seen) == sorted(AREAS)
    by_area = dict(seen)
    assert by_area["system"].system is not None
    assert by_area["torch"].target is not None and by_area["torch"].gpu is not None
    assert facts.target is not None and facts.target.torch is not None
    # without a callback the result is the same
    plain = collect_facts(ProbeOptions(venv=venv, root=tmp_path / "none"))
    assert plain.target == facts.target and plain.system == facts.system
