"""How a global fetch budget is split over targets: the square-root rule (``budget_scale``, ``allocate_periods``),
the longest period derived from the budget (``budget_max_period``, ``budget_plan``), and whether the targets keep one
clock of day (``phase_agreement``). Pure functions of the targets' rates; the ``rate`` policy (``shhd.rate``) turns
the plan into periods, and the scheduler and the revisit simulator call it at every rebalance."""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from typing import NamedTuple

from shhd.observation import clamp as _clamp

__all__ = [
    "RATE_BUDGET_STRETCH",
    "BudgetView",
    "allocate_periods",
    "budget_max_period",
    "budget_plan",
    "budget_scale",
    "phase_agreement",
]

#: Rate policy under a global budget: the longest period is at least this many times the budget's mean period
#: (targets / budget), so a small budget does not clamp every target to the same longest period (uniform). Below
#: about 1.4 most targets sit at that longest period again and the split is nearly uniform; 1.75 is the middle of
#: the flat stretch of 1.5 to 2 on the development half (docs/REVISIT.md, "#21, third round").
RATE_BUDGET_STRETCH: float | None = 1.75


def budget_scale(rates: Sequence[float], budget_per_s: float, min_period_s: float, max_period_s: float) -> float:
    """The constant C of the square-root rule period_i = clamp(C / sqrt(rate_i), min, max) that spends
    ``budget_per_s`` fetches per second in total (bisection on log C; clamped targets are water-filled).

    Minimising item-weighted mean lag sum_i rate_i * period_i / 2 subject to sum_i 1/period_i = B gives
    f_i ∝ sqrt(rate_i) (docs/REVISIT.md §D5, O2). Rates must be > 0.

    The roots are sorted once, so each step of the bisection costs O(log n) instead of O(n): the scheduler and the
    simulator run this over every target at every rebalance, and on 180 days of 858 real targets the plain sum took
    almost half of the simulator's time.
    """
    roots = sorted(math.sqrt(r) for r in rates)
    if not roots:
        return 1.0
    below = list(itertools.accumulate(roots, initial=0.0))  # below[k] = sum of the k smallest roots

    def spend(c: float) -> float:
        # A target sits at the longest period when c / q > max, i.e. q < c / max, at the shortest when q > c / min;
        # in between it spends q / c.
        longest = bisect.bisect_left(roots, c / max_period_s)
        shortest = max(bisect.bisect_right(roots, c / min_period_s), longest)
        middle = below[shortest] - below[longest]
        return longest / max_period_s + (len(roots) - shortest) / min_period_s + middle / c

    lo, hi = min_period_s * roots[0], max_period_s * roots[-1]
    if spend(lo) <= budget_per_s:
        return lo
    if spend(hi) >= budget_per_s:
        return hi
    while hi / lo > 1 + 1e-9:
        mid = math.sqrt(lo * hi)
        if spend(mid) > budget_per_s:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


def allocate_periods(
    rates: Sequence[float], budget_per_s: float, min_period_s: float, max_period_s: float
) -> list[float]:
    """Split a global budget of ``budget_per_s`` fetches/s over targets with item rates ``rates`` (items/s, > 0)
    by the square-root rule; returns one period per target, within [min, max]."""
    c = budget_scale(rates, budget_per_s, min_period_s, max_period_s)
    return [_clamp(c / math.sqrt(r), min_period_s, max_period_s) for r in rates]


def budget_max_period(
    targets: int, budget_per_s: float, max_period_s: float, stretch: float | None = RATE_BUDGET_STRETCH
) -> float:
    """The longest period under a global budget: ``max_period_s``, or ``stretch`` x targets / budget when longer."""
    if stretch is None or budget_per_s <= 0 or targets <= 0:
        return max_period_s
    return max(max_period_s, stretch * targets / budget_per_s)


def budget_plan(
    rates: Sequence[float],
    budget_per_s: float,
    min_period_s: float,
    max_period_s: float,
    stretch: float | None = RATE_BUDGET_STRETCH,
) -> tuple[float, float]:
    """(C, longest period) of the square-root split of ``budget_per_s`` over targets with item rates ``rates``,
    the longest period derived from the budget (``budget_max_period``); pass both to ``RatePolicy.set_budget_scale``."""
    longest = budget_max_period(len(rates), budget_per_s, max_period_s, stretch)
    return budget_scale(rates, budget_per_s, min_period_s, longest), longest


def phase_agreement(phases: Sequence[tuple[complex, float]]) -> float:
    """The weighted mean cosine between the daily phases of two different targets, from (daily amplitude, weight)
    pairs: Σ_{i≠j} w_i w_j cos(θ_i - θ_j) / Σ_{i≠j} w_i w_j, 0 with fewer than two.

    That is (|Σ w u|² - Σ w²) / ((Σ w)² - Σ w²), u = the unit phase: the squared mean resultant of the phases without
    the bias of a small population (N independent phases give a resultant of about 1/sqrt(N), and 0 here), so a
    dozen targets on their own clocks do not look like one clock.
    """
    total, weight, squares = 0j, 0.0, 0.0
    for amplitude, w in phases:
        if amplitude == 0 or w <= 0:
            continue
        total += w * amplitude / abs(amplitude)
        weight += w
        squares += w * w
    pairs = weight * weight - squares
    return (abs(total) ** 2 - squares) / pairs if pairs > 0 else 0.0


class BudgetView(NamedTuple):
    """What the split of a global budget needs from one target's state (``RatePolicy.budget_view``)."""

    rate_per_s: float
    #: The relative daily amplitude the daily anchor would use (``forecast.daily_amplitude``); 0 when there is none,
    #: None when not read this time (``RatePolicy.profiles_due``).
    daily: complex | None
