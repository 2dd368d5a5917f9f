"""``icecrawler remove`` while the crawl runs, as separate OS processes: a product being crawled (the sandbox holds its
pages unanswered, and the removal comes while the request log shows the client waiting for one, which is answered
only after the removal) and a Weibo user (waiting in the queue or being crawled by the client's other worker) are
removed with one command.

Checked: the command counts both; the client's report of the crawl it had under way is refused (LeaseLost,
TaskRemoved) and the client goes on crawling the target that is left, then exits 0 on SIGTERM with no traceback;
the completion log shows the ended lease as ``Removed``, and no lease of a removed task after the removal; the
scheduler holds only the target that is left."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from icecrawler_local.stack import running_stack
from sandbox.scenario import Product, Scenario, WeiboUser
from sandbox.schedules import Schedule
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.ice, pytest.mark.bdb, pytest.mark.slow]

SPEED = 60.0
SCHEDULER = {
    "scheduler.initial_period_s": 60,
    "scheduler.min_period_s": 60,
    "scheduler.max_period_s": 120,
    "scheduler.lease_s": 20,
    "scheduler.maintenance_interval_s": 0.2,
}
CLIENT = {"client.workers": 2, "client.batch": 1, "client.idle_sleep_s": 0.2, "client.timeout_s": 10}
REMOVED_PRODUCT, KEPT_PRODUCT, REMOVED_USER = "100012043978", "100008348542", 1907518591


def scenario() -> Scenario:
    return Scenario(
        seed=7,
        users=(WeiboUser(uid=REMOVED_USER, backlog=5, schedule=Schedule("periodic", interval_s=3600)),),
        products=(
            Product("jd", REMOVED_PRODUCT, backlog=12, schedule=Schedule("periodic", interval_s=120)),
            Product("jd", KEPT_PRODUCT, backlog=6, schedule=Schedule("periodic", interval_s=120)),
        ),
    )


def test_targets_removed_while_one_is_being_crawled(tmp_path: Path) -> None:
    with running_stack(
        tmp_path, scenario(), speed=SPEED, scheduler_settings=SCHEDULER, client_settings=CLIENT
    ) as stack:
        stack.seed([f"jd:{REMOVED_PRODUCT}", f"jd:{KEPT_PRODUCT}", f"weibo_mobile:{REMOVED_USER}"])
        client = stack.start_client("c1")
        wait_for(lambda: stack.scheduler_stats()["done"] >= 3, "the first crawls were never reported", 90)
        held = {"site": "jd", "target": REMOVED_PRODUCT}
        stack.misbehave({**held, "set": {"hold": True}})
        # The removal must find the product in flight: wait until a request for it is held unanswered. It stays so
        # until the rule is cleared below (or the client's own read timeout, client.timeout_s, ends its wait).
        wait_for(
            lambda: any(
                r["target"] == REMOVED_PRODUCT and "hold" in r["misbehaviour"] and r["status"] == 0
                for r in stack.requests(site="jd")
            ),
            "the product was never crawled while its pages were held",
            90,
            interval_s=0.05,
        )
        assert stack.task_info(f"reviews:jd:{REMOVED_PRODUCT}")["state"] == "inflight"
        output = stack.icecrawler("remove", f"jd:{REMOVED_PRODUCT}", f"weibo_mobile:{REMOVED_USER}")
        removed_ms = int(time.time() * 1000)  # the removal is durable once the command returns
        stack.misbehave({**held, "clear": True})
        assert output.splitlines()[:2] == ["reviews: 1 removed of 1", "user: 1 removed of 1"], output
        assert stack.scheduler_stats()["tasks"] == 1
        wait_for(
            lambda: "the task was removed" in client.log_path.read_text(errors="replace"),
            "the client's report of the removed task was never refused",
            60,
        )
        kept_before = sum(1 for r in stack.requests(site="jd") if r["target"] == KEPT_PRODUCT)
        wait_for(
            lambda: sum(1 for r in stack.requests(site="jd") if r["target"] == KEPT_PRODUCT) > kept_before,
            "the product that was left was not crawled again",
            90,
        )
        assert client.stop(timeout_s=20) == 0
        assert stack.stop_scheduler() == 0
        done = stack.done_log()
        log = client.log_path.read_text(errors="replace")

    removed_ids = {f"reviews:jd:{REMOVED_PRODUCT}", f"user:weibo_mobile:{REMOVED_USER}"}
    ended = [e for e in done if e["outcome"] == "Removed"]
    assert (f"reviews:jd:{REMOVED_PRODUCT}", "c1") in [(e["task_id"], e["worker"]) for e in ended], ended
    assert {e["task_id"] for e in ended} <= removed_ids  # the user may have been in flight too
    assert not [e for e in done if e["task_id"] in removed_ids and e["leased_wall_ms"] > removed_ms], done
    assert any(e["task_id"] == f"reviews:jd:{KEPT_PRODUCT}" and e["leased_wall_ms"] > removed_ms for e in done)
    assert "Traceback" not in log, log[-4000:]
