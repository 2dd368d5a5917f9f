"""shhd.forecast: each forecast and the fetch rule pinned to its formula on hand-computed cases."""

from __future__ import annotations

import math

import pytest

from shhd.forecast import (
    MAX_AMPLITUDE,
    MIN_SIGMA,
    OMEGA_DAY,
    Periodic,
    burst_lag,
    daily_amplitude,
    daily_batch_time,
    diurnal_lag,
    fit_periodic,
    periodic_delay,
    recent_excess,
    solve_fetch_time,
)

DAY = 86400.0


def test_fit_periodic_on_an_exact_clock() -> None:
    fit = fit_periodic([0.0, 100.0, 200.0, 300.0, 400.0, 500.0], max_cv=0.35, min_items=6)
    assert fit is not None
    assert (fit.anchor_s, fit.period_s) == (pytest.approx(500.0), pytest.approx(100.0))
    assert fit.sigma_s == pytest.approx(MIN_SIGMA * 100.0)  # no residual: the floor


def test_fit_periodic_is_a_least_squares_lattice() -> None:
    times = [0.0, 100.0, 200.0, 300.0, 400.0, 510.0]
    fit = fit_periodic(times, max_cv=0.35, min_items=6)
    assert fit is not None
    # k = -5..0 counted back from the last item; slope = Σ (k - k̄) t / Σ (k - k̄)² = 1775 / 17.5
    period = 1775 / 17.5
    assert fit.period_s == pytest.approx(period)
    assert fit.anchor_s == pytest.approx(sum(times) / 6 + 2.5 * period)  # fitted time of the last item
    resid = [t - fit.anchor_s - period * k for k, t in zip(range(-5, 1), times, strict=True)]
    sigma = math.sqrt(sum(r * r for r in resid) / 4) * math.sqrt(1 + 1 / 6 + 2.5**2 / 17.5)
    assert fit.sigma_s == pytest.approx(sigma)


def test_fit_periodic_refuses_irregular_or_short_histories() -> None:
    assert fit_periodic([0.0, 100.0, 200.0, 300.0, 400.0], max_cv=0.35, min_items=6) is None  # too few
    assert fit_periodic([0.0, 10.0, 200.0, 210.0, 400.0, 700.0], max_cv=0.35, min_items=6) is None  # CV ≈ 0.8
    assert fit_periodic([5.0] * 6, max_cv=0.35, min_items=6) is None  # no gaps at all


def test_periodic_delay_picks_k_and_the_safety_margin() -> None:
    p = Periodic(anchor_s=1000.0, period_s=100.0, sigma_s=1.0)
    # μ / T = 0.5: k = 1 costs 0.5, k = 2 costs 0.5 + 0.25; z = sqrt(2 ln(μ / (σ sqrt(2π))))
    z = math.sqrt(2 * math.log(50 / math.sqrt(2 * math.pi)))
    assert periodic_delay(p, 1000.0, 50.0) == pytest.approx(100 + z)
    # μ / T = 4: k = 2 costs 0.5 + 2, k = 3 costs 1 + 4/3: wait for the third arrival
    z = math.sqrt(2 * math.log(400 / (3 * math.sqrt(2 * math.pi))))
    assert periodic_delay(p, 1000.0, 400.0) == pytest.approx(300 + z)
    # Asked from a later moment, the same target time
    assert periodic_delay(p, 1040.0, 50.0) == pytest.approx(60 + math.sqrt(2 * math.log(50 / math.sqrt(2 * math.pi))))


def test_periodic_delay_margin_vanishes_when_a_miss_is_cheap_and_overdue_falls_back() -> None:
    p = Periodic(anchor_s=0.0, period_s=100.0, sigma_s=10.0)
    assert periodic_delay(p, 0.0, 10.0) == pytest.approx(100.0)  # μ < k σ sqrt(2π): z = 0
    assert periodic_delay(p, 95.0, 10.0) == pytest.approx(10.0)  # at least one sigma ahead
    assert periodic_delay(p, 100.0 + 3 * 10.0 + 1, 10.0) is None  # next item overdue by > 3 σ


