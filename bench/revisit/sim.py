"""Discrete-event revisit simulator (docs/REVISIT.md §D1, §D3): single page on its own schedule (E0), or
many pages sharing a global budget of B fetches/s (E3), where every policy spends exactly the same fetches.

Scoring uses ground-truth items only; the detector's view is logged separately (``believed_hits``).
Items arriving before the warm-up ``warmup_s`` are not scored; items stop at ``end_s`` and fetching goes on until
``end_s + drain_s``, so late items get real lags; those still uncaught then are counted (censored at the end).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench.revisit.content import ContentModel
from bench.revisit.traces import Page
from shhd.fingerprint import hamming
from shhd.period import GROWTH_MAX_D
from shhd.policies import BudgetView, Observation, RatePolicy, RevisitPolicy

#: How often (simulated seconds) the budgeted scheduler refreshes the rate policy's square-root scale.
ALLOCATION_EPOCH_S = 3600.0
_HARMONIC = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, 200_001))])


def _harmonic(count: int) -> np.ndarray:
    """H(1) .. H(count): the table, or computed for a fetch that catches more items (a bulk import dated at one
    instant can hold any number)."""
    if count < _HARMONIC.size:
        return _HARMONIC[1 : count + 1]
    return np.cumsum(1.0 / np.arange(1, count + 1))


@dataclass(frozen=True)
class Horizon:
    warmup_s: float
    end_s: float
    drain_s: float


@dataclass
class Result:
    """Ground-truth metrics of one run (times in seconds)."""

    fetches: int = 0
    hits: int = 0
    believed_hits: int = 0
    lags: list[np.ndarray] = field(default_factory=list)
    uncaught: int = 0
    stale_s: float = 0.0
    harmonic_s: float = 0.0
    scored_time_s: float = 0.0
    periods: list[tuple[float, float, int]] = field(default_factory=list)
    #: Per page: total lag (s) and number of its scored items, caught or censored at the end (per-source tables).
    page_lag_s: list[float] = field(default_factory=list)
    page_items: list[int] = field(default_factory=list)

    def all_lags(self) -> np.ndarray:
        return np.concatenate(self.lags) if self.lags else np.empty(0)

    def summary(self) -> dict[str, float]:
        lag = self.all_lags()
        return {
            "fetches": float(self.fetches),
            "hit_rate": self.hits / self.fetches if self.fetches else 0.0,
            "believed_hit_rate": self.believed_hits / self.fetches if self.fetches else 0.0,
            "items": float(lag.size),
            "lag_mean_min": float(lag.mean()) / 60 if lag.size else 0.0,
            "lag_p95_min": float(np.percentile(lag, 95)) / 60 if lag.size else 0.0,
            "lag_p99_min": float(np.percentile(lag, 99)) / 60 if lag.size else 0.0,
            "uncaught": float(self.uncaught),
            "freshness": 1.0 - self.stale_s / self.scored_time_s if self.scored_time_s else 1.0,
            "harmonic_staleness": self.harmonic_s / self.scored_time_s if self.scored_time_s else 0.0,
        }


@dataclass
class Detector:
    """What a policy's crawl reports: ``simhash`` (the real fingerprint of the simulated page), ``exact`` (a digest
    that differs whenever the page text differs: new items or noise), ``newest`` (``exact``, but of the new items'
    times only the newest one, as the scheduler's Report carries it) or ``count`` (the real fingerprint, but the
    policy trusts the exact new-item count, so "believed changed" means new items)."""

    kind: str
    content: ContentModel | None = None

    def fingerprint(self, page: int, n_items: int, noise_version: int) -> int:
        if self.kind in ("simhash", "count") and self.content is not None:
            return self.content.fingerprint(page, n_items, noise_version)
        return (n_items * 1_000_003 + noise_version * 7919 + 1) & ((1 << 64) - 1)

    def believes_changed(self, previous: int, current: int, new_items: int) -> bool:
        if self.kind == "count":
            return new_items > 0
        if self.kind == "simhash":
            return hamming(previous, current) > GROWTH_MAX_D
        return previous != current


class _Crawl:
    """Per-page bookkeeping shared by both scheduler modes."""

    def __init__(self, pages: Sequence[Page], policy: RevisitPolicy, detector: Detector, horizon: Horizon) -> None:
        self.pages, self.policy, self.detector, self.h = pages, policy, detector, horizon
        self.states: list[dict[str, Any]] = [policy.initial_state() for _ in pages]
        self.seen = [0] * len(pages)
        self.fps = [0] * len(pages)
        self.res = Result(
            scored_time_s=len(pages) * (horizon.end_s + horizon.drain_s - horizon.warmup_s),
            page_lag_s=[0.0] * len(pages),
            page_items=[0] * len(pages),
        )

    def fetch(self, i: int, now: float, count: bool = True) -> float:
        """Crawl page i at ``now``: score it, feed the policy, return the next period."""
        page = self.pages[i]
        arr = page.arrivals
        j = int(np.searchsorted(arr, now, side="right"))
        new = arr[self.seen[i] : j]
        noise_v = int(np.searchsorted(page.noise, now, side="right")) if page.noise.size else 0
        fp = self.detector.fingerprint(i, j, noise_v)
        if count:
            self.res.fetches += 1
            self.res.hits += new.size > 0
            self.res.believed_hits += self.detector.believes_changed(self.fps[i], fp, new.size)
            self._score(i, new[new >= self.h.warmup_s], now)
        self.seen[i], self.fps[i] = j, fp
        obs = Observation(
            now_s=now,
            fingerprint=fp,
            new_items=int(new.size),
            window_items=min(j, 10),
            newest_item_s=float(arr[j - 1]) if j else 0.0,
            new_item_times_s=() if self.detector.kind == "newest" else tuple(new.tolist()),
        )
        decision = self.policy.next_period(self.states[i], obs)
        self.states[i] = decision.state
        return decision.period_s

    def finish(self) -> Result:
        end = self.h.end_s + self.h.drain_s
        for i, page in enumerate(self.pages):
            left = page.arrivals[self.seen[i] :]
            left = left[left >= self.h.warmup_s]
            self.res.uncaught += left.size
            # Censored at the end: a lower bound on their lag, but counted, so leaving a page's last items
            # uncaught never lowers a policy's mean lag.
            self._score(i, left, end)
        return self.res

    def _score(self, i: int, items: np.ndarray, at: float) -> None:
        """Add the lag, staleness and harmonic staleness of page i's scored ``items``, captured at ``at``."""
        if items.size == 0:
            return
        self.res.lags.append(at - items)
        self.res.page_lag_s[i] += float((at - items).sum())
        self.res.page_items[i] += int(items.size)
        self.res.stale_s += at - float(items[0])
        gaps = np.diff(np.append(items, at))
        self.res.harmonic_s += float((_harmonic(items.size) * gaps).sum())


