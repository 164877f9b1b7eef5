"""Self-test, run inside the target venv: `python -m <runtime>.selftest --json`.

Per GPU x dtype x head size: every kernel the registry offers is checked against fp32 SDPA on
the accuracy suite (ACCURACY_CASES: Gaussian; a joint text+image sequence with one channel of Q
and K offset by +100, +300 and +600 on the image tokens; large-magnitude rows; near-constant
rows; the older shared K offset) with each smooth_k setting its spec allows, the worst case per
kernel and setting reported; the Gaussian case decides whether a kernel passes (the router
checks every call site on its own data), and the router's choice is timed against SDPA with
the method of measure.py at the lengths that decide: the app shapes (SDXL, FLUX 1024/1536/2048,
Wan 720p), a coarse set from 1024 to 32760, and, per (dtype, head size, heads), the crossover
bracketed by bisection on the grid of lengths between measured points whose decisions differ,
until the bracket's ends lie within BRACKET_RATIO of each other (a length inside a bracket is
close to the crossover, where either path is within a few percent of the other: the router
times it live, as any shape verify did not store). The router interpolates between stored
lengths whose decisions agree. Each point carries its
decision, which `verify` stores per GPU and shape. The crossover (the shortest length from
which every longer one is routed) is reported for reading. Also: what `sageattn()` itself would
pick, and whether that is correct.

Reuse: where the decisions stored for this build were measured with the same kernel inputs
(SageAttention's and torch's installed files, the GPU and its driver), correctness is checked
again on every key, but only a sample of the stored shapes is timed again (per family the
shortest clear win and the shortest clear loss); if the sample agrees, the rest are kept,
otherwise that family is measured anew. `--fresh` decides everything anew.

Sister dtypes: fp16 and bf16 inputs run the same quantised kernel (SageAttention quantises Q
and K to int8 and V to fp8 or fp16 whatever the input type) against the same SDPA kernel, so a
family of the second dtype measured with the same kernel as the first borrows the first's
decisions after the same sample as reuse agrees; where it disagrees, it is measured whole.

`--progress` writes one line per shape to stderr (PROGRESS_PREFIX, then JSON: key, shape,
shapes done and an estimate of those left, seconds spent and left) for verify's output.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import itertools
import json
import math
import os
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from .accuracy import (
    ACCURACY_CASES,
    Comparison,
    Thresholds,
    accuracy_case,
    compare,
)
from .decisions import (
    PROGRESS_PREFIX,
    Calibration,
    Decision,
    bh_bucket,
    gpu_identity,
    parse_shape_key,
    shape_key,
)
from .hook import live_fingerprint
from .measure import (
    FULL,
    QUICK,
    MeasureSettings,
    SpeedResult,
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
         16896, 20480, 24576, 28672, 32760)
QUICK_SWEEP = (1024, 4096, 16384)
# Measured in every full sweep; the rest of SWEEP only where bisection brackets a crossover.
COARSE = (1024, 4096, 8192, 16384, 24576, 32760)
# Bisection stops when a bracket's longer end is within this ratio of its shorter one: 8192
# and 10240 are close enough (each sustained point near the crossover costs up to 2 s).
BRACKET_RATIO = 1.25
# The app shapes (bf16): (dtype, head size, batch, heads) -> lengths. The tool's
# decide/app_shapes.APP_SHAPES names the same shapes for its output.
APP_LENGTHS = {("bfloat16", 64, 2, 10): (4096,), ("bfloat16", 128, 1, 24): (4608, 9728, 16896),
               ("bfloat16", 128, 1, 40): (32760,)}

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




def _on(torch: Any, device: Any) -> Any:
    """The device as current for CUDA; nothing to select on the CPU."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _check(fn: Callable[..., Any], sdpa: Callable[..., Any], q: Any, k: Any, v: Any,
           torch: Any, smooth: bool | None = None, reference: Any = None) -> Comparison | str:
    try:
        with _on(torch, q.device):
            if smooth is None:
                out = fn(q, k, v, is_causal=False, scale=None)
            else:
                out = fn(q, k, v, is_causal=False, scale=None, smooth_k=smooth)
        if reference is None:
            reference = sdpa(q.float(), k.float(), v.float()).to(q.dtype)
        return compare(out, reference)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"[:300]


