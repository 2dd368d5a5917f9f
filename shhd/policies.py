"""Re-crawl (revisit) policies behind one interface, so the scheduler and the revisit simulator run the very
same code. A policy is pure: it gets an Observation (what one crawl saw, with ``now`` passed in) and the
target's previous JSON-serialisable state, and returns the next period plus the new state.

INTERFACE CONTRACT (used by scheduler_server and bench/revisit; keep it stable):

    policy = make_policy("shhd", min_period_s=60, max_period_s=86400, initial_period_s=600)
    state = policy.initial_state()                       # dict, JSON-serialisable, stored by the scheduler
    decision = policy.next_period(state, observation)    # -> Decision(period_s, state, distance)

Extensions (additive): ``RatePolicy.rate_of(state)`` gives a target's estimated item rate (items/s), and
``allocate_periods(rates, budget_per_s, min_period_s, max_period_s)`` splits a global fetch budget over targets by
the square-root rule; ``RatePolicy.set_budget_scale`` makes its periods follow that split.

Policies (``make_policy`` names):

* ``fixed``: constant period.
* ``shhd``: the paper's simhash + Hamming-distance bands (``shhd.period``).
* ``nutch``: Apache Nutch ``AdaptiveFetchSchedule`` with the shipped ``nutch-default.xml`` constants.
* ``cho``: Poisson rate from the irregular-interval MLE (Cho & Garcia-Molina; Kolobov et al. smoothing), period for a
  target change probability.
* ``sart``: Sharma & Dixit's self-adjusting refresh time, OUR READING (the paper's rule is not public).
* ``rate``: our own: exact new-item counts and item times -> decayed rate estimate plus forecasts of a clock, a
  daily profile and bursts (``shhd.forecast``) -> fetch when the expected lag reaches the square-root rule's
  threshold.

Change signals: ``shhd`` sees only the Hamming distance (as in the paper); ``nutch``, ``cho`` and ``sart`` see the
binary "changed" signal an exact digest gives (new items, or a fingerprint that differs at all); ``rate`` uses the
item counts and times (all new items' times when the source gives them, as the scheduler's Report carries them in
``newItemTimesMs``; else the newest one only). All policies use the realised interval since their previous crawl
(``now_s`` minus the ``last_s`` they keep), so a scheduler that delays a crawl does not confuse them.
"""

from __future__ import annotations

import cmath
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from shhd.fingerprint import BITS, hamming
from shhd.forecast import (
    OMEGA_DAY,
    burst_lag,
    daily_amplitude,
    diurnal_lag,
    fit_periodic,
    periodic_delay,
    recent_excess,
    solve_fetch_time,
)
from shhd.period import SHHDController, ShhdState

__all__ = [
    "POLICY_NAMES",
    "ChoPolicy",
    "Decision",
    "FixedPolicy",
    "NutchPolicy",
    "Observation",
    "RatePolicy",
    "RevisitPolicy",
    "SartPolicy",
    "ShhdPolicy",
    "allocate_periods",
    "budget_scale",
    "cho_rate_mle",
    "make_policy",
]


