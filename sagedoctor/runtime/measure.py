"""Timing a kernel against SDPA side by side, and deciding whether the kernel is worth it,
with as little GPU time as the decision needs.

The method (docs/measurement.md): each sample times `inner` back-to-back calls between two
CUDA events (short calls are repeated until a sample lasts about a millisecond); warm-up runs
both paths alternately until two successive samples of each agree; then paired rounds time
both paths, kernel first in even rounds and SDPA first in odd ones, so clock ramps and cache
state fall on both alike. Each round gives one speed-up, SDPA time over kernel time.

Sequential stopping: after every pair of rounds, a confidence interval for the speed-up (the
mean of the rounds' log speed-ups, its spread never taken below a noise floor, the normal
quantile Bonferroni-split over every look the stage may take, so the whole stage holds at
`confidence`) is compared with the thresholds, and sampling stops as soon as the interval
clears them. A clear win or loss stops after its first paired sample (one round of each order).

A GPU at its power limit (an H200 at 700 W in any sustained attention or matmul load) sets
its clock by what the running kernel draws, and SageAttention's 8-bit kernels draw less than
SDPA's bf16 ones: once one path runs alone for a tenth of a second or more it gets a higher
clock than the other. Short interleaved samples hide that (on the H200 at 9728 tokens: 0.95x
SDPA in 2 ms samples, 1.05-1.11x in blocks of 120-300 ms, 1.07x inside a FLUX-like block loop).
The sustained clock only ever lifted the kernel (0.73-0.77 at 4608 tokens by every method,
0.95 -> 1.07 at 9728, 1.05 -> 1.17 at 16896). So on a GPU a short interval wholly above the
margin is a win, one wholly below the sustain band's floor (0.88) a loss, and only an interval
reaching between the two goes to the second, sustained stage (paired blocks of each path
alone, timed after their first 80 ms), which decides against the margin with the same
sequential rule. Off the GPU the short stage decides against the margin itself.

The decision: route when the interval's lower bound is at least the margin (1.03), keep SDPA
when its upper bound is below it; still straddling at the stage's bound, the estimate decides:
the kernel when the speed-up itself is at least the margin, else SDPA (for a shape without an
earlier decision; the margin is what a straddling estimate must clear). A shape
routed by an earlier run of the same build on the same GPU stays routed unless the kernel is
now measurably slower (upper bound below 1), and one kept on SDPA needs the margin twice over
(1.06): hysteresis, so that a shape at the line does not flip between runs.

Each CUDA sample starts behind a short GPU spin as long as the host needs to issue one call, so
the host's launch overhead overlaps GPU work, as it does in a denoising loop that keeps the GPU
busy; timing a lone call from an idle queue would charge SageAttention's Python-side
quantisation launches to the kernel.

Standard library only: the timer is passed in (CUDA events on a GPU, a fake one in tests), and
so is the clock that bounds a measurement's wall time (`budget_s`, for the app's live timing).
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
Clock = Callable[[], float]


@dataclass(frozen=True)
class MeasureSettings:
    min_rounds: int = 2  # one paired sample: a round of each order
    max_rounds: int = 12  # the short stage's bound
    warmup_min: int = 2  # samples of each path, at least
    warmup_max: int = 12
    settle: float = 0.03  # warm-up ends when successive samples agree within 3%
    sample_s: float = 1e-3  # a sample repeats short calls until it lasts about this long
    max_inner: int = 32
    margin: float = DEFAULT_MARGIN
    # The chance that a decision's interval holds, for the whole of one stage (every look).
    confidence: float = 0.99
    # The per-round spread of log speed-ups assumed at least: two or three rounds cannot
    # estimate it, and event-timed rounds on a settled GPU vary by about 1% (H200).
    noise_floor: float = 0.015
    # The sustained stage, for short intervals that reach between the band's floor and the
    # margin (0 seconds turns it off): each block runs one path alone for sustain_lead_s
    # untimed, then sustain_s timed. (The band's top is no longer used: a short win stands.)
    sustain_band: tuple[float, float] = (0.88, 1.12)
    sustain_s: float = 0.08
    sustain_lead_s: float = 0.08
    sustain_min_rounds: int = 2
    sustain_max_rounds: int = 6
    sustain_max_inner: int = 20_000
    budget_s: float = 0.0  # wall time one measurement may take (0: unbounded)

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


# verify's sweep: a point still undecided after 4 sustained rounds (1.3 s) lies within a few
# percent of the margin, where keeping SDPA costs little; 6 rounds made verify 50 s on an H100.
FULL = MeasureSettings(sustain_max_rounds=4)
QUICK = MeasureSettings(max_rounds=8, warmup_max=6, sustain_max_rounds=6)
# In an app's own first calls of a shape: the user waits for it, so at most about 0.25 s,
# short samples only (a sustained stage alone needs 0.64 s); a shape the short samples cannot
# settle stays on SDPA.
LIVE = MeasureSettings(max_rounds=8, warmup_max=4, sustain_s=0.0, budget_s=0.25)


@dataclass(frozen=True)
class SpeedResult:
    speedup: float  # the rounds' geometric mean of SDPA time / kernel time
    low: float  # the confidence interval's bounds
    high: float
    kernel_s: float  # median time of one kernel call
    sdpa_s: float
    rounds: int
    margin: float
    settled: bool  # the warm-up converged before its bound
    prior: bool | None = None  # the decision of an earlier run of this build, if any
    short: float | None = None  # the short stage's speed-up, where the sustained stage decided
    decision: str = "sdpa"  # 'kernel', 'sdpa', or 'undecided' (SDPA kept)
    spent_s: float = 0.0  # wall time the measurement took
    stopped: str = ""  # why sampling stopped: 'decided', 'bound' or 'budget'

    @property
    def spread(self) -> float:
        return (self.high - self.low) / 2

    @property
    def route(self) -> bool:
        return self.decision == "kernel"


def decide(low: float, high: float, margin: float, prior: bool | None = None) -> str:
    """'kernel', 'sdpa' or 'undecided' for a speed-up interval. A shape decided before
    (`prior`) keeps its decision unless the new rounds clear a band around the margin: a
    routed one leaves when the kernel is measurably slower (upper bound below 1), one kept on
    SDPA is routed when the lower bound clears the margin by as much again."""
    if prior is True:
        return "sdpa" if high < 1.0 else "kernel"
    if prior is False:
        margin = 2 * margin - 1
    if low >= margin:
        return "kernel"
    if high < margin:
        return "sdpa"
    return "undecided"


def decide_at_bound(low: float, mid: float, high: float, margin: float,
                    prior: bool | None = None) -> str:
    """decide() for the interval a stage ended with. One still straddling the margin is
    settled by the estimate: the kernel when the speed-up itself is at least the margin, SDPA
    ('undecided') otherwise. Keeping SDPA on every straddle made a shape a few percent above
    the margin flip from run to run, as whether 2 or 4 rounds cleared it was chance (on an
    H100, FLUX 1536's 9728 tokens at 1.05-1.07x sustained: SDPA in 2 verifies, the kernel in
    the third); the estimate moved 1-2% between those runs. (Asking also for a lower bound of
    at least 1 flipped as often: 4 rounds' spread is itself noisy.) A shape decided before
    keeps that decision on a straddle: the hysteresis already holds it still."""
    decision = decide(low, high, margin, prior)
    if decision != "undecided" or prior is not None:
        return decision
    return "kernel" if mid >= margin else "undecided"


def _settles(low: float, high: float, margin: float, prior: bool | None) -> bool:
    """Whether more rounds could still change decide()'s answer: for a routed prior, until
    the interval lies on one side of 1."""
    if prior is True:
        return low >= 1.0 or high < 1.0
    return decide(low, high, margin, prior) != "undecided"


def quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) == 1:
        return values[0], values[0], values[0]
    low, mid, high = statistics.quantiles(values, n=4, method="inclusive")
    return low, mid, high


def looks(min_rounds: int, max_rounds: int) -> int:
    """How many times a stage compares its interval: after min_rounds, then every pair."""
    return 1 + max(0, (max(max_rounds, min_rounds) - min_rounds + 1) // 2)


def z_for(confidence: float, n_looks: int) -> float:
    """The two-sided normal quantile that keeps `confidence` over `n_looks` looks
    (Bonferroni: each look gets an equal share of the error)."""
    alpha = min(max(1.0 - confidence, 1e-9), 0.5)
    return statistics.NormalDist().inv_cdf(1.0 - alpha / (2 * max(1, n_looks)))


def interval(ratios: list[float], z: float, noise_floor: float) -> tuple[float, float, float]:
    """(low, geometric mean, high) of the speed-up from the rounds' ratios. The spread is the
    rounds' own from 4 rounds on, never below `noise_floor`."""
    logs = [math.log(r) if r > 0 and math.isfinite(r) else (50.0 if r > 0 else -50.0)
            for r in ratios]
    mean = statistics.fmean(logs)
    sd = noise_floor
    if len(logs) >= 4:
        sd = max(sd, statistics.stdev(logs))
    half = z * sd / math.sqrt(len(logs))
    return math.exp(mean - half), math.exp(mean), math.exp(mean + half)


def inner_calls(one_call_s: float, settings: MeasureSettings) -> int:
    if not one_call_s > 0:
        return settings.max_inner
    return max(1, min(settings.max_inner, math.ceil(settings.sample_s / one_call_s)))


def _settled(samples: list[float], tolerance: float) -> bool:
    if len(samples) < 2:
        return False
    a, b = samples[-2], samples[-1]
    return abs(a - b) <= tolerance * max(a, b)


def sustain_on(settings: MeasureSettings) -> bool:
    return settings.sustain_s > 0


def in_sustain_band(speedup: float, settings: MeasureSettings) -> bool:
    low, high = settings.sustain_band
    return sustain_on(settings) and low <= speedup <= high


def sustained_calls(window_s: float, one_call_s: float, settings: MeasureSettings) -> int:
    if not one_call_s > 0:
        return settings.sustain_max_inner
    return max(1, min(settings.sustain_max_inner, math.ceil(window_s / one_call_s)))


@dataclass
class _Rounds:
    kernel_t: list[float]
    sdpa_t: list[float]
    ratios: list[float]
    bounds: tuple[float, float, float]
    stopped: str


def _paired(kernel: Callable[[], Any], sdpa: Callable[[], Any],
            sample: Callable[[Callable[[], Any], str], float], min_rounds: int,
            max_rounds: int, z: float, noise_floor: float,
            done: Callable[[float, float, float], bool],
            over_budget: Callable[[], bool]) -> _Rounds:
    """Paired rounds, kernel first in even rounds and SDPA first in odd ones: `min_rounds` of
    them, then more in pairs until `done(low, mid, high)` says the interval settles the
    question, max_rounds are reached or the budget is spent."""
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

    stopped = "bound"
    for _ in range(max(1, min_rounds)):
        one_round()
        if over_budget():
            break
    while True:
        bounds = interval(ratios, z, noise_floor)
        if done(*bounds):
            stopped = "decided"
            break
        if over_budget():
            stopped = "budget"
            break
        if len(ratios) >= max_rounds:
            break
        one_round()
        one_round()  # in pairs: each order as often as the other
    return _Rounds(kernel_t, sdpa_t, ratios, bounds, stopped)


def measure_pair(kernel: Callable[[], Any], sdpa: Callable[[], Any], timer: Timer,
                 settings: MeasureSettings = FULL, prior: bool | None = None,
                 clock: Clock = time.perf_counter) -> SpeedResult:
    """Time `kernel` against `sdpa` (both already checked correct) and decide; `prior` is
    an earlier run's decision for this shape (same build and GPU), or None. Short paired
    samples first; where their interval reaches into the sustain band, the sustained stage
    decides instead."""
    started = clock()

    def over_budget() -> bool:
        return settings.budget_s > 0 and clock() - started >= settings.budget_s

    inner = inner_calls(min(timer(kernel, 1), timer(sdpa, 1)), settings)
    kernel_warm: list[float] = []
    sdpa_warm: list[float] = []
    while len(kernel_warm) < settings.warmup_max:
        kernel_warm.append(timer(kernel, inner))
        sdpa_warm.append(timer(sdpa, inner))
        if len(kernel_warm) >= settings.warmup_min and _settled(kernel_warm, settings.settle) \
                and _settled(sdpa_warm, settings.settle):
            break
        if over_budget():
            break
    settled = _settled(kernel_warm, settings.settle) and _settled(sdpa_warm, settings.settle)
    band_low = settings.sustain_band[0]
    sustained = sustain_on(settings)
    # The short stage's win line: the margin (twice over for a shape kept on SDPA before; 1
    # for one routed before, which leaves only when measurably slower).
    win_at = 1.0 if prior is True else 2 * settings.margin - 1 if prior is False \
        else settings.margin

    def short_done(low: float, _mid: float, high: float) -> bool:
        if not sustained:
            return _settles(low, high, settings.margin, prior)
        # A win in short samples is one when sustained too (the power limit only ever
        # lifted the kernel), a loss below the band is one whatever the clock; an interval
        # wholly between the two can only be settled by the sustained stage.
        return low >= win_at or high < band_low or (low >= band_low and high < win_at)

    z_short = z_for(settings.confidence, looks(settings.min_rounds, settings.max_rounds))
    short = _paired(kernel, sdpa, lambda fn, _path: timer(fn, inner) / inner,
                    settings.min_rounds, settings.max_rounds, z_short, settings.noise_floor,
                    short_done, over_budget)
    low, mid, high = short.bounds
    kernel_s, sdpa_s = statistics.median(short.kernel_t), statistics.median(short.sdpa_t)
    if sustained and not (low >= win_at or high < band_low) and not over_budget():
        return _sustained(kernel, sdpa, timer, settings, prior, mid, settled, kernel_s, sdpa_s,
                          clock, started, over_budget)
    if sustained:
        decision = ("kernel" if low >= win_at else "sdpa" if high < band_low
                    else "sdpa" if prior is not True else "kernel")
    else:
        decision = decide_at_bound(low, mid, high, settings.margin, prior)
    return SpeedResult(speedup=mid, low=low, high=high, kernel_s=kernel_s, sdpa_s=sdpa_s,
                       rounds=len(short.ratios), margin=settings.margin, settled=settled,
                       prior=prior, decision=decision, spent_s=clock() - started,
                       stopped=short.stopped)


def _sustained(kernel: Callable[[], Any], sdpa: Callable[[], Any], timer: Timer,
               settings: MeasureSettings, prior: bool | None, short: float, settled: bool,
               kernel_call_s: float, sdpa_call_s: float, clock: Clock, started: float,
               over_budget: Callable[[], bool]) -> SpeedResult:
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

    z = z_for(settings.confidence, looks(settings.sustain_min_rounds,
                                         settings.sustain_max_rounds))
    rounds = _paired(kernel, sdpa, block, settings.sustain_min_rounds,
                     settings.sustain_max_rounds, z, settings.noise_floor,
                     lambda low, _mid, high: _settles(low, high, settings.margin, prior),
                     over_budget)
    low, mid, high = rounds.bounds
    return SpeedResult(speedup=mid, low=low, high=high,
                       kernel_s=statistics.median(rounds.kernel_t),
                       sdpa_s=statistics.median(rounds.sdpa_t), rounds=len(rounds.ratios),
                       margin=settings.margin, settled=settled, prior=prior, short=short,
                       decision=decide_at_bound(low, mid, high, settings.margin, prior),
                       spent_s=clock() - started, stopped=rounds.stopped)


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
