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
- ``trace``: a real publication trace (``times``, unix seconds, ascending; ``sandbox.tracefile`` reads a file of
  them), shifted so that its instant ``start_s`` (default: its first item) lands on the start. Its items before
  ``start_s`` are the target's backlog, published before the start at their shifted times (``trace_times``): a
  real target had them when a crawler first met it, so a first crawl reads them as it would have read them there.

Consecutive items of one target are at least ``MIN_GAP_MS`` apart, which keeps generated ids unique. A trace's
items closer than that (several in one second, a day's batch at one instant) are spread, never dropped: an item
from the start on goes later, to ``MIN_GAP_MS`` after the one before; a backlog item goes earlier, to ``MIN_GAP_MS``
before the one after, so the backlog stays before the start. ``trace_times`` counts them.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from icecrawler.errors import ConfigError
from sandbox.tracefile import DAY_S, finite

__all__ = [
    "KINDS",
    "MIN_GAP_MS",
    "TRACE_MAX_DAYS",
    "Schedule",
    "TraceTimes",
    "arrivals",
    "backlog_times",
    "target_times",
    "trace_times",
]

#: Smallest gap between two items of one target (simulated ms).
MIN_GAP_MS = 1000
#: A trace (its items and its start) spans at most this many days: a century. Much more puts its items on the run's
#: clock outside the years a date can show (``sandbox.content.beijing``: year 1 to 9999).
TRACE_MAX_DAYS = 36_500

ScheduleKind = Literal["periodic", "poisson", "bursty", "static", "trace"]
KINDS: tuple[str, ...] = ("periodic", "poisson", "bursty", "static", "trace")


@dataclass(frozen=True)
class Schedule:
    """One target's arrival process; the fields a kind does not use are ignored."""

    kind: ScheduleKind = "static"
    interval_s: float = 600.0
    offset_s: float | None = None
    per_hour: float = 6.0
    burst_size: int = 5
    burst_spread_s: float = 10.0
    #: ``trace``: the item times, unix seconds, ascending (equal times allowed).
    times: tuple[float, ...] = ()
    #: ``trace``: the instant of the trace (unix seconds) that lands on the start; None: its first item.
    start_s: float | None = None

    def __post_init__(self) -> None:
        if self.kind == "trace":
            self._check_trace()
        elif self.times != () or self.start_s is not None:
            # They would be ignored, yet written by to_dict into the scenario's digest.
            raise ConfigError(f"schedule {self.kind}: times and start_s are for kind trace only")
        if self.kind not in KINDS:
            raise ConfigError(f"unknown schedule kind {self.kind!r} (known: {', '.join(KINDS)})")
        if self.kind in ("periodic", "bursty") and self.interval_s <= 0:
            raise ConfigError(f"schedule {self.kind}: interval_s must be > 0")
        if self.kind == "poisson" and self.per_hour <= 0:
            raise ConfigError("schedule poisson: per_hour must be > 0")
        if self.kind == "bursty" and self.burst_size < 1:
            raise ConfigError("schedule bursty: burst_size must be >= 1")

    def _check_trace(self) -> None:
        """A trace's times: a non-empty list of finite numbers, ascending (a scenario file gives a list)."""
        if isinstance(self.times, str | bytes | Mapping) or not isinstance(self.times, tuple | list):
            raise ConfigError(f"schedule trace: times must be a list of unix seconds, got {self.times!r}")
        bad = next((k for k, x in enumerate(self.times) if not finite(x)), None)
        if bad is not None or not self.times:
            shown = "none" if bad is None else f"item {bad + 1}: {self.times[bad]!r}"[:60]
            raise ConfigError(f"schedule trace: times must be finite numbers (unix seconds), at least one; got {shown}")
        values = tuple(float(x) for x in self.times)
        if any(b < a for a, b in itertools.pairwise(values)):
            raise ConfigError("schedule trace: times must be ascending")
        if self.start_s is not None and not finite(self.start_s):
            raise ConfigError(f"schedule trace: start_s must be a finite number (unix seconds), got {self.start_s!r}")
        start = values[0] if self.start_s is None else float(self.start_s)
        if max(values[-1], start) - min(values[0], start) > TRACE_MAX_DAYS * DAY_S:
            raise ConfigError(f"schedule trace: the times and start_s span more than {TRACE_MAX_DAYS} days")
        object.__setattr__(self, "times", values)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Schedule:
        known = {"kind", "interval_s", "offset_s", "per_hour", "burst_size", "burst_spread_s", "times", "start_s"}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"unknown schedule key(s) {sorted(unknown)} (known: {sorted(known)})")
        return cls(**dict(data))

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain data; ``times`` only for a trace (the other kinds' documents stay as they were)."""
        return {k: (list(v) if k == "times" else v) for k, v in self.__dict__.items() if v is not None and v != ()}

    def expected_count(self, start_ms: int, now_ms: int) -> int | None:
        """Exact number of items after the start by ``now_ms`` (the backlog not counted) for deterministic kinds
        (periodic, static, trace); None otherwise."""
        if self.kind == "static":
            return 0
        if self.kind == "trace":
            return bisect.bisect_right(trace_times(self, start_ms).future, now_ms)
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
    """Publish times (epoch ms, strictly increasing by >= MIN_GAP_MS) after ``start_ms`` (a trace's: from
    ``start_ms`` on, ``trace_times``)."""
    if schedule.kind == "trace":
        yield from trace_times(schedule, start_ms).future
        return
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


@dataclass(frozen=True)
class TraceTimes:
    """A trace schedule's items on the run's clock (epoch ms), and what keeping them MIN_GAP_MS apart moved."""

    #: Items before the start, oldest first: the target's backlog.
    backlog: tuple[int, ...]
    #: Items from the start on, oldest first.
    future: tuple[int, ...]
    #: Items moved to keep MIN_GAP_MS from their neighbour (later from the start on, earlier in the backlog).
    spread: int
    #: The largest such move, ms.
    most_moved_ms: int


def trace_times(schedule: Schedule, start_ms: int) -> TraceTimes:
    """A ``trace`` schedule's item times: each time ``t`` is published at ``start_ms + floor((t - start_s) * 1000)``,
    so the trace's ``start_s`` lands on ``start_ms`` and the gaps between items are the trace's own; times before
    ``start_s`` (and only those) are the backlog. Items closer than MIN_GAP_MS to their neighbour are spread, away
    from the start (module docstring), and counted."""
    if schedule.kind != "trace":
        raise ConfigError(f"trace_times: a {schedule.kind} schedule has no trace")
    start_s = schedule.times[0] if schedule.start_s is None else schedule.start_s
    cut = bisect.bisect_left(schedule.times, start_s)
    shifted = [start_ms + math.floor((t - start_s) * 1000) for t in schedule.times]
    future = shifted[cut:]
    backlog = shifted[:cut]
    spread = 0
    most = 0
    for k in range(1, len(future)):
        least = future[k - 1] + MIN_GAP_MS
        if future[k] < least:
            spread += 1
            most = max(most, least - future[k])
            future[k] = least
    bound = future[0] if future else start_ms - 1 + MIN_GAP_MS
    for k in range(len(backlog) - 1, -1, -1):
        latest = bound - MIN_GAP_MS
        if backlog[k] > latest:
            spread += 1
            most = max(most, backlog[k] - latest)
            backlog[k] = latest
        bound = backlog[k]
    return TraceTimes(tuple(backlog), tuple(future), spread, most)


def target_times(
    schedule: Schedule, backlog: int, backlog_gap_s: float, rng: random.Random, start_ms: int
) -> tuple[list[int], Iterator[int]]:
    """One target's backlog (oldest first) and arrivals from ``start_ms``: a trace brings its own backlog (its items
    before its start: ``backlog`` and ``backlog_gap_s`` are not used), the other kinds draw ``backlog`` items roughly
    ``backlog_gap_s`` apart before the start."""
    if schedule.kind == "trace":
        times = trace_times(schedule, start_ms)
        return list(times.backlog), iter(times.future)
    return backlog_times(backlog, backlog_gap_s, rng, start_ms), arrivals(schedule, rng, start_ms)
