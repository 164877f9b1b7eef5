"""The doctor remembers what verify found: after a verify saw `sageattn()` return garbage on a
GPU (recorded on the H200 with a tag v2.2.0 build), `check` says so and exits non-zero, and the
plan replaces the build instead of saying "nothing to do"; a record of an older build, or a
corrupt one, is said plainly."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from sagedoctor.decide.checks import diagnose
from sagedoctor.decide.findings import exit_code
from sagedoctor.decide.resolve import resolve_plan
from sagedoctor.facts import Facts, VerificationFacts, load_facts_file
from sagedoctor.index import shipped_index
from sagedoctor.plan import Plan
from sagedoctor.state import record_verification, state_path, venv_python_version
from sagedoctor.verify import key_results, parse_report, verdict, verify_record
from tests.standins import add_sageattention, add_torch, clean_env, make_venv, run_cli, venv_python

FIXTURES = Path(__file__).parent / "fixtures"
PROFILES = Path(__file__).parent / "profiles"
TORCH_PY = "__version__ = '2.11.0+cu130'\ncuda = '13.0'\nhip = None\n"


def broken_report(sage: str = "2.2.0", torch: str = "2.11.0") -> dict:
    report = parse_report((FIXTURES / "selftest-h200-v2.2.0.json").read_text(encoding="utf-8"))
    report.setdefault("fingerprint", {"python": "3.12.3", "dists": {}})  # older report form
    report["fingerprint"]["dists"].update(sageattention=sage, torch=torch)
    return report


def record(prefix: Path, report: dict) -> None:
    # the venv's own Python: a record of another Python is stale (the hook says so too)
    report["fingerprint"]["python"] = venv_python_version(prefix)
    results = key_results(report)
    record_verification(prefix, venv_python(prefix), verdict(report, results),
                        report["fingerprint"], verify_record(report, results),
                        "2026-12-03T08:00:00+00:00")


def venv_with_sage(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    prefix = tmp_path / "app venv é"
    site = make_venv(prefix)
    add_torch(site, TORCH_PY, "2.11.0")
    add_sageattention(site, "2.2.0", ("_fused", "_qattn_sm80", "_qattn_sm89", "_qattn_sm90"))
    return prefix, clean_env(tmp_path)


def test_check_names_the_wrong_sageattn_and_exits_non_zero(tmp_path: Path,
                                                            monkeypatch: object) -> None:
    prefix, env = venv_with_sage(tmp_path)
    done = run_cli(["check", "sageattention", "--venv", str(prefix), "--json"], env)
    before = {f["code"] for f in json.loads(done.stdout)["findings"]}
    assert "SD169" in before and "SD167" not in before  # installed, never verified

    import os
    old_home = os.environ.get("HOME")
    os.environ["HOME"] = env["HOME"]  # the state store lives under the user's HOME
    try:
        record(prefix, broken_report())
        assert state_path(prefix).is_file()
    finally:
        if old_home is not None:
            os.environ["HOME"] = old_home
    done = run_cli(["check", "sageattention", "--venv", str(prefix), "-v"], env)
    assert done.returncode != 0, done.stdout
    assert "SD167" in done.stdout and "sageattn()" in done.stdout
    text = " ".join(done.stdout.split())  # the report wraps long lines
    assert "ComfyUI" in text and "sm90" in text
    report = json.loads(run_cli(["check", "--venv", str(prefix), "--json"], env).stdout)
    wrong = report["facts"]["verification"]["wrong_sageattn"]
    assert [w["arch"] for w in wrong] == ["9.0"]


def ready_h200(verification: VerificationFacts | None) -> Facts:
    facts = load_facts_file(PROFILES / "linux-h200-ready.json")
    return dataclasses.replace(facts, verification=verification)


def test_a_recorded_wrong_kernel_makes_the_plan_rebuild_from_the_pinned_source() -> None:
    index = shipped_index()
    before = resolve_plan(ready_h200(None), index)
    assert isinstance(before, Plan)
    assert not {"build-from-source", "install-from-index"} & {s.action for s in before.steps}
    from sagedoctor.probe.verification import wrong_kernels

    report = broken_report()
    wrong = wrong_kernels(verify_record(report, key_results(report)))
    facts = ready_h200(VerificationFacts("verified", "sdpa-only", "2026-12-03", "2.2.0",
                                         "2.11.0", wrong))
    assert exit_code(diagnose(facts)) != 0
    plan = resolve_plan(facts, index)
    assert isinstance(plan, Plan)
    actions = [s.action for s in plan.steps]
    assert "build-from-source" in actions and "install-from-index" not in actions
    build = next(s for s in plan.steps if s.action == "build-from-source").build
    assert build is not None and index.build.commit in build.source
    assert any("sageattn()" in n and "wrong" in n for n in plan.notes)


def test_a_record_of_another_build_is_stale_and_a_corrupt_one_unverified() -> None:
    stale = ready_h200(VerificationFacts("verified", "routing", "2026-11-01", "2.1.1", "2.10.0"))
    codes = {f.code: f for f in diagnose(stale)}
    assert codes["SD168"].severity == "warn" and "2.1.1" in codes["SD168"].detail
    plan = resolve_plan(stale, shipped_index())  # stale: no claim, no rebuild forced
    assert isinstance(plan, Plan) and "build-from-source" not in {s.action for s in plan.steps}
    corrupt = {f.code: f for f in diagnose(ready_h200(VerificationFacts("corrupt")))}
    assert "does not parse" in corrupt["SD169"].detail


def test_a_corrupt_state_file_reads_as_unverified_never_a_crash(tmp_path: Path) -> None:
    prefix, env = venv_with_sage(tmp_path)
    import os
    old_home = os.environ.get("HOME")
    os.environ["HOME"] = env["HOME"]
    try:
        path = state_path(prefix)
    finally:
        if old_home is not None:
            os.environ["HOME"] = old_home
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\xff{not json")
    done = run_cli(["check", "sageattention", "--venv", str(prefix), "--json"], env)
    assert done.returncode in (0, 1), done.stderr
    assert json.loads(done.stdout)["facts"]["verification"]["status"] == "corrupt"


def test_a_rebuild_under_the_same_version_makes_the_record_stale(tmp_path: Path) -> None:
    # On the H200: the main build verified, then a v2.2.0 build (also "2.2.0") installed by
    # hand; `check` said "No problems found". The dist-info's RECORD, by stat, tells them apart.
    import os

    from sagedoctor.runtime.hook import dist_stats
    from sagedoctor.state import venv_site_dirs

    prefix, env = venv_with_sage(tmp_path)
    report = parse_report((FIXTURES / "selftest-h200-main.json").read_text(encoding="utf-8"))
    report["fingerprint"] = {"python": venv_python_version(prefix),
                             "dists": {"sageattention": "2.2.0", "torch": "2.11.0"},
                             "stat": dist_stats(venv_site_dirs(prefix))}
    old_home = os.environ.get("HOME")
    os.environ["HOME"] = env["HOME"]
    try:
        record(prefix, report)
    finally:
        if old_home is not None:
            os.environ["HOME"] = old_home

    def codes() -> tuple[set[str], str]:
        done = run_cli(["check", "sageattention", "--venv", str(prefix), "--json"], env)
        data = json.loads(done.stdout)
        return {f["code"] for f in data["findings"]}, json.dumps(data["findings"])

    found, _ = codes()
    assert "SD168" not in found and "SD169" not in found and "SD167" not in found
    import shutil

    site = Path(venv_site_dirs(prefix)[0])
    shutil.rmtree(site / "sageattention-2.2.0.dist-info")  # reinstalled by hand: another build
    add_sageattention(site, "2.2.0", ("_fused", "_qattn_sm90"))
    found, text = codes()
    assert "SD168" in found, text
    assert "installed files of sageattention changed" in text