@dataclass(frozen=True)
class Observation:
    """What one crawl of a target saw."""

    now_s: float
    #: 64-bit simhash of the crawled item window (unsigned); 0 when the crawl produced nothing.
    fingerprint: int = 0
    #: Items newer than the previous crawl's cursor (an exact change signal).
    new_items: int = 0
    #: Items in the crawled window.
    window_items: int = 0
    #: Publication time of the newest item, seconds (0 if unknown).
    newest_item_s: float = 0.0
    #: Publication times of the new items, seconds, if the source gives them.
    new_item_times_s: tuple[float, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Decision:
    period_s: float
    state: dict[str, Any]
    #: Hamming distance to the previous fingerprint (-1 when there was none).
    distance: int = -1


class RevisitPolicy(Protocol):
    name: str

    def initial_state(self) -> dict[str, Any]: ...

    def next_period(self, state: dict[str, Any], observation: Observation) -> Decision: ...


@dataclass
class FixedPolicy:
    """Fixed interval: period = initial period, always (the baseline every other policy must beat)."""

    min_period_s: float
    max_period_s: float
    initial_period_s: float
    name: str = "fixed"

    def initial_state(self) -> dict[str, Any]:
        return {"period_s": self.initial_period_s}

    def next_period(self, state: dict[str, Any], observation: Observation) -> Decision:
        return Decision(self.initial_period_s, dict(state), -1)


def _clamp(x: float, lo: float, hi: float) -> float:
    return min(max(x, lo), hi)


def _distance(previous: int | None, observation: Observation) -> int:
    """Hamming distance to the previous fingerprint, -1 when there is none."""
    return -1 if previous is None else hamming(previous, observation.fingerprint)


def _changed(previous: int | None, observation: Observation) -> bool | None:
    """Exact-digest change test (Nutch's signature comparison): new items, or any fingerprint difference.

    None means unknown: the first crawl, with no previous fingerprint and no new items reported.
    """
    if observation.new_items > 0:
        return True
    if previous is None:
        return None
    return previous != observation.fingerprint


@dataclass
class ShhdPolicy:
    """SHHD (simhash + Hamming distance) from the paper; the rule and its constants live in ``shhd.period``.

    ``detector="simhash"`` is the paper: d = Hamming(previous fingerprint, current fingerprint). ``"count"`` is the
    ideal detector of docs/REVISIT.md §D6: d = 64 when the crawl found new items, else 0. It separates
    detection from scheduling, and is the fix when one new item does not move the window's simhash.
    The additive step after slow start is the first period (our reading; docs/REVISIT.md §D6).
    """

    min_period_s: float
    max_period_s: float
    initial_period_s: float
    detector: str = "simhash"
    slow_start: bool = True
    name: str = "shhd"

    def initial_state(self) -> dict[str, Any]:
        return {"period_s": self.initial_period_s, "ssthresh_s": None, "fingerprint": None}

    def next_period(self, state: dict[str, Any], observation: Observation) -> Decision:
        if self.detector == "count":
            distance = BITS if observation.new_items > 0 else 0
        else:
            distance = _distance(state.get("fingerprint"), observation)
        controller = SHHDController(self.min_period_s, self.max_period_s, self.initial_period_s, self.slow_start)
        ssthresh = state.get("ssthresh_s")
        new = controller.update(ShhdState(float(state["period_s"]), math.inf if ssthresh is None else ssthresh),
                                distance)
        out = {"period_s": new.period_s, "ssthresh_s": None if math.isinf(new.ssthresh_s) else new.ssthresh_s,
               "fingerprint": observation.fingerprint}
        return Decision(new.period_s, out, distance)


#: Nutch ``db.fetch.schedule.adaptive.inc_rate`` as shipped in conf/nutch-default.xml (Java fallback: 0.2).
NUTCH_INC_RATE = 0.4
#: ``db.fetch.schedule.adaptive.dec_rate`` (nutch-default.xml and Java fallback agree).
NUTCH_DEC_RATE = 0.2
#: ``db.fetch.schedule.adaptive.sync_delta`` (true in both).
NUTCH_SYNC_DELTA = True
#: ``db.fetch.schedule.adaptive.sync_delta_rate`` in nutch-default.xml (Java fallback: 0.2).
NUTCH_SYNC_DELTA_RATE = 0.3


@dataclass
class NutchPolicy:
    """Apache Nutch ``AdaptiveFetchSchedule.setFetchSchedule`` (apache/nutch HEAD), nutch-default.xml constants::

        MODIFIED:    interval *= (1 - DEC_RATE); modifiedTime = fetchTime
        NOTMODIFIED: interval *= (1 + INC_RATE)
        SYNC_DELTA:  delta = fetchTime - modifiedTime; if delta > interval: interval = delta
                     offset = round(delta * SYNC_DELTA_RATE); if offset > maxInterval: offset = 0  (long division)
                     refTime = fetchTime - offset
        interval = clamp(interval, min, max); nextFetch = refTime + interval

    MODIFIED comes from an exact-digest comparison (Nutch's MD5Signature); the first crawl is UNKNOWN (unchanged
    interval). Min/max are the scheduler's bounds (the same for every policy) instead of Nutch's 60 s / 365 d, and
    the returned delay is at least min_period_s (the scheduler's contract).
    """

    min_period_s: float
    max_period_s: float
    initial_period_s: float
    inc_rate: float = NUTCH_INC_RATE
    dec_rate: float = NUTCH_DEC_RATE
    sync_delta: bool = NUTCH_SYNC_DELTA
    sync_delta_rate: float = NUTCH_SYNC_DELTA_RATE
    name: str = "nutch"

    def initial_state(self) -> dict[str, Any]:
        return {"interval_s": self.initial_period_s, "modified_s": None, "fingerprint": None}

    def next_period(self, state: dict[str, Any], observation: Observation) -> Decision:
        now = observation.now_s
        interval = float(state["interval_s"])
        modified = now if state.get("modified_s") is None else float(state["modified_s"])
        changed = _changed(state.get("fingerprint"), observation)
        if changed is True:
            interval *= 1.0 - self.dec_rate
            modified = now
        elif changed is False:
            interval *= 1.0 + self.inc_rate
        ref = now
        if self.sync_delta:
            delta = now - modified
            if delta > interval:
                interval = delta
            offset = round(delta * self.sync_delta_rate)
            if delta > 0 and offset > self.max_period_s:
                offset = 0  # Nutch HEAD: offset / delta * max with long division, and offset < delta
            ref = now - offset
        interval = _clamp(interval, self.min_period_s, self.max_period_s)
        period = max(ref + interval - now, self.min_period_s)
        out = {"interval_s": interval, "modified_s": modified, "fingerprint": observation.fingerprint}
        return Decision(period, out, _distance(state.get("fingerprint"), observation))


#: Cho policy: target probability that at least one change happens within a period (docs/REVISIT.md §D6).
CHO_TARGET_CHANGE_PROBABILITY = 0.5
#: Cho policy: most recent (interval, changed) observations kept in the state (bounds the JSON size).
CHO_HISTORY = 64


def cho_rate_mle(changed_s: Sequence[float], unchanged_s: Sequence[float]) -> float:
    """Irregular-interval Poisson MLE (Cho & Garcia-Molina; Kolobov et al. NeurIPS 2019 eq. 10): the λ solving

        sum_{i in C} t_i / (e^{λ t_i} - 1) = sum_{j in U} t_j

    by safeguarded Newton steps (the left side falls monotonically in λ). Needs an interval of each kind.
    """
    total_u = float(sum(unchanged_s))
    if not changed_s or total_u <= 0:
        raise ValueError("cho_rate_mle needs at least one changed and one unchanged interval")
    t = np.asarray(changed_s, dtype=float)
    lo, hi = 1e-12, 1e3
    lam = _clamp(t.size / (float(t.sum()) + total_u), lo, hi)
    for _ in range(200):  # Newton steps, kept inside a shrinking bisection bracket
        e = np.expm1(np.minimum(lam * t, 700.0))
        excess = float((t / e).sum()) - total_u
        if excess > 0:
            lo = lam
        else:
            hi = lam
        slope = -float((t * t * (e + 1.0) / (e * e)).sum())
        step = lam - excess / slope if slope < 0 else math.nan
        if abs(step - lam) <= 1e-12 * lam or hi / lo <= 1 + 1e-12:
            return step if lo <= step <= hi else lam
        lam = step if lo < step < hi else math.sqrt(lo * hi)
    return lam


@dataclass
class ChoPolicy:
    """Poisson / Cho single-target policy (docs/REVISIT.md §D6, Cho).

    λ̂ = ``cho_rate_mle`` over the recorded (interval, changed) history plus Kolobov's smoothing (one changed and
    one unchanged pseudo-interval of 0.5 x the first period); next period I = -ln(1 - p*) / λ̂, so that
    P(at least one change within I) = p*. The change bit comes from an exact digest (new items or any fingerprint
    difference): Cho's model observes only "changed or not".
    """

    min_period_s: float
    max_period_s: float
    initial_period_s: float
    target_p: float = CHO_TARGET_CHANGE_PROBABILITY
    name: str = "cho"

    def initial_state(self) -> dict[str, Any]:
        return {"period_s": self.initial_period_s, "last_s": None, "fingerprint": None, "history": []}

    def rate_of(self, state: dict[str, Any]) -> float:
        """Estimated change rate (changes/s) from the state's history."""
        pseudo = 0.5 * self.initial_period_s
        changed = [pseudo] + [t for t, c in state["history"] if c]
        unchanged = [pseudo] + [t for t, c in state["history"] if not c]
        return cho_rate_mle(changed, unchanged)

    def next_period(self, state: dict[str, Any], observation: Observation) -> Decision:
        history = list(state["history"])
        changed = _changed(state.get("fingerprint"), observation)
        if state.get("last_s") is not None and changed is not None:
            history.append([observation.now_s - float(state["last_s"]), 1 if changed else 0])
            history = history[-CHO_HISTORY:]
        out = {"last_s": observation.now_s, "fingerprint": observation.fingerprint, "history": history}
        period = _clamp(-math.log1p(-self.target_p) / self.rate_of(out), self.min_period_s, self.max_period_s)
        out["period_s"] = period
        return Decision(period, out, _distance(state.get("fingerprint"), observation))


@dataclass
class SartPolicy:
    """SART, self-adjusting refresh time (Sharma & Dixit, IJCSNS 2008) -- OUR READING, the rule is not public::

        c = crawls that saw a change since the first crawl at t0
        c > 0:  I = clamp((now - t0) / c)       (mean time between detected changes)
        c == 0: I = clamp(2 * I_prev)           (no evidence yet)

    The change bit comes from an exact digest, as for ``nutch``.
    """

    min_period_s: float
    max_period_s: float
    initial_period_s: float
    name: str = "sart"

    def initial_state(self) -> dict[str, Any]:
        return {"period_s": self.initial_period_s, "start_s": None, "changes": 0, "fingerprint": None}

    def next_period(self, state: dict[str, Any], observation: Observation) -> Decision:
        now = observation.now_s
        start = now if state.get("start_s") is None else float(state["start_s"])
        changes = int(state["changes"]) + (1 if _changed(state.get("fingerprint"), observation) else 0)
        if changes > 0:
            period = _clamp((now - start) / changes, self.min_period_s, self.max_period_s)
        else:
            period = _clamp(2 * float(state["period_s"]), self.min_period_s, self.max_period_s)
        out = {"period_s": period, "start_s": start, "changes": changes, "fingerprint": observation.fingerprint}
        return Decision(period, out, _distance(state.get("fingerprint"), observation))


#: Rate policy: half-life of the exponential forgetting of old items and exposure, so the estimate follows regime
#: switches. Picked on the benchmark's tuning seeds (docs/REVISIT.md), not the reported ones.
RATE_HALF_LIFE_S = 24 * 3600.0
#: Rate policy: time constant of the fade of a burst forecast (a run of close items just before the crawl); None
#: turns the burst forecast off. Picked on development seeds, never the reported ones (docs/REVISIT.md).
RATE_BURST_FADE_S: float | None = 1800.0
#: Rate policy: fewest recent items that can show a burst.
RATE_BURST_MIN_RUN = 3
#: Rate policy: strength of the long-run rate as the prior of a burst's rate, in items.
RATE_BURST_PRIOR_ITEMS = 1.0
#: Rate policy: the smallest rate estimate (items/s), so a target that never published stays at the longest period.
RATE_FLOOR_PER_S = 1e-9
#: Rate policy prior: PRIOR_ITEMS items seen over PRIOR_ITEMS x the first period, so a new target starts at the
#: rate of one item per first period and the prior fades as real exposure accumulates (Kolobov's 0.5/0.5 smoothing).
RATE_PRIOR_ITEMS = 0.5
#: Rate policy: recent item times kept in the state (periodic and burst forecasts).
RATE_TIMES_KEPT = 12
#: Rate policy: a target counts as periodic when at least this many recent items ...
RATE_PERIODIC_MIN_ITEMS = 6
#: ... have gaps whose coefficient of variation is below this (Poisson: 1; a clock with 10 % jitter: 0.14).
RATE_PERIODIC_MAX_CV = 0.35
#: ... and the first fetch on a newly found clock comes at least this share of its period later (a new fit sets
#: the phase; the paper's test, tests/e2e/test_paper_period.py, keeps every period within 0.5 to 2 item periods).
RATE_PERIODIC_FIRST_MIN = 0.55


def budget_scale(rates: Sequence[float], budget_per_s: float, min_period_s: float, max_period_s: float) -> float:
    """The constant C of the square-root rule period_i = clamp(C / sqrt(rate_i), min, max) that spends
    ``budget_per_s`` fetches per second in total (bisection on log C; clamped targets are water-filled).

    Minimising item-weighted mean lag sum_i rate_i * period_i / 2 subject to sum_i 1/period_i = B gives
    f_i ∝ sqrt(rate_i) (docs/REVISIT.md §D5, O2). Rates must be > 0.
    """
    roots = [math.sqrt(r) for r in rates]
    if not roots:
        return 1.0

    def spend(c: float) -> float:
        return sum(1.0 / _clamp(c / q, min_period_s, max_period_s) for q in roots)

    lo, hi = min_period_s * min(roots), max_period_s * max(roots)
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


def allocate_periods(rates: Sequence[float], budget_per_s: float, min_period_s: float,
                     max_period_s: float) -> list[float]:
    """Split a global budget of ``budget_per_s`` fetches/s over targets with item rates ``rates`` (items/s, > 0)
    by the square-root rule; returns one period per target, within [min, max]."""
    c = budget_scale(rates, budget_per_s, min_period_s, max_period_s)
    return [_clamp(c / math.sqrt(r), min_period_s, max_period_s) for r in rates]


@dataclass
class RatePolicy:
    """Our policy: exact change signals -> a rate estimate and a forecast of the next items -> the next fetch.

    Each crawl reports how many items are new and (when the source gives them) their times. With weight
    w(t) = 2^{-(now - t)/H} (H = ``half_life_s``)::

        n        = n * 2^{-dt/H} + sum_j w(t_j)                  (items; untimed items count at mid-interval)
        exposure = exposure * 2^{-dt/H} + H/ln2 * (1 - 2^{-dt/H}) (time, weighted the same way)
        λ        = (n + a w) / (exposure + a w I0)                (a = RATE_PRIOR_ITEMS, w = 2^{-age/H})

    The prior (one item per I0, weight a) fades with the target's age, so a target that never publishes drifts
    to the longest period. This is the complete-observation rate estimate (Kolobov eq. 11, with forgetting).

    The next fetch comes when the lag the uncaught items are expected to have piled up reaches μ = C² / 2
    (``shhd.forecast``): for a Poisson target, period = C / sqrt(λ), the lag-optimal square-root rule. Three
    forecasts refine λ(s) with what the item times show (each falls back to the plain rule when it sees nothing):

    * periodic (``periodic``): the recent items sit on a clock (gap CV < RATE_PERIODIC_MAX_CV): fetch just
      after the k-th next arrival (``forecast.periodic_delay``);
    * daily profile (``diurnal``): λ(s) = λ (1 + Re(A e^{iωs})), A from decayed Fourier moments of the item
      times and of the exposure, shrunk by its noise (``forecast.daily_amplitude``);
    * burst (``burst_fade_s``): a run of close items just before the crawl adds λ e (e^{-(s - now)/F}) to λ(s),
      e = how much faster the run came than λ (``forecast.recent_excess``), F = ``burst_fade_s``.

    C is ``sqrt(R)`` on its own, R = ``reference_period_s`` (default: the first period I0), so a target with one
    item per R gets period R and one 100x slower gets 10 R; or, under a global fetch budget, ``budget_scale(...)``
    over all targets' ``rate_of`` (see ``set_budget_scale``).
    """

    min_period_s: float
    max_period_s: float
    initial_period_s: float
    half_life_s: float = RATE_HALF_LIFE_S
    reference_period_s: float | None = None
    scale: float | None = None
    periodic: bool = True
    diurnal: bool = True
    burst_fade_s: float | None = RATE_BURST_FADE_S
    name: str = "rate"

    def initial_state(self) -> dict[str, Any]:
        return {"period_s": self.initial_period_s, "last_s": None, "items": 0.0, "exposure_s": 0.0,
                "prior_weight": 1.0, "times": [], "day": [0.0] * 6, "on_clock": False}

    def set_budget_scale(self, scale: float | None) -> None:
        """Use C = ``scale`` (from ``budget_scale``) for every later period; None returns to sqrt(I0)."""
        self.scale = scale

    def rate_of(self, state: dict[str, Any]) -> float:
        """Estimated long-run item rate (items/s) of a target, always > 0."""
        a = RATE_PRIOR_ITEMS * float(state.get("prior_weight", 1.0))
        return max((float(state["items"]) + a) / (float(state["exposure_s"]) + a * self.initial_period_s),
                   RATE_FLOOR_PER_S)

    def _scale(self) -> float:
        reference = self.initial_period_s if self.reference_period_s is None else self.reference_period_s
        return math.sqrt(reference) if self.scale is None else self.scale

    def period_for(self, rate: float) -> float:
        """The square-root-rule period for an item rate."""
        return _clamp(self._scale() / math.sqrt(rate), self.min_period_s, self.max_period_s)

    def next_period(self, state: dict[str, Any], observation: Observation) -> Decision:
        now = observation.now_s
        last = state.get("last_s")
        out: dict[str, Any] = {"last_s": now, "prior_weight": float(state.get("prior_weight", 1.0)),
                               "items": float(state["items"]), "exposure_s": float(state["exposure_s"]),
                               "day": [float(x) for x in state.get("day", [0.0] * 6)]}
        if last is not None:
            out["prior_weight"] *= 2.0 ** (-max(now - float(last), 0.0) / self.half_life_s)
            out["items"], out["exposure_s"] = _decayed_counts(out["items"], out["exposure_s"], float(last),
                                                              observation, self.half_life_s)
            out["day"] = _day_moments(out["day"], float(last), observation, self.half_life_s)
        clock = None
        if observation.new_items > 1 and not observation.new_item_times_s:  # only then may items go on the clock
            clock = fit_periodic(state.get("times", []), RATE_PERIODIC_MAX_CV, RATE_PERIODIC_MIN_ITEMS)
        out["times"] = _recent_times(state.get("times", []), last, observation, clock.period_s if clock else None)
        fit = fit_periodic(out["times"], RATE_PERIODIC_MAX_CV, RATE_PERIODIC_MIN_ITEMS) if self.periodic else None
        out["on_clock"], delay = False, None
        if fit is not None:
            # A newly found clock does not pull the next fetch in by more than about half a period: the fetches
            # keep at least that spacing until one lands on the clock's phase without it (then "on_clock").
            ahead = 0.0 if state.get("on_clock") else RATE_PERIODIC_FIRST_MIN * fit.period_s
            delay = periodic_delay(fit, now, 0.5 * self._scale() ** 2, ahead)
            out["on_clock"] = delay is not None and (ahead == 0.0 or delay > ahead)
        period = self._period(out, now) if delay is None else _clamp(delay, self.min_period_s, self.max_period_s)
        out["period_s"] = period
        return Decision(period, out, -1)

    def _period(self, state: dict[str, Any], now: float) -> float:
        """The next period from the rate forecast (+ daily profile, + burst)."""
        mu = 0.5 * self._scale() ** 2
        rate = self.rate_of(state)
        amplitude = (daily_amplitude(state["day"], state["items"], state["exposure_s"], _dispersion(state["times"]))
                     if self.diurnal else 0j)
        excess = (recent_excess(state["times"], now, rate, RATE_BURST_PRIOR_ITEMS, RATE_BURST_MIN_RUN)
                  if self.burst_fade_s is not None else 0.0)
        if excess == 0.0 and amplitude == 0j:
            return self.period_for(rate)
        fade = 1.0 / (self.burst_fade_s or 1.0)
        return solve_fetch_time(lambda tau: diurnal_lag(rate, amplitude, now, tau) + burst_lag(rate, excess, fade, tau),
                                mu, self.min_period_s, self.max_period_s)


def _recent_times(times: Sequence[float], last: float | None, observation: Observation,
                  clock_period_s: float | None = None) -> list[float]:
    """The last RATE_TIMES_KEPT item times after this crawl: the new items' times when the source gives them,
    else the newest item's time only (a Report with no ``newItemTimesMs``). With several new items and only the
    newest time, the older ones are placed one clock period apart before it when the target was on a clock
    (``clock_period_s``); otherwise their times are unknown and the history restarts at the newest. New items
    without a usable time (none, or one outside (last crawl, now]) empty the history."""
    now = observation.now_s
    new = sorted(t for t in observation.new_item_times_s if (last is None or last < t) and t <= now)
    new = new[-observation.new_items:] if observation.new_items > 0 else []
    kept = [float(t) for t in times]
    newest = observation.newest_item_s
    if new:
        kept += new
    elif observation.new_items > 0 and 0 < newest <= now and (last is None or newest > last):
        older = [newest - j * clock_period_s for j in range(observation.new_items - 1, 0, -1)] if clock_period_s else []
        if observation.new_items == 1 or (older and (last is None or older[0] > last)):
            kept = [*kept, *older, newest]
        else:
            kept = [newest]
    elif observation.new_items > 0:
        kept = []  # new items at unknown times (or a newest time outside this interval): the history breaks here
    return kept[-RATE_TIMES_KEPT:]


def _dispersion(times: Sequence[float]) -> float:
    """Squared coefficient of variation of the recent gaps, at least 1 (Poisson: 1; clustered items: more)."""
    if len(times) < 4:
        return 1.0
    gaps = [b - a for a, b in itertools.pairwise(times)]
    mean = sum(gaps) / len(gaps)
    if mean <= 0:
        return 1.0
    var = sum((g - mean) ** 2 for g in gaps) / (len(gaps) - 1)
    return max(1.0, var / (mean * mean))


def _day_moments(day: list[float], last: float, observation: Observation, half_life: float) -> list[float]:
    """The decayed daily Fourier moments after the interval (last, now] (RatePolicy): [Σ w e^{iωt_j} (items),
    ∫ w e^{iωs} ds, ∫ w e^{2iωs} ds (exposure)] as (re, im) pairs, w = 2^{-(now - t)/H}, ω = 2π / day."""
    now = observation.now_s
    dt = max(now - last, 0.0)
    decay = 2.0 ** (-dt / half_life)
    kappa = math.log(2) / half_life
    times = [t for t in observation.new_item_times_s if last < t <= now][: observation.new_items]
    times += [0.5 * (last + now)] * (observation.new_items - len(times))
    items = complex(day[0], day[1]) * decay + sum(2.0 ** (-(now - t) / half_life) * cmath.exp(1j * OMEGA_DAY * t)
                                                  for t in times)
    moments = [items]
    for harmonic, (re, im) in ((1, (day[2], day[3])), (2, (day[4], day[5]))):
        c = complex(kappa, harmonic * OMEGA_DAY)
        fresh = (cmath.exp(1j * harmonic * OMEGA_DAY * now) - decay * cmath.exp(1j * harmonic * OMEGA_DAY * last)) / c
        moments.append(complex(re, im) * decay + fresh)
    return [x for z in moments for x in (z.real, z.imag)]


def _decayed_counts(items: float, exposure: float, last: float, observation: Observation,
                    half_life: float) -> tuple[float, float]:
    """Exponentially forgotten item count and exposure after the interval (last, now] (RatePolicy)."""
    now = observation.now_s
    dt = max(now - last, 0.0)
    decay = 2.0 ** (-dt / half_life)
    times = [t for t in observation.new_item_times_s if last < t <= now][: observation.new_items]
    untimed = observation.new_items - len(times)
    fresh = sum(2.0 ** (-(now - t) / half_life) for t in times) + untimed * 2.0 ** (-dt / 2 / half_life)
    return items * decay + fresh, exposure * decay + half_life / math.log(2) * (1.0 - decay)


POLICY_NAMES: tuple[str, ...] = ("fixed", "shhd", "nutch", "cho", "sart", "rate")
_POLICIES: dict[str, type] = {"fixed": FixedPolicy, "shhd": ShhdPolicy, "nutch": NutchPolicy, "cho": ChoPolicy,
                              "sart": SartPolicy, "rate": RatePolicy}


def make_policy(name: str, *, min_period_s: float, max_period_s: float, initial_period_s: float,
                reference_period_s: float | None = None) -> RevisitPolicy:
    """Build a policy by name (see POLICY_NAMES) with the scheduler's bounds and first period.

    ``reference_period_s`` (setting ``scheduler.rate_reference_period_s``) only matters to ``rate`` without a
    global budget: the period of a target that publishes one item per that period; None means the first period.
    """
    cls = _POLICIES.get(name)
    if cls is None:
        raise ValueError(f"unknown revisit policy {name!r} (known: {', '.join(POLICY_NAMES)})")
    if cls is RatePolicy:
        return RatePolicy(min_period_s, max_period_s, initial_period_s, reference_period_s=reference_period_s)
    policy: RevisitPolicy = cls(min_period_s, max_period_s, initial_period_s)
    return policy
