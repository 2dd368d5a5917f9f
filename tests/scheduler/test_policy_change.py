"""A task record keeps the state of the revisit policy that last crawled it. After ``scheduler.policy`` changed
between restarts, the next core goes on from that state: the keys the new policy lacks start as a new task's
(``shhd.policies.resume_state``). Before, a report of such a task raised KeyError, failing its whole report batch at
every try, and with a fetch budget so did the budget's rebalance, which a daemon runs before it serves."""

from __future__ import annotations

from typing import Any

import pytest

from icecrawler.models import Report, TaskKind
from scheduler_server.core import SchedulerCore
from scheduler_server.store import QueueStore
from tests.scheduler.conftest import ManualClocks, make_settings
from tests.scheduler.test_budget import RATE_SETTINGS

ITEMS = {"reviews:jd:1": 3, "reviews:jd:2": 0}
OTHERS = ["fixed", "shhd", "nutch", "cho", "sart"]


def crawled(core: SchedulerCore, clocks: ManualClocks, rounds: int) -> list[dict[str, Any]]:
    """Each round, a day later (every task is due): lease both tasks and report ``ITEMS`` new items, each alone."""
    for _ in range(rounds):
        clocks.advance(86400)
        for task in core.lease("w", len(ITEMS)):
            items = ITEMS[task.id]
            core.report(
                [Report(task_id=task.id, lease_token=task.lease_token, new_items=items, window_items=10, fingerprint=7)]
            )
    return [core.task_info(task_id) for task_id in ITEMS]


@pytest.mark.parametrize("before", OTHERS)
def test_the_rate_policy_with_a_budget_goes_on_with_tasks_another_policy_scheduled(
    store: QueueStore, clocks: ManualClocks, before: str
) -> None:
    first = SchedulerCore.from_settings(make_settings(**{**RATE_SETTINGS, "scheduler__policy": before}), store, clocks)
    first.add(["jd:1", "jd:2"], TaskKind.ProductReviews)
    crawled(first, clocks, rounds=2)
    core = SchedulerCore.from_settings(
        make_settings(**RATE_SETTINGS, scheduler__fetch_budget_per_s=0.01), store, clocks
    )
    assert core.rebalance_budget() is not None  # the daemon's start runs it: KeyError 'items' stopped the start
    busy, quiet = crawled(core, clocks, rounds=3)  # every report applied: each raised KeyError 'items'
    assert busy["crawls"] == quiet["crawls"] == 5
    assert busy["last_outcome"] == quiet["last_outcome"] == "Ok"
    assert 10.0 <= busy["period_s"] < quiet["period_s"] <= 86400.0
    assert {"items", "exposure_s"} <= busy["policy_state"].keys()


@pytest.mark.parametrize("after", OTHERS)
def test_another_policy_goes_on_with_tasks_the_rate_policy_scheduled(
    store: QueueStore, clocks: ManualClocks, after: str
) -> None:
    first = SchedulerCore.from_settings(make_settings(**RATE_SETTINGS), store, clocks)
    first.add(["jd:1", "jd:2"], TaskKind.ProductReviews)
    crawled(first, clocks, rounds=2)
    core = SchedulerCore.from_settings(make_settings(**{**RATE_SETTINGS, "scheduler__policy": after}), store, clocks)
    for info in crawled(core, clocks, rounds=3):
        assert info["crawls"] == 5 and info["last_outcome"] == "Ok"
        assert 10.0 <= info["period_s"] <= 86400.0
        assert core.policy.initial_state().keys() <= info["policy_state"].keys()


def test_the_core_drops_keys_its_policy_does_not_know(store: QueueStore, clocks: ManualClocks) -> None:
    """The core's shortcut took a state holding every key of its policy as it was, extra keys too: a rate state
    passed on by ``fixed`` (which keeps what it is given) kept the old ``last_s`` when rate was chosen again."""
    core = SchedulerCore.from_settings(make_settings(**RATE_SETTINGS), store, clocks)
    whole = core.policy.initial_state()
    assert core.resumed_state(whole) is whole
    assert core.resumed_state({**whole, "ssthresh_s": 60.0}) == whole