def _setting_label(smooth: bool | None) -> str:
    return "default" if smooth is None else f"smooth_k={smooth}"


def kernel_suite(fn: Callable[..., Any], spec: KernelSpec, sdpa: Callable[..., Any],
           cases: dict[str, tuple[Any, Any, Any, Any]], torch: Any,
           thresholds: Thresholds) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every case with every smooth_k setting: per setting each case's result, and per setting
    the worst case (lowest cosine; an error or NaN is worse than any number)."""
    suite: dict[str, Any] = {}
    worst: dict[str, Any] = {}
    for smooth in spec.settings():
        label = _setting_label(smooth)
        results = {name: _describe(_check(fn, sdpa, q, k, v, torch, smooth, ref), thresholds)
                   for name, (q, k, v, ref) in cases.items()}
        suite[label] = results
        name = min(results, key=lambda n: results[n].get("cosine", -2.0))
        worst[label] = {"case": name, **results[name]}
    return suite, worst


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
    q, k, v = accuracy_case(torch, device, dtype, check_shape, d, "gaussian")

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


def initial_lengths(grid: tuple[int, ...], apps: tuple[int, ...] = ()) -> list[int]:
    """What a sweep measures before bisecting: the grid's ends, the coarse lengths and the
    app lengths on it."""
    ordered = sorted(set(grid))
    if not ordered:
        return []
    return sorted({ordered[0], ordered[-1]} | {t for t in ordered if t in COARSE or t in apps})


class Bisection:
    """Which length to measure next: the initial ones, then the middle of the grid between two
    adjacent measured lengths whose decisions differ, until they are neighbours on the grid or
    within `ratio` of each other. Between two measured lengths that agree nothing more is
    measured: the router interpolates there."""

    def __init__(self, grid: tuple[int, ...], initial: list[int],
                 ratio: float = BRACKET_RATIO) -> None:
        self.grid = sorted(set(grid))
        self.queue = [t for t in sorted(set(initial)) if t in self.grid]
        self.decided: dict[int, bool] = {}
        self.ratio = ratio

    def record(self, tokens: int, route: bool) -> None:
        self.decided[tokens] = route

    def _gaps(self) -> list[tuple[int, int]]:
        """Grid indices of adjacent measured lengths that disagree with lengths between."""
        index = sorted(self.grid.index(t) for t in self.decided)
        grid = self.grid
        return [(a, b) for a, b in itertools.pairwise(index)
                if b - a > 1 and grid[b] > grid[a] * self.ratio
                and self.decided[grid[a]] != self.decided[grid[b]]]

    def next(self) -> int | None:
        while self.queue:
            tokens = self.queue.pop(0)
            if tokens not in self.decided:
                return tokens
        gaps = self._gaps()
        if not gaps:
            return None
        a, b = gaps[0]
        return self.grid[(a + b) // 2]

    def left(self) -> int:
        """An estimate of the lengths still to measure."""
        pending = sum(1 for t in self.queue if t not in self.decided)
        return pending + sum(max(1, math.ceil(math.log2(b - a))) for a, b in self._gaps())


class Progress:
    """One line per measured shape on stderr (or wherever `write` goes), with the shapes left
    (an estimate: bisection's plan grows as it finds crossovers) and the time left at the
    time per shape so far."""

    def __init__(self, write: Callable[[str], None] | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.write = write
        self.clock = clock
        self.started = clock()
        self.done = 0
        self.left: dict[str, int] = {}

    def plan(self, family: str, shapes: int) -> None:
        self.left[family] = shapes

    def shape(self, family: str, shape: str, left_in_family: int, what: str) -> None:
        self.done += 1
        self.left[family] = left_in_family
        left = sum(self.left.values())
        spent = self.clock() - self.started
        if self.write is not None:
            self.write(PROGRESS_PREFIX + json.dumps({
                "key": family, "shape": shape, "what": what, "done": self.done, "left": left,
                "spent_s": round(spent, 1), "left_s": round(spent / self.done * left, 1)}))


def driver_signature(proc_root: str = "/proc", system_root: str | None = None) -> str | None:
    """Which GPU driver is installed: the first line of /proc/driver/nvidia/version on Linux,
    the size and time of nvcuda.dll on Windows; None where neither is found."""
    try:
        with open(os.path.join(proc_root, "driver", "nvidia", "version"),
                  encoding="utf-8", errors="replace") as handle:
            line = handle.readline(500).strip()
        if line:
            return line
    except OSError:
        pass
    root = system_root if system_root is not None else os.environ.get("SYSTEMROOT")
    if root:
        try:
            found = os.stat(os.path.join(root, "System32", "nvcuda.dll"))
            return f"nvcuda.dll {found.st_size} {found.st_mtime_ns}"
        except OSError:
            return None
    return None


def kernel_inputs(fingerprint: dict[str, Any], torch_cuda: str | None,
                  driver: str | None) -> dict[str, str | None]:
    """What the kernels' speed depends on beyond the versions: the installed files of
    SageAttention, torch and Triton (their dist-info RECORD by stat), torch's CUDA and the
    driver. Two runs with equal inputs measure the same kernels on the same software."""
    stat = fingerprint.get("stat") or {}
    out: dict[str, str | None] = {
        name: json.dumps(stat.get(name)) if stat.get(name) is not None else None
        for name in ("sageattention", "torch", "triton", "triton-windows")}
    out["torch_cuda"] = torch_cuda
    out["driver"] = driver
    return out


def reuse_check(prior: Calibration | None, live: dict[str, str | None],
                fresh: bool) -> tuple[bool, str]:
    """Whether stored decisions may be kept after a sample agrees, and why (not)."""
    if fresh:
        return False, "--fresh: every shape decided anew"
    if prior is None or not any(g.decisions for g in prior.gpus.values()):
        return False, "no stored decisions for this build: every shape measured"
    if not prior.inputs:
        return False, "the stored decisions do not say what they were measured with"
    changed = sorted(k for k in set(prior.inputs) | set(live)
                     if prior.inputs.get(k) != live.get(k))
    if changed:
        return False, "changed since the stored decisions: " + ", ".join(changed)
    return True, "same SageAttention build, torch, GPU and driver as the stored decisions"


def family_points(earlier: dict[str, Decision], dtype: str, d: int, batch: int, heads: int,
                  kernel: str) -> dict[int, Decision]:
    """The stored verify decisions of one sweep family, by length."""
    bucket = bh_bucket(batch * heads)
    out = {}
    for key, decision in earlier.items():
        parsed = parse_shape_key(key)
        if parsed is None or decision.kernel != kernel or decision.source != "verify":
            continue
        p_dtype, p_d, p_bucket, q_len, kv_len, causal = parsed
        if (p_dtype, p_d, p_bucket) == (dtype, d, bucket) and q_len == kv_len and not causal:
            out[q_len] = decision
    return out


# A stored decision this clear settles in one paired sample when timed again (the short
# stage's first interval spans about +-4% on a GPU): a routed length whose lower bound is at
# least CLEAR_WIN, a kept one whose upper bound is at most CLEAR_LOSS.
CLEAR_WIN = 1.10
CLEAR_LOSS = 0.90


def reuse_sample(stored: dict[int, Decision]) -> list[int]:
    """The stored lengths a reusing verify times again: one routed and one kept, each the
    shortest (cheapest to time) of those decided clearly enough to settle in one paired
    sample, else the clearest on its side (the highest lower bound, the lowest upper bound).
    So the check that the GPU still behaves as measured costs a fraction of a second: the
    clearest win is often the longest length (Wan's 32760 tokens x 40 heads, about 40 ms a
    call on an H100), and a clear win at a shorter length proves as much. A close call (an
    app shape at the margin) would need the sustained stage and is kept, as `--fresh` is
    there to decide those anew."""
    routed = [t for t in stored if stored[t].route]
    kept = [t for t in stored if not stored[t].route]
    sample = set()
    if routed:
        clear = [t for t in routed if stored[t].low >= CLEAR_WIN]
        sample.add(min(clear) if clear else max(routed, key=lambda t: (stored[t].low, -t)))
    if kept:
        clear = [t for t in kept if stored[t].high <= CLEAR_LOSS]
        sample.add(min(clear) if clear else min(kept, key=lambda t: (stored[t].high, t)))
    return sorted(sample)


def run_selftest(registry: KernelRegistry | None = None, thresholds: Thresholds | None = None,
                 dtypes: tuple[str, ...] = ("bfloat16", "float16"),
                 head_dims: tuple[int, ...] = (64, 128), sweep: tuple[int, ...] = SWEEP,
                 settings: MeasureSettings = FULL, quick: bool = False,
                 prior: Calibration | None = None, fresh: bool = False,
                 progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """`prior`: the decisions an earlier run stored for this build; a shape it routed stays
    routed unless the kernel is now measurably slower (measure.decide), and where its kernel
    inputs are the live ones a sample is timed again and the rest kept."""
    began = time.perf_counter()
    import torch
    import torch.nn.functional as F

    registry = registry or default_registry()
    thresholds = thresholds or Thresholds.from_env()
    sdpa = F.scaled_dot_product_attention
    fingerprint = live_fingerprint()
    timing: dict[str, float] = {"import_torch_s": round(time.perf_counter() - began, 2),
                                "checks_s": 0.0, "sweep_s": 0.0}
    on_cpu = os.environ.get(DEVICE_ENV, "").strip() == "cpu"
    inputs = kernel_inputs(fingerprint, torch.version.cuda,
                           None if on_cpu else driver_signature())
    reuse, why = reuse_check(None if fresh else prior, inputs, fresh)
    report: dict[str, Any] = {
        "schema_version": SELFTEST_SCHEMA_VERSION,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "thresholds": {"min_cosine": thresholds.min_cosine, "max_rel_l2": thresholds.max_rel_l2},
        "measure": _measure_info(settings, quick, reuse, why,
                                 sum(len(g.decisions) for g in prior.gpus.values())
                                 if prior and not fresh else 0),
        "gpus": [],
        "fingerprint": fingerprint,
        "inputs": inputs,
        "timing": timing,
    }
    if fresh:
        prior = None
    _import_sageattention(report, timing)
    started = time.perf_counter()
    report["modules"] = _modules()
    timing["modules_s"] = round(time.perf_counter() - started, 2)
    if on_cpu:
        report["gpus"].append(_cpu_entry(torch, thresholds, sdpa, dtypes, head_dims,
                                         settings, report, progress))
        return report
    started = time.perf_counter()
    if not torch.cuda.is_available():
        report["error"] = "torch sees no CUDA GPU"
        return report
    count = torch.cuda.device_count()
    torch.empty(1, device="cuda")  # the CUDA context, timed on its own
    timing["cuda_init_s"] = round(time.perf_counter() - started, 2)
    tracker = Progress(progress)
    _plan_progress(tracker, count, dtypes, head_dims, sweep, quick, reuse)
    for index in range(count):
        device = torch.device("cuda", index)
        major, minor = torch.cuda.get_device_capability(device)
        uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
        gpu: dict[str, Any] = {"index": index, "name": torch.cuda.get_device_name(device),
                               "arch": f"{major}.{minor}", "uuid": str(uuid) if uuid else None,
                               "keys": []}
        gpu_id = gpu_identity(gpu["uuid"], gpu["name"], gpu["arch"], index)
        earlier = prior.gpus.get(gpu_id) if prior else None
        shapes = {d: SWEEP_SHAPES.get(d, ((1, 16),))[:1 if quick else None] for d in head_dims}
        sisters: dict[int, dict[tuple[int, int], tuple[str, str, dict[int, Decision]]]] = {}
        for dtype_name in dtypes:
            for d in head_dims:
                key = _test_key(
                    torch, registry, thresholds, sdpa, cuda_event_timer(torch, device), device,
                    (int(major), int(minor)), dtype_name, getattr(torch, dtype_name), d, sweep,
                    shapes[d], settings, earlier.decisions if earlier else {},
                    reuse=reuse and not quick, report=report, progress=tracker,
                    gpu_label=(index, count), sister=sisters.get(d))
                gpu["keys"].append(key)
                if not sisters.get(d):
                    sisters[d] = sister_families(key)
        report["gpus"].append(gpu)
    timing["selftest_s"] = round(time.perf_counter() - began, 2)
    return report


def _measure_info(settings: MeasureSettings, quick: bool, reuse: bool, why: str,
                  prior_decisions: int) -> dict[str, Any]:
    """The report's account of the method, with the reuse and sister counters it fills."""
    return {"method": "cuda-events behind a host-lead spin, paired rounds with sequential "
                      "stopping; sustained blocks decide short intervals that reach into the "
                      "sustain band; bisection of the crossover",
            "margin": settings.margin, "confidence": settings.confidence,
            "noise_floor": settings.noise_floor, "max_rounds": settings.max_rounds,
            "quick": quick, "sustain_band": list(settings.sustain_band),
            "sustain_s": settings.sustain_s, "prior_decisions": prior_decisions,
            "reuse": {"allowed": reuse, "why": why, "kept": 0, "timed": 0,
                      "families_remeasured": []},
            # families of the second dtype that took the first's decisions
            "sister": {"kept": 0, "timed": 0, "families": [], "families_remeasured": []}}


def _import_sageattention(report: dict[str, Any], timing: dict[str, float]) -> None:
    """SageAttention's version and whether it imports (the error, cut short, if not)."""
    try:
        from importlib import metadata

        report["sageattention"] = metadata.version("sageattention")
    except Exception:
        report["sageattention"] = None
    try:
        started = time.perf_counter()
        import sageattention  # noqa: F401

        report["import"] = "ok"
        timing["import_sageattention_s"] = round(time.perf_counter() - started, 2)
    except Exception as exc:
        report["import"] = f"{type(exc).__name__}: {exc}"[:300]


def _plan_progress(tracker: Progress, count: int, dtypes: tuple[str, ...],
                   head_dims: tuple[int, ...], sweep: tuple[int, ...], quick: bool,
                   reuse: bool) -> None:
    """The shapes each family is expected to time, for the progress lines' estimate."""
    for index in range(count):
        for dtype_name in dtypes:
            for d in head_dims:
                for batch, heads in SWEEP_SHAPES.get(d, ((1, 16),))[:1 if quick else None]:
                    apps = APP_LENGTHS.get((dtype_name, d, batch, heads), ())
                    # Reusing (or borrowing the first dtype's decisions), a family re-times its
                    # two sample lengths (more if they disagree).
                    expected = (2 if (reuse or dtype_name != dtypes[0]) and not quick
                                else len(initial_lengths(sweep, apps)) + (0 if quick else 2))
                    tracker.plan(_family_label(dtype_name, d, batch, heads, index, count),
                                 expected)


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
               settings: MeasureSettings, report: dict[str, Any],
               progress: Callable[[str], None] | None) -> dict[str, Any]:
    device = torch.device("cpu")
    registry = _cpu_registry()
    timer = perf_counter_timer(lambda: None)
    settings = settings.for_device("cpu")
    gpu: dict[str, Any] = {"index": 0, "name": "cpu", "arch": "0.0", "uuid": None, "keys": []}
    tracker = Progress(progress)
    for dtype_name in dtypes:
        for d in head_dims:
            for batch, heads in CPU_SHAPES:
                tracker.plan(_family_label(dtype_name, d, batch, heads, 0, 1), len(CPU_SWEEP))
    for dtype_name in dtypes:
        for d in head_dims:
            gpu["keys"].append(_test_key(torch, registry, thresholds, sdpa, timer, device,
                                         (0, 0), dtype_name, getattr(torch, dtype_name), d,
                                         CPU_SWEEP, CPU_SHAPES, settings, {}, "cpu",
                                         CPU_CHECK_SHAPE, reuse=False, report=report,
                                         progress=tracker))
    return gpu