def run_single(
    page: Page, policy: RevisitPolicy, detector: Detector, horizon: Horizon, start_s: float = 0.0, trace: bool = False
) -> Result:
    """One page, unconstrained: the policy fetches whenever it asks to (mode A). ``trace`` records
    (time, period, distance) per fetch."""
    crawl = _Crawl([page], policy, detector, horizon)
    now, end = start_s, horizon.end_s + horizon.drain_s
    period = crawl.fetch(0, now, count=False)
    while True:
        now += period
        if now > end:
            break
        prev_fp = crawl.fps[0]
        period = crawl.fetch(0, now)
        if trace:
            crawl.res.periods.append((now, period, hamming(prev_fp, crawl.fps[0])))
    return crawl.finish()


def run_budget(
    pages: Sequence[Page],
    policy: RevisitPolicy,
    detector: Detector,
    horizon: Horizon,
    budget_per_s: float,
    min_period_s: float,
    max_period_s: float,
    rng: np.random.Generator,
) -> Result:
    """Many pages, global budget (mode B): one fetch every 1/B seconds, always of the page whose proposed due time
    is earliest (the most overdue), so every policy spends exactly the same fetches. Pages get a baseline crawl at
    t = 0 (not counted). For the ``rate`` policy the scheduler refreshes its square-root scale every
    ALLOCATION_EPOCH_S from all pages' rate estimates and daily profiles (``RatePolicy.apply_budget``), as the real
    scheduler does."""
    crawl = _Crawl(pages, policy, detector, horizon)
    heap = [(crawl.fetch(i, 0.0, count=False), i) for i in range(len(pages))]
    heapq.heapify(heap)
    refresh: Callable[[], None] | None = None
    if isinstance(policy, RatePolicy):
        rate_policy = policy
        # A daily profile depends on the page's state alone, and a fetch replaces the state, so each page's profile
        # is read again only after a fetch: most pages go hours or days between fetches, and reading every profile
        # at every refresh took about a third of a 180-day run's time.
        profiles: list[tuple[dict[str, Any] | None, complex]] = [(None, 0j)] * len(pages)

        def refresh() -> None:
            views = []
            for i, state in enumerate(crawl.states):
                read, daily = profiles[i]
                if read is not state:
                    daily = rate_policy.daily_profile(state)
                    profiles[i] = (state, daily)
                views.append(BudgetView(rate_policy.rate_of(state), daily))
            rate_policy.apply_budget(views, budget_per_s, min_period_s, max_period_s)

        refresh()
    slot = 1.0 / budget_per_s
    end = horizon.end_s + horizon.drain_s
    now = float(rng.uniform(0.0, slot))
    next_refresh = ALLOCATION_EPOCH_S
    while now <= end:
        if refresh is not None and now >= next_refresh:
            refresh()
            next_refresh += ALLOCATION_EPOCH_S
        _, i = heapq.heappop(heap)
        heapq.heappush(heap, (now + crawl.fetch(i, now), i))
        now += slot
    if isinstance(policy, RatePolicy):
        policy.set_budget_scale(None)
    return crawl.finish()


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and 95% half-width (Student t) over seeds."""
    x = np.asarray(values, dtype=float)
    if x.size < 2:
        return float(x.mean()) if x.size else math.nan, math.nan
    z = 1.959964
    nu = x.size - 1  # Cornish-Fisher expansion of Student's t 97.5% quantile (within 1% for nu >= 3)
    t = z + (z**3 + z) / (4 * nu) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * nu**2)
    return float(x.mean()), float(t * x.std(ddof=1) / math.sqrt(x.size))
