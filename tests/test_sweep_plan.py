"""Which shapes verify measures and which it keeps: bisection of the crossover, interpolation
between stored lengths, reuse of stored decisions when nothing changed for the kernels'
inputs, the progress lines, and the driver's signature. Measurements come from a fake
`measure` (the GPU timer's boundary); everything above it is the real code."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from sagedoctor.runtime.decisions import PROGRESS_PREFIX, Calibration, Decision, shape_key
from sagedoctor.runtime.selftest import (
    APP_LENGTHS,
    BRACKET_RATIO,
    COARSE,
    SWEEP,
    Bisection,
    Progress,
    _family,
    driver_signature,
    family_points,
    initial_lengths,
    kernel_inputs,
    reuse_check,
    reuse_sample,
    sister_families,
    sister_for,
)
from sagedoctor.verify import APP_SHAPES, parse_progress, progress_line, render_reuse

FLUX_APPS = APP_LENGTHS[("bfloat16", 128, 1, 24)]


def _fake_measure(routes: Any, log: list[int]) -> Any:
    def measure(tokens: int) -> dict[str, Any]:
        log.append(tokens)
        route = bool(routes(tokens))
        return {"tokens": tokens, "route": route, "speedup": 1.1 if route else 0.9,
                "reused": False}
    return measure


def _stored(points: list[dict[str, Any]]) -> dict[int, Decision]:
    return {p["tokens"]: Decision(p["route"], "k", p["speedup"], p["speedup"], p["speedup"],
                                  2, "verify", "2026-12-01T00:00:00") for p in points}


def test_the_app_shapes_here_are_the_ones_verify_names() -> None:
    named = {(dtype, d, bh, tokens) for dtype, d, bh, tokens in APP_SHAPES.values()}
    here = {(dtype, d, b * h, t) for (dtype, d, b, h), lengths in APP_LENGTHS.items()
            for t in lengths}
    assert named == here


def test_bisection_brackets_the_crossover_with_few_shapes() -> None:
    log: list[int] = []
    points = _family(_fake_measure(lambda t: t >= 11264, log), lambda *_: None, SWEEP,
                     FLUX_APPS, {}, 1, 24, {}, "bf16")
    assert set(initial_lengths(SWEEP, FLUX_APPS)) <= set(log)  # coarse and app lengths
    assert set(FLUX_APPS) <= set(log) and set(COARSE) <= set(log)
    assert len(log) == len(set(log)) < len(SWEEP)  # each once, fewer than the old grid
    # The crossover is bracketed by measured lengths within BRACKET_RATIO of each other.
    routed = min(t for t in log if t >= 11264)
    kept = max(t for t in log if t < 11264)
    assert routed <= kept * BRACKET_RATIO and 11264 in log
    assert [p["tokens"] for p in points] == sorted(log)
    # Every grid length not measured lies between measured ones that agree (interpolation
    # gives the truth there) or inside the bracket (unknown: the router times it live).
    cal = Calibration()
    for p in points:
        cal.put("GPU-1", shape_key("bfloat16", 128, 24, p["tokens"], p["tokens"], False),
                Decision(p["route"], "k", 1.0, 1.0, 1.0, 2, "verify"))
    for tokens in SWEEP:
        found, how = cal.lookup("GPU-1", shape_key("bfloat16", 128, 24, tokens, tokens,
                                                   False))
        if kept < tokens < routed:
            assert (found, how) == (None, "unknown"), tokens
            continue
        assert found is not None and found.route is (tokens >= 11264), tokens
        assert how == ("stored" if tokens in log else "interpolated")


def test_bisection_stops_when_the_bracket_is_narrow_and_not_before() -> None:
    truth = {t: t >= 14336 for t in SWEEP}
    for ratio, last_kept in ((1.0, 12288), (BRACKET_RATIO, 12288), (2.0, 8192)):
        plan = Bisection(SWEEP, initial_lengths(SWEEP), ratio)
        measured = []
        while (tokens := plan.next()) is not None:
            measured.append(tokens)
            plan.record(tokens, truth[tokens])
        routed = min(t for t in measured if truth[t])
        kept = max(t for t in measured if not truth[t])
        assert kept == last_kept, ratio
        assert routed <= kept * max(ratio, 1.0) or SWEEP.index(routed) == SWEEP.index(kept) + 1
    # 1.0: grid neighbours (12288, 14336); 2.0: the coarse pair (8192, 16384) is enough.
    assert routed == 16384


def test_bisection_follows_every_change_of_decision_and_nothing_else() -> None:
    plan = Bisection(SWEEP, [1024, 32760])
    truth = {t: 9216 <= t < 20480 for t in SWEEP}  # a window of wins, then a long dip
    measured = []
    while (tokens := plan.next()) is not None:
        measured.append(tokens)
        plan.record(tokens, truth[tokens])
    # 1024 and 32760 agree (both lose), so bisection alone never looks between them: the
    # coarse lengths are what find the window.
    assert measured == [1024, 32760]
    plan = Bisection(SWEEP, initial_lengths(SWEEP))
    measured = []
    while (tokens := plan.next()) is not None:
        measured.append(tokens)
        plan.record(tokens, truth[tokens])
    index = sorted(SWEEP.index(t) for t in measured)
    for a, b in itertools.pairwise(index):
        if truth[SWEEP[a]] != truth[SWEEP[b]]:
            # each change bracketed by grid neighbours or lengths within the ratio
            assert b == a + 1 or SWEEP[b] <= SWEEP[a] * BRACKET_RATIO
    assert plan.left() == 0


def _speedup_measure(speedup: Any, log: list[int]) -> Any:
    """A fake `measure` whose speed-up grows with the length, as on a real GPU; routed where it
    clears 1.03."""
    def measure(tokens: int) -> dict[str, Any]:
        log.append(tokens)
        value = float(speedup(tokens))
        return {"tokens": tokens, "route": value >= 1.03, "speedup": value, "reused": False}
    return measure


def _flux_like(tokens: int) -> float:
    return 0.6 + tokens / 16384 * 0.5  # 0.63 at 1024, 0.94 at 9728, 1.1 at 16384, 1.6 at 32768


def test_an_unchanged_build_re_times_a_sample_and_keeps_the_rest() -> None:
    log: list[int] = []
    first = _family(_speedup_measure(_flux_like, log), lambda *_: None, SWEEP,
                    FLUX_APPS, {}, 1, 24, {}, "bf16")
    stored = _stored(first)
    sample = reuse_sample(stored)
    # The shortest clear loss and the shortest clear win: each settles in one paired sample.
    assert sample == [min(stored), min(t for t in stored if stored[t].low >= 1.10)]
    assert sample[1] < max(stored)
    log.clear()
    info: dict[str, Any] = {}
    ticks: list[tuple[int, int, str]] = []
    again = _family(_speedup_measure(_flux_like, log),
                    lambda t, left, what: ticks.append((t, left, what)), SWEEP, FLUX_APPS,
                    stored, 1, 24, info, "bf16")
    assert log == sample and len(log) < len(stored)
    assert info == {"timed": len(sample), "kept": len(stored) - len(sample)}
    assert {p["tokens"] for p in again} == set(stored)
    assert {p["tokens"] for p in again if p["reused"]} == set(stored) - set(sample)
    assert [t[2] for t in ticks] == ["re-timed"] * len(sample) and ticks[-1][1] == 0
    # A sample that disagrees (the kernel lost its lead) measures the family anew and says so.
    log.clear()
    info = {}
    moved = _family(_speedup_measure(lambda t: 0.9, log), lambda *_: None, SWEEP,
                    FLUX_APPS, stored, 1, 24, info, "bf16")
    assert info["families_remeasured"] == ["bf16"]
    assert not any(p["reused"] for p in moved)
    assert not any(p["route"] for p in moved)
    assert len(log) > len(sample)


def test_a_sister_dtype_borrows_the_first_dtypes_decisions_after_a_sample_agrees() -> None:
    log: list[int] = []
    first = _family(_speedup_measure(_flux_like, log), lambda *_: None, SWEEP,
                    FLUX_APPS, {}, 1, 24, {}, "bf16")
    key = {"dtype": "bfloat16", "chosen": "sage_fp8_sm90",
           "sweep": [{**p, "batch": 1, "heads": 24} for p in first]}
    families = sister_families(key)
    assert list(families) == [(1, 24)]
    sister = sister_for(families, 1, 24, "sage_fp8_sm90")
    assert sister is not None and sister[0] == "bfloat16"
    assert set(sister[1]) == {p["tokens"] for p in first}
    # another kernel, another family, or a key without a kernel: nothing to borrow
    assert sister_for(families, 1, 24, "sage_fp16_triton") is None
    assert sister_for(families, 1, 40, "sage_fp8_sm90") is None
    assert sister_families({**key, "chosen": None}) == {}
    # The same speeds: only the sample is timed; the rest are the sister's decisions.
    log.clear()
    info: dict[str, Any] = {}
    borrowed = _family(_speedup_measure(_flux_like, log), lambda *_: None, SWEEP, FLUX_APPS,
                       {}, 1, 24, {}, "fp16", sister=sister, sister_info=info)
    assert log == reuse_sample(sister[1])
    assert info == {"timed": len(log), "kept": len(first) - len(log), "families": ["fp16"]}
    assert [(p["tokens"], p["route"]) for p in borrowed] == [(p["tokens"], p["route"])
                                                              for p in first]
    assert {p["tokens"] for p in borrowed if p.get("borrowed") == "bfloat16"} \
        == {p["tokens"] for p in first} - set(log)
    assert not any(p["reused"] for p in borrowed)  # stamped with this run's time by verify
    # A sample that disagrees measures the family whole, each length once, and says so.
    log.clear()
    info = {}
    own = _family(_speedup_measure(lambda t: 0.9, log), lambda *_: None, SWEEP, FLUX_APPS,
                  {}, 1, 24, {}, "fp16", sister=sister, sister_info=info)
    assert info["families_remeasured"] == ["fp16"] and "families" not in info
    assert not any(p["route"] or p.get("borrowed") for p in own)
    assert len(log) == len(set(log)) and set(log) == {p["tokens"] for p in own}
    assert set(reuse_sample(sister[1])) <= set(log)


def test_reuse_sample_takes_the_shortest_clear_decision_on_each_side() -> None:
    points = [{"tokens": t, "route": s >= 1.03, "speedup": s}
              for t, s in ((1024, 0.70), (4096, 0.62), (9728, 1.08), (16896, 1.12),
                           (24576, 1.30), (32768, 1.25))]
    stored = _stored(points)
    # clear (>= 1.10, <= 0.90) and cheapest: not 4096 and 24576, the clearest, but as long
    assert reuse_sample(stored) == [1024, 16896]
    # nothing clear on a side: the clearest there (the highest lower bound, the lowest upper)
    close = _stored([{"tokens": t, "route": s >= 1.03, "speedup": s}
                     for t, s in ((4096, 0.93), (8192, 0.95), (9728, 1.05), (12288, 1.08))])
    assert reuse_sample(close) == [4096, 12288]
    only_kept = _stored([{"tokens": t, "route": False, "speedup": 0.95} for t in (1024, 32768)])
    assert reuse_sample(only_kept) == [1024]  # a tie goes to the shorter, cheaper length
    assert reuse_sample({}) == []


def test_reuse_needs_the_same_kernel_inputs_and_says_why_not() -> None:
    live = kernel_inputs({"stat": {"sageattention": ["sageattention-2.2.0.dist-info", 10, 5],
                                   "torch": ["torch-2.11.0.dist-info", 20, 6]}}, "13.0",
                         "NVRM version: 580.159.04")
    assert live["sageattention"] == json.dumps(["sageattention-2.2.0.dist-info", 10, 5])
    assert live["triton"] is None and str(live["driver"]).endswith("580.159.04")
    stored = Calibration({"torch": "2.11.0"}, {}, dict(live))
    stored.put("GPU-1", shape_key("bfloat16", 128, 24, 4096, 4096, False),
               Decision(False, "k", 0.7, 0.7, 0.7, 2, "verify"))
    assert reuse_check(stored, live, fresh=False)[0] is True
    assert reuse_check(stored, live, fresh=True) == (False, "--fresh: every shape decided "
                                                            "anew")
    assert "no stored decisions" in reuse_check(None, live, False)[1]
    rebuilt = {**live, "sageattention": json.dumps(["sageattention-2.2.0.dist-info", 11, 9])}
    allowed, why = reuse_check(stored, rebuilt, False)
    assert not allowed and why.endswith("sageattention")
    driver = {**live, "driver": "NVRM version: 590.1"}
    assert reuse_check(stored, driver, False) == (False, "changed since the stored decisions: "
                                                         "driver")
    unlabelled = Calibration({"torch": "2.11.0"}, dict(stored.gpus))
    assert not reuse_check(unlabelled, live, False)[0]


def test_family_points_take_only_this_familys_verify_decisions() -> None:
    earlier = {
        shape_key("bfloat16", 128, 24, 9728, 9728, False): Decision(True, "k", 1, 1, 1, 2,
                                                                    "verify"),
        shape_key("bfloat16", 128, 40, 9728, 9728, False): Decision(True, "k", 1, 1, 1, 2,
                                                                    "verify"),
        shape_key("bfloat16", 128, 24, 4096, 4096, False): Decision(False, "k", 1, 1, 1, 2,
                                                                    "runtime"),
        shape_key("bfloat16", 128, 24, 8192, 4096, False): Decision(False, "k", 1, 1, 1, 2,
                                                                    "verify"),
        shape_key("bfloat16", 128, 24, 6144, 6144, False): Decision(False, "other", 1, 1, 1,
                                                                    2, "verify"),
    }
    assert list(family_points(earlier, "bfloat16", 128, 1, 24, "k")) == [9728]


def test_the_driver_signature_from_proc_or_nvcuda(tmp_path: Path) -> None:
    proc = tmp_path / "pröc root"
    (proc / "driver" / "nvidia").mkdir(parents=True)
    (proc / "driver" / "nvidia" / "version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04\nGCC version: 12\n",
        encoding="utf-8")
    assert driver_signature(str(proc), "") == \
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04"
    windows = tmp_path / "Windows"
    (windows / "System32").mkdir(parents=True)
    (windows / "System32" / "nvcuda.dll").write_bytes(b"x" * 10)
    signature = driver_signature(str(tmp_path / "none"), str(windows))
    assert signature is not None and signature.startswith("nvcuda.dll 10 ")
    assert driver_signature(str(tmp_path / "none"), str(tmp_path / "none")) is None


def test_progress_lines_carry_key_shape_and_time_left_and_parse_safely() -> None:
    lines: list[str] = []
    now = [0.0]
    progress = Progress(lines.append, clock=lambda: now[0])
    progress.plan("bfloat16 D128 1x24", 10)
    progress.plan("float16 D128 1x24", 10)
    now[0] = 2.0
    progress.shape("bfloat16 D128 1x24", "1x24x9728", 9, "measured")
    (line,) = lines
    assert line.startswith(PROGRESS_PREFIX)
    data = parse_progress(line)
    assert data == {"key": "bfloat16 D128 1x24", "shape": "1x24x9728", "what": "measured",
                    "done": 1, "left": 19, "spent_s": 2.0, "left_s": 38.0}
    assert progress_line(data) == ("bfloat16 D128 1x24: 1x24x9728 measured (1 done, about 19 "
                                   "left, ~38 s left)")
    for hostile in ("", "plain stderr", PROGRESS_PREFIX + "{", PROGRESS_PREFIX + "[1]",
                    PROGRESS_PREFIX + "[" * 100000):
        assert parse_progress(hostile) is None
    odd = parse_progress(PROGRESS_PREFIX + json.dumps(
        {"key": 5, "shape": "x" * 500, "done": -1, "left": True, "left_s": "soon"}))
    assert odd is not None and odd["key"] == "" and len(odd["shape"]) == 80
    assert odd["done"] == 0 and odd["left"] == 0 and odd["left_s"] is None
    assert "s left" not in progress_line(odd)


def test_verify_says_whether_it_kept_stored_decisions() -> None:
    kept = {"measure": {"reuse": {"allowed": True, "why": "same SageAttention build",
                                  "kept": 42, "timed": 11, "families_remeasured": []}}}
    assert render_reuse(kept) == ("kept 42 stored shape decisions and re-timed 11 (same "
                                  "SageAttention build)\n")
    kept["measure"]["reuse"]["families_remeasured"] = ["float16 D64 2x10"]
    assert render_reuse(kept).rstrip().endswith("disagreed: float16 D64 2x10")
    fresh = {"measure": {"reuse": {"allowed": False, "why": "--fresh: every shape decided "
                                                             "anew"}}}
    assert render_reuse(fresh) == "every shape measured: --fresh: every shape decided anew\n"
    assert render_reuse({"measure": {}}) == ""
    fresh["measure"]["sister"] = {"kept": 30, "timed": 6, "families": [
        "float16 D64 2x10", "float16 D128 1x24"], "families_remeasured": ["float16 D128 1x40"]}
    lines = render_reuse(fresh).splitlines()
    assert lines[0] == "every shape measured: --fresh: every shape decided anew"
    assert lines[1] == ("took 30 shape decisions from the other dtype with the same kernel, "
                        "after a sample of 6 agreed: float16 D64 2x10, float16 D128 1x24; "
                        "measured whole where the other dtype's sample disagreed: "
                        "float16 D128 1x40")
    fresh["measure"]["sister"] = {"kept": "x", "timed": 6, "families": ["a"]}  # hostile
    assert render_reuse(fresh).count("\n") == 1