def _point(batch: int, heads: int, tokens: int, result: SpeedResult, prior: bool | None,
           ) -> dict[str, Any]:
    return {"batch": batch, "heads": heads, "tokens": tokens,
            "kernel_ms": round(result.kernel_s * 1e3, 4),
            "sdpa_ms": round(result.sdpa_s * 1e3, 4), "speedup": round(result.speedup, 4),
            "low": round(result.low, 4), "high": round(result.high, 4),
            "rounds": result.rounds, "route": result.route, "decision": result.decision,
            "settled": result.settled, "prior": prior, "sustained": result.short is not None,
            "short": None if result.short is None else round(result.short, 4),
            "spent_ms": round(result.spent_s * 1e3, 1), "stopped": result.stopped,
            "reused": False}


def _kept_point(batch: int, heads: int, tokens: int, decision: Decision) -> dict[str, Any]:
    return {"batch": batch, "heads": heads, "tokens": tokens, "speedup": decision.speedup,
            "low": decision.low, "high": decision.high, "rounds": decision.rounds,
            "route": decision.route, "decision": "kernel" if decision.route else "sdpa",
            "reused": True, "measured_at": decision.measured_at}


def _kernel_entry(registry: KernelRegistry, spec: KernelSpec, sdpa: Callable[..., Any],
                  cases: dict[str, tuple[Any, Any, Any, Any]], torch: Any,
                  thresholds: Thresholds) -> tuple[dict[str, Any], Callable[..., Any] | None]:
    """One kernel's report entry on the accuracy suite, and the kernel (None: it failed to
    load)."""
    entry: dict[str, Any] = {"name": spec.name, "label": spec.label}
    try:
        fn = registry.load(spec)
    except Exception as exc:
        entry.update(passed=False, error=f"{type(exc).__name__}: {exc}"[:300])
        return entry, None
    suite, worst = kernel_suite(fn, spec, sdpa, cases, torch, thresholds)
    labels = list(suite)
    # The stated setting first; the other where only it passes the Gaussian case (the
    # router's checks try both in the same order).
    setting = next((label for label in labels if suite[label]["gaussian"]["passed"]),
                   labels[0])
    entry["smooth_k"] = spec.smooth_k
    entry["setting"] = setting
    entry["normal"] = suite[setting]["gaussian"]
    entry["outlier"] = suite[setting]["shared_k_offset"]
    entry["suite"] = suite
    entry["worst"] = worst
    # The router decides on the call's own inputs; outliers are reported, not required.
    entry["passed"] = entry["normal"]["passed"]
    return entry, fn


