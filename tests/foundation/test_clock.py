"""The one clock type: the accelerated formula every process shares, what only a test harness uses, and how a
jump of the wall clock is noticed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from icecrawler.clock import Clock, ClockJumpWatch
from icecrawler.errors import ConfigError
from icecrawler.processes import ProcessGroup, free_port
from icecrawler.settings import Settings


class Wall:
    """A wall clock that moves only when told."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_simulated_time_runs_speed_times_faster_from_the_shared_origin() -> None:
    wall = Wall(1_000.0)
    clock = Clock(speed=60, origin=1_000.0, wall=wall)
    wall.now = 1_010.0
    assert clock.now() == 1_000.0 + 600 and clock.now_ms() == 1_600_000
    assert clock.wall() == 1_010.0 and clock.wall_ms() == 1_010_000
    assert clock.to_wall_delay(600) == clock.wall_delay(600) == 10
    assert clock.wall_at(1_600_000) == 1_010_000
    assert clock.wall_at(999_000) == 999_000  # before the origin: the backlog's own time


def test_frozen_time_moves_only_by_advance() -> None:
    wall = Wall(2_000.0)
    clock = Clock(speed=0, origin=2_000.0, wall=wall)
    wall.now += 100
    assert clock.now_ms() == 2_000_000
    assert clock.wall_at(2_001_000) is None and clock.to_wall_delay(1) == float("inf")
    assert clock.advance(3600) == 5_600_000
    with pytest.raises(ConfigError, match="only moves forward"):
        clock.advance(-1)


def test_bad_speeds_are_refused_and_settings_never_freeze_a_crawl() -> None:
    with pytest.raises(ConfigError, match=">= 0"):
        Clock(speed=-1)
    settings = Settings()
    settings.set("clock.speed", "0")
    with pytest.raises(ConfigError, match=r"clock\.speed must be > 0"):
        Clock.from_settings(settings)
    settings.set("clock.speed", "30")
    clock = Clock.from_settings(settings)
    assert clock.speed == 30 and clock.origin > 0  # origin 0: "now"


def test_a_jump_of_the_wall_clock_is_told_from_a_slew_and_from_time_passing() -> None:
    wall, monotonic = Wall(1_800_000_000.0), Wall(5_000.0)
    watch = ClockJumpWatch(threshold_s=1.0, wall=wall, monotonic=monotonic)
    wall.now += 3600
    monotonic.now += 3600
    assert watch.check() == 0.0  # an hour passed on both clocks
    wall.now += 600 + 0.3  # NTP slewing at 500 ppm over 10 minutes moves the wall 0.3 s
    monotonic.now += 600
    assert watch.check() == 0.0
    wall.now += 5 + 30
    monotonic.now += 5
    assert watch.check() == pytest.approx(30)  # stepped forward (or the machine was suspended for 30 s)
    assert watch.check() == 0.0  # told once
    wall.now -= 3600 - 5
    monotonic.now += 5
    assert watch.check() == pytest.approx(-3600)
    wall.now += 86400 * 30 + 60  # a month between checks: 60 s is within 0.1 %, a slew that long could do it
    monotonic.now += 86400 * 30
    assert watch.check() == 0.0


@pytest.mark.parametrize("role", ["scheduler", "client"])
def test_a_daemon_on_a_sped_up_clock_without_the_runs_origin_is_refused_at_start(role: str, tmp_path: Path) -> None:
    """``clock.speed=60`` alone: each process took its own start as the origin, and took it again at every restart,
    so a scheduler killed and started again by the same command found its due times as far in the future as it had
    run (the crawl stalled that long), and a restarted client read its sites' item times hours off. Refused at
    start with one line naming ``clock.origin``."""
    port = free_port()
    ice = tmp_path / "ice.conf"
    ice.write_text(
        f"SchedulerAdapter.Endpoints=tcp -h 127.0.0.1 -p {port}\n"
        f"Scheduler.Proxy=scheduler:tcp -h 127.0.0.1 -p {port}\nStorage.Proxy=storage:tcp -h 127.0.0.1 -p {port}\n"
    )
    argv = [
        sys.executable,
        "-m",
        "icecrawler_cli",
        role,
        "--set",
        "clock.speed=60",
        "--set",
        f"scheduler.db_dir={tmp_path / 'db'}",
        "--set",
        "metrics.scheduler.port=0",
        "--set",
        "metrics.client.port=0",
        f"--Ice.Config={ice}",
    ]
    with ProcessGroup(tmp_path) as group:
        process = group.start(role, argv)
        code = process.popen.wait(timeout=60)
        log = process.log_tail()
    assert code == 2, log
    assert "clock.speed=60 needs clock.origin" in log and "Traceback" not in log, log
    assert not (tmp_path / "db").exists(), "the scheduler opened its database before refusing"
