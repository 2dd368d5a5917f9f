"""The ``rate`` revisit policy (the default): exact change signals -> a rate estimate and a forecast of the next
items -> the next fetch. How a global fetch budget is split over targets is ``shhd.allocation``; the forecasts are
``shhd.forecast``. Re-exported by ``shhd.policies`` (the interface contract lives there)."""

from __future__ import annotations

import cmath
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from shhd.allocation import RATE_BUDGET_STRETCH, BudgetView, budget_plan, phase_agreement
from shhd.calibration import RateCalibration
from shhd.forecast import (
    DAY_S,
    OMEGA_DAY,
    burst_lag,
    daily_amplitude,
    daily_batch_time,
    diurnal_lag,
    fit_periodic,
    periodic_delay,
    recent_excess,
    solve_fetch_time,
)
from shhd.observation import Decision, Observation
from shhd.observation import clamp as _clamp

__all__ = ["BatchTime", "RatePolicy"]


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
#: Rate policy: the rate estimate's memory, in items: the half-life of the forgetting is at least ``half_life_s``
#: and stretches to about this many of the target's own mean gaps (up to RATE_HALF_LIFE_MAX_S), so a target that
#: publishes a few times a week is not judged on its last one or two items. Product reviews come in sales days, and
#: a memory of 20 items lagged them; 5 items follow them, at a cost to our commit feeds of 0.7 point at 0.25× on the
#: development half and 2 on the report half (docs/REVISIT.md, "#21, fifteenth round"). None: a fixed half-life.
RATE_MEMORY_ITEMS: float | None = 5.0
RATE_HALF_LIFE_MAX_S = 14 * 86400.0
#: Rate policy: half-life of the daily profile's moments. A daily pattern needs several weeks to show its phase on a
#: target with a few items a day, and habits change slowly; 28 to 90 days do equally well on the development half,
#: 14 days worse at low budgets (docs/REVISIT.md, "#21, sixth round").
RATE_DAY_HALF_LIFE_S: float | None = 60 * 86400.0
#: Rate policy: a period of at least DAY_ANCHOR_MIN days on a target with a daily pattern (relative amplitude at
#: least DAY_ANCHOR_AMPLITUDE) moves to the nearest time of day where its daily rate falls through its mean, the
#: lag-optimal time for a fetch a day (d/dF of E[(F - t) mod day] = 1 - day * f(F)). False: off.
RATE_DAY_ANCHOR = True
RATE_DAY_ANCHOR_MIN = 0.75
RATE_DAY_ANCHOR_AMPLITUDE = 0.1
#: Rate policy under a global budget: the daily anchor is off while the targets keep one clock, that is while the
#: fetch-weighted mean cosine between two different targets' daily phases (``phase_agreement``) is above this; two
#: targets at a cosine of 0.5 have their busy hours 4 h apart. On one clock every anchor asks for the same hours, and
#: so do the busy targets' own due times; the queue serves those hours late and the anchor costs more than it saves.
#: Product-review streams sit at 0.6-0.9, Weibo users and commit feeds at 0.2-0.4 (docs/REVISIT.md, "#21, sixteenth
#: round"). None: the anchor stays on.
RATE_SHARED_CLOCK_AGREEMENT: float | None = 0.5
#: ... judged again at most this often (seconds of the policy's clock, ``profiles_due``): daily profiles move over
#: days, and reading one costs several times what a rate does, so a scheduler that rebalances every second reads them
#: hourly, as the revisit simulator's hourly refresh does.
RATE_SHARED_CLOCK_CHECK_S = 3600.0
#: Rate policy: a target whose sessions (items after a quiet gap of at least BATCH_GAP_S) begin at one time of
#: day publishes in a daily batch (a site that dates items by day, a job run by the clock): when the mean resultant
#: length of its session starts' times of day is at least BATCH_RESULTANT over at least BATCH_MIN_SESSIONS decayed
#: sessions, the next fetch comes just after the first batch the last fetch did not see
#: (``forecast.daily_batch_time``), however short the period, and the batch's items are not read as a burst. A
#: continuous daily profile cannot look like that: a sinusoid's resultant is at most 1/2, and on the real
#: (second-resolution) traces the rule changes no figure (docs/REVISIT.md, "Daily batches").
RATE_BATCH_GAP_S = 3 * 3600.0
RATE_BATCH_RESULTANT = 0.97
RATE_BATCH_MIN_SESSIONS = 6.0
#: ... or at least this many when the sessions all begin at the very same second of the day (date stamps, a clock):
#: a day-stamped target is then known after three days instead of six, and a second-resolution trace never looks
#: like that (docs/REVISIT.md, "#21, seventh round").
RATE_BATCH_MIN_EXACT_SESSIONS = 3.0
#: ... for periods up to BATCH_ANCHOR_MAX days; a longer period keeps its own phase. A fetch every k days anchored
#: to the batch leaves its items (k - 1) / 2 days plus the fetch's delay after the batch, a free phase k / 2 days, so
#: anchoring pays only when the fetch comes within half a day of the batch. Under a small budget the slots after a
#: batch that a whole site shares go to the busy targets first, and the quiet, long-period ones come later than that
#: (docs/REVISIT.md, "Daily batches").
RATE_BATCH_ANCHOR_MAX = 1.0
#: ... unless more than this share of its new items carried a stamp at or before the crawl before (items that turn
#: up hours after their stamp: a site that stamps items with the day they appear, not a batch at midnight; such
#: stamps say nothing about when to fetch).
RATE_BATCH_MAX_LATE_SHARE = 0.25
#: ... the fetch comes at least this long after the batch's mean time (``forecast.daily_batch_time``) ...
RATE_BATCH_MIN_DELAY_S = 60.0
#: ... plus QUEUE_S / (1 + the target's items a day): when many targets share one batch time (a whole site dated
#: by day), the fetch slots after it go to the busiest first, and serving the jobs with the most waiting items first
#: gives the least total wait (Smith's rule). On day-stamped traces this order, not the size of the offsets, is
#: what counts (docs/REVISIT.md, "Daily batches").
RATE_BATCH_QUEUE_S = 540.0
#: Rate policy: correct each estimate by how the population's estimates of that size came true
#: (``shhd.calibration``); False: each target's own estimate only.
RATE_CALIBRATE = True
#: ... a crawl teaches the calibration only once the target's own items outweigh its prior this many times.
RATE_CALIBRATION_MIN_EVIDENCE = 1.0
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

    A period of most of a day or more on a target with a daily profile moves to where its daily rate falls through its
    mean (the daily anchor, RATE_DAY_ANCHOR), except under a global budget while the targets keep one clock
    (``apply_budget``, RATE_SHARED_CLOCK_AGREEMENT). A target whose sessions begin at one time of day, day after day,
    publishes in a daily batch (a site that dates items by day only): its fetches move to just after the batch,
    busiest targets first (RATE_BATCH_*, ``forecast.daily_batch_time``), and the batch's ties are no burst.

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
    memory_items: float | None = RATE_MEMORY_ITEMS
    day_half_life_s: float | None = RATE_DAY_HALF_LIFE_S
    day_anchor: bool = RATE_DAY_ANCHOR
    #: Under a budget, the longest period is at least this many budget mean periods (``budget_plan``).
    budget_stretch: float | None = RATE_BUDGET_STRETCH
    #: The longest period under a budget (``set_budget_scale``); None: ``max_period_s``.
    budget_max_s: float | None = None
    #: Above this phase agreement of the targets under a budget, no daily anchor (RATE_SHARED_CLOCK_AGREEMENT).
    shared_clock_agreement: float | None = RATE_SHARED_CLOCK_AGREEMENT
    #: Whether the targets under the budget keep one clock (``apply_budget``): the daily anchor is then off.
    shared_clock: bool = False
    #: When ``apply_budget`` last judged ``shared_clock`` (the policy's clock, seconds); None: never.
    clock_checked_s: float | None = None
    #: Shared by all targets of this policy (``shhd.calibration``); None: no calibration.
    calibration: RateCalibration | None = field(
        default_factory=lambda: RateCalibration() if RATE_CALIBRATE else None, repr=False, compare=False
    )
    name: str = "rate"

    def initial_state(self) -> dict[str, Any]:
        return {
            "period_s": self.initial_period_s,
            "last_s": None,
            "items": 0.0,
            "exposure_s": 0.0,
            "prior_weight": 1.0,
            "times": [],
            "day": [0.0] * 6,
            "sessions": [0.0] * 5,
            "on_clock": False,
        }

    def set_budget_scale(self, scale: float | None, max_period_s: float | None = None) -> None:
        """Use C = ``scale`` (from ``budget_scale`` or ``budget_plan``) for every later period, and the longest
        period ``max_period_s`` when given (``budget_plan``); None returns to sqrt(I0) and ``max_period_s``."""
        self.scale = scale
        self.budget_max_s = max_period_s if scale is not None else None
        if scale is None:
            self.shared_clock, self.clock_checked_s = False, None

    def profiles_due(self, now: float) -> bool:
        """Whether the next ``apply_budget`` should judge the shared clock again (every RATE_SHARED_CLOCK_CHECK_S)."""
        return self.clock_checked_s is None or now - self.clock_checked_s >= RATE_SHARED_CLOCK_CHECK_S

    def budget_view(self, state: dict[str, Any], profile: bool = True) -> BudgetView:
        """This target's part in ``apply_budget``; its daily profile only when ``profile``."""
        return BudgetView(self.rate_of(state), self.daily_profile(state) if profile else None)

    def apply_budget(
        self,
        views: Sequence[BudgetView],
        budget_per_s: float,
        min_period_s: float,
        max_period_s: float,
        now: float | None = None,
    ) -> float:
        """Split ``budget_per_s`` over the targets of ``views`` by the square-root rule (``budget_plan``), and turn the
        daily anchor off while they keep one clock (RATE_SHARED_CLOCK_AGREEMENT); returns C. Views without their
        daily profile (``budget_view(state, profile=False)``) leave that judgement as it was.

        Each target with a daily profile strong enough to anchor weighs in by its fetch rate under the new split: the
        crowding is of fetches, so the busy targets count most.
        """
        scale, longest = budget_plan(
            [v.rate_per_s for v in views], budget_per_s, min_period_s, max_period_s, self.budget_stretch
        )
        self.set_budget_scale(scale, longest)
        if any(v.daily is None for v in views):
            return scale  # the profiles were not read this time: the last judgement stands
        anchoring = [
            (v.daily, 1.0 / self.period_for(v.rate_per_s))
            for v in views
            if v.daily is not None and abs(v.daily) >= RATE_DAY_ANCHOR_AMPLITUDE
        ]
        limit = self.shared_clock_agreement
        self.shared_clock = limit is not None and phase_agreement(anchoring) > limit
        self.clock_checked_s = now
        return scale

    def _longest(self) -> float:
        return self.max_period_s if self.budget_max_s is None else max(self.budget_max_s, self.max_period_s)

    @property
    def longest_period_s(self) -> float:
        """The longest period the policy gives now: ``max_period_s``, or under a budget too small for it the stretch
        ``budget_plan`` chose. The scheduler clamps by it, or it would spend more than the budget."""
        return self._longest()

    def describe(self) -> dict[str, Any]:
        """What the policy steers by now, for an operator: the budget's square-root constant (None without a
        budget, or before the first ``apply_budget``), the longest period it allows, whether the daily anchor is
        on, and the calibration's classes (``RateCalibration.describe``)."""
        return {
            "budget_scale": self.scale,
            "longest_period_s": self._longest(),
            "daily_anchor": self.day_anchor and not self.shared_clock,
            "targets_keep_one_clock": self.shared_clock,
            "calibration": None if self.calibration is None else self.calibration.describe(),
        }

    def _half_life(self, state: dict[str, Any]) -> float:
        """The forgetting half-life: ``half_life_s``, stretched to ``memory_items`` mean gaps (RATE_MEMORY_ITEMS)."""
        if self.memory_items is None:
            return self.half_life_s
        return _clamp(
            self.memory_items / self.rate_of(state), self.half_life_s, max(RATE_HALF_LIFE_MAX_S, self.half_life_s)
        )

    def own_rate(self, state: dict[str, Any]) -> float:
        """The target's own rate estimate (items/s, > 0): its decayed items and exposure, with the fading prior."""
        a = RATE_PRIOR_ITEMS * float(state.get("prior_weight", 1.0))
        return max(
            (float(state["items"]) + a) / (float(state["exposure_s"]) + a * self.initial_period_s), RATE_FLOOR_PER_S
        )

    def rate_of(self, state: dict[str, Any]) -> float:
        """Estimated long-run item rate (items/s) of a target, always > 0: its own estimate, calibrated."""
        own = self.own_rate(state)
        return own if self.calibration is None else self.calibration.calibrated(own)

    def _teach(self, state: dict[str, Any], observation: Observation, last: float) -> None:
        """Tell the calibration what the target's own estimate predicted since ``last`` and what the crawl found;
        not while the prior still outweighs the target's items (every new target starts at the prior's rate), except
        when the estimate is near silent: a silent target's empty crawls are what the near-silent class learns from."""
        if self.calibration is None:
            return
        own = self.own_rate(state)
        prior_items = RATE_PRIOR_ITEMS * float(state.get("prior_weight", 1.0))
        if float(state["items"]) >= RATE_CALIBRATION_MIN_EVIDENCE * prior_items or self.calibration.is_silent(own):
            self.calibration.observe(own, observation.now_s - last, observation.new_items, observation.now_s)

    def _scale(self) -> float:
        reference = self.initial_period_s if self.reference_period_s is None else self.reference_period_s
        return math.sqrt(reference) if self.scale is None else self.scale

    def period_for(self, rate: float) -> float:
        """The square-root-rule period for an item rate."""
        return _clamp(self._scale() / math.sqrt(rate), self.min_period_s, self._longest())

    def next_period(self, state: dict[str, Any], observation: Observation) -> Decision:
        now = observation.now_s
        last = state.get("last_s")
        out: dict[str, Any] = {
            "last_s": now,
            "prior_weight": float(state.get("prior_weight", 1.0)),
            "items": float(state["items"]),
            "exposure_s": float(state["exposure_s"]),
            "day": [float(x) for x in state.get("day", [0.0] * 6)],
            "sessions": _session_state(state),
        }
        if last is not None:
            self._teach(state, observation, float(last))
            half_life = self._half_life(state)
            day_half_life = self.day_half_life_s or half_life
            out["prior_weight"] *= 2.0 ** (-max(now - float(last), 0.0) / half_life)
            out["items"], out["exposure_s"] = _decayed_counts(
                out["items"], out["exposure_s"], float(last), observation, half_life
            )
            day = out["day"] + [0.0] * (8 - len(out["day"]))
            out["day"] = _day_moments(day[:6], float(last), observation, day_half_life)
            if self.day_half_life_s is not None:
                out["day"] += list(_decayed_counts(day[6], day[7], float(last), observation, day_half_life))
            times = state.get("times", [])
            out["sessions"] = _session_moments(
                out["sessions"], times[-1] if times else None, float(last), observation, day_half_life
            )
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
        period = self._period(out, now) if delay is None else _clamp(delay, self.min_period_s, self._longest())
        out["period_s"] = period
        return Decision(period, out, -1)

    def _period(self, state: dict[str, Any], now: float) -> float:
        """The next period from the rate forecast (+ daily profile, + burst)."""
        mu = 0.5 * self._scale() ** 2
        rate = self.rate_of(state)
        amplitude = self.daily_profile(state)
        batch = self._batch_time(state, rate)
        excess = (
            recent_excess(state["times"], now, rate, RATE_BURST_PRIOR_ITEMS, RATE_BURST_MIN_RUN)
            if self.burst_fade_s is not None and batch is None
            else 0.0
        )
        if excess == 0.0 and amplitude == 0j:
            return self._anchored(self.period_for(rate), amplitude, now, batch)
        fade = 1.0 / (self.burst_fade_s or 1.0)

        def lag(tau: float) -> float:
            return diurnal_lag(rate, amplitude, now, tau) + burst_lag(rate, excess, fade, tau)

        return self._anchored(solve_fetch_time(lag, mu, self.min_period_s, self._longest()), amplitude, now, batch)

    def daily_profile(self, state: dict[str, Any]) -> complex:
        """The relative daily amplitude A of the target's rate, λ(s) = λ (1 + Re(A e^{iωs})); 0 without ``diurnal``."""
        if not self.diurnal:
            return 0j
        day = [float(x) for x in state.get("day", ())]
        if len(day) < 6:
            return 0j  # a state stored before the daily profile
        items, exposure = (day[6], day[7]) if len(day) >= 8 else (float(state["items"]), float(state["exposure_s"]))
        return daily_amplitude(day[:6], items, exposure, _dispersion(state.get("times", [])))

    def _batch_time(self, state: dict[str, Any], rate: float) -> BatchTime | None:
        """When to fetch a target that publishes in a daily batch, busier ones first; None when it does not
        (RATE_BATCH_*)."""
        if not (self.diurnal and self.day_anchor):
            return None
        sessions = _session_state(state)
        if sessions[4] > RATE_BATCH_MAX_LATE_SHARE * (sessions[3] + sessions[4]):
            return None  # items that turn up after their stamp: the stamps are dates, not publication times
        day = state["day"]
        items = day[6] if len(day) >= 8 else float(state["items"])
        after = daily_batch_time(
            sessions,
            day,
            items,
            RATE_BATCH_MIN_SESSIONS,
            RATE_BATCH_RESULTANT,
            RATE_BATCH_MIN_DELAY_S,
            RATE_BATCH_MIN_EXACT_SESSIONS,
        )
        if after is None:
            return None
        # Busier first (RATE_BATCH_QUEUE_S) by the long-run rate of the daily profile's counts: the rate estimate's
        # short memory swings with each day's batch and churned the order (docs/REVISIT.md, "#21, fifteenth round").
        steady = day[6] / day[7] if len(day) >= 8 and day[7] > 0 else rate
        return BatchTime(after, RATE_BATCH_QUEUE_S / (1.0 + steady * DAY_S))

    def _anchored(self, period: float, amplitude: complex, now: float, batch: BatchTime | None = None) -> float:
        """``period``, moved to just after the target's next unseen daily batch (``batch``; periods up to
        RATE_BATCH_ANCHOR_MAX days, however short), else to the nearest descending mean crossing of the daily profile
        (RATE_DAY_ANCHOR), unless the budgeted targets keep one clock (``shared_clock``)."""
        if batch is not None:
            return period if period > RATE_BATCH_ANCHOR_MAX * DAY_S else self._after_next_batch(batch, now)
        if (
            not self.day_anchor
            or self.shared_clock
            or period < RATE_DAY_ANCHOR_MIN * DAY_S
            or abs(amplitude) < RATE_DAY_ANCHOR_AMPLITUDE
        ):
            return period
        # λ(s) ∝ 1 + |A| cos(ωs + arg A) falls through its mean where ωs + arg A = π/2 (mod 2π).
        crossing = ((math.pi / 2 - cmath.phase(amplitude)) / OMEGA_DAY) % DAY_S
        nearest = crossing + round((now + period - crossing) / DAY_S) * DAY_S - now
        if nearest < self.min_period_s:
            nearest += DAY_S
        # Past the longest period the period stays as it is. Taking the crossing a day earlier instead fetched long
        # before the period was up and found little: with a longest period of a day, every period of 0.75-1 day
        # went to whatever crossing came next, hours away (docs/REVISIT.md, "#21, eighth round").
        return nearest if nearest <= self._longest() else period

    def _after_next_batch(self, batch: BatchTime, now: float) -> float:
        """The wait until this target's place in the queue after the first batch this fetch has not seen.

        A fetch at or after a batch's time has that batch's items, so the next fetch worth making follows the next
        batch. Counting from the last batch seen, not from now + period, matters when the shared queue made this
        fetch early, just before its batch: the batch nearest to now + period is then a day later, and a day-stamped
        site's busiest targets lost a day's items to every such fetch (docs/REVISIT.md, "#21, seventh round").
        The wait may pass the longest period by up to the queue place (at most RATE_BATCH_QUEUE_S): a batch target
        waits for its batch rather than fetch before it and find nothing.
        """
        seen = now - (now - batch.after_s) % DAY_S  # the latest batch time at or before now
        return max(seen + DAY_S + batch.queue_s - now, self.min_period_s)


