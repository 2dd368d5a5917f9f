"""Item-arrival forecasts for the ``rate`` policy, and the fetch time each one implies. Pure: no clock, no I/O.

The rule that ties them together (docs/REVISIT.md §D5, O2, generalised): fetch a target when the capture lag
its uncaught items are expected to have piled up since the last fetch reaches a threshold μ,

    A(t) = ∫_now^t λ̂(s) (t - s) ds = μ.

For a Poisson target with rate λ this is λ τ² / 2 = μ, i.e. τ = sqrt(2 μ / λ): the square-root rule with
C = sqrt(2 μ). The forecasts below only change λ̂(s): a daily profile (``diurnal_lag``), a burst that fades
(``burst_lag``); a page that publishes on a clock gets its own rule (``periodic_delay``).
"""

from __future__ import annotations

import cmath
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = [
    "OMEGA_DAY",
    "Periodic",
    "burst_lag",
    "daily_amplitude",
    "diurnal_lag",
    "fit_periodic",
    "periodic_delay",
    "recent_excess",
    "solve_fetch_time",
]

DAY_S = 86400.0
#: Angular frequency of the daily cycle, rad/s.
OMEGA_DAY = 2 * math.pi / DAY_S
#: Smallest arrival spread of a periodic forecast, as a share of the period (a clock with no jitter still has
#: some: publication delays, clock skew).
MIN_SIGMA = 0.01
#: Largest relative daily amplitude a forecast uses (keeps λ̂(s) > 0).
MAX_AMPLITUDE = 0.95
#: Fewest (weighted) items before a daily profile is estimated at all.
MIN_DAILY_ITEMS = 8.0


@dataclass(frozen=True)
class Periodic:
    """A page that publishes about every ``period_s``: its last item sat at ``anchor_s`` on the fitted lattice
    anchor + k * period, with ``sigma_s`` the spread of an arrival around its lattice point."""

    anchor_s: float
    period_s: float
    sigma_s: float


def fit_periodic(times: Sequence[float], max_cv: float, min_items: int) -> Periodic | None:
    """The lattice t_j ≈ anchor + k_j * period through the recent item times, or None when they are not regular.

    Regular means: at least ``min_items`` times and a coefficient of variation of the gaps below ``max_cv``
    (a Poisson source has 1, a clock with 10 % jitter about 0.14). The lattice is a least-squares line through
    (k_j, t_j), k_j counted back from the last item, so one late item does not shift the phase.
    """
    if len(times) < max(min_items, 3):
        return None
    gaps = [b - a for a, b in itertools.pairwise(times)]
    mean = sum(gaps) / len(gaps)
    if mean <= 0:
        return None
    var = sum((g - mean) ** 2 for g in gaps) / (len(gaps) - 1)
    if math.sqrt(var) / mean >= max_cv:
        return None
    last = times[-1]
    ks = [float(round((t - last) / mean)) for t in times]
    n = len(times)
    kbar, tbar = sum(ks) / n, sum(times) / n
    sxx = sum((k - kbar) ** 2 for k in ks)
    if sxx <= 0:
        return None
    period = sum((k - kbar) * (t - tbar) for k, t in zip(ks, times, strict=True)) / sxx
    if period <= 0:
        return None
    anchor = tbar - period * kbar  # fitted time of the last item (k = 0)
    resid = sum((t - anchor - period * k) ** 2 for k, t in zip(ks, times, strict=True))
    sigma = math.sqrt(resid / max(n - 2, 1)) * math.sqrt(1 + 1 / n + kbar * kbar / sxx)
    return Periodic(anchor, period, max(sigma, MIN_SIGMA * period))


