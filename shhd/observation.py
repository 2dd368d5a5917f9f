"""What one crawl of a target saw (Observation) and what a revisit policy answers (Decision): the types every
policy in ``shhd.policies`` and ``shhd.rate`` shares."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Decision", "Observation", "clamp"]


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


def clamp(x: float, lo: float, hi: float) -> float:
    return min(max(x, lo), hi)
