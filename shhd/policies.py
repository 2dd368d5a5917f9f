"""Re-crawl (revisit) policies behind one interface, so the scheduler and the revisit simulator run the very
same code. A policy is pure: it gets an Observation (what one crawl saw, with ``now`` passed in) and the
target's previous JSON-serialisable state, and returns the next period plus the new state.

INTERFACE CONTRACT (used by scheduler_server and bench/revisit; keep it stable):

    policy = make_policy("shhd", min_period_s=60, max_period_s=86400, initial_period_s=600)
    state = policy.initial_state()                       # dict, JSON-serialisable, stored by the scheduler
    decision = policy.next_period(state, observation)    # -> Decision(period_s, state, distance)

A stored state may have been written by another policy (the scheduler's ``scheduler.policy`` changed between
restarts) or before a key existed: ``resume_state(policy, state)`` completes it from ``policy.initial_state()``.

Extensions (additive): ``RatePolicy.rate_of(state)`` gives a target's estimated item rate (items/s), and
``allocate_periods(rates, budget_per_s, min_period_s, max_period_s)`` splits a global fetch budget over targets by
the square-root rule; ``RatePolicy.set_budget_scale`` makes its periods follow that split, and
``RatePolicy.apply_budget(views, ...)`` does both from every target's ``budget_view(state)``, and turns the daily
anchor off while the targets keep one clock.

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

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from shhd.allocation import BudgetView, allocate_periods, budget_plan, budget_scale
from shhd.calibration import RateCalibration
from shhd.fingerprint import BITS, hamming
from shhd.observation import Decision, Observation, clamp
from shhd.period import SHHDController, ShhdState
from shhd.rate import RATE_CALIBRATE, RatePolicy

_clamp = clamp

__all__ = [
    "POLICY_NAMES",
    "BudgetView",
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
    "budget_plan",
    "budget_scale",
    "cho_rate_mle",
    "make_policy",
    "resume_state",
]


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
        new = controller.update(
            ShhdState(float(state["period_s"]), math.inf if ssthresh is None else ssthresh), distance
        )
        out = {
            "period_s": new.period_s,
            "ssthresh_s": None if math.isinf(new.ssthresh_s) else new.ssthresh_s,
            "fingerprint": observation.fingerprint,
        }
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
        # In e^{-λt} form, so a changed interval far longer than 1/λ adds ~0 instead of overflowing:
        # t / (e^{λt} - 1) = t w / (1 - w) and its λ-derivative -t² e^{λt} / (e^{λt} - 1)² = -t² w / (1 - w)².
        w = np.exp(-lam * t)
        d = -np.expm1(-lam * t)
        excess = float((t * w / d).sum()) - total_u
        if excess > 0:
            lo = lam
        else:
            hi = lam
        slope = -float((t * t * w / (d * d)).sum())
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
        """Estimated change rate (changes/s) from the state's history (intervals of 0 s or less, which a history
        stored by an older version may hold, say nothing: left out)."""
        pseudo = 0.5 * self.initial_period_s
        changed = [pseudo] + [t for t, c in state["history"] if c and t > 0]
        unchanged = [pseudo] + [t for t, c in state["history"] if not c and t > 0]
        return cho_rate_mle(changed, unchanged)

    def next_period(self, state: dict[str, Any], observation: Observation) -> Decision:
        history = list(state["history"])
        changed = _changed(state.get("fingerprint"), observation)
        last = state.get("last_s")
        # A crawl at the same time as the last one, or before it (the clock stepped back), adds no interval: one of
        # 0 s made the estimate 0/0 and a negative one could leave no unchanged time at all (ValueError).
        if last is not None and changed is not None and observation.now_s > float(last):
            history.append([observation.now_s - float(last), 1 if changed else 0])
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


def resume_state(policy: RevisitPolicy, state: dict[str, Any]) -> dict[str, Any]:
    """``state`` as ``policy`` can go on from it: each key of ``policy.initial_state()`` it lacks taken from there,
    and each key it does not know dropped.

    Why: the scheduler keeps each task's state in its record, and a record written under another policy (an
    operator changed ``scheduler.policy`` between restarts), or by a version before a key existed, lacks keys that
    this policy reads with ``state[key]`` (KeyError at every report of the task). The policies share a key only
    where it means the same (``period_s``, ``last_s``, ``fingerprint``), so what they have in common carries over
    and the rest starts as for a new task. Foreign keys go: ``fixed`` keeps the state it is given, and a ``last_s``
    that went through it from another policy would name a crawl long past to the next one. A state with exactly
    the policy's keys is returned as it is (the same object)."""
    initial = policy.initial_state()
    if initial.keys() == state.keys():
        return state
    return {**initial, **{key: value for key, value in state.items() if key in initial}}


POLICY_NAMES: tuple[str, ...] = ("fixed", "shhd", "nutch", "cho", "sart", "rate")
_POLICIES: dict[str, type] = {
    "fixed": FixedPolicy,
    "shhd": ShhdPolicy,
    "nutch": NutchPolicy,
    "cho": ChoPolicy,
    "sart": SartPolicy,
    "rate": RatePolicy,
}


def make_policy(
    name: str,
    *,
    min_period_s: float,
    max_period_s: float,
    initial_period_s: float,
    reference_period_s: float | None = None,
    calibrate: bool = RATE_CALIBRATE,
) -> RevisitPolicy:
    """Build a policy by name (see POLICY_NAMES) with the scheduler's bounds and first period.

    ``reference_period_s`` (setting ``scheduler.rate_reference_period_s``) only matters to ``rate`` without a
    global budget: the period of a target that publishes one item per that period; None means the first period.
    ``calibrate`` (setting ``scheduler.rate_calibration``) only matters to ``rate``: False keeps each target's own
    rate estimate, without the population's calibration (``shhd.calibration``).
    """
    cls = _POLICIES.get(name)
    if cls is None:
        raise ValueError(f"unknown revisit policy {name!r} (known: {', '.join(POLICY_NAMES)})")
    if cls is RatePolicy:
        return RatePolicy(
            min_period_s,
            max_period_s,
            initial_period_s,
            reference_period_s=reference_period_s,
            calibration=RateCalibration() if calibrate else None,
        )
    policy: RevisitPolicy = cls(min_period_s, max_period_s, initial_period_s)
    return policy
