"""The sandbox's simulated clock: the same formula as ``icecrawler.clock.Clock`` (so the sites, the scheduler
and the clients of one run agree on "now" when they share ``clock.origin`` and ``clock.speed``), plus two
things only a test harness needs: ``speed == 0`` freezes time, and ``advance`` jumps it forward.

    sim_now = origin + (wall_now - origin) * speed + advanced

The wall-clock source is injected so unit tests never sleep.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from icecrawler.errors import ConfigError

__all__ = ["SimClock"]


class SimClock:
    """Simulated time in epoch milliseconds. Thread-safe; ``advance`` is local to this process."""

    def __init__(self, speed: float = 1.0, origin: float = 0.0, wall: Callable[[], float] = time.time) -> None:
        if speed < 0:
            raise ConfigError(f"clock speed must be >= 0 (0 freezes time), got {speed}")
        self.speed = speed
        self._wall = wall
        self.origin = origin if origin > 0 else wall()
        self._advanced_s = 0.0
        self._lock = threading.Lock()

    @property
    def origin_ms(self) -> int:
        """Where schedules start: simulated time equals wall time at the origin."""
        return int(self.origin * 1000)

    def now_ms(self) -> int:
        wall = self._wall()
        with self._lock:
            return int((self.origin + (wall - self.origin) * self.speed + self._advanced_s) * 1000)

    def wall_ms(self) -> int:
        return int(self._wall() * 1000)

    def advance(self, seconds: float) -> int:
        """Jump simulated time forward (never back); returns the new now. Other processes do not see it."""
        if seconds < 0:
            raise ConfigError(f"the clock only moves forward, got {seconds}")
        with self._lock:
            self._advanced_s += seconds
        return self.now_ms()

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