def _test_key(torch: Any, registry: KernelRegistry, thresholds: Thresholds,
              sdpa: Callable[..., Any], timer: Any, device: Any,
              arch: tuple[int, int], dtype_name: str, dtype: Any, d: int,
              sweep: tuple[int, ...], shapes: tuple[tuple[int, int], ...],
              settings: MeasureSettings, earlier: dict[str, Any], device_type: str = "cuda",
              check_shape: tuple[int, int, int] = CHECK_SHAPE, *, reuse: bool = False,
              report: dict[str, Any] | None = None, progress: Progress | None = None,
              gpu_label: tuple[int, int] = (0, 1),
              sister: dict[tuple[int, int], tuple[str, str, dict[int, Decision]]] | None = None,
              ) -> dict[str, Any]:
    checks_began = time.perf_counter()
    key: dict[str, Any] = {"dtype": dtype_name, "head_dim": d, "kernels": [], "chosen": None,
                           "sweep": [], "crossover": None,
                           "sageattn_auto": _sageattn_auto(torch, device, arch, dtype, d,
                                                           thresholds, sdpa, check_shape)}
    cases = {}
    for i, name in enumerate(ACCURACY_CASES):
        q, k, v = accuracy_case(torch, device, dtype, check_shape, d, name, seed=i)
        with _on(torch, device):
            reference = sdpa(q.float(), k.float(), v.float()).to(dtype)  # once, for all kernels
        cases[name] = (q, k, v, reference)
    chosen: tuple[KernelSpec, Callable[..., Any]] | None = None
    candidates = list(registry.candidates(device_type, arch, dtype_name, d))
    stored_kernel = _stored_kernel(earlier, dtype_name, d) if reuse else None
    if stored_kernel in {c.name for c in candidates}:
        # Reusing: the kernel the stored decisions were measured with is checked again
        # first; passing, it is chosen as before (the same build fails the same kernels),
        # and the others are not run again. Failing, every kernel is checked.
        first = [c for c in candidates if c.name == stored_kernel]
        candidates = first + [c for c in candidates if c.name != stored_kernel]
    for spec in candidates:
        if chosen is not None and stored_kernel is not None:
            key.setdefault("kernels_not_rechecked", []).append(spec.name)
            continue
        entry, fn = _kernel_entry(registry, spec, sdpa, cases, torch, thresholds)
        key["kernels"].append(entry)
        if entry["passed"] and chosen is None and fn is not None:
            chosen = (spec, fn)
            key["chosen"] = spec.name
    timing = (report or {}).get("timing")
    if isinstance(timing, dict):
        timing["checks_s"] = round(timing.get("checks_s", 0.0)
                                   + time.perf_counter() - checks_began, 2)
    if chosen is None:
        return key
    spec, fn = chosen
    sweep_began = time.perf_counter()
    reuse_info = (report or {}).get("measure", {}).get("reuse", {})
    sister_info = (report or {}).get("measure", {}).get("sister", {})
    crossovers: dict[str, int | None] = {}
    for batch, heads in shapes:
        label = _family_label(dtype_name, d, batch, heads, *gpu_label)

        def measure(tokens: int, batch: int = batch, heads: int = heads) -> dict[str, Any]:
            q, k, v = accuracy_case(torch, device, dtype, (batch, heads, tokens), d,
                                    "gaussian")
            before = earlier.get(shape_key(dtype_name, d, batch * heads, tokens, tokens, False))
            prior = before.route if before is not None and before.kernel == spec.name else None
            with _on(torch, device):
                result = measure_pair(partial(fn, q, k, v, is_causal=False, scale=None),
                                      partial(sdpa, q, k, v), timer, settings, prior)
            del q, k, v
            return _point(batch, heads, tokens, result, prior)

        def tick(tokens: int, left: int, what: str, batch: int = batch, heads: int = heads,
                 label: str = label) -> None:
            if progress is not None:
                progress.shape(label, f"{batch}x{heads}x{tokens}", left, what)

        apps = APP_LENGTHS.get((dtype_name, d, batch, heads), ())
        points = _family(measure, tick, sweep, apps,
                         family_points(earlier, dtype_name, d, batch, heads, spec.name)
                         if reuse else {}, batch, heads, reuse_info, label,
                         sister=sister_for(sister, batch, heads, spec.name),
                         sister_info=sister_info)
        key["sweep"].extend(points)
        crossovers[f"{batch}x{heads}"] = crossover([(p["tokens"], p["route"]) for p in points])
    key["crossovers"] = crossovers
    key["crossover"] = next(iter(crossovers.values()), None)
    if isinstance(timing, dict):
        timing["sweep_s"] = round(timing.get("sweep_s", 0.0)
                                  + time.perf_counter() - sweep_began, 2)
    return key


