"""The TUI's pure pieces: rows, plan lines, the verdict sentence, the cancel chain, and the
probe layer's per-area callback (real probes of a stand-in venv)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sagedoctor.decide.checks import diagnose
from sagedoctor.decide.findings import AREAS
from sagedoctor.facts import Facts, load_facts_file
from sagedoctor.install.runner import InstallError
from sagedoctor.plan import Plan, Step
from sagedoctor.probe import ProbeOptions, collect_facts
from sagedoctor.tui.cancel import InstallCancelled, cancelled_in
from sagedoctor.tui.model import area_row, plan_summary, verdict_line
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


# --- downloads and their sizes ---------------------------------------------------------------

def _download_plan(tmp_path: Path) -> Plan:
    from sagedoctor.plan import WheelDownload
    from tests.test_install_kit import settings_for

    archive = "https://github.com/thu-ml/SageAttention/archive/d1a57a5.tar.gz"
    return Plan(python=str(tmp_path / "bin" / "python"), prefix=str(tmp_path), os="linux",
                steps=(Step("install-wheel", "Install the wheel", "why", ("sageattention",),
                            wheel=WheelDownload("sageattention-2.2.0-py3-none-any.whl",
                                                "https://example.org/sage.whl", "ab" * 32,
                                                "index")),
                       Step("build-from-source", "Build", "why", ("sageattention",),
                            build=settings_for(archive, commit="d1a57a5")),
                       Step("bundle-runtime", "Runtime", "why", ("sagedoctor-runtime",))))


def test_plan_downloads_say_each_size_or_that_it_is_unknown(tmp_path: Path) -> None:
    from sagedoctor.tui.model import downloads_summary, human_bytes, step_lines

    plan = _download_plan(tmp_path)
    assert downloads_summary(plan) == ("Downloads: 2 files, total size unknown (the index has "
                                       "no sizes).")
    cached = {"https://example.org/sage.whl": 3 * 1024 * 1024}
    assert downloads_summary(plan, cached) == ("Downloads: 1 file, total size unknown (the "
                                               "index has no sizes); 1 in the cache.")
    lines = step_lines(1, plan.steps[0], cached)
    assert "   size: in the cache (3.0 MiB), not downloaded again" in lines
    assert any(line.startswith("   download: the source archive https://github.com/") and
               "size unknown" in line for line in step_lines(2, plan.steps[1]))
    assert step_lines(3, plan.steps[2])[2].startswith("   venv: ")  # the runtime: built here
    everything = {**cached, plan.steps[1].build.source: 1536}  # type: ignore[union-attr]
    assert downloads_summary(plan, everything) == "Downloads: none; all 2 file(s) are in the cache."
    assert (human_bytes(0), human_bytes(1536), human_bytes(5 << 30)) == (
        "0 B", "1.5 KiB", "5.0 GiB")


def test_transfer_line_has_the_rate_and_elapsed_time() -> None:
    from sagedoctor.tui.model import transfer_line

    assert transfer_line(2 << 20, 4 << 20, 2.0) == "2.0 MiB of 4.0 MiB  1.0 MiB/s  0:02"
    assert transfer_line(1000, None, 0.0) == "1000 B (size not sent)  …/s  0:00"


def test_cached_sizes_come_from_files_in_the_download_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hashlib

    from sagedoctor.install.cache import Cache, default_cache_dir
    from sagedoctor.plan import WheelDownload
    from sagedoctor.tui.session import cached_sizes
    from tests.test_install_kit import sage_wheel

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    data = sage_wheel(tmp_path / "w").read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    step = Step("install-wheel", "Install", "why", ("sageattention",),
                wheel=WheelDownload("sage-2.2.0-py3-none-any.whl", "https://example.org/w.whl",
                                    sha, "index"))
    plan = Plan(python="/x/bin/python", prefix="/x", os="linux", steps=(step,))
    assert cached_sizes(plan) == {}
    downloaded = tmp_path / "w.whl"
    downloaded.write_bytes(data)
    Cache(default_cache_dir()).store(downloaded, "sage-2.2.0-py3-none-any.whl", sha,
                                     "https://example.org/w.whl")
    assert cached_sizes(plan) == {"https://example.org/w.whl": len(data)}


def test_tilde_shortens_only_paths_under_home() -> None:
    from sagedoctor.tui.model import tilde

    home = "/home/ana"
    assert tilde("log: /home/ana/.local/x.log and /home/anabel/y", home) == \
        "log: ~/.local/x.log and /home/anabel/y"
    assert tilde("/home/ana/", "/home/ana/") == "~/"
    assert tilde("/etc/x", "/") == "/etc/x"
    assert tilde(r"C:\Users\Ana\x", r"C:\Users\Ana") == r"C:\Users\Ana\x"


def test_a_rollbacks_file_count_is_said_in_good_english() -> None:
    from sagedoctor.install.transaction import files_match

    def snapshot(*counts: int) -> dict:
        return {"dists": {f"d{i}": [{"files": {f"f{j}": "x" for j in range(n)}}]
                          for i, n in enumerate(counts)}}

    assert files_match(snapshot(1)) == "1 file matches"
    assert files_match(snapshot(1, 1)) == "2 files match"
    assert files_match(snapshot()) == "0 files match"
