"""The self-test's accuracy suite: the outlier cases are there, built as described, and the
report names the worst case per kernel and smooth_k setting (CPU, real torch)."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from sagedoctor.runtime.accuracy import ACCURACY_CASES, Thresholds, accuracy_case  # noqa: E402
from sagedoctor.runtime.registry import KernelSpec  # noqa: E402
from sagedoctor.runtime.selftest import kernel_suite  # noqa: E402
from tests.test_runtime_sites import int8_attention  # noqa: E402

SHAPE = (1, 2, 256)


def test_the_suite_holds_the_outlier_cases() -> None:
    assert {"gaussian", "joint_offset_100", "joint_offset_300", "joint_offset_600",
            "large_rows", "near_constant_rows"} <= set(ACCURACY_CASES)


def test_the_joint_case_offsets_one_channel_of_q_and_k_on_the_image_tokens_only() -> None:
    q, k, v = (t.float() for t in accuracy_case(torch, torch.device("cpu"), torch.bfloat16,
                                                (1, 2, 1024), 64, "joint_offset_600"))
    text = 512 if 1024 // 8 >= 512 else 1024 // 8  # min(512, s // 8)
    assert text == 128
    for t in (q, k):
        assert float(t[..., text:, 0].mean()) == pytest.approx(600, abs=1)
        assert abs(float(t[..., :text, 0].mean())) < 0.5  # the text tokens: untouched
        assert abs(float(t[..., text:, 1:].mean())) < 0.1  # the other channels: untouched
    assert abs(float(v[..., 0].mean())) < 0.1


def _suite_of(fn: Any, smooth_k: bool | None) -> tuple[dict[str, Any], dict[str, Any]]:
    device = torch.device("cpu")
    cases = {}
    for i, name in enumerate(ACCURACY_CASES):
        q, k, v = accuracy_case(torch, device, torch.bfloat16, SHAPE, 64, name, seed=i)
        cases[name] = (q, k, v, F.scaled_dot_product_attention(
            q.float(), k.float(), v.float()).to(torch.bfloat16))
    spec = KernelSpec("k", "k", lambda: fn, device_type="cpu", smooth_k=smooth_k)
    return kernel_suite(fn, spec, F.scaled_dot_product_attention, cases, torch, Thresholds())


def test_the_worst_case_per_setting_is_reported_for_a_kernel_wrong_on_outliers() -> None:
    suite, worst = _suite_of(int8_attention, smooth_k=True)
    assert set(suite) == set(worst) == {"smooth_k=True", "smooth_k=False"}
    for setting in suite:
        assert suite[setting]["gaussian"]["passed"]
        assert set(suite[setting]) == set(ACCURACY_CASES)
        assert not worst[setting]["passed"]
        assert worst[setting]["case"].startswith("joint_offset_")
        assert worst[setting]["cosine"] == min(r["cosine"] for r in suite[setting].values())
    # the larger the offset, the worse (the stand-in quantises as SageAttention does)
    cos = [suite["smooth_k=False"][f"joint_offset_{o}"]["cosine"] for o in (100, 300, 600)]
    assert cos[0] > cos[2]


def test_a_correct_kernel_passes_every_case_and_one_without_smooth_k_has_one_setting() -> None:
    def exact(q: Any, k: Any, v: Any, *, is_causal: bool, scale: float | None) -> Any:
        return F.scaled_dot_product_attention(q.float(), k.float(), v.float()).to(q.dtype)

    suite, worst = _suite_of(exact, smooth_k=None)
    assert list(suite) == ["default"]
    assert all(r["passed"] for r in suite["default"].values())
    assert worst["default"]["passed"]


def test_verify_shows_the_worst_case_per_kernel_and_setting() -> None:
    from sagedoctor.verify import key_results, render_table

    worst = {"smooth_k=True": {"case": "joint_offset_600", "cosine": 0.641, "passed": False},
             "smooth_k=False": {"case": "joint_offset_600", "cosine": 0.543, "passed": False}}
    report = {"gpus": [{"index": 0, "name": "H100", "arch": "9.0", "uuid": None, "keys": [
        {"dtype": "bfloat16", "head_dim": 128, "chosen": "sage_fp8_sm90", "sweep": [],
         "kernels": [{"name": "sage_fp8_sm90", "passed": True, "worst": worst,
                      "normal": {"cosine": 0.9993, "rel_l2": 0.037}}]}]}]}
    results = key_results(report)
    assert results[0].worst == (
        ("sage_fp8_sm90", "smooth_k=True", "joint_offset_600", 0.641, False),
        ("sage_fp8_sm90", "smooth_k=False", "joint_offset_600", 0.543, False))
    text = render_table(results)
    assert ("GPU 0 bfloat16 D128: sage_fp8_sm90 smooth_k=True joint_offset_600 cos 0.641 "
            "(fails), sage_fp8_sm90 smooth_k=False joint_offset_600 cos 0.543 (fails)") in text
