"""The router's CUDA paths on a real GPU (skipped without one): device context, capability
lookup, CUDA-synchronised timing, and the real SageAttention registry when the package is
missing or present."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
F = torch.nn.functional

from sagedoctor.runtime import KernelRegistry, KernelSpec, Router, sage_scope  # noqa: E402
from sagedoctor.runtime.accuracy import Thresholds, compare  # noqa: E402

pytestmark = pytest.mark.gpu


def cuda_math(q: Any, k: Any, v: Any, *, is_causal: bool = False,
              scale: float | None = None) -> Any:
    """Correct but slow attention: SDPA's math backend in fp32."""
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        out = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                             is_causal=is_causal, scale=scale)
    return out.to(q.dtype)


def garbage(q: Any, k: Any, v: Any, **_: Any) -> Any:
    return torch.randn_like(q)


def spec(name: str, fn: Any, priority: int) -> KernelSpec:
    return KernelSpec(name, name, lambda: fn, device_type="cuda", priority=priority)


def qkv(s: int, d: int = 128, h: int = 24, device: str = "cuda") -> tuple[Any, Any, Any]:
    g = torch.Generator(device=device).manual_seed(s)
    return tuple(torch.randn(1, h, s, d, device=device, dtype=torch.bfloat16, generator=g)
                 for _ in range(3))


def test_cuda_kernel_verified_and_wrong_one_rejected_on_a_real_gpu() -> None:
    registry = KernelRegistry()
    registry.register(spec("garbage", garbage, 1))
    registry.register(spec("math", cuda_math, 2))
    router = Router(registry=registry)
    q, k, v = qkv(4608)
    with sage_scope(router):
        out = F.scaled_dot_product_attention(q, k, v)
    stats = router.stats()
    assert stats["keys"] == {f"{q.device}|bfloat16|128": "math"}
    # fp32 math is slower than flash SDPA on a GPU: measured with CUDA sync, SDPA is kept
    assert stats["sdpa"] == {"slower": 1}
    assert compare(out, F.scaled_dot_product_attention(q, k, v)).passes(Thresholds())


def test_last_device_runs_with_its_own_device_current() -> None:
    last = torch.cuda.device_count() - 1
    device = f"cuda:{last}"
    seen: list[int] = []

    def recording(q: Any, k: Any, v: Any, **kw: Any) -> Any:
        seen.append(torch.cuda.current_device())
        return cuda_math(q, k, v, **kw)

    registry = KernelRegistry()
    registry.register(spec("rec", recording, 1))
    router = Router(registry=registry, speed_check=False)
    q, k, v = qkv(1024, device=device)
    with torch.cuda.device(0), sage_scope(router):
        out = F.scaled_dot_product_attention(q, k, v)
    assert seen and set(seen) == {last}
    assert router.stats()["routed"] == {"rec": 1}
    assert compare(out, F.scaled_dot_product_attention(q, k, v)).cosine > 0.999


def test_default_registry_never_breaks_the_call() -> None:
    """With the real SageAttention kernels: routed only if one passes, never an exception."""
    router = Router()
    q, k, v = qkv(16896)
    with sage_scope(router):
        out = F.scaled_dot_product_attention(q, k, v)
    reference = F.scaled_dot_product_attention(q, k, v)
    assert compare(out, reference).passes(Thresholds())
    print(router.stats())


# --- with a real SageAttention build (skipped where none is installed) ----------------------

def _sageattention_or_skip() -> Any:
    try:
        import sageattention
    except Exception:
        pytest.skip("SageAttention is not installed in this interpreter")
    return sageattention


def test_router_uses_only_a_sage_kernel_that_matches_sdpa_on_this_gpu() -> None:
    """With a broken kernel in the build (tag v2.2.0's sm90 one), the router picks a correct
    one or none; with a good build it picks the best one. Either way its output is right."""
    _sageattention_or_skip()
    from sagedoctor.runtime import default_registry

    registry = default_registry()
    router = Router(registry=registry)
    q, k, v = qkv(4096, h=8)
    reference = cuda_math(q, k, v)
    with sage_scope(router):
        out = F.scaled_dot_product_attention(q, k, v)
    assert compare(out, reference).passes(Thresholds())
    chosen = router.stats()["keys"]["cuda:0|bfloat16|128"]
    arch = torch.cuda.get_device_capability()
    for candidate in registry.candidates("cuda", arch, "bfloat16", 128):
        direct = registry.load(candidate)(q, k, v, is_causal=False, scale=None)
        good = compare(direct, reference).passes(Thresholds())
        if candidate.name == chosen:
            assert good
            break
        assert not good, f"{candidate.name} was correct but passed over for {chosen}"
    else:
        assert chosen is None


def test_selftest_reports_every_kernel_and_a_calibration_on_this_gpu() -> None:
    _sageattention_or_skip()
    from sagedoctor.runtime.measure import QUICK
    from sagedoctor.runtime.selftest import run_selftest
    from sagedoctor.verify import calibration, key_results

    report = run_selftest(dtypes=("bfloat16",), head_dims=(128,), sweep=(1024, 16384),
                          settings=QUICK, quick=True)
    results = key_results(report)
    assert [(r.dtype, r.head_dim) for r in results] == [("bfloat16", 128)]
    (result,) = results
    assert report["modules"]["_fused"] == "ok"
    if result.chosen is not None:
        assert result.cosine is not None and result.cosine >= 0.99
    cal = calibration(report)
    if result.chosen is not None:
        (gpu,) = cal.gpus.values()
        assert {k.split("|")[3] for k in gpu.decisions} == {"1024", "16384"}


def test_the_event_timer_hides_the_hosts_launch_overhead_behind_gpu_work() -> None:
    # A call that spends 1 ms on the host before it issues 3 ms of GPU work: in a busy
    # denoising loop the host runs ahead and the GPU never waits; the first sample (no lead
    # known yet) charges the host's millisecond, later ones must not.
    import time

    from sagedoctor.runtime.measure import cuda_event_timer, gpu_cycles_per_s

    rate = gpu_cycles_per_s(torch, torch.cuda._sleep)

    def host_then_gpu() -> None:
        time.sleep(0.001)
        torch.cuda._sleep(int(0.003 * rate))

    timer = cuda_event_timer(torch, torch.device("cuda", 0))
    first = timer(host_then_gpu, 1)
    later = sorted(timer(host_then_gpu, 1) for _ in range(5))[2]
    assert first > 0.0037
    assert later < 0.0034
    assert later == pytest.approx(0.003, rel=0.1)
