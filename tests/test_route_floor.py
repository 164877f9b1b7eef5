"""The router's floor: the query length below which the stored decisions settle every call on
SDPA, so the hot path asks nothing more (issue 37: SDXL 1024's 140 calls on an H100)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sagedoctor.runtime.decisions import Calibration, Decision, route_floor, shape_key

MIN = 128


def decision(route: bool, kernel: str = "sage_fp8_sm90") -> Decision:
    return Decision(route, kernel, 1.1 if route else 0.8, 0.7, 1.2, 4, "verify")


def h100_like() -> Calibration:
    """As a verify on an H100 stores them: D64 routes from 16384, D128 from 9728."""
    cal = Calibration()
    for dtype in ("bfloat16", "float16"):
        for d, bh, routed_from in ((64, 20, 16384), (128, 24, 9728), (128, 40, 10240)):
            for length in (1024, 4096, 8192, 9728, 10240, 16384, 32760):
                cal.put("GPU-a", shape_key(dtype, d, bh, length, length, False),
                        decision(length >= routed_from))
    return cal


def test_an_h100_like_sweep_puts_the_floor_past_the_last_sdpa_point_before_any_route() -> None:
    assert route_floor(h100_like(), MIN) == 8193  # D128 1x24: SDPA at 8192, kernel at 9728


def test_nothing_stored_or_a_route_at_the_shortest_point_leaves_no_floor() -> None:
    assert route_floor(Calibration(), MIN) == MIN
    cal = h100_like()
    cal.put("GPU-a", shape_key("bfloat16", 64, 80, 1024, 1024, False), decision(True))
    assert route_floor(cal, MIN) == MIN  # below 1024 that family would be timed live


def test_every_gpu_and_family_counts_and_cross_attention_is_ignored() -> None:
    cal = h100_like()
    cal.put("GPU-b", shape_key("bfloat16", 128, 24, 2048, 2048, False), decision(False))
    cal.put("GPU-b", shape_key("bfloat16", 128, 24, 4096, 4096, False), decision(True))
    assert route_floor(cal, MIN) == 2049  # the other GPU routes from 4096
    cross = h100_like()
    cross.put("GPU-a", shape_key("bfloat16", 64, 20, 2048, 77, False), decision(True))
    assert route_floor(cross, MIN) == 8193


def test_a_change_of_kernel_between_points_ends_the_family_as_a_route_does() -> None:
    cal = Calibration()
    cal.put("GPU-a", shape_key("bfloat16", 128, 24, 1024, 1024, False), decision(False))
    cal.put("GPU-a", shape_key("bfloat16", 128, 24, 4096, 4096, False),
            decision(False, "sage_fp16_triton"))
    cal.put("GPU-a", shape_key("bfloat16", 128, 24, 8192, 8192, False), decision(False))
    # between 1024 and 4096 the router interpolates nothing (the kernels differ): timed live
    assert route_floor(cal, MIN) == 1025


def test_the_floor_never_drops_below_the_shortest_length_routed() -> None:
    assert route_floor(Calibration(), 4096) == 4096
    assert route_floor(h100_like(), 16384) == 16384


FAMILY = st.tuples(st.sampled_from(("bfloat16", "float16")), st.sampled_from((64, 128)),
                   st.sampled_from((10, 20, 24, 40)))
POINTS = st.dictionaries(st.integers(1, 40_000), st.booleans(), min_size=1, max_size=8)


@given(st.dictionaries(FAMILY, POINTS, min_size=1, max_size=4),
       st.lists(st.integers(1, 40_000), min_size=1, max_size=20))
def test_below_the_floor_no_stored_family_would_route_or_time_a_call(
        families: dict[tuple[str, int, int], dict[int, bool]], lengths: list[int]) -> None:
    cal = Calibration()
    for (dtype, d, bh), points in families.items():
        for length, route in points.items():
            cal.put("GPU-a", shape_key(dtype, d, bh, length, length, False), decision(route))
    floor = route_floor(cal, MIN)
    assert floor >= MIN
    for (dtype, d, bh), points in families.items():
        shortest = min(points)
        for length in lengths:
            if length >= floor or length < MIN:  # (shorter than MIN: short, never timed)
                continue
            found, how = cal.lookup("GPU-a", shape_key(dtype, d, bh, length, length, False))
            if found is not None:
                assert not found.route, (length, how)
            else:  # timed live, unless shorter than every stored point of the family
                assert length < shortest
