"""Arrival schedules are pure and reproducible; on a fast clock the published count matches them exactly."""

from __future__ import annotations

import itertools
import random

import pytest
import requests

from icecrawler.errors import ConfigError
from sandbox import Product, SandboxServer, Scenario, Schedule
from sandbox.schedules import MIN_GAP_MS, arrivals, backlog_times

START = 1_800_000_000_000


def _first(schedule: Schedule, count: int, seed: str = "s") -> list[int]:
    return list(itertools.islice(arrivals(schedule, random.Random(seed), START), count))


def test_periodic_is_exact() -> None:
    schedule = Schedule("periodic", interval_s=600)
    assert _first(schedule, 3) == [START + 600_000, START + 1_200_000, START + 1_800_000]
    assert schedule.expected_count(START, START + 599_999) == 0
    assert schedule.expected_count(START, START + 3_600_000) == 6
    assert _first(Schedule("periodic", interval_s=60, offset_s=0), 2) == [START, START + 60_000]


def test_poisson_is_reproducible_and_near_its_rate() -> None:
    schedule = Schedule("poisson", per_hour=60)
    times = _first(schedule, 2000)
    assert times == _first(schedule, 2000)
    assert times != _first(schedule, 2000, seed="other")
    mean_gap_s = (times[-1] - START) / len(times) / 1000
    assert 50 < mean_gap_s < 70  # 60 s expected; 2000 draws keep it well inside


def test_bursty_comes_in_bursts_and_gaps_stay_positive() -> None:
    times = _first(Schedule("bursty", interval_s=3600, burst_size=4, burst_spread_s=5), 40)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) >= MIN_GAP_MS
    assert sum(1 for gap in gaps if gap <= 7_500) >= 25  # 3 short gaps per burst of 4
    assert sum(1 for gap in gaps if gap > 60_000) >= 5


def test_static_and_backlog() -> None:
    assert _first(Schedule("static"), 5) == []
    backlog = backlog_times(10, 3600, random.Random(1), START)
    assert len(backlog) == 10 and backlog == sorted(backlog) and backlog[-1] < START


def test_bad_schedules_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        Schedule.from_dict({"kind": "weekly"})
    with pytest.raises(ConfigError):
        Schedule.from_dict({"kind": "periodic", "every": 5})
    with pytest.raises(ConfigError):
        Schedule("poisson", per_hour=0)


def test_periodic_count_on_a_fast_clock() -> None:
    """One review every 10 simulated minutes at 3600x: the truth holds exactly the expected count for the
    server's own "now", whatever the real time the test took."""
    schedule = Schedule("periodic", interval_s=600)
    scenario = Scenario(seed=3, products=(Product("jd", "1001", backlog=0, schedule=schedule),))
    with SandboxServer(scenario, speed=3600, port=0) as server:
        for _ in range(3):
            requests.get(
                server.base_url("jd") + "/comment/productPageComments.action", params={"productId": "1001"}, timeout=10
            )
        truth = server.truth("jd", "1001")
        expected = schedule.expected_count(truth["origin_ms"], truth["now_ms"])
        assert expected is not None and len(truth["items"]) == expected
        times = [item["published_ms"] for item in truth["items"]]
        assert times == [truth["origin_ms"] + 600_000 * (k + 1) for k in range(expected)]
        assert all(item["published_wall_ms"] >= truth["origin_ms"] for item in truth["items"])


def test_same_seed_same_world() -> None:
    scenario = Scenario(seed=5, products=(Product("jd", "1001", backlog=3, schedule=Schedule("poisson")),))
    worlds = []
    for _ in range(2):
        with SandboxServer(scenario, speed=0, port=0, origin=1_800_000_000.0) as server:
            server.clock.advance(7200)
            worlds.append([(i["id"], i["text"]) for i in server.truth()["items"]])
    assert worlds[0] == worlds[1] and len(worlds[0]) > 3
