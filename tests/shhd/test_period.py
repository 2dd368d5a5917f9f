"""shhd.period: the SHHD bands and update rule on hand-computed cases."""

from __future__ import annotations

import math

import pytest

from shhd.period import GROWTH_MAX_D, SHRINK_MIN_D, SHHDController, ShhdState, band

CTRL = SHHDController(min_period_s=60, max_period_s=3600, step_s=60)


@pytest.mark.parametrize(
    ("d", "expected"),
    [(-1, "none"), (0, "growth"), (3, "growth"), (4, "stable"), (24, "stable"), (25, "shrink"), (64, "shrink")],
)
def test_bands(d: int, expected: str) -> None:
    assert band(d) == expected
    assert (GROWTH_MAX_D, SHRINK_MIN_D) == (3, 25)


def test_slow_start_doubles_until_ssthresh_then_adds_step() -> None:
    assert CTRL.update(ShhdState(60), 0) == ShhdState(120)
    assert CTRL.update(ShhdState(120, 240), 2) == ShhdState(240, 240)
    assert CTRL.update(ShhdState(240, 240), 3) == ShhdState(300, 240)


def test_stable_keeps_period_and_shrink_halves_and_sets_ssthresh() -> None:
    assert CTRL.update(ShhdState(600, 300), 10) == ShhdState(600, 300)
    assert CTRL.update(ShhdState(600), 30) == ShhdState(300, 300)
    assert CTRL.update(ShhdState(100), 64) == ShhdState(60, 60)  # 50 clamped to min, ssthresh max(50, 60)


def test_bounds_and_unknown_distance() -> None:
    assert CTRL.update(ShhdState(3000), 0) == ShhdState(3600)
    assert CTRL.update(ShhdState(500), -1) == ShhdState(500)
    pure = SHHDController(60, 3600, 60, slow_start=False)
    assert pure.update(ShhdState(240, 240), 0) == ShhdState(480, 240)
    assert math.isinf(CTRL.update(ShhdState(60), 0).ssthresh_s)
