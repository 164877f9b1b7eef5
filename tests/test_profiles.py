"""Table-driven: every machine profile in tests/profiles/ and what check must say about it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sagedoctor.decide.checks import diagnose
from sagedoctor.decide.findings import CATALOG, PREFLIGHT_CODES, SUMMARY_CODES, exit_code
from sagedoctor.facts import load_facts_file

PROFILES = Path(__file__).parent / "profiles"

# profile -> (codes that must be reported at warn/error/info, exit code)
EXPECTED: dict[str, tuple[set[str], int]] = {
    "linux-h200-ready": ({"SD166"}, 0),
    "linux-h200-install-interrupted": ({"SD166", "SD199"}, 1),
    "linux-cpu-machine-no-torch": ({"SD111", "SD141", "SD161"}, 2),
    "linux-amd-gpu": ({"SD111"}, 2),
    "macos-apple": ({"SD101", "SD111"}, 2),
    "windows-arm64": ({"SD101"}, 2),
    "wsl-rtx3090-needs-install": ({"SD102", "SD161", "SD171"}, 1),
    # torch 2.7's cu128 build starts at Turing (sm70 came back in 2.8): no torch kernels either
    "linux-v100": ({"SD112", "SD144"}, 2),
    "linux-t4-turing": ({"SD113"}, 2),
    # torch 2.10 needs Triton 3.6, Turing needs < 3.3: said once, with the way out
    "windows-rtx2080-turing": ({"SD113", "SD146"}, 1),
    "linux-orin-sm87": ({"SD114"}, 2),
    "linux-r470-unknown-gpu": ({"SD115", "SD161"}, 1),
    "linux-gpu-listing-hung": ({"SD116"}, 1),
    "linux-driver-too-old-for-cu130": ({"SD120"}, 1),
    "windows-driver-unknown": ({"SD121", "SD191"}, 1),
    "windows-embedded-python-no-headers": ({"SD131"}, 1),
    "linux-system-python-readonly": ({"SD132", "SD134"}, 1),
    "windows-python38": ({"SD133"}, 1),
    "linux-no-torch": ({"SD141"}, 1),
    "windows-cpu-torch": ({"SD142"}, 1),
    "linux-rocm-torch": ({"SD143"}, 1),
    "linux-gtx1080-cu128": ({"SD112", "SD144"}, 2),
    "windows-torch23": ({"SD145", "SD161"}, 1),
    "windows-triton-missing": ({"SD151"}, 1),
    "windows-triton-mismatch": ({"SD152"}, 1),
    "windows-plain-triton": ({"SD153"}, 1),
    "windows-sageattention1": ({"SD162"}, 1),
    "windows-sage-cuda-major-mismatch": ({"SD163"}, 1),
    "windows-sage-torch-mismatch": ({"SD163"}, 1),
    "linux-4090-sm80-only-build-old-nvcc": ({"SD164", "SD172"}, 1),
    "linux-egg-leftovers": ({"SD165"}, 1),  # the plan moves them aside: an error to fix
    "linux-nvcc-major-mismatch-no-gcc": ({"SD161", "SD173", "SD174"}, 1),
    "windows-invokeai-backend-set-but-unsupported": ({"SD182", "SD184"}, 1),
    "windows-invokeai-yaml-broken": ({"SD183", "SD191"}, 1),
    "linux-target-probe-failed": ({"SD190"}, 1),
    "linux-h100-plus-v100": ({"SD112", "SD144"}, 1),
    "windows-rtx5090-torch213-ready": (set(), 0),
    "linux-uv-venv-triton-mismatch": ({"SD152"}, 1),
    "linux-stale-pip-cpu-torch": ({"SD142"}, 1),
    "linux-wrapper-nvcc-no-toolkit": ({"SD161", "SD175", "SD176"}, 1),
    "linux-cuda-home-points-nowhere": ({"SD175", "SD191"}, 1),
    "windows-invokeai-sliced": ({"SD182", "SD185", "SD191"}, 1),
    "windows-invokeai-launcher-updated": ({"SD187", "SD188", "SD191"}, 1),
    # After verify found sageattn() garbage on the H200 (tag v2.2.0 build): an error.
    "linux-h200-sageattn-wrong": ({"SD166", "SD167"}, 1),
    "linux-h200-verify-stale": ({"SD166", "SD168", "SD191"}, 1),
    "linux-h200-hook-path-a-folder": ({"SD136"}, 1),
    "windows-4090-unverified": ({"SD169", "SD182", "SD191"}, 1),  # no runtime: install, verify
    # today's torch (issue 18)
    "windows-torch214-today": ({"SD152", "SD161"}, 1),
    "windows-torch215-no-triton-windows-yet": ({"SD147", "SD161"}, 1),
    "linux-h200-torch214-cxx20-build": ({"SD161"}, 1),
    "linux-rtx5090-torch-cu126": ({"SD144", "SD161"}, 1),
    "windows-rtx2080-turing-torch25": ({"SD113", "SD154", "SD161"}, 1),
    "windows-turing-beside-3090-torch210": ({"SD113", "SD148", "SD191"}, 1),
    "linux-rtx4090-optional-index": ({"SD161"}, 1),
    "linux-rtx4090-torch214-gcc9": ({"SD149", "SD161"}, 1),
    "windows-4090-post5-nan-wheel": ({"SD192"}, 1),
    "windows-invokeai-backend-not-set": ({"SD193"}, 1),
    "windows-invokeai-root-not-a-root": ({"SD197"}, 1),
    "linux-invokeai-root-not-invokeai": ({"SD166", "SD186", "SD191"}, 1),
    # ComfyUI's portable build started with --use-sage-attention on a sageattn() found wrong.
    "windows-comfyui-portable-sage-flag-wrong": ({"SD131", "SD167", "SD181", "SD222"}, 1),
    # InvokeAI's own switch: no kernel for sm75/sm87, the fixed rule measured slower, an
    # unreadable choice type; diffusers' switch in the environment (issue 36)
    "windows-rtx2080-invokeai-switch": ({"SD113", "SD194"}, 1),
    "linux-orin-invokeai-switch-on": ({"SD114", "SD194"}, 2),
    "linux-h100-invokeai-rule-slower": ({"SD194"}, 0),
    "windows-invokeai-choices-unreadable": ({"SD189"}, 0),
    "linux-h200-diffusers-sage-backend": ({"SD155"}, 0),
}

# Codes a profile must NOT show, where the absence is the point.
ABSENT: dict[str, set[str]] = {
    "linux-h200-ready": {"SD120", "SD152", "SD163", "SD164"},
    "windows-rtx5090-torch213-ready": {"SD152", "SD163", "SD164", "SD151"},
    "windows-rtx2080-turing": {"SD112", "SD152", "SD154"},  # one finding, SD146
    "windows-torch214-today": {"SD202", "SD147"},
    "windows-torch215-no-triton-windows-yet": {"SD151", "SD152"},
    "windows-rtx2080-turing-torch25": {"SD152", "SD146"},
    "linux-h100-plus-v100": {"SD111"},
    "windows-4090-post5-nan-wheel": {"SD191", "SD163"},
    "linux-invokeai-root-not-invokeai": {"SD182", "SD183", "SD187"},
    # the app's own embedded Python: no "base interpreter" note, nothing called InvokeAI
    "windows-comfyui-portable-sage-flag-wrong": {"SD134", "SD180", "SD223"},
    # the plan chose the hook: nothing to switch on in invokeai.yaml
    "windows-rtx2080-invokeai-switch": {"SD193"},
    "linux-h100-invokeai-rule-slower": {"SD193"},
    "windows-invokeai-choices-unreadable": {"SD193", "SD182"},
}


def test_the_ready_profiles_carry_the_runtime_this_sagedoctor_bundles() -> None:
    from sagedoctor import __version__
    from tests.profiles.make_profiles import RUNTIME

    # after a version bump: set RUNTIME and run tests/profiles/make_profiles.py
    assert __version__ == RUNTIME
    for name in ("linux-h200-ready", "windows-rtx5090-torch213-ready"):
        facts = load_facts_file(PROFILES / f"{name}.json")
        assert facts.target is not None and facts.target.runtime == __version__


def test_every_profile_file_has_an_expectation() -> None:
    assert {p.stem for p in PROFILES.glob("*.json")} == set(EXPECTED)
    assert len(EXPECTED) >= 25


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_profile_findings_and_exit_code(name: str) -> None:
    facts = load_facts_file(PROFILES / f"{name}.json")
    findings = diagnose(facts)
    reported = {f.code for f in findings if f.severity != "ok"}
    want, code = EXPECTED[name]
    assert want <= reported, f"missing {want - reported}; got {sorted(reported)}"
    assert not ABSENT.get(name, set()) & reported
    assert exit_code(findings) == code
    for f in findings:
        if f.severity in ("warn", "error"):
            assert f.fix, f"{f.code} has no fix"


def test_profiles_cover_every_problem_code() -> None:
    seen: set[str] = set()
    for name in EXPECTED:
        seen |= {f.code for f in diagnose(load_facts_file(PROFILES / f"{name}.json"))}
    problem_codes = ({c for c in CATALOG if c.startswith("SD1")} - SUMMARY_CODES
                     - PREFLIGHT_CODES)  # SD2xx: plan; preflight codes: tests/test_preflight.py
    assert problem_codes <= seen, f"no profile triggers {sorted(problem_codes - seen)}"


def test_windows_fix_lines_quote_paths_with_spaces() -> None:
    facts = load_facts_file(PROFILES / "windows-triton-missing.json")
    fix = next(f.fix for f in diagnose(facts) if f.code == "SD151")
    # a launcher venv has no pip: the fix goes through uv (tests/test_fixes.py has the table)
    assert fix.startswith("uv pip install --python "
                          "C:\\Users\\Ana\\invokeai\\.venv\\Scripts\\python.exe ")
    assert '"triton-windows>=3.6,<3.7"' in fix


def test_sage_mismatch_says_built_for_x_you_have_y() -> None:
    facts = load_facts_file(PROFILES / "windows-sage-cuda-major-mismatch.json")
    detail = next(f.detail for f in diagnose(facts) if f.code == "SD163")
    assert detail == "built for CUDA 12 (cu128), you have torch 2.10.0+cu130 (CUDA 13.0)"
    facts = load_facts_file(PROFILES / "windows-sage-torch-mismatch.json")
    detail = next(f.detail for f in diagnose(facts) if f.code == "SD163")
    assert detail == "built for torch 2.8.0, you have torch 2.9.1+cu128"


def test_profile_tags_are_the_ones_packaging_gives_that_interpreter() -> None:
    # Hand-written tags once lacked cp39-abi3: a 3.12 venv was told it "needs Python >= 3.9".
    facts = load_facts_file(PROFILES / "windows-triton-mismatch.json")
    assert facts.target is not None
    assert {"cp312-cp312-win_amd64", "cp39-abi3-win_amd64", "py3-none-any"} <= set(
        facts.target.tags)
    assert facts.target.tags[0] == "cp312-cp312-win_amd64"
    old = load_facts_file(PROFILES / "windows-python38.json").target
    assert old is not None and "cp39-abi3-win_amd64" not in old.tags
    arm = load_facts_file(PROFILES / "windows-arm64.json").target
    assert arm is not None and all(t.endswith(("win_arm64", "-any")) for t in arm.tags)


def test_a_cp39_abi3_wheel_serves_python_312_on_windows() -> None:
    from sagedoctor.decide.resolve import resolve_plan
    from sagedoctor.index import shipped_index
    from sagedoctor.plan import Plan

    facts = load_facts_file(PROFILES / "windows-triton-mismatch.json")
    plan = resolve_plan(facts, shipped_index())
    assert isinstance(plan, Plan), plan  # was Blocked(SD201 "needs Python >= 3.9")
    assert [s.action for s in plan.steps] == ["install", "bundle-runtime", "verify"]
    assert plan.steps[0].requirement == "triton-windows>=3.3,<3.4"
