"""Self-test, run inside the target venv: `python -m <runtime>.selftest --json`.

Per GPU x dtype x head size: every kernel the registry offers is checked against SDPA (normal
and outlier inputs), and the router's choice is timed against SDPA over a sweep of shapes
(diffusion head counts, lengths including the non-power-of-two ones real models use) with the
paired method of measure.py; each point carries its decision, which `verify` stores per GPU
and shape for the router. The crossover (the shortest length from which every longer one is
routed) is reported for reading. Also: what `sageattn()` itself would pick, and whether that
is correct.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

from .accuracy import Comparison, Thresholds, compare
from .decisions import Calibration, gpu_identity, shape_key
from .hook import live_fingerprint
from .measure import (
    FULL,
    QUICK,
    MeasureSettings,
    cuda_event_timer,
    measure_pair,
    perf_counter_timer,
)
from .registry import KernelRegistry, KernelSpec, default_registry

SELFTEST_SCHEMA_VERSION = 1
CHECK_SHAPE = (1, 8, 4096)  # batch, heads, tokens for the correctness checks
# Lengths real models use sit between powers of two: FLUX at 1536x1536 is 9728 tokens, at
# 2048x2048 16896, Wan 720p 32760; the crossover on Hopper lies near 10k.
SWEEP = (1024, 2048, 4096, 4608, 6144, 8192, 9216, 9728, 10240, 11264, 12288, 14336, 16384,
         16896, 20480, 24576, 28672, 32760, 32768)
QUICK_SWEEP = (1024, 4096, 16384)
# (batch, heads) per head size: SDXL (2 x 10 heads of 64); FLUX (24 of 128) and Wan (40 of 128).
SWEEP_SHAPES = {64: ((2, 10),), 128: ((1, 24), (1, 40))}
# SAGEDOCTOR_SELFTEST_DEVICE=cpu: the same checks and sweep on the CPU, with `sageattn()` as
# the one kernel, small shapes and wall-clock timing. For machines without a GPU running
# stand-in builds (the tests); a real SageAttention has no CPU kernels.
DEVICE_ENV = "SAGEDOCTOR_SELFTEST_DEVICE"
CPU_CHECK_SHAPE = (1, 2, 256)
CPU_SWEEP = (256, 512)
CPU_SHAPES = ((1, 2),)
SAGE_MODULES = ("_fused", "_qattn_sm80", "_qattn_sm89", "_qattn_sm90")
# What upstream's `sageattn()` dispatches to per architecture (core.py at d1a57a5 and v2.2.0);
# the Windows fork differs on sm86/87 (CUDA fp16) and sm75 (Triton).
SAGEATTN_AUTO = {
    (8, 0): "sage_fp16_cuda", (8, 6): "sage_fp16_triton", (8, 9): "sage_fp8_cuda_fp32fp16",
    (9, 0): "sage_fp8_sm90", (12, 0): "sage_fp8_cuda_per_warp",
    (12, 1): "sage_fp8_cuda_per_warp",
}


def _modules() -> dict[str, str]:
    """Each compiled SageAttention module: 'ok' or the import error."""
    out = {}
    for name in SAGE_MODULES:
        try:
            importlib.import_module(f"sageattention.{name}")
            out[name] = "ok"
        except Exception as exc:  # report, never raise: this is a diagnosis
            out[name] = f"{type(exc).__name__}: {exc}"[:300]
    return out


def _inputs(torch: Any, device: Any, dtype: Any, shape: tuple[int, int, int], d: int,
            outlier: bool, seed: int = 0) -> tuple[Any, Any, Any]:
    generator = torch.Generator(device=device).manual_seed(seed)
    b, h, s = shape
    q, k, v = (torch.randn(b, h, s, d, device=device, dtype=torch.float32, generator=generator)
               for _ in range(3))
    if outlier:
        # Large magnitudes and a shared K offset: what overflows int8/fp8 quantisation and
        # gives the black images users report.
        q = q * 8
        k = k * 8 + 20
        v = v * 50
    return q.to(dtype), k.to(dtype), v.to(dtype)


def _on(torch: Any, device: Any) -> Any:
    """The device as current for CUDA; nothing to select on the CPU."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _check(fn: Callable[..., Any], sdpa: Callable[..., Any], q: Any, k: Any, v: Any,
           torch: Any) -> Comparison | str:
    try:
        with _on(torch, q.device):
            out = fn(q, k, v, is_causal=False, scale=None)
        reference = sdpa(q.float(), k.float(), v.float()).to(q.dtype)
        return compare(out, reference)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"[:300]


def _describe(result: Comparison | str, thresholds: Thresholds) -> dict[str, Any]:
    if isinstance(result, str):
        return {"passed": False, "error": result}
    return {"passed": result.passes(thresholds), "cosine": round(result.cosine, 6),
            "rel_l2": round(result.rel_l2, 6), "finite": result.finite}


