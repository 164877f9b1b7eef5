"""Each call site checked on its own data, smooth_k tried both ways, and every keyword the
runtime passes named by the kernel (CPU, real torch, stand-in kernels registered through the
registry; a stand-in `sageattention` package on disk for the loader)."""

from __future__ import annotations

import importlib.util
import logging
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from sagedoctor.runtime import KernelRegistry, KernelSpec, Router, sage_scope  # noqa: E402
from sagedoctor.runtime.accuracy import Thresholds, compare  # noqa: E402
from sagedoctor.runtime.registry import UnnamedKeyword, sage_loader  # noqa: E402
from sagedoctor.runtime.router import SIGNATURE_CHECKS  # noqa: E402

BF16 = torch.bfloat16
TEXT = 32  # tokens of "text" before the "image" tokens of a joint sequence


def gaussian(seed: int, s: int = 256, h: int = 2, d: int = 64) -> tuple[Any, Any, Any]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, h, s, d, generator=g).to(BF16) for _ in range(3))


def joint_outlier(seed: int, offset: float = 600.0) -> tuple[Any, Any, Any]:
    """One channel of Q and K offset on the image tokens only (what InvokeAI measured in the
    first block of Qwen-Image and Krea-2)."""
    q, k, v = (t.float() for t in gaussian(seed))
    q[:, :, TEXT:, 0] += offset
    k[:, :, TEXT:, 0] += offset
    return q.to(BF16), k.to(BF16), v.to(BF16)


def int8_attention(q: Any, k: Any, v: Any, *, is_causal: bool = False,
                   scale: float | None = None, smooth_k: bool = True) -> Any:
    """A stand-in quantised kernel: Q and K to int8 per (batch, head) by their absolute maximum,
    K smoothed by its mean over the sequence first when asked. Right on Gaussian data (cosine
    ~0.999), wrong where one channel dwarfs the others, as SageAttention's kernels are."""
    qf, kf = q.float(), k.float()
    if smooth_k:
        kf = kf - kf.mean(dim=2, keepdim=True)

    def quant(t: Any) -> Any:
        step = t.abs().amax(dim=(2, 3), keepdim=True).clamp_min(1e-8) / 127
        return (t / step).round().clamp(-127, 127) * step

    s = scale if scale is not None else q.shape[-1] ** -0.5
    scores = quant(qf) @ quant(kf).transpose(-1, -2) * s
    if is_causal:
        mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
    return (scores.softmax(-1) @ v.float()).to(q.dtype)


