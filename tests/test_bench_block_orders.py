"""bench_block's orders: in the balanced design each way directly follows every other way
equally often, so a lag after a change of load (the GPU's clock following its power draw)
falls on every way alike; the rotated one, kept for comparison, always puts a way after the
same other way."""

from __future__ import annotations

from collections import Counter

import pytest

from benchmarks.bench_block import balanced_orders, rotated_orders


def followers(orders: list[list[int]]) -> Counter[tuple[int, int]]:
    return Counter((row[i], row[i + 1]) for row in orders for i in range(len(row) - 1))


@pytest.mark.parametrize("ways", [2, 3, 4, 5, 6, 7])
def test_each_way_follows_every_other_equally_often(ways: int) -> None:
    orders = balanced_orders(ways)
    assert all(sorted(row) == list(range(ways)) for row in orders)
    pairs = followers(orders)
    assert set(pairs) == {(a, b) for a in range(ways) for b in range(ways) if a != b}
    assert len(set(pairs.values())) == 1
    assert len(orders) == (ways if ways % 2 == 0 else 2 * ways)


def test_rotated_orders_always_put_a_way_after_the_same_one() -> None:
    pairs = followers(rotated_orders(3))
    assert {a: b for b, a in pairs} == {1: 0, 2: 1, 0: 2}  # scope (2) always after sage (1)
