"""One notion of "now" for every process of a crawl, optionally accelerated: the one clock type of the project.

Tests, benchmarks and the demo compress hours into seconds. For that to stay coherent, the sandbox sites,
the scheduler and the clients must agree on simulated time, so all of them read it from the same formula:

    sim_now = origin + (wall_now - origin) * speed + advanced

``origin`` is a wall-clock epoch shared by every process of one run (``--set clock.origin=...``); with
``speed == 1`` this is the wall clock. Periods computed in simulated seconds turn into wall delays with
``to_wall_delay``. Two things only a test harness uses: ``speed == 0`` freezes time (the sandbox's
``--speed 0``; never from settings), and ``advance`` jumps this process's simulated time forward. The wall-clock
source is injected so unit tests never sleep.

``ClockJumpWatch`` notices the wall clock jumping under a long-running daemon, which a daemon that keeps wall-clock
deadlines (leases, holds) must at least say.

``BEIJING`` is the one Beijing time zone (UTC+8, no daylight saving): the sites print their times in it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta, timezone

from icecrawler.errors import ConfigError
from icecrawler.settings import Settings

__all__ = ["BEIJING", "Clock", "ClockJumpWatch"]

#: China Standard Time, which every crawled site shows (often without an offset).
BEIJING = timezone(timedelta(hours=8))


class Clock:
    """Simulated time (epoch seconds or ms) and the wall time it runs on. Thread-safe."""

    def __init__(self, speed: float = 1.0, origin: float = 0.0, wall: Callable[[], float] = time.time) -> None:
        if speed < 0:
            raise ConfigError(f"clock speed must be >= 0 (0 freezes time), got {speed}")
        self.speed = speed
        self._wall = wall
        #: Origin 0 means "now": simulated time starts at this process's start.
        self.origin = origin if origin > 0 else wall()
        self._advanced_s = 0.0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Clock(speed={self.speed!r}, origin={self.origin!r})"

    @classmethod
    def from_settings(cls, settings: Settings) -> Clock:
        """``clock.speed`` (> 0: a crawl that never advances would never finish) and ``clock.origin``."""
        speed = settings.get_float("clock.speed")
        if speed <= 0:
            raise ConfigError(f"clock.speed must be > 0, got {speed}")
        return cls(speed=speed, origin=settings.get_float("clock.origin"))

    @classmethod
    def check_shared_origin(cls, settings: Settings, role: str) -> None:
        """A daemon on a sped-up clock must be given the run's ``clock.origin``: with 0 it would start simulated
        time from its own start, and again from every restart (``kill -9`` and a supervisor's restart included), so
        a restarted scheduler would find its due times, and a restarted client its sites' item times, that far off.
        Refused at start with one line instead."""
        speed = settings.get_float("clock.speed")
        if speed != 1.0 and settings.get_float("clock.origin") <= 0:
            raise ConfigError(
                f"clock.speed={speed:g} needs clock.origin: the wall-clock epoch (seconds) that every process of "
                f"this run shares, e.g. --set clock.origin=$(date +%s) once, given again to each process and to each "
                f"restart (the sandbox prints its own); with 0 this {role} would start its simulated time again "
                "from its own start"
            )

    # --- reading ------------------------------------------------------------------------------------------

    def now(self) -> float:
        """Simulated seconds since the epoch."""
        wall = self._wall()
        with self._lock:
            return self.origin + (wall - self.origin) * self.speed + self._advanced_s

    def now_ms(self) -> int:
        return int(self.now() * 1000)

    def wall(self) -> float:
        """Wall-clock seconds since the epoch (leases and politeness are wall time)."""
        return self._wall()

    def wall_ms(self) -> int:
        return int(self._wall() * 1000)

    @property
    def origin_ms(self) -> int:
        """Where schedules start: simulated time equals wall time at the origin."""
        return int(self.origin * 1000)

    # --- converting ---------------------------------------------------------------------------------------

    def to_wall_delay(self, sim_seconds: float) -> float:
        """How long to really wait for ``sim_seconds`` of simulated time to pass (forever when frozen)."""
        return sim_seconds / self.speed if self.speed else float("inf")

    def wall_delay(self, sim_seconds: float) -> float:
        """``to_wall_delay`` under the name the scheduler's ``Clocks`` protocol uses."""
        return self.to_wall_delay(sim_seconds)

    def wall_at(self, sim_ms: int) -> int | None:
        """The wall time (ms) at which simulated time reaches ``sim_ms`` under the current speed and advance;
        None when time is frozen. Before ``origin`` this is the simulated time itself (backlog items)."""
        if sim_ms <= self.origin_ms:
            return sim_ms
        if self.speed == 0:
            return None
        with self._lock:
            advanced = self._advanced_s
        wall_s = self.origin + (sim_ms / 1000 - self.origin - advanced) / self.speed
        return int(max(wall_s, self.origin) * 1000)

    # --- acting -------------------------------------------------------------------------------------------

    def sleep(self, sim_seconds: float) -> None:
        time.sleep(max(0.0, self.to_wall_delay(sim_seconds)))

    def advance(self, seconds: float) -> int:
        """Jump simulated time forward (never back); returns the new now in ms. Other processes do not see it."""
        if seconds < 0:
            raise ConfigError(f"the clock only moves forward, got {seconds}")
        with self._lock:
            self._advanced_s += seconds
        return self.now_ms()


class ClockJumpWatch:
    """Notices the wall clock jumping: set by hand, stepped by NTP, or a machine resumed from suspend (the
    monotonic clock stops while suspended). Each ``check`` compares how far the wall moved since the last one with
    how far the monotonic clock moved. NTP slews the wall by at most 500 ppm, so a difference above
    ``threshold_s`` (or 0.1 % of the time between checks, if more) is a jump, never a slew."""

    def __init__(
        self,
        threshold_s: float = 1.0,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.threshold_s = threshold_s
        self._wall = wall
        self._monotonic = monotonic
        self._at = monotonic()
        self._offset = wall() - self._at

    def check(self) -> float:
        """Seconds the wall clock jumped since the last check (> 0 forward, < 0 back), or 0.0."""
        at = self._monotonic()
        offset = self._wall() - at
        jump = offset - self._offset
        allowed = max(self.threshold_s, (at - self._at) * 0.001)
        self._at, self._offset = at, offset
        return jump if abs(jump) > allowed else 0.0
