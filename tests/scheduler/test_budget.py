"""The global fetch budget: the scheduler spreads ``scheduler.fetch_budget_per_s`` over all tasks by the
square-root rule of the ``rate`` policy, from each task's own rate estimate."""

from __future__ import annotations

import logging
import math

import pytest

from icecrawler.errors import NoWorkError
from icecrawler.models import Report, TaskKind
from scheduler_server.core import SchedulerCore
from scheduler_server.store import QueueStore
from shhd.policies import budget_scale
from tests.scheduler.conftest import ManualClocks, make_settings

RATE_SETTINGS = {
    "scheduler__policy": "rate",
    "scheduler__min_period_s": 10.0,
    "scheduler__initial_period_s": 60.0,
    "scheduler__max_period_s": 86400.0,
}


def crawl_rounds(core: SchedulerCore, clocks: ManualClocks, new_items: dict[str, int], rounds: int) -> None:
    """Each round: lease every task and report ``new_items[id]`` new items, then let an hour pass."""
    for _ in range(rounds):
        clocks.advance(3600)
        for task in core.lease("w", len(new_items)):
            core.report(
                [Report(task_id=task.id, lease_token=task.lease_token, new_items=new_items[task.id], window_items=10)]
            )


def test_budget_constant_matches_the_square_root_rule_over_task_rates(store: QueueStore, clocks: ManualClocks) -> None:
    core = SchedulerCore.from_settings(
        make_settings(**RATE_SETTINGS, scheduler__fetch_budget_per_s=0.01), store, clocks
    )
    core.add(["jd:1", "jd:2", "jd:3"], TaskKind.ProductReviews)
    crawl_rounds(core, clocks, {"reviews:jd:1": 30, "reviews:jd:2": 3, "reviews:jd:3": 0}, rounds=4)
    scale = core.rebalance_budget()
    assert scale is not None
    # The same constant from the same estimates, computed independently of the scheduler.
    from scheduler_server.codec import TaskRecord

    with store.transaction() as txn:
        states = [TaskRecord.from_bytes(raw).policy_state for _, raw in txn.scan("tasks", b"", limit=10)]
    rates = [core.policy.rate_of(state) for state in states]  # type: ignore[attr-defined]
    assert math.isclose(scale, budget_scale(rates, 0.01, 10.0, 86400.0))
    # The periods it implies spend the budget, and a busier task gets a shorter period.
    periods = [min(86400.0, max(10.0, scale / math.sqrt(rate))) for rate in rates]
    assert math.isclose(sum(1 / p for p in periods), 0.01, rel_tol=1e-6)
    busiest, quietest = rates.index(max(rates)), rates.index(min(rates))
    assert periods[busiest] < periods[quietest]


def test_budget_steers_the_next_periods(store: QueueStore, clocks: ManualClocks) -> None:
    tight = SchedulerCore.from_settings(
        make_settings(**RATE_SETTINGS, scheduler__fetch_budget_per_s=0.001), store, clocks
    )
    tight.add(["jd:1", "jd:2"], TaskKind.ProductReviews)
    crawl_rounds(tight, clocks, {"reviews:jd:1": 6, "reviews:jd:2": 6}, rounds=3)
    unbudgeted = tight.task_info("reviews:jd:1")["period_s"]
    scale = tight.rebalance_budget()
    assert scale is not None
    crawl_rounds(tight, clocks, {"reviews:jd:1": 6, "reviews:jd:2": 6}, rounds=1)
    periods = [tight.task_info(task_id)["period_s"] for task_id in ("reviews:jd:1", "reviews:jd:2")]
    # Two equal tasks share 0.001 fetches/s: about 2000 s each (their rate estimates moved a little since the
    # constant was computed), far longer than the ~10-minute period they had without a budget. The first report
    # teaches the shared rate calibration before the second is decided, so they agree to within a per cent.
    assert math.isclose(periods[0], periods[1], rel_tol=0.01)
    assert 1500.0 < periods[0] < 2500.0 and periods[0] > 2 * unbudgeted


