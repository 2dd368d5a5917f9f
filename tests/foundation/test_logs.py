"""``LogThrottle`` and ``FailureEpisode``: pure logic, on a clock the test sets."""

from __future__ import annotations

import math

from icecrawler.logs import Failure, FailureEpisode, LogThrottle
from tests.helpers import ManualClock


def test_a_throttle_admits_one_line_per_key_and_interval_and_counts_the_rest() -> None:
    clock = ManualClock(1000.0)
    throttle = LogThrottle(60.0, clock)
    first = throttle.admit("a")
    assert first is not None and first[0] == 0 and LogThrottle.more(first, "x") == ""
    assert throttle.admit("a") is None and throttle.admit("a") is None
    assert throttle.admit("b") is not None  # keys are apart
    clock.now += 60.0
    again = throttle.admit("a")
    assert again == (2, 60.0) and LogThrottle.more(again, "x") == " (2 more x in the last 60 s)"


def test_an_episode_logs_its_first_failure_then_one_a_minute_with_a_count() -> None:
    clock = ManualClock(1000.0)
    episode = FailureEpisode(60.0, clock)
    assert not episode.failing and not episode.recovered()  # nothing to recover from
    first = episode.failed("disk full")
    assert first == Failure(first=True, logged=True, unlogged=0, since_s=math.inf) and first.more("x") == ""
    assert episode.failing and episode.message == "disk full"
    assert [episode.failed("disk full").logged for _ in range(3)] == [False] * 3
    clock.now += 61.0
    later = episode.failed("disk full")
    assert (later.first, later.logged) == (False, True)
    assert later.more("rounds") == " (3 more rounds in the last 61 s)"


def test_a_recovery_is_said_once_and_the_next_episode_starts_afresh() -> None:
    clock = ManualClock(1000.0)
    episode = FailureEpisode(60.0, clock)
    episode.failed()
    episode.failed()  # unlogged
    assert episode.recovered() is True
    assert episode.recovered() is False  # said once
    assert not episode.failing and episode.message == ""
    again = episode.failed("again")  # the same second: a new episode is logged at once, its count its own
    assert (again.first, again.logged, again.unlogged) == (True, True, 0)


def test_work_that_overlapped_a_failure_proves_no_recovery() -> None:
    episode = FailureEpisode(60.0, ManualClock(1000.0))
    began = episode.mark()  # a batch starts
    episode.failed()  # another batch is refused meanwhile
    assert episode.recovered(began) is False and episode.failing
    after = episode.mark()
    assert episode.recovered(after) is True  # work begun after the last failure did


def test_an_infinite_interval_logs_once_per_episode() -> None:
    clock = ManualClock(1000.0)
    episode = FailureEpisode(math.inf, clock)
    assert episode.failed().logged
    clock.now += 1e9
    assert not episode.failed().logged
    episode.recovered()
    assert episode.failed().logged
