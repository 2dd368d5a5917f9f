"""Politeness shared by every worker, because it lives in the scheduler (url-frontier's per-queue delay and
BlockQueueUntil, kept here instead of per process as in scrapy-redis).

Per host:
* with a spacing > 0 a host has at most one task in flight, and the next task of that host is leased no
  sooner than ``spacing`` after the previous one was leased AND after it ended (report, release or lease
  expiry). Since a client fetches only between lease and report, two tasks' fetches of one host are never
  closer than the spacing, whatever the clients' timing;
* a Banned/RateLimited report blocks the host until its Retry-After (or ``scheduler.host_block_s``).

All times here are wall-clock seconds: sites care about real request rates, not simulated time.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any

__all__ = ["HostGate", "RateWindow"]


class RateWindow:
    """Events counted in one-second buckets over a sliding window (default one minute)."""

    def __init__(self, window_s: float = 60.0) -> None:
        self.window_s = window_s
        self._buckets: collections.deque[list[float]] = collections.deque()
        self._total = 0.0

    def _trim(self, now: float) -> None:
        while self._buckets and self._buckets[0][0] <= now - self.window_s:
            self._total -= self._buckets.popleft()[1]

    def add(self, now: float, amount: float = 1.0) -> None:
        second = float(int(now))
        if self._buckets and self._buckets[-1][0] == second:
            self._buckets[-1][1] += amount
        else:
            self._buckets.append([second, amount])
        self._total += amount
        self._trim(now)

    def total(self, now: float) -> float:
        self._trim(now)
        return self._total


@dataclass
class _Host:
    last_lease: float = float("-inf")
    last_end: float = float("-inf")
    inflight: int = 0
    blocked_until: float = 0.0
    block_reason: str = ""


class HostGate:
    """Decides whether a host may be given another task now; see the module docstring."""

    def __init__(self, spacing_s: float) -> None:
        self.spacing_s = spacing_s
        self._hosts: dict[str, _Host] = collections.defaultdict(_Host)
        self.leases: collections.defaultdict[str, RateWindow] = collections.defaultdict(RateWindow)

    def ready_in(self, host: str, now: float) -> float:
        """Seconds until ``host`` may get a task (0: now); ``inf`` while a spaced host has a task in flight."""
        state = self._hosts[host]
        wait = max(0.0, state.blocked_until - now)
        if self.spacing_s > 0:
            if state.inflight > 0:
                return float("inf")
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
        state = self._hosts[host]
        if until > state.blocked_until:
            state.blocked_until = until
            state.block_reason = reason

    def blocks(self) -> dict[str, tuple[float, str]]:
        """Current blocks, to persist them."""
        return {host: (s.blocked_until, s.block_reason) for host, s in self._hosts.items() if s.blocked_until}

    def describe(self, now: float) -> dict[str, Any]:
        return {
            host: {
                "inflight": s.inflight,
                "spacing_s": self.spacing_s,
                "ready_in_s": round(min(self.ready_in(host, now), 1e9), 3),
                "blocked_for_s": round(max(0.0, s.blocked_until - now), 3),
                "block_reason": s.block_reason if s.blocked_until > now else "",
                "leases_last_min": self.leases[host].total(now),
            }
            for host, s in sorted(self._hosts.items())
        }
