"""Re-crawl (revisit) policies behind one interface, so the scheduler and the revisit simulator run the very
same code. A policy is pure: it gets an Observation (what one crawl saw, with ``now`` passed in) and the
target's previous JSON-serialisable state, and returns the next period plus the new state.

INTERFACE CONTRACT (used by scheduler_server and bench/revisit; keep it stable):

    policy = make_policy("shhd", min_period_s=60, max_period_s=86400, initial_period_s=600)
    state = policy.initial_state()                       # dict, JSON-serialisable, stored by the scheduler
    decision = policy.next_period(state, observation)    # -> Decision(period_s, state, distance)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["POLICY_NAMES", "Decision", "Observation", "RevisitPolicy", "make_policy"]


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


POLICY_NAMES: tuple[str, ...] = ("fixed",)


def make_policy(name: str, *, min_period_s: float, max_period_s: float, initial_period_s: float) -> RevisitPolicy:
    """Build a policy by name (see POLICY_NAMES)."""
    if name == "fixed":
        return FixedPolicy(min_period_s, max_period_s, initial_period_s)
    raise ValueError(f"unknown revisit policy {name!r} (known: {', '.join(POLICY_NAMES)})")