def _sageattn_auto(torch: Any, device: Any, arch: tuple[int, int], dtype: Any, d: int,
                   thresholds: Thresholds, sdpa: Callable[..., Any],
                   check_shape: tuple[int, int, int] = CHECK_SHAPE) -> dict[str, Any]:
    kernel = SAGEATTN_AUTO.get(arch)
    try:
        from sageattention import sageattn
    except Exception as exc:
        return {"kernel": kernel, "error": f"{type(exc).__name__}: {exc}"[:300]}
    q, k, v = _inputs(torch, device, dtype, check_shape, d, outlier=False)

    def auto(q: Any, k: Any, v: Any, *, is_causal: bool, scale: float | None) -> Any:
        return sageattn(q, k, v, tensor_layout="HND", is_causal=is_causal, sm_scale=scale)

    return {"kernel": kernel, **_describe(_check(auto, sdpa, q, k, v, torch), thresholds)}


def crossover(points: list[tuple[int, bool]]) -> int | None:
    """Shortest length from which every longer length measured is routed."""
    best = None
    for tokens, route in sorted(points, reverse=True):
        if route:
            best = tokens
        else:
            break
    return best


def run_selftest(registry: KernelRegistry | None = None, thresholds: Thresholds | None = None,
                 dtypes: tuple[str, ...] = ("bfloat16", "float16"),
                 head_dims: tuple[int, ...] = (64, 128), sweep: tuple[int, ...] = SWEEP,
                 settings: MeasureSettings = FULL, quick: bool = False,
                 prior: Calibration | None = None) -> dict[str, Any]:
    """`prior`: the decisions an earlier run stored for this build; a shape it routed stays
    routed unless the kernel is now measurably slower (measure.decide)."""
    import torch
    import torch.nn.functional as F

    registry = registry or default_registry()
    thresholds = thresholds or Thresholds.from_env()
    sdpa = F.scaled_dot_product_attention
    report: dict[str, Any] = {
        "schema_version": SELFTEST_SCHEMA_VERSION,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "thresholds": {"min_cosine": thresholds.min_cosine, "max_rel_l2": thresholds.max_rel_l2},
        "measure": {"method": "cuda-events behind a host-lead spin, paired rounds; sustained "
                              "blocks decide results in the sustain band",
                    "margin": settings.margin, "rounds": settings.rounds,
                    "max_rounds": settings.max_rounds, "quick": quick,
                    "sustain_band": list(settings.sustain_band),
                    "sustain_s": settings.sustain_s,
                    "prior_decisions": sum(len(g.decisions) for g in prior.gpus.values())
                    if prior else 0},
        "gpus": [],
        "fingerprint": live_fingerprint(),
    }
    try:
        from importlib import metadata

        report["sageattention"] = metadata.version("sageattention")
    except Exception:
        report["sageattention"] = None
    try:
        import sageattention  # noqa: F401

        report["import"] = "ok"
    except Exception as exc:
        report["import"] = f"{type(exc).__name__}: {exc}"[:300]
    report["modules"] = _modules()
    if os.environ.get(DEVICE_ENV, "").strip() == "cpu":
        report["gpus"].append(_cpu_entry(torch, thresholds, sdpa, dtypes, head_dims,
                                         settings))
        return report
    if not torch.cuda.is_available():
        report["error"] = "torch sees no CUDA GPU"
        return report
    for index in range(torch.cuda.device_count()):
        device = torch.device("cuda", index)
        major, minor = torch.cuda.get_device_capability(device)
        arch = (int(major), int(minor))
        props = torch.cuda.get_device_properties(device)
        uuid = getattr(props, "uuid", None)
        gpu: dict[str, Any] = {"index": index, "name": torch.cuda.get_device_name(device),
                               "arch": f"{major}.{minor}", "uuid": str(uuid) if uuid else None,
                               "keys": []}
        timer = cuda_event_timer(torch, device)
        gpu_id = gpu_identity(gpu["uuid"], gpu["name"], gpu["arch"], index)
        earlier = prior.gpus.get(gpu_id) if prior else None
        shapes = {d: SWEEP_SHAPES.get(d, ((1, 16),))[:1 if quick else None] for d in head_dims}
        for dtype_name in dtypes:
            dtype = getattr(torch, dtype_name)
            for d in head_dims:
                gpu["keys"].append(_test_key(torch, registry, thresholds, sdpa, timer, device,
                                             arch, dtype_name, dtype, d, sweep, shapes[d],
                                             settings, earlier.decisions if earlier else {}))
        report["gpus"].append(gpu)
    return report


def _cpu_registry() -> KernelRegistry:
    registry = KernelRegistry()

    def load() -> Callable[..., Any]:
        from sageattention import sageattn

        def kernel(q: Any, k: Any, v: Any, *, is_causal: bool, scale: float | None) -> Any:
            return sageattn(q, k, v, tensor_layout="HND", is_causal=is_causal, sm_scale=scale)

        return kernel

    registry.register(KernelSpec("sageattn_cpu", "sageattn() on the CPU", load,
                                 device_type="cpu"))
    return registry


