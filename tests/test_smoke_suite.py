"""The install's smoke check runs verify's accuracy suite after its Gaussian call: the Gaussian
call decides, the outlier cases are reported (worst case per device), never required. Real venvs
with this machine's CPU torch and stand-in `sageattn` dists (SAGEDOCTOR_SMOKE_DEVICE=cpu)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sagedoctor.install.smoke import judge, run_smoke
from tests.standins import add_dist, borrow_host_site, make_venv, venv_python

pytest.importorskip("torch")

# Right on Gaussian data, wrong (zeros) wherever one channel of Q carries a large offset: what
# every SageAttention 2 kernel does, less crudely, at +600 on the image tokens.
SAGE_WRONG_ON_OUTLIERS = (
    "def sageattn(q, k, v, tensor_layout='HND', is_causal=False, **kw):\n"
    "    import torch, torch.nn.functional as F\n"
    "    out = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)\n"
    "    return torch.zeros_like(out) if float(q[..., 0].abs().max()) > 50 else out\n")
SAGE_RIGHT = (
    "def sageattn(q, k, v, tensor_layout='HND', is_causal=False, **kw):\n"
    "    import torch.nn.functional as F\n"
    "    return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)\n")


def _venv_with(tmp_path: Path, kernel: str) -> Path:
    venv = tmp_path / "app venv"
    site = make_venv(venv)
    borrow_host_site(site)
    add_dist(site, "sageattention", "2.2.0", {"sageattention/__init__.py": kernel})
    return venv_python(venv)


def test_a_kernel_wrong_only_on_outliers_passes_and_its_worst_case_is_reported(
        tmp_path: Path) -> None:
    result = run_smoke(_venv_with(tmp_path, SAGE_WRONG_ON_OUTLIERS), device="cpu")
    assert result.ok, result.summary
    row = result.report["devices"][0]  # type: ignore[index]
    suite = row["suite"]
    assert set(suite) >= {"joint_offset_100", "joint_offset_300", "joint_offset_600",
                          "large_rows", "near_constant_rows"}
    assert suite["joint_offset_600"]["cosine"] < 0.5  # the zeros, measured in the target
    assert suite["near_constant_rows"]["cosine"] > 0.999  # Q as Gaussian there: right
    assert result.summary.startswith("cpu (cpu): cosine 1.0000")
    assert ", outliers worst joint_offset_" in result.summary


def test_a_right_kernel_reports_a_worst_case_that_is_right_too(tmp_path: Path) -> None:
    result = run_smoke(_venv_with(tmp_path, SAGE_RIGHT), device="cpu")
    assert result.ok, result.summary
    suite = result.report["devices"][0]["suite"]  # type: ignore[index]
    assert min(case["cosine"] for case in suite.values()) > 0.999
    worst = result.summary.rpartition("cosine ")[2]
    assert float(worst) > 0.999


def test_judge_reads_a_hostile_suite_without_crashing() -> None:
    base = {"device": "cuda:0", "name": "GPU", "ok": True, "cosine": 0.9995, "rel_l2": 0.03}
    for suite, expected in (
            ({"a": {"cosine": 0.9}, "b": {"cosine": 0.5}}, ", outliers worst b cosine 0.500"),
            ({"a": {"cosine": 0.9}, "b": {"error": "RuntimeError: boom"}},
             ", outliers worst b RuntimeError: boom"),
            ({"a": {"cosine": None}}, ", outliers worst a not finite"),
            ({"a": "nonsense", "b": [1]}, ""), ("nonsense", ""), ({}, "")):
        result = judge({"devices": [{**base, "suite": suite}], "error": None})
        assert result.ok  # the suite never decides
        assert result.summary == "cuda:0 (GPU): cosine 0.9995, rel L2 0.030" + expected
    wrong = judge({"devices": [{**base, "ok": False, "cosine": 0.1,
                                "suite": {"a": {"cosine": 0.2}}}], "error": None})
    assert not wrong.ok and "[wrong], outliers worst a cosine 0.200" in wrong.summary


def test_a_target_torch_without_bytecode_compiles_into_sagedoctors_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bytecode writing off (a container's PYTHONDONTWRITEBYTECODE) and a torch installed
    without bytecode (a stand-in that stops the check at its import): what the check's
    interpreter compiles lands in sagedoctor's cache, where the verify after it reads it,
    and nothing in the venv."""
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    venv = tmp_path / "app venv"
    site = make_venv(venv)
    add_dist(site, "torch", "2.13.0", {"torch/__init__.py": "raise ImportError('stand-in')\n"})
    result = run_smoke(venv_python(venv), device="cpu")
    assert not result.ok and "stand-in" in result.summary
    cache = tmp_path / "cache" / "sagedoctor" / "bytecode"
    assert [p.parent.name for p in cache.rglob("__init__.*.pyc")
            if "app venv" in p.parts] == ["torch"]
    assert list(venv.rglob("*.pyc")) == []
