"""End to end, the page-cap gap: a JD product keeps publishing while no client crawls it, so that more than
``client.max_pages`` pages pile up between two visits. The next visit stops at the cap and keeps a resume point;
``status --task`` and the scheduler's stats show the open gap; the client is killed with ``kill -9`` in the
middle of closing it; a new client finishes the job. Every published item is stored exactly once."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from icecrawler_local.stack import running_stack
from sandbox.scenario import Product, Scenario, WeiboUser
from sandbox.schedules import Schedule
from tests.helpers import caught_up, client_logs, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.ice, pytest.mark.bdb, pytest.mark.slow]

SPEED = 60.0
PRODUCT = "100012043978"
TASK = f"reviews:jd:{PRODUCT}"
#: One review every 12 simulated seconds: 5 a wall second, half a JD page.
INTERVAL_S = 12.0
MAX_PAGES = 3
CATCH_UP_S = 6.0


def test_a_burst_longer_than_the_page_cap_survives_a_kill_9_mid_gap_and_is_stored_exactly_once(tmp_path: Path) -> None:
    world = Scenario(
        seed=7, products=(Product("jd", PRODUCT, backlog=5, schedule=Schedule("periodic", interval_s=INTERVAL_S)),)
    )
    scheduler_settings = {
        "scheduler.initial_period_s": 30,
        "scheduler.min_period_s": 30,
        "scheduler.max_period_s": 60,
        "scheduler.lease_s": 4,
    }
    client_settings = {
        "client.workers": 1,
        "client.batch": 1,
        "client.max_pages": MAX_PAGES,
        "client.idle_sleep_s": 0.2,
        "client.shutdown_grace_s": 5,
    }
    with running_stack(
        tmp_path, world, speed=SPEED, scheduler_settings=scheduler_settings, client_settings=client_settings
    ) as stack:

        def gap() -> Any:
            return stack.task_info(TASK).get("gap")

        stack.seed([f"jd:{PRODUCT}"])
        first = stack.start_client("client-1")
        # Everything listed so far is fetched (the first crawl may take several visits itself).
        wait_for(lambda: gap() is None and bool(stack.task_info(TASK)["cursor"]), "the first crawl never finished")
        stack.kill_client("client-1")
        time.sleep(20)  # ~100 reviews, 10 pages, pile up while nobody crawls: several visits to close
        second = stack.start_client("client-2")
        wait_for(
            lambda: gap() is not None and bool(gap()["since_cursor"]), "the page cap never opened a gap", timeout_s=60
        )
        stack.kill_client("client-2")  # kill -9 in the middle of closing the gap (its lease must expire)
        output = stack.icecrawler("status", "--task", TASK, "--json")
        shown = json.loads([line for line in output.splitlines() if line.startswith("{")][-1])
        stats = stack.scheduler_stats()
        third = stack.start_client("client-3")
        wait_for(lambda: gap() is None, "the gap was never closed", timeout_s=90)
        expected, stored, published = caught_up(stack, CATCH_UP_S, timeout_s=60)
        codes = [third.stop(timeout_s=20)]
        logs = client_logs([first, second, third])

    assert shown["gap"]["open"] is True and shown["gap"]["since_cursor"], shown
    assert stats["open_gaps"] >= 1
    assert "page cap reached before the cursor" in logs and "page-cap gap closed" in logs
    missing = expected - stored
    assert not missing, f"{sum(missing.values())} published review(s) never stored, e.g. {list(missing)[:5]}"
    duplicated = {key: count for key, count in stored.items() if count > 1}
    assert not duplicated, f"stored more than once: {list(duplicated.items())[:5]}"
    assert not set(stored) - set(published), "stored reviews the sandbox never published"
    assert len(expected) > 5 + 10 * MAX_PAGES, "the burst was not longer than the page cap"
    assert codes == [0], logs[-3000:]
    assert "Traceback" not in logs, logs[-4000:]


def test_a_weibo_com_timeline_longer_than_the_page_cap_resumes_with_its_xsrf_header(tmp_path: Path) -> None:
    """weibo.com's API wants the XSRF-TOKEN cookie echoed in X-XSRF-TOKEN once a session holds it. A resumed visit
    is rebuilt from the gap cursor, which dropped the request's cookie headers: the second visit on the same session
    was answered 403, reported as Banned, and the ban held every task of the host."""
    uid = 1907518591
    world = Scenario(
        seed=7, users=(WeiboUser(uid=uid, sites=("web",), backlog=90, schedule=Schedule("static"), pinned=False),)
    )
    scheduler_settings = {
        "scheduler.initial_period_s": 30,
        "scheduler.min_period_s": 30,
        "scheduler.max_period_s": 60,
    }
    client_settings = {"client.workers": 1, "client.batch": 1, "client.max_pages": 1, "client.idle_sleep_s": 0.2}
    task = f"user:weibo_web:{uid}"
    with running_stack(
        tmp_path, world, speed=SPEED, scheduler_settings=scheduler_settings, client_settings=client_settings
    ) as stack:
        stack.seed([f"weibo_web:{uid}"])
        client = stack.start_client("client-1")  # one worker: every visit on the same session, cookie and all
        wait_for(
            lambda: bool(stack.task_info(task)["cursor"]) and stack.task_info(task).get("gap") is None,
            lambda: f"the first crawl never finished:\n{client.log_tail(10)}",
            timeout_s=90,
        )
        expected, stored, _ = caught_up(stack, CATCH_UP_S, timeout_s=30)
        codes = [client.stop(timeout_s=20)]
        logs = client_logs([client])

    assert "Banned" not in logs, logs[-3000:]
    assert "gap kept open" in logs, "the timeline was not longer than the page cap"
    missing = expected - stored
    assert not missing, f"{sum(missing.values())} published post(s) never stored, e.g. {list(missing)[:5]}"
    assert codes == [0], logs[-3000:]