class Recorder:
    """Counts a kernel's calls and the smooth_k each was given."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.smooth: list[bool | None] = []

    def spec(self, name: str = "int8", smooth_k: bool | None = True) -> KernelSpec:
        def load() -> Callable[..., Any]:
            def kernel(q: Any, k: Any, v: Any, *, is_causal: bool = False,
                       scale: float | None = None, smooth_k: bool | None = None) -> Any:
                self.smooth.append(smooth_k)
                if smooth_k is None:
                    return self.fn(q, k, v, is_causal=is_causal, scale=scale)
                return self.fn(q, k, v, is_causal=is_causal, scale=scale, smooth_k=smooth_k)
            return kernel
        return KernelSpec(name, name, load, device_type="cpu", smooth_k=smooth_k)


def router_of(*specs: KernelSpec, **kw: Any) -> Router:
    registry = KernelRegistry()
    for s in specs:
        registry.register(s)
    return Router(registry=registry, speed_check=False, **kw)


def test_the_stand_in_kernel_is_right_on_gaussian_data_and_wrong_on_the_outlier() -> None:
    """The premise of the tests below, measured, not assumed."""
    good = compare(int8_attention(*gaussian(1)), F.scaled_dot_product_attention(*gaussian(1)))
    assert good.passes(Thresholds())
    for smooth in (True, False):
        bad = compare(int8_attention(*joint_outlier(2), smooth_k=smooth),
                      F.scaled_dot_product_attention(*joint_outlier(2)))
        assert not bad.passes(Thresholds()), (smooth, bad)


def test_a_site_wrong_on_its_own_data_stays_on_sdpa_while_the_other_sites_route(
        caplog: pytest.LogCaptureFixture) -> None:
    kernel = Recorder(int8_attention)
    router = router_of(kernel.spec())
    step = [gaussian(10), joint_outlier(11), gaussian(12)]  # three layers of one shape
    outputs = []
    with caplog.at_level(logging.WARNING, logger="sagedoctor.runtime"):
        for _ in range(3):  # three denoising steps, a scope each
            with sage_scope(router):
                outputs.append([F.scaled_dot_product_attention(*call) for call in step])
    stats = router.stats()
    assert stats["routed"] == {"int8": 6}  # sites 0 and 2, in each of the 3 steps
    assert stats["sdpa"] == {"site": 3}  # site 1, in each step
    assert stats["sites"]["checked"] == 3 and stats["sites"]["failed"] == 1
    for per_step in outputs:  # the outlier site is served by SDPA itself
        torch.testing.assert_close(per_step[1], F.scaled_dot_product_attention(*step[1]),
                                   rtol=0, atol=0)
        for i in (0, 2):
            assert compare(per_step[i], F.scaled_dot_product_attention(*step[i])).passes(
                Thresholds())
    # the first-call check (both settings on the Gaussian slice: the first passes), the
    # site checks of step 1 (site 1 tried with both settings), then one call per routed site
    assert kernel.smooth == [True, True, True, False, True, True, True, True, True]
    failures = [r.getMessage() for r in caplog.records if "failed its check" in r.getMessage()]
    assert len(failures) == 1  # logged once, with its position, shape and error
    assert "call 1 of shape" in failures[0] and "q 1x2x256x64" in failures[0]
    assert "smooth_k=True: cos" in failures[0] and "smooth_k=False: cos" in failures[0]


def test_a_site_that_passes_only_with_the_other_smooth_k_keeps_that_setting() -> None:
    def smoothing_breaks_it(q: Any, k: Any, v: Any, *, is_causal: bool = False,
                            scale: float | None = None, smooth_k: bool = True) -> Any:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)
        # wrong with smoothing, but only where K has a large offset (the data decides)
        return -out if smooth_k and float(k.float().abs().max()) > 50 else out

    kernel = Recorder(smoothing_breaks_it)
    router = router_of(kernel.spec(smooth_k=True))
    step = [gaussian(20), joint_outlier(21)]
    for _ in range(2):
        with sage_scope(router):
            outs = [F.scaled_dot_product_attention(*call) for call in step]
    assert router.stats()["routed"] == {"int8": 4}
    assert router.stats()["sdpa"] == {}
    torch.testing.assert_close(outs[1], F.scaled_dot_product_attention(*step[1]))
    # first-call check True; step 1: site 0 True, site 1 True (fails) then False (passes);
    # step 2: site 0 with True, site 1 straight with False
    assert kernel.smooth == [True, True, True, False, True, False]


def test_global_mode_checks_the_first_calls_of_a_shape_and_moves_the_whole_shape_to_sdpa(
        caplog: pytest.LogCaptureFixture) -> None:
    """Without a scope no step boundary is known, so no call site: the shape is the unit."""
    kernel = Recorder(int8_attention)
    router = router_of(kernel.spec())
    other = gaussian(30, s=512)  # another shape, Gaussian: keeps routing
    router.enable_global()
    try:
        with caplog.at_level(logging.WARNING, logger="sagedoctor.runtime"):
            F.scaled_dot_product_attention(*gaussian(31))
            F.scaled_dot_product_attention(*joint_outlier(32))  # fails: the shape goes
            late = F.scaled_dot_product_attention(*gaussian(33))  # ... even for this call
            for _ in range(3):
                F.scaled_dot_product_attention(*other)
    finally:
        router.disable_global()
    stats = router.stats()
    assert stats["routed"] == {"int8": 4} and stats["sdpa"] == {"site": 2}
    torch.testing.assert_close(late, F.scaled_dot_product_attention(*gaussian(33)),
                               rtol=0, atol=0)
    assert any("global mode: every call of it" in r.getMessage() for r in caplog.records)


def test_global_mode_stops_checking_a_shape_after_one_steps_worth_of_calls() -> None:
    kernel = Recorder(int8_attention)
    router = router_of(kernel.spec())
    call = gaussian(40)
    router.enable_global()
    try:
        for _ in range(SIGNATURE_CHECKS + 10):
            F.scaled_dot_product_attention(*call)
    finally:
        router.disable_global()
    stats = router.stats()
    assert stats["sites"]["checked"] == SIGNATURE_CHECKS
    assert stats["routed"] == {"int8": SIGNATURE_CHECKS + 10}
    # one kernel call per call (the check compares the call's own output): plus the first
    # call's check on its slice
    assert len(kernel.smooth) == SIGNATURE_CHECKS + 10 + 1


class FakeClock:
    """Each reading advances by `tick` seconds: a check costs two readings of it."""

    def __init__(self, tick: float) -> None:
        self.now = 0.0
        self.tick = tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


def test_the_per_site_checks_stop_at_their_time_budget_and_later_steps_check_nothing() -> None:
    clock = FakeClock(0.5)  # every check "costs" 1 s: reference 0.5 + comparison 0.5
    kernel = Recorder(int8_attention)
    router = router_of(kernel.spec(), clock=clock, site_check_budget_s=3.0)
    step = [gaussian(50 + i) for i in range(8)]  # eight layers of one shape
    for _ in range(4):
        with sage_scope(router):
            for call in step:
                F.scaled_dot_product_attention(*call)
    stats = router.stats()
    assert stats["sites"]["checked"] == 3  # the budget: 3 s of checks, then no more
    assert stats["sites"]["check_ms"] == pytest.approx(3000.0)
    assert stats["sites"]["unchecked"] == 5 * 4  # sites 3..7 in each of the four steps
    assert stats["routed"] == {"int8": 32}
    assert len(kernel.smooth) == 32 + 1  # one kernel call per call, one first-call check


def test_the_per_site_checks_stop_at_their_count_budget() -> None:
    kernel = Recorder(int8_attention)
    router = router_of(kernel.spec(), max_site_checks=2)
    with sage_scope(router):
        for i in range(5):
            F.scaled_dot_product_attention(*gaussian(60 + i))
    sites = router.stats()["sites"]
    assert (sites["checked"], sites["unchecked"]) == (2, 3)


def test_a_kernel_without_a_smooth_k_setting_is_called_without_the_keyword() -> None:
    calls: list[dict[str, Any]] = []

    def strict(q: Any, k: Any, v: Any, *, is_causal: bool = False,
               scale: float | None = None) -> Any:
        calls.append({"is_causal": is_causal})
        return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)

    spec = KernelSpec("strict", "strict", lambda: strict, device_type="cpu")
    router = router_of(spec)
    with sage_scope(router):
        F.scaled_dot_product_attention(*gaussian(70))
    assert router.stats()["routed"] == {"strict": 1} and len(calls) == 2


# --- every keyword the runtime passes is a named parameter of the kernel ------------------

STAND_IN = '''
import torch.nn.functional as F


def named(q, k, v, tensor_layout="HND", is_causal=False, sm_scale=None, smooth_k=True,
          pv_accum_dtype="fp32", **kwargs):
    CALLS.append(smooth_k)
    return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=sm_scale)


def swallowed(q, k, v, tensor_layout="HND", is_causal=False, sm_scale=None, **kwargs):
    # like upstream's sageattn(): smooth_k lands in **kwargs and changes nothing
    CALLS.append(kwargs.get("smooth_k"))
    return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=sm_scale)


CALLS = []
'''


@pytest.fixture
def stand_in_sageattention(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    package = tmp_path / "sageattention"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(STAND_IN), encoding="utf-8")
    found = importlib.util.spec_from_file_location("sageattention", package / "__init__.py")
    assert found is not None and found.loader is not None
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "sageattention", module)
    return module


def test_a_kernel_ending_in_kwargs_without_the_keyword_fails_its_check(
        stand_in_sageattention: Any, caplog: pytest.LogCaptureFixture) -> None:
    load = sage_loader("swallowed")
    with pytest.raises(UnnamedKeyword, match=r"sageattention.swallowed has no parameter "
                                             r"smooth_k: it would be ignored"):
        load()
    router = router_of(KernelSpec("swallowed", "swallowed", load, device_type="cpu",
                                  smooth_k=True))
    call = gaussian(80)
    with caplog.at_level(logging.WARNING, logger="sagedoctor.runtime"), sage_scope(router):
        out = F.scaled_dot_product_attention(*call)
    assert router.stats()["sdpa"] == {"unverified": 1}
    assert stand_in_sageattention.CALLS == []  # never called: refused before it could run
    assert any("has no parameter smooth_k: it would be ignored" in r.getMessage()
               for r in caplog.records)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(*call), rtol=0, atol=0)


def test_a_kernel_naming_every_keyword_is_called_with_smooth_k(
        stand_in_sageattention: Any) -> None:
    router = router_of(KernelSpec("named", "named", sage_loader("named", pv_accum_dtype="fp32"),
                                  device_type="cpu", smooth_k=False))
    with sage_scope(router):
        F.scaled_dot_product_attention(*gaussian(81))
    assert router.stats()["routed"] == {"named": 1}
    assert stand_in_sageattention.CALLS == [False, False]  # the check, then the call
    # a fixed keyword the function does not name is refused the same way
    with pytest.raises(UnnamedKeyword, match="qk_quant_gran"):
        sage_loader("named", qk_quant_gran="per_warp")()


def test_every_sageattention_spec_states_its_smooth_k() -> None:
    from sagedoctor.runtime.registry import SAGE_KERNELS

    assert all(isinstance(s.smooth_k, bool) for s in SAGE_KERNELS)
    assert {s.settings() for s in SAGE_KERNELS} == {(True, False)}