class BatchTime(NamedTuple):
    """When to fetch a target that publishes in a daily batch (``RatePolicy._batch_time``)."""

    #: Time of day (seconds after 00:00 UTC) just after the batch: its items are all there from then on.
    after_s: float
    #: How much later this target's fetch comes, for its place in the queue after the batch (busier ones first).
    queue_s: float


def _recent_times(
    times: Sequence[float], last: float | None, observation: Observation, clock_period_s: float | None = None
) -> list[float]:
    """The last RATE_TIMES_KEPT item times after this crawl: the new items' times when the source gives them,
    else the newest item's time only (as the scheduler's Report carries it). With several new items and only the
    newest time, the older ones are placed one clock period apart before it when the target was on a clock
    (``clock_period_s``); otherwise their times are unknown and the history restarts at the newest. New items
    without a usable time (none, or one outside (last crawl, now]) empty the history."""
    now = observation.now_s
    new = sorted(t for t in observation.new_item_times_s if (last is None or last < t) and t <= now)
    new = new[-observation.new_items :] if observation.new_items > 0 else []
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
    items = complex(day[0], day[1]) * decay + sum(
        2.0 ** (-(now - t) / half_life) * cmath.exp(1j * OMEGA_DAY * t) for t in times
    )
    moments = [items]
    for harmonic, (re, im) in ((1, (day[2], day[3])), (2, (day[4], day[5]))):
        c = complex(kappa, harmonic * OMEGA_DAY)
        fresh = (cmath.exp(1j * harmonic * OMEGA_DAY * now) - decay * cmath.exp(1j * harmonic * OMEGA_DAY * last)) / c
        moments.append(complex(re, im) * decay + fresh)
    return [x for z in moments for x in (z.real, z.imag)]