def sister_families(key: dict[str, Any]) -> dict[tuple[int, int], tuple[str, str,
                                                                         dict[int, Decision]]]:
    """A measured key's families as a sister dtype borrows them: (batch, heads) -> (dtype,
    kernel, decision by length)."""
    out: dict[tuple[int, int], tuple[str, str, dict[int, Decision]]] = {}
    kernel = key.get("chosen")
    if not kernel:
        return out
    for p in key.get("sweep", []):
        family = out.setdefault((int(p["batch"]), int(p["heads"])),
                                (str(key["dtype"]), str(kernel), {}))
        family[2][int(p["tokens"])] = Decision(
            route=bool(p["route"]), kernel=str(kernel), speedup=float(p["speedup"]),
            low=float(p.get("low", p["speedup"])), high=float(p.get("high", p["speedup"])),
            rounds=int(p.get("rounds", 0)), source="verify")
    return out


def sister_for(sister: dict[tuple[int, int], tuple[str, str, dict[int, Decision]]] | None,
               batch: int, heads: int, kernel: str) -> tuple[str, dict[int, Decision]] | None:
    """The sister dtype's decisions for this family, where they were measured with the same
    kernel (another kernel's speed says nothing about this one's)."""
    found = (sister or {}).get((batch, heads))
    if found is None or found[1] != kernel or not found[2]:
        return None
    return found[0], found[2]