def test_no_budget_without_the_setting_or_with_another_policy(store: QueueStore, clocks: ManualClocks) -> None:
    unbudgeted = SchedulerCore.from_settings(make_settings(**RATE_SETTINGS), store, clocks)
    unbudgeted.add(["jd:1"], TaskKind.ProductReviews)
    assert unbudgeted.rebalance_budget() is None
    fixed = SchedulerCore.from_settings(make_settings(scheduler__fetch_budget_per_s=1.0), store, clocks)
    assert fixed.rebalance_budget() is None


def test_rate_calibration_learns_from_reports_and_the_setting_turns_it_off(
    store: QueueStore, clocks: ManualClocks
) -> None:
    core = SchedulerCore.from_settings(make_settings(**RATE_SETTINGS), store, clocks)
    calibration = core.policy.calibration  # type: ignore[attr-defined]
    assert calibration is not None
    core.add(["jd:1", "jd:2"], TaskKind.ProductReviews)
    crawl_rounds(core, clocks, {"reviews:jd:1": 30, "reviews:jd:2": 2}, rounds=6)
    assert calibration._rows  # the reports taught it: tasks past their prior
    from scheduler_server.codec import TaskRecord

    with store.transaction() as txn:
        states = [TaskRecord.from_bytes(raw).policy_state for _, raw in txn.scan("tasks", b"", limit=10)]
    for state in states:
        own = core.policy.own_rate(state)  # type: ignore[attr-defined]
        assert math.isclose(core.policy.rate_of(state), own * calibration.factor(own))  # type: ignore[attr-defined]
    off = SchedulerCore.from_settings(make_settings(**RATE_SETTINGS, scheduler__rate_calibration=False), store, clocks)
    assert off.policy.calibration is None  # type: ignore[attr-defined]
    assert all(
        math.isclose(off.policy.rate_of(s), off.policy.own_rate(s))  # type: ignore[attr-defined]
        for s in states
    )