def periodic_delay(p: Periodic, now: float, mu: float, min_ahead_s: float = 0.0) -> float | None:
    """When to fetch a periodic page next (seconds after ``now``), or None when its next item is overdue by more
    than 3 sigmas (the clock broke: fall back to the rate forecast).

    Fetching just after the k-th next arrival, cycle after cycle, costs per unit time (lag of the k items plus
    μ per fetch) (k - 1) / 2 + μ / (k T), in units of T: k is the integer minimising it (near sqrt(2 μ / T)).
    The fetch waits z sigmas after that arrival, z trading the lag every caught item pays (k σ per sigma) against
    a missed item, which costs about one more fetch: k σ = μ φ(z), z = sqrt(2 ln(μ / (k σ sqrt(2π)))).
    The delay is at least ``min_ahead_s``.
    """
    m1 = p.anchor_s + p.period_s
    if now > m1 + 3 * p.sigma_s:
        return None
    ratio = mu / p.period_s
    k = max(1, math.floor(math.sqrt(2 * ratio)))
    if (k + 1 - 1) / 2 + ratio / (k + 1) < (k - 1) / 2 + ratio / k:
        k += 1
    excess = mu / (k * p.sigma_s * math.sqrt(2 * math.pi))
    z = math.sqrt(2 * math.log(excess)) if excess > 1 else 0.0
    return max(p.anchor_s + k * p.period_s + z * p.sigma_s - now, min_ahead_s, p.sigma_s)


#: How close to 1 the session starts' resultant length must be for ``daily_batch_time`` to count them as one exact
#: time of day: 1e-9 is a spread of about half a second, far below what people who post by hand show.
EXACT_RESULTANT_GAP = 1e-9


def daily_batch_time(
    starts: Sequence[float],
    day: Sequence[float],
    items: float,
    min_starts: float,
    min_resultant: float,
    min_delay_s: float,
    min_exact_starts: float | None = None,
) -> float | None:
    """The time of day (seconds after midnight UTC) for a fetch just after a daily batch, or None when there is none.

    ``starts`` = (Σ w e^{iωt}, re and im, and Σ w) over the first items of the target's sessions (items after a
    long quiet gap), ``day`` the item moments of ``_day_moments`` and ``items`` their weight Σ w. A target whose
    sessions begin at the same time of day, day after day (their mean resultant length at least ``min_resultant``
    over at least ``min_starts`` sessions), publishes in a batch: a site that dates items by day only, or a job run
    by the clock. No sinusoid fits that (its resultant is at most 1/2), and the one-fetch-a-day optimum is just after
    the batch, where the item density falls to nothing: the items' mean time of day plus two of their circular
    standard deviations (at least ``min_delay_s``). Sessions that all begin at the very same second of the day
    (resultant 1 to within EXACT_RESULTANT_GAP: dates, or a clock) show a batch from ``min_exact_starts`` sessions
    on; people who publish to the second do not do that by chance.
    """
    if items <= 0:
        return None
    resultant_sum = abs(complex(starts[0], starts[1]))
    needed = min_starts
    if min_exact_starts is not None and resultant_sum >= (1.0 - EXACT_RESULTANT_GAP) * starts[2]:
        needed = min(min_starts, min_exact_starts)
    if starts[2] < needed:
        return None
    if resultant_sum < min_resultant * starts[2]:
        return None
    mean = complex(day[0], day[1])
    resultant = min(abs(mean) / items, 1.0)
    if resultant <= 0:
        return None
    spread_s = math.sqrt(max(-2.0 * math.log(resultant), 0.0)) / OMEGA_DAY
    return (cmath.phase(mean) / OMEGA_DAY + max(2.0 * spread_s, min_delay_s)) % DAY_S


def diurnal_lag(rate: float, amplitude: complex, now: float, tau: float) -> float:
    """∫_now^{now+τ} λ(s) (now + τ - s) ds for λ(s) = rate * (1 + Re(amplitude * e^{iωs})), ω = 2π / day.

    ∫_0^τ (τ - u) e^{c u} du = (e^{cτ} - 1 - cτ) / c², c = iω.
    """
    c = 1j * OMEGA_DAY
    wave = amplitude * cmath.exp(c * now) * (cmath.exp(c * tau) - 1 - c * tau) / (c * c)
    return rate * (0.5 * tau * tau + wave.real)