def test_diurnal_lag_closed_form() -> None:
    assert diurnal_lag(2.0, 0j, 123.0, 50.0) == pytest.approx(2.0 * 50.0**2 / 2)
    # λ(s) = 1 + cos ωs from 0: ∫_0^τ (τ - u) cos ωu du = (1 - cos ωτ) / ω²; half a day gives 2 / ω²
    assert diurnal_lag(1.0, 1 + 0j, 0.0, DAY / 2) == pytest.approx((DAY / 2) ** 2 / 2 + 2 / OMEGA_DAY**2)
    assert diurnal_lag(1.0, 1 + 0j, 0.0, DAY) == pytest.approx(DAY**2 / 2)  # a whole day averages out
    # A = -i: λ = 1 + sin ωs; check against a midpoint sum
    now, tau, n = 3600.0, 7200.0, 20000
    h = tau / n
    numeric = sum((1 + math.sin(OMEGA_DAY * (now + (j + 0.5) * h))) * (tau - (j + 0.5) * h) * h for j in range(n))
    assert diurnal_lag(1.0, -1j, now, tau) == pytest.approx(numeric, rel=1e-6)


def test_burst_lag_closed_form() -> None:
    # ∫_0^τ e^{-u/100} (τ - u) du at τ = 100: 100 τ - 100² (1 - e^{-1}) = 10⁴ e^{-1}
    assert burst_lag(0.5, 3.0, 0.01, 100.0) == pytest.approx(0.5 * 3.0 * 1e4 * math.exp(-1))
    assert burst_lag(0.5, 3.0, 1e-12, 100.0) == pytest.approx(0.5 * 3.0 * 100.0**2 / 2)  # no fade yet
    assert burst_lag(0.5, 0.0, 0.01, 100.0) == 0.0


def test_recent_excess_takes_the_densest_recent_run() -> None:
    # j = 3: (3 + 1) / (1000 - 900 + 100) = 0.02 = 2 λ; j = 4: 5 / 1100 < 2 λ
    assert recent_excess([0.0, 900.0, 950.0, 990.0], 1000.0, 0.01, 1.0, 3) == pytest.approx(1.0)
    assert recent_excess([0.0, 500.0], 1000.0, 0.01, 1.0, 3) == 0.0  # shorter than a run
    assert recent_excess([0.0, 100.0, 200.0, 300.0], 10_000.0, 0.01, 1.0, 3) == 0.0  # quiet: never negative


def test_daily_amplitude_from_moments_over_whole_days() -> None:
    # Two whole days, no forgetting: ∫ e^{iωs} = ∫ e^{2iωs} = 0, so c0 = N / E, c1 = 2 Σcos / E, A = 2 Σcos / N.
    e = 2 * DAY
    raw = 2 * 25.0 / 100.0
    shrink = 1 - (4 / 100) / raw**2  # noise of |A|² on a flat page: 4 / N
    assert daily_amplitude([25.0, 0.0, 0.0, 0.0, 0.0, 0.0], 100.0, e) == pytest.approx(raw * shrink)
    # sin moment: A = (c1 - i c2) / c0
    assert daily_amplitude([0.0, 25.0, 0.0, 0.0, 0.0, 0.0], 100.0, e) == pytest.approx(-1j * raw * shrink)
    # clustered items: the noise scales with the dispersion
    assert daily_amplitude([25.0, 0.0, 0.0, 0.0, 0.0, 0.0], 100.0, e, 2.0) == pytest.approx(
        raw * (1 - (8 / 100) / raw**2)
    )
    assert daily_amplitude([50.0, 0.0, 0.0, 0.0, 0.0, 0.0], 100.0, e) == pytest.approx(MAX_AMPLITUDE)  # capped


def test_daily_amplitude_zero_cases() -> None:
    assert daily_amplitude([2.0, 0.0, 0.0, 0.0, 0.0, 0.0], 5.0, 2 * DAY) == 0j  # too few items
    assert daily_amplitude([1.0, 0.0, 0.0, 0.0, 0.0, 0.0], 100.0, 2 * DAY) == 0j  # inside the noise
    assert daily_amplitude([0.0] * 6, 100.0, 0.0) == 0j  # no exposure
    # exposure all at one instant of the day: cos moments equal the exposure, the system is singular
    assert daily_amplitude([10.0, 0.0, 1000.0, 0.0, 1000.0, 0.0], 10.0, 1000.0) == 0j


