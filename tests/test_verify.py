"""Reading the self-test's report: a real one, recorded on the H200 with the broken v2.2.0
build, and what `verify` makes of it; the calibration and the verified fingerprint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sagedoctor.verify import (
    VerifyError,
    calibration,
    key_results,
    parse_report,
    render_table,
    verdict,
    write_verified,
)

RECORDED = Path(__file__).parent / "fixtures" / "selftest-h200-v2.2.0.json"
RECORDED_MAIN = Path(__file__).parent / "fixtures" / "selftest-h200-main.json"


def recorded() -> dict:
    return parse_report(RECORDED.read_text(encoding="utf-8"))


def test_the_broken_sm90_kernel_is_rejected_and_nothing_is_routed() -> None:
    report = recorded()
    results = key_results(report)
    assert {(r.dtype, r.head_dim) for r in results} == {
        ("bfloat16", 64), ("bfloat16", 128), ("float16", 64), ("float16", 128)}
    for r in results:
        assert "sage_fp8_sm90" in r.rejected
        assert r.chosen == "sage_fp8_cuda_fp32fp16"  # correct, but slower than SDPA
        assert r.cosine is not None and r.cosine > 0.999
        assert r.best_speedup is not None and r.best_speedup < 1
        assert r.crossover is None
        assert r.auto_passed is False  # what sageattn() itself picks is garbage
    assert verdict(report, results) == "sdpa-only"
    assert set(calibration(results)["crossovers"].values()) == {None}
    table = render_table(results)
    assert "WRONG" in table and "never" in table and "sage_fp8_cuda_fp32fp16" in table


def test_the_good_build_routes_long_sequences_to_the_sm90_kernel() -> None:
    report = parse_report(RECORDED_MAIN.read_text(encoding="utf-8"))
    results = key_results(report)
    assert verdict(report, results) == "routing"
    for r in results:
        assert r.chosen == "sage_fp8_sm90" and not r.rejected and r.auto_passed is True
        assert r.cosine is not None and r.cosine > 0.999
    crossovers = calibration(results)["crossovers"]
    # flux-1024 (4608 tokens) and SDXL (4096, D=64) stay on SDPA; flux-2048 (16896) and
    # wan-720p (32760) at D=128 are routed.
    assert 4608 < crossovers["9.0|bfloat16|128"] <= 16896
    assert crossovers["9.0|bfloat16|64"] > 4096
    assert report["fingerprint"]["dists"]["sageattention"] == "2.2.0"


def test_a_routing_verdict_writes_the_fingerprint_and_a_failing_one_removes_it(
        tmp_path: Path) -> None:
    report = recorded()
    results = key_results(report)
    assert write_verified(tmp_path, report, results, "2026-12-02T00:00:00") is None
    fast = [r.__class__(**{**r.__dict__, "crossover": 12288}) for r in results]
    report["fingerprint"] = {"python": "3.12.3", "dists": {"torch": "2.11.0"}}
    path = write_verified(tmp_path, report, fast, "2026-12-02T00:00:00")
    assert path is not None
    data = json.loads(path.read_text())
    assert data["verdict"] == "routing" and data["fingerprint"]["dists"]["torch"] == "2.11.0"
    assert data["kernels"]["9.0|bfloat16|128"] == "sage_fp8_cuda_fp32fp16"
    assert write_verified(tmp_path, report, results, "later") is None
    assert not path.exists()  # a later failing verify switches the hook off


def test_several_gpus_of_one_arch_keep_the_most_cautious_crossover() -> None:
    base = key_results(recorded())[0]
    a = base.__class__(**{**base.__dict__, "gpu": 0, "crossover": 8192})
    b = base.__class__(**{**base.__dict__, "gpu": 1, "crossover": 16384})
    c = base.__class__(**{**base.__dict__, "gpu": 2, "crossover": None})
    assert calibration([a, b])["crossovers"][a.calibration_key] == 16384
    assert calibration([a, c])["crossovers"][a.calibration_key] is None


@pytest.mark.parametrize("text", ["", "not json", "[]", '{"schema_version": 2, "gpus": []}',
                                  '{"schema_version": 1, "gpus": {}}'])
def test_malformed_reports_are_errors(text: str) -> None:
    with pytest.raises(VerifyError):
        parse_report(text)
