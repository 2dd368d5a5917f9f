"""The SHHD period controller (simhash + Hamming distance), as the paper describes it.

After each crawl the Hamming distance d between the previous and the current fingerprint picks a band:

    d <= GROWTH_MAX_D (3)              growth: period doubles (slow start) below ssthresh, then grows additively
    GROWTH_MAX_D < d < SHRINK_MIN_D    stable: period unchanged
    d >= SHRINK_MIN_D (25)             shrink: ssthresh = max(period / 2, min); period = period / 2

then the period is clamped to [min, max]. The paper's bands overlap at d = 3 ([0,3] and [3,25)); we put d = 3 in
growth, which is Manku et al.'s near-duplicate threshold (d <= 3 means "the same page"). The TCP-like ssthresh and
the additive step are our reading of "exponential at first like TCP slow start": the paper gives no numbers.
d < 0 (no previous fingerprint) leaves the period unchanged. Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["GROWTH_MAX_D", "SHRINK_MIN_D", "SHHDController", "ShhdState", "band"]

#: Largest distance still treated as "unchanged" (growth band). Manku et al.: near-duplicate iff d <= 3.
GROWTH_MAX_D = 3
#: Smallest distance treated as "changed a lot" (shrink band); the paper's 25.
SHRINK_MIN_D = 25


def band(distance: int) -> str:
    """The paper's band for a Hamming distance: "growth", "stable" or "shrink" ("none" when d < 0)."""
    if distance < 0:
        return "none"
    if distance <= GROWTH_MAX_D:
        return "growth"
    if distance < SHRINK_MIN_D:
        return "stable"
    return "shrink"


@dataclass(frozen=True)
class ShhdState:
    """Controller state: the current period and the slow-start threshold (inf until the first shrink)."""

    period_s: float
    ssthresh_s: float = math.inf


@dataclass(frozen=True)
class SHHDController:
    """The SHHD update rule with its bounds.

    ``step_s`` is the additive growth once the period has reached ssthresh (docs/REVISIT.md uses the
    first period t0). ``slow_start=False`` gives the "pure x2 / ÷2" variant (doubling at any period).
    """

    min_period_s: float
    max_period_s: float
    step_s: float
    slow_start: bool = True

    def update(self, state: ShhdState, distance: int) -> ShhdState:
        """Next state after a crawl whose fingerprint moved by ``distance`` bits."""
        period, ssthresh = state.period_s, state.ssthresh_s
        kind = band(distance)
        if kind == "growth":
            period = 2 * period if (not self.slow_start or period < ssthresh) else period + self.step_s
        elif kind == "shrink":
            ssthresh = max(period / 2, self.min_period_s)
            period = period / 2
        return ShhdState(min(max(period, self.min_period_s), self.max_period_s), ssthresh)