def _moments(times: list[float]) -> tuple[list[float], list[float], float]:
    """(session-start moments, item moments, item count) without forgetting, each item its own session."""
    z = sum(complex(math.cos(OMEGA_DAY * t), math.sin(OMEGA_DAY * t)) for t in times)
    return [z.real, z.imag, float(len(times))], [z.real, z.imag, 0.0, 0.0, 0.0, 0.0], float(len(times))


def test_daily_batch_time_just_after_a_batch_that_comes_at_one_time_of_day() -> None:
    # Day-stamped items: all at 16:00 UTC (midnight in Beijing), day after day: fetch min_delay after them.
    starts, day, items = _moments([16 * 3600.0 + k * DAY for k in range(8)])
    assert daily_batch_time(starts, day, items, 6.0, 0.97, 60.0) == pytest.approx(16 * 3600.0 + 60.0)
    # A clock job that runs 02:00 ± a few minutes: two circular standard deviations after its mean.
    jitter = [-300.0, 300.0, 0.0, -300.0, 300.0, 0.0, -300.0, 300.0]
    starts, day, items = _moments([2 * 3600.0 + j + k * DAY for k, j in enumerate(jitter)])
    spread = math.sqrt(-2 * math.log(abs(complex(day[0], day[1])) / items)) / OMEGA_DAY
    assert 200.0 < spread < 300.0
    assert daily_batch_time(starts, day, items, 6.0, 0.97, 60.0) == pytest.approx(2 * 3600.0 + 2 * spread)
    # Wrapping past midnight stays a time of day.
    starts, day, items = _moments([DAY - 30.0 + k * DAY for k in range(8)])
    assert daily_batch_time(starts, day, items, 6.0, 0.97, 60.0) == pytest.approx(30.0)


def test_daily_batch_time_refuses_a_daily_profile_or_too_few_days() -> None:
    # The densest daily profile a sinusoid can have, 1 + cos: items spread over the day (resultant 1/2).
    spread = [DAY * (k + 0.5) / 48 for k in range(48) for _ in range(round(48 * (1 + math.cos(2 * math.pi * k / 48))))]
    starts, day, items = _moments(spread)
    assert abs(complex(starts[0], starts[1])) / starts[2] == pytest.approx(0.5, abs=0.01)
    assert daily_batch_time(starts, day, items, 6.0, 0.97, 60.0) is None
    # A batch seen on five days only: not yet.
    starts, day, items = _moments([16 * 3600.0 + k * DAY for k in range(5)])
    assert daily_batch_time(starts, day, items, 6.0, 0.97, 60.0) is None
    assert daily_batch_time([0.0, 0.0, 0.0], [0.0] * 6, 0.0, 6.0, 0.97, 60.0) is None  # nothing seen


def test_daily_batch_time_knows_exact_stamps_after_three_days_but_close_ones_only_after_six() -> None:
    # Dates: every session starts at 16:00:00 to the second, three days running.
    starts, day, items = _moments([16 * 3600.0 + k * DAY for k in range(3)])
    assert daily_batch_time(starts, day, items, 6.0, 0.97, 60.0, 3.0) == pytest.approx(16 * 3600.0 + 60.0)
    assert daily_batch_time(starts, day, items, 6.0, 0.97, 60.0) is None  # without the exact rule: not yet
    two = _moments([16 * 3600.0 + k * DAY for k in range(2)])
    assert daily_batch_time(*two, 6.0, 0.97, 60.0, 3.0) is None
    # Someone who posts at about the same time each day, a few seconds to a minute apart, is not exact: six days.
    for wobble in (5.0, 60.0):
        times = [16 * 3600.0 + j + k * DAY for k, j in enumerate((0.0, wobble, -wobble, 0.0, wobble))]
        starts, day, items = _moments(times)
        assert abs(complex(starts[0], starts[1])) / starts[2] > 0.97
        assert daily_batch_time(starts, day, items, 6.0, 0.97, 60.0, 3.0) is None


def test_solve_fetch_time() -> None:
    assert solve_fetch_time(lambda t: t * t / 2, 50.0, 1.0, 100.0) == pytest.approx(10.0, rel=1e-5)
    assert solve_fetch_time(lambda t: t * t / 2, 0.1, 1.0, 100.0) == 1.0  # already over the threshold at lo
    assert solve_fetch_time(lambda t: t * t / 2, 1e9, 1.0, 100.0) == 100.0  # never reached: hi