def _cpu_entry(torch: Any, thresholds: Thresholds, sdpa: Callable[..., Any],
               dtypes: tuple[str, ...], head_dims: tuple[int, ...],
               settings: MeasureSettings) -> dict[str, Any]:
    device = torch.device("cpu")
    registry = _cpu_registry()
    timer = perf_counter_timer(lambda: None)
    settings = settings.for_device("cpu")
    gpu: dict[str, Any] = {"index": 0, "name": "cpu", "arch": "0.0", "uuid": None, "keys": []}
    for dtype_name in dtypes:
        for d in head_dims:
            gpu["keys"].append(_test_key(torch, registry, thresholds, sdpa, timer, device,
                                         (0, 0), dtype_name, getattr(torch, dtype_name), d,
                                         CPU_SWEEP, CPU_SHAPES, settings, {}, "cpu",
                                         CPU_CHECK_SHAPE))
    return gpu


def _test_key(torch: Any, registry: KernelRegistry, thresholds: Thresholds,
              sdpa: Callable[..., Any], timer: Any, device: Any,
              arch: tuple[int, int], dtype_name: str, dtype: Any, d: int,
              sweep: tuple[int, ...], shapes: tuple[tuple[int, int], ...],
              settings: MeasureSettings, earlier: dict[str, Any], device_type: str = "cuda",
              check_shape: tuple[int, int, int] = CHECK_SHAPE) -> dict[str, Any]:
    key: dict[str, Any] = {"dtype": dtype_name, "head_dim": d, "kernels": [], "chosen": None,
                           "sweep": [], "crossover": None,
                           "sageattn_auto": _sageattn_auto(torch, device, arch, dtype, d,
                                                           thresholds, sdpa, check_shape)}
    normal = _inputs(torch, device, dtype, check_shape, d, outlier=False)
    outlier = _inputs(torch, device, dtype, check_shape, d, outlier=True, seed=1)
    chosen: tuple[KernelSpec, Callable[..., Any]] | None = None
    for spec in registry.candidates(device_type, arch, dtype_name, d):
        entry: dict[str, Any] = {"name": spec.name, "label": spec.label}
        try:
            fn = registry.load(spec)
        except Exception as exc:
            entry.update(passed=False, error=f"{type(exc).__name__}: {exc}"[:300])
            key["kernels"].append(entry)
            continue
        entry["normal"] = _describe(_check(fn, sdpa, *normal, torch), thresholds)
        entry["outlier"] = _describe(_check(fn, sdpa, *outlier, torch), thresholds)
        # The router decides on the call's own inputs; outliers are reported, not required.
        entry["passed"] = entry["normal"]["passed"]
        key["kernels"].append(entry)
        if entry["passed"] and chosen is None:
            chosen = (spec, fn)
            key["chosen"] = spec.name
    if chosen is None:
        return key
    spec, fn = chosen
    crossovers: dict[str, int | None] = {}
    for batch, heads in shapes:
        points = []
        for tokens in sweep:
            q, k, v = _inputs(torch, device, dtype, (batch, heads, tokens), d, outlier=False)
            before = earlier.get(shape_key(dtype_name, d, batch * heads, tokens, tokens, False))
            prior = before.route if before is not None and before.kernel == spec.name else None
            with _on(torch, device):
                result = measure_pair(partial(fn, q, k, v, is_causal=False, scale=None),
                                      partial(sdpa, q, k, v), timer, settings, prior)
            del q, k, v
            points.append((tokens, result.route))
            key["sweep"].append({
                "batch": batch, "heads": heads, "tokens": tokens,
                "kernel_ms": round(result.kernel_s * 1e3, 4),
                "sdpa_ms": round(result.sdpa_s * 1e3, 4), "speedup": round(result.speedup, 4),
                "low": round(result.low, 4), "high": round(result.high, 4),
                "rounds": result.rounds, "route": result.route, "settled": result.settled,
                "prior": prior, "sustained": result.short is not None,
                "short": None if result.short is None else round(result.short, 4)})
        crossovers[f"{batch}x{heads}"] = crossover(points)
    key["crossovers"] = crossovers
    key["crossover"] = next(iter(crossovers.values()), None)
    return key


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="selftest")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="a short sweep")
    parser.add_argument("--fresh", action="store_true",
                        help="ignore the decisions earlier runs stored for this build")
    args = parser.parse_args(argv)
    settings = (QUICK if args.quick else FULL).with_env()
    prior = None
    if not args.fresh:
        from .router import calibration_path, load_current_calibration

        prior = load_current_calibration(calibration_path())
    report = run_selftest(sweep=QUICK_SWEEP if args.quick else SWEEP, settings=settings,
                          quick=args.quick, prior=prior)
    if args.json:
        print(json.dumps(report))
    else:
        print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