def daily_amplitude(day: Sequence[float], items: float, exposure: float, dispersion: float = 1.0) -> complex:
    """The relative daily amplitude A of λ(s) = c0 (1 + Re(A e^{iωs})) from decayed moments (``_day_moments`` of
    shhd.policies: Σ w e^{iωt_j}, ∫ w e^{iωs}, ∫ w e^{2iωs}) plus N = Σ w and E = ∫ w ds, by the moment equations
    of λ(s) = c0 + c1 cos ωs + c2 sin ωs (they account for exposure that does not cover whole days evenly):

        Σ w f(t_j) = ∫ w λ f ds   for f in (1, cos, sin).

    Shrunk towards 0 by max(0, 1 - noise / |A|²), noise = the variance |A|² would have on a flat page (4 D / N
    when the exposure covers whole days evenly; D, the ``dispersion`` of the counts, is 1 for Poisson items and
    more for clustered ones), and capped at MAX_AMPLITUDE. 0 when N < MIN_DAILY_ITEMS or the system is singular.
    """
    if items < MIN_DAILY_ITEMS or exposure <= 0:
        return 0j
    sc, ss, e1r, e1i, e2r, e2i = day
    m = [[exposure, e1r, e1i], [e1r, 0.5 * (exposure + e2r), 0.5 * e2i], [e1i, 0.5 * e2i, 0.5 * (exposure - e2r)]]
    inverse = _inverse3(m)
    if inverse is None:
        return 0j
    c = [sum(inverse[r][j] * v for j, v in enumerate((items, sc, ss))) for r in range(3)]
    if c[0] <= 0:
        return 0j
    amp = complex(c[1], -c[2]) / c[0]
    # Cov(c) ≈ c0 M^-1 for Poisson items (M = the exposure moments above), so the noise in |A|² is
    # (M^-1_11 + M^-1_22) / c0 (= 4 / N when the exposure covers whole days evenly), times the dispersion.
    noise = dispersion * (inverse[1][1] + inverse[2][2]) / c[0]
    size2 = abs(amp) ** 2
    if size2 <= noise:
        return 0j
    amp *= 1.0 - noise / size2
    if abs(amp) > MAX_AMPLITUDE:
        amp *= MAX_AMPLITUDE / abs(amp)
    return amp


def _inverse3(m: Sequence[Sequence[float]]) -> list[list[float]] | None:
    """The inverse of a symmetric positive 3x3 matrix by cofactors; None when it is (nearly) singular."""
    cof = [
        [
            m[(r + 1) % 3][(c + 1) % 3] * m[(r + 2) % 3][(c + 2) % 3]
            - m[(r + 1) % 3][(c + 2) % 3] * m[(r + 2) % 3][(c + 1) % 3]
            for c in range(3)
        ]
        for r in range(3)
    ]
    det = sum(m[0][c] * cof[0][c] for c in range(3))
    scale = abs(m[0][0] * m[1][1] * m[2][2])
    if scale <= 0 or abs(det) <= 1e-9 * scale:
        return None
    return [[cof[c][r] / det for c in range(3)] for r in range(3)]


def recent_excess(times: Sequence[float], now: float, rate: float, prior_items: float, min_run: int) -> float:
    """How much faster than ``rate`` the newest items came: the largest shrunk rate of a run of the j >= ``min_run``
    newest items, (j + k) / (now - t_{-j} + k / rate) (k = ``prior_items`` pulls a short run towards ``rate``),
    divided by ``rate``, minus 1; at least 0. A burst in progress when the crawl ran shows as a run of close items
    just before now; a quiet spell gives 0, not less (a burst starts without warning, so quiet is no reason to
    wait longer)."""
    best = rate
    for j in range(min_run, len(times) + 1):
        best = max(best, (j + prior_items) / (max(now - times[-j], 0.0) + prior_items / rate))
    return best / rate - 1.0


def burst_lag(rate: float, excess: float, fade_per_s: float, tau: float) -> float:
    """∫_0^τ rate * excess * e^{-h u} (τ - u) du (h = ``fade_per_s``): the extra lag of a burst that fades."""
    h = fade_per_s
    if h * tau < 1e-6:
        return rate * excess * 0.5 * tau * tau
    return rate * excess * (tau / h - (-math.expm1(-h * tau)) / (h * h))


def solve_fetch_time(lag: Callable[[float], float], threshold: float, lo: float, hi: float) -> float:
    """The smallest τ in [lo, hi] with lag(τ) >= threshold (lag rising in τ); lo or hi when none or all do."""
    if lag(lo) >= threshold:
        return lo
    if lag(hi) < threshold:
        return hi
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if lag(mid) >= threshold:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-6 * hi:
            break
    return hi
