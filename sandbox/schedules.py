"""When new items appear: pure arrival schedules (no clock reads, no I/O).

A schedule turns a seeded RNG and a start time into an endless, increasing sequence of publish times (epoch
ms). The sequence depends only on (schedule, seed, start), never on when or how often it is read, so the
ground truth of a run is reproducible and a site can materialise items lazily up to "now".

Kinds (``kind`` in the scenario):

- ``periodic``: one item every ``interval_s``, the first at ``offset_s`` (default: one interval) after start —
  the paper's mall test (one review every 10 minutes).
- ``poisson``: exponential gaps, ``per_hour`` items per hour on average.
- ``bursty``: bursts of ``burst_size`` items ``burst_spread_s`` apart; bursts arrive with exponential gaps
  of mean ``interval_s``.
- ``static``: nothing new ever (only the backlog).

Consecutive items of one target are at least ``MIN_GAP_MS`` apart, which keeps generated ids unique.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from icecrawler.errors import ConfigError

__all__ = ["KINDS", "MIN_GAP_MS", "Schedule", "arrivals", "backlog_times"]

#: Smallest gap between two items of one target (simulated ms).
MIN_GAP_MS = 1000

ScheduleKind = Literal["periodic", "poisson", "bursty", "static"]
KINDS: tuple[str, ...] = ("periodic", "poisson", "bursty", "static")


@dataclass(frozen=True)
class Schedule:
    """One target's arrival process; the fields a kind does not use are ignored."""

    kind: ScheduleKind = "static"
    interval_s: float = 600.0
    offset_s: float | None = None
    per_hour: float = 6.0
    burst_size: int = 5
    burst_spread_s: float = 10.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"unknown schedule kind {self.kind!r} (known: {', '.join(KINDS)})")
        if self.kind in ("periodic", "bursty") and self.interval_s <= 0:
            raise ConfigError(f"schedule {self.kind}: interval_s must be > 0")
        if self.kind == "poisson" and self.per_hour <= 0:
            raise ConfigError("schedule poisson: per_hour must be > 0")
        if self.kind == "bursty" and self.burst_size < 1:
            raise ConfigError("schedule bursty: burst_size must be >= 1")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Schedule:
        known = {"kind", "interval_s", "offset_s", "per_hour", "burst_size", "burst_spread_s"}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"unknown schedule key(s) {sorted(unknown)} (known: {sorted(known)})")
        return cls(**dict(data))

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}

    def expected_count(self, start_ms: int, now_ms: int) -> int | None:
        """Exact number of items by ``now_ms`` for deterministic kinds (periodic, static); None otherwise."""
        if self.kind == "static":
            return 0
        if self.kind != "periodic":
            return None
        first = start_ms + int(self._offset() * 1000)
        if now_ms < first:
            return 0
        return (now_ms - first) // self._step_ms() + 1

    def _offset(self) -> float:
        return self.interval_s if self.offset_s is None else self.offset_s

    def _step_ms(self) -> int:
        return max(MIN_GAP_MS, int(self.interval_s * 1000))

    def _gaps_s(self, rng: random.Random) -> Iterator[float]:
        """Seconds from the previous item (or from the start) to the next one."""
        if self.kind == "static":
            return
        if self.kind == "periodic":
            yield self._offset()
            while True:
                yield self._step_ms() / 1000
        elif self.kind == "poisson":
            while True:
                yield rng.expovariate(self.per_hour / 3600.0)
        else:
            while True:
                yield rng.expovariate(1.0 / self.interval_s)
                for _ in range(self.burst_size - 1):
                    yield self.burst_spread_s * rng.uniform(0.5, 1.5)


def arrivals(schedule: Schedule, rng: random.Random, start_ms: int) -> Iterator[int]:
    """Publish times (epoch ms, strictly increasing by >= MIN_GAP_MS) after ``start_ms``."""
    previous: int | None = None
    at = float(start_ms)
    for gap in schedule._gaps_s(rng):
        at += gap * 1000
        when = int(at)
        if previous is not None and when < previous + MIN_GAP_MS:
            when = previous + MIN_GAP_MS
            at = float(when)
        previous = when
        yield when


def backlog_times(count: int, gap_s: float, rng: random.Random, start_ms: int) -> list[int]:
    """``count`` items published before ``start_ms`` (oldest first), roughly ``gap_s`` apart with jitter."""
    gap_ms = max(2 * MIN_GAP_MS, int(gap_s * 1000))
    times = []
    at = start_ms
    for _ in range(count):
        at -= gap_ms + int(rng.uniform(-0.25, 0.25) * gap_ms)
        times.append(at)
    return sorted(times)
