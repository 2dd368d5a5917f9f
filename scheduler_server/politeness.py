"""Politeness shared by every worker, because it lives in the scheduler (url-frontier's per-queue delay and
BlockQueueUntil, kept here instead of per process as in scrapy-redis).

Per host:
* with a spacing > 0 a host has at most one task in flight, and the next task of that host is leased no
  sooner than ``spacing`` after the previous one was leased AND after it ended (report, release or lease
  expiry). Since a client fetches only between lease and report, two tasks' fetches of one host are never
  closer than the spacing, whatever the clients' timing;
* a Banned/RateLimited report blocks the host until its Retry-After (or ``scheduler.host_block_s``);
* the operator may hold a host for a while, or lift a hold or a ban early (``icecrawler hold``).

All times here are wall-clock seconds: sites care about real request rates, not simulated time.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

__all__ = ["HELD_BY_OPERATOR", "Hold", "HostGate", "RateWindow"]

#: How the reason of an operator's hold begins (``icecrawler hold``), telling it apart from a ban's block.
HELD_BY_OPERATOR = "held by the operator"


class RateWindow:
    """Events counted in one-second buckets over a sliding window (default one minute)."""

    def __init__(self, window_s: float = 60.0) -> None:
        self.window_s = window_s
        self._buckets: collections.deque[list[float]] = collections.deque()
        self._total = 0.0

    def _trim(self, now: float) -> None:
        buckets = self._buckets
        if buckets and buckets[-1][0] > now:
            # The wall clock was set back: events "in the future" count as now, or they would count for the jump
            # too (an account's spent budget held it for an hour after a clock set back an hour).
            second = float(int(now))
            for bucket in buckets:
                bucket[0] = min(bucket[0], second)
        while buckets and buckets[0][0] <= now - self.window_s:
            self._total -= buckets.popleft()[1]

    def add(self, now: float, amount: float = 1.0) -> None:
        self._trim(now)
        second = float(int(now))
        if self._buckets and self._buckets[-1][0] == second:
            self._buckets[-1][1] += amount
        else:
            self._buckets.append([second, amount])
        self._total += amount

    def total(self, now: float) -> float:
        self._trim(now)
        return self._total


@dataclass
class Hold:
    """Something refused until a wall-clock time: a host's Retry-After or ban, an account's freeze."""

    until: float = 0.0
    reason: str = ""

    def extend(self, until: float, reason: str) -> None:
        """Holds only grow: a shorter Retry-After never lifts a longer ban."""
        if until > self.until:
            self.until = until
            self.reason = reason

    def remaining(self, now: float) -> float:
        return max(0.0, self.until - now)

    def describe(self, now: float) -> dict[str, Any]:
        return {"held_for_s": round(self.remaining(now), 3), "reason": self.reason if self.until > now else ""}


@dataclass
class _Host:
    last_lease: float = float("-inf")
    last_end: float = float("-inf")
    inflight: int = 0
    block: Hold = field(default_factory=Hold)


class HostGate:
    """Decides whether a host may be given another task now; see the module docstring."""

    def __init__(self, spacing_s: float) -> None:
        self.spacing_s = spacing_s
        self._hosts: dict[str, _Host] = collections.defaultdict(_Host)
        self.leases: collections.defaultdict[str, RateWindow] = collections.defaultdict(RateWindow)

    def ready_in(self, host: str, now: float) -> float:
        """Seconds until ``host`` may get a task (0: now); ``inf`` while a spaced host has a task in flight."""
        state = self._hosts[host]
        wait = state.block.remaining(now)
        if self.spacing_s > 0:
            if state.inflight > 0:
                return float("inf")
            # A last lease or end "in the future" means the wall clock was set back: count it as now, or the host
            # would wait out the jump on top of its spacing.
            state.last_lease, state.last_end = min(state.last_lease, now), min(state.last_end, now)
            wait = max(wait, state.last_lease + self.spacing_s - now, state.last_end + self.spacing_s - now)
        return wait

    def leased(self, host: str, now: float) -> None:
        state = self._hosts[host]
        state.last_lease = now
        state.inflight += 1
        self.leases[host].add(now)

    def ended(self, host: str, now: float) -> None:
        """A task of ``host`` was reported, released or expired."""
        state = self._hosts[host]
        state.inflight = max(0, state.inflight - 1)
        state.last_end = now

    def restore_inflight(self, host: str, now: float) -> None:
        """At start-up: a lease that survived a restart still occupies its host."""
        state = self._hosts[host]
        state.inflight += 1
        state.last_lease = max(state.last_lease, now)

    def block(self, host: str, until: float, reason: str) -> None:
        self._hosts[host].block.extend(until, reason)

    def hold(self, host: str, until: float, reason: str) -> None:
        """The operator's hold: sets the block as given, shorter or lifted (``until`` 0) included, where a ban's
        block only ever grows."""
        state = self._hosts[host]
        state.block.until, state.block.reason = until, reason

    def describe(self, now: float) -> dict[str, Any]:
        return {
            host: {
                "inflight": s.inflight,
                "spacing_s": self.spacing_s,
                "ready_in_s": round(min(self.ready_in(host, now), 1e9), 3),
                "block": s.block.describe(now),
                "leases_last_min": self.leases[host].total(now),
            }
            for host, s in sorted(self._hosts.items())
        }
