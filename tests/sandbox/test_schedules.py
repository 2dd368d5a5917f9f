"""Arrival schedules are pure and reproducible; on a fast clock the published count matches them exactly."""

from __future__ import annotations

import itertools
import random

import pytest
import requests

from icecrawler.errors import ConfigError
from sandbox import Product, SandboxServer, Scenario, Schedule
from sandbox.content import SLOTS
from sandbox.scenario import Category
from sandbox.schedules import MIN_GAP_MS, TRACE_MAX_DAYS, arrivals, backlog_times, target_times, trace_times

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


# --- trace: real publication times shifted onto the run's clock -----------------------------------------------------

T0 = 1_700_000_000.0


def test_a_trace_lands_its_first_item_on_the_start_and_keeps_its_gaps() -> None:
    schedule = Schedule("trace", times=(T0, T0 + 60, T0 + 3600.5))
    times = trace_times(schedule, START)
    assert times.backlog == () and times.future == (START, START + 60_000, START + 3_600_500)
    assert (times.spread, times.most_moved_ms) == (0, 0)
    assert _first(schedule, 10) == list(times.future)
    assert schedule.expected_count(START, START + 60_000) == 2
    assert schedule.expected_count(START, START - 1) == 0


def test_a_trace_started_later_turns_its_earlier_items_into_the_backlog() -> None:
    schedule = Schedule("trace", times=(T0, T0 + 10, T0 + 100, T0 + 200), start_s=T0 + 100)
    times = trace_times(schedule, START)
    assert times.backlog == (START - 100_000, START - 90_000)
    assert times.future == (START, START + 100_000)
    backlog, future = target_times(schedule, backlog=30, backlog_gap_s=3600, rng=random.Random(1), start_ms=START)
    assert backlog == list(times.backlog), "a trace's backlog is its own, whatever the synthetic count says"
    assert list(future) == list(times.future)


def test_equal_and_too_close_times_are_spread_and_counted_never_dropped() -> None:
    schedule = Schedule("trace", times=(T0, T0, T0, T0 + 1.5))
    times = trace_times(schedule, START)
    assert times.future == (START, START + 1000, START + 2000, START + 3000)
    assert (times.spread, times.most_moved_ms) == (3, 2000)
    # Before the start the backlog is spread away from it, so that it stays before the start.
    backlog = trace_times(Schedule("trace", times=(T0 - 0.5, T0 - 0.2, T0), start_s=T0), START)
    assert backlog.backlog == (START - 2000, START - 1000) and backlog.future == (START,)
    assert (backlog.spread, backlog.most_moved_ms) == (2, 1500)


def test_a_spread_trace_keeps_every_item_the_gap_and_the_start() -> None:
    rng = random.Random(7)
    for _ in range(200):
        times = sorted(T0 + rng.choice((0, 0.3, 1, 2, 86400)) * rng.randint(0, 5) for _ in range(rng.randint(1, 30)))
        start_s = rng.choice((None, times[len(times) // 2], times[-1] + 5))
        result = trace_times(Schedule("trace", times=tuple(times), start_s=start_s), START)
        merged = result.backlog + result.future
        assert len(merged) == len(times)
        assert all(b - a >= MIN_GAP_MS for a, b in itertools.pairwise(merged)), merged
        assert all(t < START for t in result.backlog) and all(t >= START for t in result.future)
        assert len(result.backlog) == sum(t < (times[0] if start_s is None else start_s) for t in times)


def test_a_trace_schedule_reads_and_writes_as_plain_data() -> None:
    schedule = Schedule.from_dict({"kind": "trace", "times": [T0, T0 + 5], "start_s": T0})
    assert schedule.times == (T0, T0 + 5.0)
    assert Schedule.from_dict(schedule.to_dict()) == schedule
    assert "times" not in Schedule("periodic").to_dict(), "the other kinds' documents (and digests) stay as they were"


@pytest.mark.parametrize(
    "data",
    [
        {"kind": "trace"},
        {"kind": "trace", "times": []},
        {"kind": "trace", "times": "1700000000"},
        {"kind": "trace", "times": [T0 + 5, T0]},
        {"kind": "trace", "times": [T0, float("nan")]},
        {"kind": "trace", "times": [T0, True]},
        {"kind": "trace", "times": [T0, "1700000001"]},
        {"kind": "trace", "times": [T0], "start_s": "soon"},
    ],
)
def test_a_bad_trace_schedule_is_a_config_error(data: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match="schedule trace"):
        Schedule.from_dict(data)


@pytest.mark.parametrize("data", [{"kind": "periodic", "times": [T0]}, {"kind": "static", "start_s": T0}])
def test_trace_keys_on_another_kind_are_refused_not_ignored_into_the_digest(data: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match=f"schedule {data['kind']}: times and start_s are for kind trace only"):
        Schedule.from_dict(data)


@pytest.mark.parametrize("key", ["arrivals", "arrival_reviews"])
def test_a_category_refuses_a_trace_for_its_arrivals_or_their_reviews(key: str) -> None:
    """A trace is one target's items: as arrivals its items before the start were dropped without a word, and as
    arrival_reviews every arriving product replayed the same trace."""
    with pytest.raises(ConfigError, match=f"category 1: {key} cannot be a trace schedule"):
        Category.from_dict({"id": 1, key: {"kind": "trace", "times": [T0, T0 + 60]}})


def test_more_products_than_the_sites_ids_keep_apart_are_refused() -> None:
    """Product k and product k + SLOTS would publish the same JD review ids at the same instant."""
    products = tuple(Product("jd", str(k)) for k in range(SLOTS + 1))
    assert len(Scenario(products=products[:SLOTS]).products) == SLOTS
    with pytest.raises(ConfigError, match=rf"{SLOTS + 1} products, more than the {SLOTS}.*--traces-limit"):
        Scenario(products=products)


def test_a_trace_spanning_more_than_a_century_is_refused() -> None:
    """Its items would land outside the years a date can show (a backlog of a million days: before year 1)."""
    far = T0 + (TRACE_MAX_DAYS + 1) * 86400
    for data in ({"times": [T0, far]}, {"times": [T0], "start_s": far}):
        with pytest.raises(ConfigError, match=f"span more than {TRACE_MAX_DAYS} days"):
            Schedule.from_dict({"kind": "trace", **data})
