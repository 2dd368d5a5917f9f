"""Change processes for the revisit simulator (docs/REVISIT.md §D2): per-page item arrival times and
noise-change times, seeded, in seconds. Every policy in one seed sees the same traces (common random numbers)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

HOUR = 3600.0
DAY = 86400.0

#: Population of per-page mean item rates (docs/REVISIT.md §D2): log-normal, median one item per 2 h, sigma 1.5,
#: clipped to [one per week, one per 2 min] so that the bench stays bounded.
RATE_MEDIAN_PER_S = 1 / (2 * HOUR)
RATE_SIGMA = 1.5
RATE_MIN_PER_S = 1 / (7 * DAY)
RATE_MAX_PER_S = 1 / 120.0
#: Mixture shares (docs/REVISIT.md §D2; 5 points of Poisson moved to a regime switch so adaptation speed is
#: measured).
MIXTURE = (
    ("poisson", 0.35),
    ("diurnal", 0.20),
    ("bursty", 0.15),
    ("periodic", 0.10),
    ("regime", 0.05),
    ("static", 0.10),
    ("noise", 0.05),
)


@dataclass
class Page:
    """Ground truth of one simulated page: item arrivals and noise changes (counters/ads, no new item)."""

    kind: str
    #: Long-run mean item rate, items/s (what the known-rate square-root bound is given).
    rate: float
    arrivals: np.ndarray
    noise: np.ndarray = field(default_factory=lambda: np.empty(0))


def poisson(rng: np.random.Generator, rate: float, end: float) -> np.ndarray:
    """Homogeneous Poisson arrivals on [0, end)."""
    n = rng.poisson(rate * end)
    return np.sort(rng.uniform(0.0, end, n))


def periodic(rng: np.random.Generator, period: float, end: float, jitter: float = 0.1) -> np.ndarray:
    """One item every ``period`` with phase U(0, period) and N(0, (jitter*period)^2) jitter (ECSHOP test)."""
    base = np.arange(rng.uniform(0.0, period), end, period)
    out = base + rng.normal(0.0, jitter * period, base.size) if jitter > 0 else base
    return np.sort(out[(out >= 0) & (out < end)])


def diurnal(rng: np.random.Generator, rate: float, end: float, amplitude: float = 0.9) -> np.ndarray:
    """λ(t) = rate * (1 + a sin(2π (t - φ) / day)), by thinning a Poisson process at rate (1 + a) * rate."""
    cand = poisson(rng, rate * (1 + amplitude), end)
    phase = rng.uniform(0.0, DAY)
    keep = rng.uniform(0.0, 1 + amplitude, cand.size) < 1 + amplitude * np.sin(2 * math.pi * (cand - phase) / DAY)
    return cand[keep]


def bursty(rng: np.random.Generator, rate: float, end: float) -> np.ndarray:
    """Two-state MMPP: ON rate 20x OFF, ON 10% of the time, mean ON 30 min, long-run mean ``rate``."""
    off_rate = rate / (0.1 * 20 + 0.9)
    on_mean, off_mean = 30 * 60.0, 270 * 60.0
    t, on, out = 0.0, rng.uniform() < 0.1, []
    while t < end:
        dur = rng.exponential(on_mean if on else off_mean)
        seg_end = min(t + dur, end)
        n = rng.poisson((20 * off_rate if on else off_rate) * (seg_end - t))
        out.append(rng.uniform(t, seg_end, n))
        t, on = seg_end, not on
    return np.sort(np.concatenate(out)) if out else np.empty(0)


def regime(rng: np.random.Generator, rate: float, end: float, factor: float = 10.0) -> np.ndarray:
    """Poisson at a base rate, x ``factor`` for one day starting at a random time (a "promotion").
    The base is chosen so the long-run mean over [0, end) is ``rate``."""
    start = rng.uniform(0.0, max(end - DAY, 0.0))
    promo = min(DAY, end - start)
    base = rate * end / (end + (factor - 1) * promo)
    quiet = poisson(rng, base, end)
    quiet = quiet[(quiet < start) | (quiet >= start + promo)]
    busy = start + poisson(rng, base * factor, promo)
    return np.sort(np.concatenate([quiet, busy]))


def draw_rate(rng: np.random.Generator) -> float:
    return float(np.clip(RATE_MEDIAN_PER_S * math.exp(RATE_SIGMA * rng.normal()), RATE_MIN_PER_S, RATE_MAX_PER_S))


def make_page(rng: np.random.Generator, kind: str, end: float) -> Page:
    """One page of a given process kind; items arrive on [0, end)."""
    rate = draw_rate(rng)
    if kind == "poisson":
        return Page(kind, rate, poisson(rng, rate, end))
    if kind == "periodic":
        return Page(kind, rate, periodic(rng, 1 / rate, end))
    if kind == "diurnal":
        return Page(kind, rate, diurnal(rng, rate, end))
    if kind == "bursty":
        return Page(kind, rate, bursty(rng, rate, end))
    if kind == "regime":
        return Page(kind, rate, regime(rng, rate, end))
    if kind == "static":
        return Page(kind, 0.0, np.empty(0))
    if kind == "noise":
        return Page(kind, 0.0, np.empty(0), poisson(rng, rate, end))
    raise ValueError(f"unknown change process {kind!r}")


def mixture(rng: np.random.Generator, n_pages: int, end: float) -> list[Page]:
    """A heterogeneous population drawn from MIXTURE (kinds assigned by share, then shuffled)."""
    kinds: list[str] = []
    for kind, share in MIXTURE:
        kinds += [kind] * round(share * n_pages)
    kinds = (kinds + ["poisson"] * n_pages)[:n_pages]
    rng.shuffle(kinds)
    return [make_page(rng, kind, end) for kind in kinds]
