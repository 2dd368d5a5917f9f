"""One notion of "now" for every process of a crawl, optionally accelerated.

Tests, benchmarks and the demo compress hours into seconds. For that to stay coherent, the sandbox sites,
the scheduler and the clients must agree on simulated time, so all of them read it from the same function:

    sim_now = origin + (wall_now - origin) * speed

``origin`` is a wall-clock epoch shared by every process of one run (``--set clock.origin=...``); with
``speed == 1`` this is the wall clock. Periods computed in simulated seconds turn into wall delays with
``to_wall_delay``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from icecrawler.errors import ConfigError
from icecrawler.settings import Settings

__all__ = ["Clock"]


@dataclass(frozen=True)
class Clock:
    speed: float = 1.0
    origin: float = 0.0

    def __post_init__(self) -> None:
        if self.speed <= 0:
            raise ConfigError(f"clock.speed must be > 0, got {self.speed}")

    @classmethod
    def from_settings(cls, settings: Settings) -> Clock:
        speed = settings.get_float("clock.speed")
        origin = settings.get_float("clock.origin")
        return cls(speed=speed, origin=origin if origin > 0 else time.time())

    def now(self) -> float:
        """Simulated seconds since the epoch."""
        wall = time.time()
        return self.origin + (wall - self.origin) * self.speed

    def now_ms(self) -> int:
        return int(self.now() * 1000)

    def to_wall_delay(self, sim_seconds: float) -> float:
        """How long to really wait for ``sim_seconds`` of simulated time to pass."""
        return sim_seconds / self.speed

    def sleep(self, sim_seconds: float) -> None:
        time.sleep(max(0.0, self.to_wall_delay(sim_seconds)))
