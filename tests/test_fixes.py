"""Fix commands fit the venv: pip where it starts, `uv pip --python` where it does not, and
every torch command names the index of the torch build the facts show."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sagedoctor.decide.checks import diagnose
from sagedoctor.decide.matrix import torch_index_url
from sagedoctor.decide.resolve import resolve_plan
from sagedoctor.decide.versions import torch_build
from sagedoctor.facts import load_facts_file
from sagedoctor.index import shipped_index
from sagedoctor.plan import Blocked
from sagedoctor.probe.target import probe_target
from tests.standins import add_dist, make_venv, venv_python

PROFILES = Path(__file__).parent / "profiles"
LINUX_PY = "/home/ana/app/.venv/bin/python"
WIN_PY = "C:\\Users\\Ana\\invokeai\\.venv\\Scripts\\python.exe"
REPAIR = ("InvokeAI venv: run the Invoke launcher's Repair (it reinstalls the torch InvokeAI "
          "6.14.2 pins), or: ")

# (profile, code) -> the exact fix `check` prints
CHECK_FIXES: dict[tuple[str, str], str] = {
    # venvs with pip: `python -m pip`, torch from the index of the build the GPU needs
    # a GPU SageAttention does not use (SD112) asks nothing of torch, beside an H100 or alone
    ("linux-gtx1080-cu128", "SD144"): "",
    ("linux-h100-plus-v100", "SD144"): "",
    # a pip dist-info without its package: pip cannot start, so uv
    ("linux-stale-pip-cpu-torch", "SD142"):
        f"uv pip install --python {LINUX_PY} --reinstall-package torch torch==2.11.0 "
        "--index-url https://download.pytorch.org/whl/cu130",  # 2.11's default: cu130
    # Linux torch pins its triton: the same torch build from its own index brings it back
    ("linux-uv-venv-triton-mismatch", "SD152"):
        f"uv pip install --python {LINUX_PY} torch==2.11.0+cu130 "
        "--index-url https://download.pytorch.org/whl/cu130 "
        "(this torch build again, which brings the triton it pins)",
    # the launcher's venv (uv venv, no pip)
    ("windows-cpu-torch", "SD142"):
        f"{REPAIR}uv pip install --python {WIN_PY} --reinstall-package torch torch==2.7.1 "
        "--index-url https://download.pytorch.org/whl/cu126",  # 2.7's default serves sm89
    # Turing with torch 2.5: the pairing intersected with the Turing cap, as the plan installs
    ("windows-rtx2080-turing-torch25", "SD154"):
        f'uv pip install --python {WIN_PY} "triton-windows>=3.1,<3.2"',
    ("windows-torch214-today", "SD152"):
        f'uv pip install --python {WIN_PY} "triton-windows>=3.8,<3.9"',
    # cu126 stops at sm90: the registry's default build of 2.14 serves an RTX 5090
    ("linux-rtx5090-torch-cu126", "SD144"):
        "Install a CUDA 13 toolkit for the source build too (nvcc 12.8.93 is CUDA 12), and: "
        f"{LINUX_PY} -m pip install --force-reinstall torch==2.14.1 "
        "--index-url https://download.pytorch.org/whl/cu130",
    # removing triton deletes triton-windows' files too (one folder): it goes back in after
    ("windows-plain-triton", "SD153"):
        "`sagedoctor install --venv C:\\Users\\Ana\\invokeai\\.venv` (removes triton, puts "
        f"triton-windows back), or by hand: uv pip uninstall --python {WIN_PY} triton, then "
        f'uv pip install --python {WIN_PY} --reinstall-package triton-windows '
        '"triton-windows>=3.6,<3.7"',
    # the GTX 1080 says what it would take
    ("linux-gtx1080-cu128", "SD112"): "Use a GPU of compute capability 8.0 or newer (RTX 30xx, "
                                      "A100 or newer); on Windows an RTX 20xx (7.5) works "
                                      "through Triton.",
    ("windows-triton-mismatch", "SD152"):
        f'uv pip install --python {WIN_PY} "triton-windows>=3.3,<3.4"',
    ("windows-triton-missing", "SD151"):
        f'uv pip install --python {WIN_PY} "triton-windows>=3.6,<3.7"',
}

# (profile, code) -> the exact fix of a finding that blocks `plan`
PLAN_FIXES: dict[tuple[str, str], str] = {
    ("linux-uv-venv-triton-mismatch", "SD152"): CHECK_FIXES[
        ("linux-uv-venv-triton-mismatch", "SD152")],
    ("windows-cpu-torch", "SD142"): CHECK_FIXES[("windows-cpu-torch", "SD142")],
}


@pytest.mark.parametrize(("profile", "code"), sorted(CHECK_FIXES))
def test_check_fix_is_exactly(profile: str, code: str) -> None:
    fixes = [f.fix for f in diagnose(load_facts_file(PROFILES / f"{profile}.json"))
             if f.code == code]
    assert fixes == [CHECK_FIXES[(profile, code)]]


@pytest.mark.parametrize(("profile", "code"), sorted(PLAN_FIXES))
def test_plan_blocker_fix_is_exactly(profile: str, code: str) -> None:
    result = resolve_plan(load_facts_file(PROFILES / f"{profile}.json"), shipped_index())
    assert isinstance(result, Blocked)
    assert [f.fix for f in result.findings if f.code == code] == [PLAN_FIXES[(profile, code)]]


def _all_fixes() -> list[tuple[str, str, str]]:
    out = []
    for path in sorted(PROFILES.glob("*.json")):
        facts = load_facts_file(path)
        out += [(path.stem, f.code, f.fix) for f in diagnose(facts)]
        result = resolve_plan(facts, shipped_index())
        if isinstance(result, Blocked):
            out += [(path.stem, f.code, f.fix) for f in result.findings]
    return out


def test_no_torch_command_anywhere_lacks_an_index_url() -> None:
    torch_commands = [(p, c, fix) for p, c, fix in _all_fixes()
                      if re.search(r"\btorch==", fix)]
    assert len(torch_commands) >= 6  # the table above is not vacuous
    for profile, code, fix in torch_commands:
        assert "--index-url https://download.pytorch.org/whl/" in fix, (profile, code, fix)


def test_no_pip_command_where_the_venv_has_no_pip() -> None:
    for profile, code, fix in _all_fixes():
        facts = load_facts_file(PROFILES / f"{profile}.json")
        if facts.target is not None and facts.target.pip_importable is False:
            assert "-m pip" not in fix, (profile, code, fix)


@pytest.mark.parametrize(("label", "cuda", "hip", "url"), [
    ("2.11.0+cu130", "13.0", None, "https://download.pytorch.org/whl/cu130"),
    ("2.7.1+cu128", "12.8", None, "https://download.pytorch.org/whl/cu128"),
    ("2.11.0", "12.6", None, "https://download.pytorch.org/whl/cu126"),  # dist lacks the tag
    ("2.10.0+rocm7.1", None, "7.1.25424", "https://download.pytorch.org/whl/rocm7.1"),
    ("2.7.1+cpu", None, None, "https://download.pytorch.org/whl/cpu"),
    ("2.5.0a0+872d972e41.nv24.08", "12.6", None, None),  # Jetson's own build: no index
])
def test_torch_index_url_of_a_build(label: str, cuda: str | None, hip: str | None,
                                    url: str | None) -> None:
    assert torch_index_url(torch_build(label, label, cuda, hip), label) == url


def test_probe_says_whether_pip_starts(tmp_path: Path) -> None:
    venv = tmp_path / "uv venv é"
    site = make_venv(venv)
    assert probe_target(venv_python(venv)).pip_importable is False
    # a dist-info left behind without its package: a version, but pip cannot start
    add_dist(site, "pip", "24.0")
    facts = probe_target(venv_python(venv))
    assert (facts.pip, facts.pip_importable) == ("24.0", False)
    (site / "pip").mkdir()
    (site / "pip" / "__init__.py").write_text("", encoding="utf-8")
    assert probe_target(venv_python(venv)).pip_importable is True
