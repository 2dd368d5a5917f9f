"""The client daemon against real servers that fail: storage stopped mid-run (records are buffered and
nothing is lost or duplicated once it is back), the scheduler stopped mid-run (reports and leasing resume), and
SIGTERM while a crawl hangs in a read (the client exits cleanly and the lease is given back, not left to
expire)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from icecrawler_local.stack import running_stack
from sandbox.misbehave import Misbehaviour, MisbehaviourRule
from sandbox.scenario import Product, Scenario, WeiboUser
from sandbox.schedules import Schedule
from tests.helpers import caught_up, client_logs, restart, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.ice, pytest.mark.bdb, pytest.mark.slow]

SPEED = 60.0
CATCH_UP_S = 8.0
SCHEDULER = {
    "scheduler.initial_period_s": 60,
    "scheduler.min_period_s": 30,
    "scheduler.max_period_s": 120,
    "scheduler.lease_s": 120,
    "scheduler.backoff_after_attempts": 100,
}
# client.batch = 1: leasing goes through getUser rather than getUsers.
CLIENT = {
    "client.workers": 2,
    "client.batch": 1,
    "client.max_pages": 20,
    "client.timeout_s": 2,
    "client.backoff_s": 0.1,
    "client.max_backoff_s": 1,
    "client.idle_sleep_s": 0.3,
    "client.progress_log_s": 2,
    "client.shutdown_grace_s": 5,
}


def small_world(*misbehave: MisbehaviourRule) -> Scenario:
    return Scenario(
        seed=5,
        users=(WeiboUser(uid=1907518591, sites=("m",), backlog=15, schedule=Schedule("periodic", interval_s=240)),),
        products=(
            Product("jd", "100012043978", backlog=15, schedule=Schedule("periodic", interval_s=180)),
            Product("jd", "100008348542", backlog=5, schedule=Schedule("static")),
        ),
        misbehave=misbehave,
    )


SEEDS = ["weibo_mobile:1907518591", "jd:100012043978", "jd:100008348542"]


def test_storage_and_scheduler_outages_lose_nothing(tmp_path: Path) -> None:
    with running_stack(
        tmp_path, small_world(), speed=SPEED, scheduler_settings=SCHEDULER, client_settings=CLIENT
    ) as stack:
        stack.seed(SEEDS)
        client = stack.start_client("client")
        wait_for(lambda: len(stack.stored()) > 0, "nothing stored before the outage")
        stack.storage.stop()
        wait_for(lambda: "storage unavailable" in client_logs([client]), "the client never noticed the outage")
        # New items keep being published and crawled while storage is down: they wait in the client's buffer.
        time.sleep(3)
        assert client.alive()
        restart(stack, stack.storage, stack.storage_port)
        stack.stop_scheduler()
        wait_for(
            lambda: "scheduler unavailable" in client_logs([client]) or "leasing failed" in client_logs([client]),
            "the client never noticed the scheduler outage",
        )
        restart(stack, stack.scheduler, stack.scheduler_port)
        expected, stored, _ = caught_up(stack, CATCH_UP_S, timeout_s=60)
        code = client.stop(timeout_s=20)
        logs = client_logs([client])
    missing = expected - stored
    assert not missing, f"{sum(missing.values())} item(s) lost across the outages, e.g. {list(missing)[:3]}"
    assert not {key: n for key, n in stored.items() if n > 1}, "an item was stored twice"
    assert code == 0, logs[-3000:]
    assert "Traceback" not in logs, logs[-3000:]


def test_sigterm_during_a_hanging_crawl_exits_cleanly_and_gives_the_lease_back(tmp_path: Path) -> None:
    hang = MisbehaviourRule("jd", "100008348542", Misbehaviour(hang_rate=1.0, hang_s=30.0))
    client_settings = {**CLIENT, "client.timeout_s": 20, "client.total_timeout_s": 60, "client.shutdown_grace_s": 1}
    with running_stack(
        tmp_path, small_world(hang), speed=SPEED, scheduler_settings=SCHEDULER, client_settings=client_settings
    ) as stack:
        stack.seed(["jd:100008348542"])
        client = stack.start_client("client")
        wait_for(
            lambda: any(r["target"] == "100008348542" for r in stack.requests(site="jd")),
            "the hanging product was never requested",
        )
        inflight_before = stack.scheduler_stats()["inflight"]
        started = time.monotonic()
        code = client.stop(timeout_s=15)
        took = time.monotonic() - started
        logs = client_logs([client])
        inflight_after = stack.scheduler_stats()["inflight"]
    assert inflight_before == 1, logs[-3000:]
    assert code == 0, f"exit code {code} after {took:.1f}s:\n{logs[-3000:]}"
    assert "giving its lease back" in logs, logs[-3000:]
    assert inflight_after == 0, f"the lease was left to expire instead of being given back:\n{logs[-3000:]}"
