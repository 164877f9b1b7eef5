"""Timing a kernel against SDPA side by side, and deciding whether the kernel is worth it.

The method (docs/measurement.md): each sample times `inner` back-to-back calls between two
CUDA events (short calls are repeated until a sample lasts about a millisecond); warm-up runs
both paths alternately until two successive samples of each agree; then paired rounds time
both paths, kernel first in even rounds and SDPA first in odd ones, so clock ramps and cache
state fall on both alike. Each round gives one speed-up, SDPA time over kernel time. A route
needs the rounds' lower quartile to clear the margin (1.03 by default), so the median beats it
by at least the spread below it: a kernel that only ties SDPA within the noise is not used, and
a decision near the line does not flip between runs. SDPA is kept when the upper quartile is
below the margin. In between the result is undecided and gets more rounds, up to a bound;
still undecided, it stays on SDPA. A shape routed by an earlier run of the same build on the
same GPU stays routed unless the kernel is now measurably slower (upper quartile below 1), and
one it kept on SDPA needs the margin twice over (1.06) to be routed: hysteresis, so that a
shape at the line does not flip between runs.

A GPU at its power limit (an H200 at 700 W in any sustained attention or matmul load) sets
its clock by what the running kernel draws, and SageAttention's 8-bit kernels draw less than
SDPA's bf16 ones: once one path runs alone for a tenth of a second or more it gets a higher
clock than the other. Short interleaved samples hide that (both paths run at the clock of the
mix), and a denoising loop does not: on the H200 at 9728 tokens (FLUX at 1536x1536) the kernel
measured 0.95x SDPA in 2 ms samples, 1.05-1.11x in blocks of 120-300 ms and 1.07x inside a
FLUX-like block loop of matmuls and attention. So a shape whose short result lies near 1 (the
sustained band) is decided by a second, sustained stage: paired blocks of each path alone,
0.16 s each, timed after their first 80 ms, when the clock has followed the kernel.

Each CUDA sample starts behind a short GPU spin as long as the host needs to issue one call, so
the host's launch overhead overlaps GPU work, as it does in a denoising loop that keeps the GPU
busy; timing a lone call from an idle queue would charge SageAttention's Python-side
quantisation launches to the kernel.

Standard library only: the timer is passed in (CUDA events on a GPU, a fake one in tests).
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

DEFAULT_MARGIN = 1.03
MARGIN_ENV = "SAGEDOCTOR_ROUTE_MARGIN"

# seconds for `inner` back-to-back calls of fn
Timer = Callable[[Callable[[], Any], int], float]


@dataclass(frozen=True)
class MeasureSettings:
    rounds: int = 10  # paired rounds before a first decision
    max_rounds: int = 24  # an undecided result gets more rounds, up to this
    warmup_min: int = 2  # samples of each path, at least
    warmup_max: int = 12
    settle: float = 0.03  # warm-up ends when successive samples agree within 3%
    sample_s: float = 1e-3  # a sample repeats short calls until it lasts about this long
    max_inner: int = 32
    margin: float = DEFAULT_MARGIN
    # The sustained stage, for short medians inside the band (0 seconds turns it off): each
    # block runs one path alone for sustain_lead_s untimed, then sustain_s timed.
    sustain_band: tuple[float, float] = (0.88, 1.12)
    sustain_s: float = 0.08
    sustain_lead_s: float = 0.08
    # paired rounds before a first decision (fewer give quartiles that hide the spread), then
    # 2 more at a time
    sustain_rounds: int = 4
    sustain_max_rounds: int = 8
    sustain_max_inner: int = 20_000

    def for_device(self, device_type: str) -> MeasureSettings:
        """Only a GPU clocks each kernel by its power draw: elsewhere no sustained stage."""
        return self if device_type == "cuda" else replace(self, sustain_s=0.0)

    def with_env(self, environ: Any = None) -> MeasureSettings:
        """SAGEDOCTOR_ROUTE_MARGIN (a speed-up such as 1.05) overrides the margin."""
        raw = (os.environ if environ is None else environ).get(MARGIN_ENV, "")
        try:
            value = float(raw)
        except ValueError:
            return self
        return replace(self, margin=value) if math.isfinite(value) and value > 0 else self


FULL = MeasureSettings()
QUICK = MeasureSettings(rounds=4, max_rounds=8, warmup_max=6, sustain_max_rounds=6)
# In an app's own first calls of a shape: bounded, since the user waits for it (a sustained
# stage adds 1.3 to 2 s once per shape, for shapes a diffusion run repeats thousands of times).
LIVE = MeasureSettings(rounds=6, max_rounds=12, warmup_max=6, sustain_max_rounds=6)


@dataclass(frozen=True)
class SpeedResult:
    speedup: float  # median of the paired rounds' SDPA time / kernel time
    low: float  # lower quartile of those ratios
    high: float  # upper quartile
    kernel_s: float  # median time of one kernel call
    sdpa_s: float
    rounds: int
    margin: float
    settled: bool  # the warm-up converged before its bound
    prior: bool | None = None  # the decision of an earlier run of this build, if any
    short: float | None = None  # the short stage's median, where the sustained stage decided

    @property
    def spread(self) -> float:
        return (self.high - self.low) / 2

    @property
    def route(self) -> bool:
        return decide(self.low, self.high, self.margin, self.prior) == "kernel"


def decide(low: float, high: float, margin: float, prior: bool | None = None) -> str:
    """'kernel', 'sdpa' or 'undecided' for the quartiles of the paired speed-ups. A shape
    decided before (`prior`) keeps its decision unless the new rounds clear a band around the
    margin: a routed one leaves when the kernel is measurably slower (upper quartile below 1),
    one kept on SDPA is routed when the lower quartile clears the margin by as much again."""
    if prior is True:
        return "sdpa" if high < 1.0 else "kernel"
    if prior is False:
        margin = 2 * margin - 1
    if low >= margin:
        return "kernel"
    if high < margin:
        return "sdpa"
    return "undecided"


def quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) == 1:
        return values[0], values[0], values[0]
    low, mid, high = statistics.quantiles(values, n=4, method="inclusive")
    return low, mid, high


def inner_calls(one_call_s: float, settings: MeasureSettings) -> int:
    if not one_call_s > 0:
        return settings.max_inner
    return max(1, min(settings.max_inner, math.ceil(settings.sample_s / one_call_s)))


def _settled(samples: list[float], tolerance: float) -> bool:
    if len(samples) < 2:
        return False
    a, b = samples[-2], samples[-1]
    return abs(a - b) <= tolerance * max(a, b)


def in_sustain_band(speedup: float, settings: MeasureSettings) -> bool:
    low, high = settings.sustain_band
    return settings.sustain_s > 0 and low <= speedup <= high


def sustained_calls(window_s: float, one_call_s: float, settings: MeasureSettings) -> int:
    if not one_call_s > 0:
        return settings.sustain_max_inner
    return max(1, min(settings.sustain_max_inner, math.ceil(window_s / one_call_s)))


def _paired(kernel: Callable[[], Any], sdpa: Callable[[], Any],
            sample: Callable[[Callable[[], Any], str], float], rounds: int, max_rounds: int,
            margin: float, prior: bool | None, stop: Callable[[float], bool] = lambda _: False,
            ) -> tuple[list[float], list[float], list[float]]:
    """Paired rounds, kernel first in even rounds and SDPA first in odd ones: `rounds` of
    them, then more in pairs while undecided, up to max_rounds (none where `stop` says so of
    the first rounds' median). Returns per-call kernel times, SDPA times and their ratios."""
    kernel_t: list[float] = []
    sdpa_t: list[float] = []
    ratios: list[float] = []

    def one_round() -> None:
        if len(ratios) % 2 == 0:
            k, s = sample(kernel, "kernel"), sample(sdpa, "sdpa")
        else:
            s, k = sample(sdpa, "sdpa"), sample(kernel, "kernel")
        kernel_t.append(k)
        sdpa_t.append(s)
        ratios.append(s / k if k > 0 else math.inf)

    for _ in range(max(1, rounds)):
        one_round()
    if stop(quartiles(ratios)[1]):
        return kernel_t, sdpa_t, ratios
    while len(ratios) < max_rounds:
        low, _mid, high = quartiles(ratios)
        if decide(low, high, margin, prior) != "undecided":
            break
        one_round()
        one_round()  # in pairs: each order as often as the other
    return kernel_t, sdpa_t, ratios


def measure_pair(kernel: Callable[[], Any], sdpa: Callable[[], Any], timer: Timer,
                 settings: MeasureSettings = FULL, prior: bool | None = None) -> SpeedResult:
    """Time `kernel` against `sdpa` (both already checked correct) and decide; `prior` is
    an earlier run's decision for this shape (same build and GPU), or None. Short paired
    samples first; a result near 1 is decided by the sustained stage instead."""
    inner = inner_calls(min(timer(kernel, 1), timer(sdpa, 1)), settings)
    kernel_warm: list[float] = []
    sdpa_warm: list[float] = []
    while len(kernel_warm) < settings.warmup_max:
        kernel_warm.append(timer(kernel, inner))
        sdpa_warm.append(timer(sdpa, inner))
        if len(kernel_warm) >= settings.warmup_min and _settled(kernel_warm, settings.settle) \
                and _settled(sdpa_warm, settings.settle):
            break
    settled = _settled(kernel_warm, settings.settle) and _settled(sdpa_warm, settings.settle)
    # The short stage. Where its first rounds put the speed-up near 1 they only screen: the
    # sustained stage decides.
    kernel_t, sdpa_t, ratios = _paired(
        kernel, sdpa, lambda fn, _path: timer(fn, inner) / inner, settings.rounds,
        settings.max_rounds, settings.margin, prior,
        stop=lambda median: in_sustain_band(median, settings))
    low, mid, high = quartiles(ratios)
    if in_sustain_band(mid, settings):
        return _sustained(kernel, sdpa, timer, settings, prior, mid, settled,
                          statistics.median(kernel_t), statistics.median(sdpa_t))
    return SpeedResult(speedup=mid, low=low, high=high, kernel_s=statistics.median(kernel_t),
                       sdpa_s=statistics.median(sdpa_t), rounds=len(ratios),
                       margin=settings.margin, settled=settled, prior=prior)


def _sustained(kernel: Callable[[], Any], sdpa: Callable[[], Any], timer: Timer,
               settings: MeasureSettings, prior: bool | None, short: float, settled: bool,
               kernel_call_s: float, sdpa_call_s: float) -> SpeedResult:
    """Paired blocks of one path alone: `lead` untimed calls, then `inner` timed ones, so the
    timed part runs at the clock the power limit allows that kernel."""
    calls = {"kernel": (sustained_calls(settings.sustain_lead_s, kernel_call_s, settings),
                        sustained_calls(settings.sustain_s, kernel_call_s, settings)),
             "sdpa": (sustained_calls(settings.sustain_lead_s, sdpa_call_s, settings),
                      sustained_calls(settings.sustain_s, sdpa_call_s, settings))}

    def block(fn: Callable[[], Any], path: str) -> float:
        lead, inner = calls[path]
        for _ in range(lead):
            fn()
        return timer(fn, inner) / inner

    kernel_t, sdpa_t, ratios = _paired(kernel, sdpa, block, settings.sustain_rounds,
                                       settings.sustain_max_rounds, settings.margin, prior)
    low, mid, high = quartiles(ratios)
    return SpeedResult(speedup=mid, low=low, high=high, kernel_s=statistics.median(kernel_t),
                       sdpa_s=statistics.median(sdpa_t), rounds=len(ratios),
                       margin=settings.margin, settled=settled, prior=prior, short=short)


def perf_counter_timer(sync: Callable[[], None]) -> Timer:
    """Wall-clock samples for devices without events (the CPU); `sync` waits for the device."""

    def timer(fn: Callable[[], Any], inner: int) -> float:
        sync()
        started = time.perf_counter()
        for _ in range(inner):
            fn()
        sync()
        return time.perf_counter() - started

    return timer


MAX_LEAD_S = 0.02  # a spin ahead of a sample never longer than this
DEFAULT_CYCLES_PER_S = 1.5e9
_CYCLES_PER_S: dict[str, float] = {}  # per device, measured once per process


def gpu_cycles_per_s(torch: Any, spin: Callable[[int], Any]) -> float:
    """How many cycles of torch.cuda._sleep make a second on this GPU (about its clock)."""
    spin(100_000)  # wakes the clocks
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    cycles = 2_000_000
    start.record()
    spin(cycles)
    end.record()
    end.synchronize()
    elapsed = float(start.elapsed_time(end)) / 1e3
    return cycles / elapsed if elapsed > 0 else DEFAULT_CYCLES_PER_S


def lead_for(host_s: float) -> float:
    """The spin ahead of a sample: a little more than the host needs to issue one call."""
    return min(MAX_LEAD_S, 1.2 * max(0.0, host_s) + 20e-6)


def cuda_event_timer(torch: Any, device: Any) -> Timer:
    """Samples between two CUDA events on the device's current stream: what the GPU spent,
    without the host's scheduling noise. Each sample starts behind a GPU spin as long as the
    host took to issue one call of that function last time, so its launches overlap GPU work
    as they do in a busy denoising loop (without the spin, a lone call's Python-side launch
    overhead would be counted as GPU time)."""
    spin = getattr(torch.cuda, "_sleep", None)
    host_per_call: dict[int, float] = {}

    def timer(fn: Callable[[], Any], inner: int) -> float:
        with torch.cuda.device(device):
            if spin is not None and str(device) not in _CYCLES_PER_S:
                _CYCLES_PER_S[str(device)] = gpu_cycles_per_s(torch, spin)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            known = host_per_call.get(id(fn))
            if spin is not None and known is not None:
                spin(int(lead_for(known) * _CYCLES_PER_S[str(device)]))
            start.record()
            issued = time.perf_counter()
            for _ in range(inner):
                fn()
            if len(host_per_call) > 256:
                host_per_call.clear()
            host_per_call[id(fn)] = (time.perf_counter() - issued) / max(1, inner)
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end)) / 1e3

    return timer


def timer_for(tensor: Any) -> Timer:
    if tensor.device.type == "cuda":
        import torch

        return cuda_event_timer(torch, tensor.device)
    return perf_counter_timer(lambda: None)