@pytest.mark.parametrize(("hours", "one_clock"), [((20, 20, 20, 20), True), ((2, 8, 14, 20), False)])
def test_budget_turns_the_daily_anchor_off_while_the_tasks_keep_one_clock(
    store: QueueStore, clocks: ManualClocks, hours: tuple[int, ...], one_clock: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Four review streams, three reviews a day each at their own hour (UTC), crawled for ten days: when every
    stream's reviews come at the same hour, their daily anchors would all ask for the same hours of the shared
    budget, and the rebalance turns the anchor off (``shhd.rate.RatePolicy.apply_budget``); at four hours six apart
    it stays on."""
    core = SchedulerCore.from_settings(
        make_settings(**RATE_SETTINGS, scheduler__fetch_budget_per_s=4 / 86400.0), store, clocks
    )
    ids = [f"jd:{k}" for k in range(len(hours))]
    core.add(ids, TaskKind.ProductReviews)
    day, start = 86400.0, clocks.now()
    first_day = start - start % day + day
    items = {
        f"reviews:{i}": [first_day + d * day + h * 3600.0 + m * 600.0 for d in range(10) for m in range(3)]
        for i, h in zip(ids, hours, strict=True)
    }
    reported = dict.fromkeys(items, start)
    for _ in range(11 * 24):
        clocks.advance(3600)
        now = clocks.now()
        try:
            leased = core.lease("w", len(ids))
        except NoWorkError:
            continue  # nothing due this hour
        for task in leased:
            new = [t for t in items[task.id] if reported[task.id] < t <= now]
            reported[task.id] = now
            times_ms = tuple(int(t * 1000) for t in sorted(new, reverse=True))
            core.report(
                [
                    Report(
                        task_id=task.id,
                        lease_token=task.lease_token,
                        new_items=len(new),
                        window_items=10,
                        newest_item_ms=times_ms[0] if times_ms else 0,
                        new_item_times_ms=times_ms,
                    )
                ]
            )
    with caplog.at_level(logging.INFO, logger="scheduler_server.budget"):
        assert core.rebalance_budget() is not None
    assert core.policy.shared_clock is one_clock  # type: ignore[attr-defined]
    assert ("daily anchor is off" in caplog.text) is one_clock  # the operator is told when it switches
    judged = core.policy.clock_checked_s  # type: ignore[attr-defined]
    assert judged == clocks.now()
    # The maintenance thread rebalances every second; the profiles are read again only an hour later.
    clocks.advance(60)
    core.rebalance_budget()
    assert core.policy.clock_checked_s == judged  # type: ignore[attr-defined]
    clocks.advance(3600)
    core.rebalance_budget()
    assert core.policy.clock_checked_s == clocks.now()  # type: ignore[attr-defined]
    assert core.policy.shared_clock is one_clock  # type: ignore[attr-defined]


def test_the_rebalance_takes_at_most_its_share_of_the_maintenance_thread(
    store: QueueStore, clocks: ManualClocks, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rebalance reads every task record. Run on every maintenance pass, one that took longer than a pass (about
    9 µs a task: past some 100 000 tasks) kept a core busy for good and reaping waited on it; it now waits nine times
    its own length after each. The monotonic clock is the test's: each rebalance "takes" 2 s of it, each pass 1 s."""
    from icecrawler.clock import ClockJumpWatch
    from scheduler_server.server import BUDGET_SHARE, Maintenance

    core = SchedulerCore.from_settings(
        make_settings(**RATE_SETTINGS, scheduler__fetch_budget_per_s=0.01), store, clocks
    )
    core.add(["jd:1", "jd:2", "jd:3"], TaskKind.ProductReviews)
    monotonic = [1000.0]
    rebalanced: list[float | None] = []
    real_rebalance = core.rebalance_budget

    def slow_rebalance() -> float | None:
        monotonic[0] += 2.0
        rebalanced.append(real_rebalance())
        return rebalanced[-1]

    monkeypatch.setattr(core, "rebalance_budget", slow_rebalance)
    maintenance = Maintenance(
        core, 1.0, 3600.0, ClockJumpWatch(wall=clocks.wall, monotonic=lambda: monotonic[0]), lambda: monotonic[0]
    )
    passes = 200
    for _ in range(passes):
        maintenance.tick()
        monotonic[0] += 1.0
    assert rebalanced and all(scale is not None and scale > 0 for scale in rebalanced)
    spent = 2.0 * len(rebalanced)
    assert spent / (passes + spent) <= BUDGET_SHARE + 2.0 / passes, (len(rebalanced), passes)
    assert len(rebalanced) < passes / 5


def test_a_budget_too_small_for_the_longest_period_stretches_it_in_the_scheduler_too(
    store: QueueStore, clocks: ManualClocks
) -> None:
    """Under a budget whose mean period (tasks ÷ B) is past ``scheduler.max_period_s``, the rate policy's longest
    period stretches past it (``budget_plan``); the core clamped every period to ``max_period_s`` again, so the
    scheduler spent several times the budget it was given."""
    core = SchedulerCore.from_settings(
        make_settings(**{**RATE_SETTINGS, "scheduler__max_period_s": 3600.0}, scheduler__fetch_budget_per_s=1e-4),
        store,
        clocks,
    )
    core.add(["jd:1", "jd:2"], TaskKind.ProductReviews)
    crawl_rounds(core, clocks, {"reviews:jd:1": 0, "reviews:jd:2": 0}, rounds=2)
    assert core.rebalance_budget() is not None
    longest = core.policy.describe()["longest_period_s"]  # type: ignore[attr-defined]
    assert longest > 3600.0  # 2 tasks ÷ 1e-4/s = 20 000 s between fetches of each, stretched past the hour
    clocks.advance(86400.0)
    for task in core.lease("w", 2):
        core.report([Report(task_id=task.id, lease_token=task.lease_token, new_items=0, window_items=10)])
    periods = [core.task_info(task_id)["period_s"] for task_id in ("reviews:jd:1", "reviews:jd:2")]
    # Two silent tasks get the longest period the budget allows, not the configured hour: together they spend
    # no more than the budget.
    assert periods == [longest, longest]
    assert sum(1.0 / period for period in periods) <= 1e-4