def _session_state(state: dict[str, Any]) -> list[float]:
    """The state's five session moments (``_session_moments``); zeros for a state stored before them."""
    kept = [float(x) for x in state.get("sessions", ())][:5]
    return kept + [0.0] * (5 - len(kept))


def _session_moments(
    sessions: Sequence[float], previous: float | None, last: float, observation: Observation, half_life: float
) -> list[float]:
    """The decayed [Σ w cos ωt, Σ w sin ωt, Σ w] of the first items of sessions (RatePolicy), then the decayed counts
    of new items whose stamp fell in (last crawl, now] and of those stamped at or before the last crawl. A new item
    starts a session when the item before it (``previous``, the newest time kept, or the one before it in this
    crawl) is at least RATE_BATCH_GAP_S older, or unknown. Untimed items add nothing."""
    now = observation.now_s
    decay = 2.0 ** (-max(now - last, 0.0) / half_life)
    re, im, n, stamped, late = (x * decay for x in sessions)
    times: list[float] = []
    if observation.new_items > 0:
        times = sorted(t for t in observation.new_item_times_s if last < t <= now)[-observation.new_items :]
        if not times and last < observation.newest_item_s <= now:
            times = [observation.newest_item_s]
    if observation.new_item_times_s:
        early = sum(1 for t in observation.new_item_times_s if 0 < t <= last)
    else:
        early = int(observation.new_items > 0 and 0 < observation.newest_item_s <= last)
    for t in times:
        if previous is None or t - previous >= RATE_BATCH_GAP_S:
            w = 2.0 ** (-(now - t) / half_life)
            re += w * math.cos(OMEGA_DAY * t)
            im += w * math.sin(OMEGA_DAY * t)
            n += w
        previous = t
    return [re, im, n, stamped + len(times), late + min(early, observation.new_items)]


def _decayed_counts(
    items: float, exposure: float, last: float, observation: Observation, half_life: float
) -> tuple[float, float]:
    """Exponentially forgotten item count and exposure after the interval (last, now] (RatePolicy)."""
    now = observation.now_s
    dt = max(now - last, 0.0)
    decay = 2.0 ** (-dt / half_life)
    times = [t for t in observation.new_item_times_s if last < t <= now][: observation.new_items]
    untimed = observation.new_items - len(times)
    fresh = sum(2.0 ** (-(now - t) / half_life) for t in times) + untimed * 2.0 ** (-dt / 2 / half_life)
    return items * decay + fresh, exposure * decay + half_life / math.log(2) * (1.0 - decay)