def _stored_kernel(earlier: dict[str, Decision], dtype: str, d: int) -> str | None:
    """The kernel the stored verify decisions of this dtype and head size were measured with."""
    names = {decision.kernel for key, decision in earlier.items()
             if decision.source == "verify" and (parsed := parse_shape_key(key)) is not None
             and parsed[:2] == (dtype, d)}
    return names.pop() if len(names) == 1 else None


def _family_label(dtype: str, d: int, batch: int, heads: int, index: int, count: int) -> str:
    return f"{dtype} D{d} {batch}x{heads}" + (f" on GPU {index}" if count > 1 else "")


def _sampled(measure: Callable[[int], dict[str, Any]], tick: Callable[[int, int, str], None],
             decisions: dict[int, Decision], what: str,
             info: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
    """reuse_sample's lengths of `decisions` timed now, and whether each agrees."""
    sample = reuse_sample(decisions)
    timed = []
    for i, tokens in enumerate(sample):
        timed.append(measure(tokens))
        tick(tokens, len(sample) - i - 1, what)
    info["timed"] = info.get("timed", 0) + len(timed)
    return timed, all(p["route"] == decisions[p["tokens"]].route for p in timed)


def _family(measure: Callable[[int], dict[str, Any]], tick: Callable[[int, int, str], None],
            sweep: tuple[int, ...], apps: tuple[int, ...], stored: dict[int, Decision],
            batch: int, heads: int, reuse_info: dict[str, Any],
            label: str, *, sister: tuple[str, dict[int, Decision]] | None = None,
            sister_info: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One (dtype, head size, batch x heads) family's points: a sample of the stored ones
    timed again and the rest kept where the sample agrees; else, with nothing stored, the
    sister dtype's decisions (its dtype and points by length) after the same sample agrees;
    else bisection from scratch."""
    timed: list[dict[str, Any]] = []
    if stored:
        timed, agree = _sampled(measure, tick, stored, "re-timed", reuse_info)
        if agree:
            reuse_info["kept"] = reuse_info.get("kept", 0) + len(stored) - len(timed)
            again = {p["tokens"] for p in timed}
            kept = [_kept_point(batch, heads, t, stored[t]) for t in sorted(stored)
                    if t not in again]
            return sorted(timed + kept, key=lambda p: int(p["tokens"]))
        reuse_info.setdefault("families_remeasured", []).append(label)
    elif sister is not None and sister[1]:
        info = sister_info if sister_info is not None else {}
        dtype, decisions = sister
        timed, agree = _sampled(measure, tick, decisions, f"checked against {dtype}", info)
        if agree:
            info["kept"] = info.get("kept", 0) + len(decisions) - len(timed)
            info.setdefault("families", []).append(label)
            again = {p["tokens"] for p in timed}
            taken = [{**_kept_point(batch, heads, t, decisions[t]), "reused": False,
                      "borrowed": dtype} for t in sorted(decisions) if t not in again]
            return sorted(timed + taken, key=lambda p: int(p["tokens"]))
        info.setdefault("families_remeasured", []).append(label)
    plan = Bisection(sweep, initial_lengths(sweep, apps))
    points = [p for p in timed if p["tokens"] in plan.grid]  # a sample's points count
    for point in points:
        plan.record(int(point["tokens"]), bool(point["route"]))
    while (length := plan.next()) is not None:
        point = measure(length)
        plan.record(length, bool(point["route"]))
        points.append(point)
        tick(length, plan.left(), "measured")
    return sorted(points, key=lambda p: int(p["tokens"]))


def main(argv: list[str] | None = None) -> int:
    from .bytecode import cache_bytecode

    cache_bytecode()  # before torch is imported (see bytecode.py)
    parser = argparse.ArgumentParser(prog="selftest")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="a short sweep")
    parser.add_argument("--fresh", action="store_true",
                        help="ignore the decisions earlier runs stored for this build")
    parser.add_argument("--progress", action="store_true",
                        help="a line per measured shape on stderr")
    args = parser.parse_args(argv)
    settings = (QUICK if args.quick else FULL).with_env()
    prior = None
    if not args.fresh:
        from .router import calibration_path, load_current_calibration

        prior = load_current_calibration(calibration_path())

    def to_stderr(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    report = run_selftest(sweep=QUICK_SWEEP if args.quick else SWEEP, settings=settings,
                          quick=args.quick, prior=prior, fresh=args.fresh,
                          progress=to_stderr if args.progress else None)
    text = json.dumps(report) if args.json else json.dumps(report, indent=2)
    token = os.environ.get("SAGEDOCTOR_ANSWER_TOKEN", "")
    if not token:
        print(text)
        return 0
    # sagedoctor's verify: the report between two copies of its token, straight to fd 1, so
    # what the venv's start-up or atexit hooks print stays outside it (target_answer.py)
    sys.stdout.flush()
    payload = (token + text + token + "\n").encode("utf-8")
    while payload:
        payload = payload[os.write(1, payload):]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
