"""Visitor sessions across processes: the scheduler mints a visitor session from the sandbox's passport for
``weibo_web`` (no account is configured), two clients crawl with it, and the sandbox ends every visitor session
while a page-2 request is being answered (pages are slow for a moment, so a crawl is mid-way).

Checked against the sandbox's request log, the scheduler's records and ground truth:

- the expiry hit a crawl after its first page (a 432 on a later-page request);
- the session was renewed exactly once however many crawls and clients met the 432 (two genvisitor2 calls in
  all), and the host was not blocked (``scheduler.host_block_s`` is an hour here: the crawl still finishes);
- every post published is stored exactly once: nothing the interrupted crawl was after is lost.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from icecrawler_local.oracle import ItemKey, stored_index, truth_index
from icecrawler_local.stack import Stack, running_stack
from sandbox.scenario import Scenario, WeiboUser
from sandbox.schedules import Schedule
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.ice, pytest.mark.bdb, pytest.mark.slow]

USERS = (3100000001, 3100000002)
SCHEDULER = {
    "scheduler.initial_period_s": 120,
    "scheduler.min_period_s": 60,
    "scheduler.max_period_s": 300,
    "scheduler.lease_s": 20,
    "scheduler.maintenance_interval_s": 0.2,
    "scheduler.host_block_s": 3600,
    "scheduler.visitor_renew_s": 1,
    "scheduler.backoff_after_attempts": 100,
}
CLIENT = {
    "client.workers": 1,
    "client.batch": 1,
    "client.max_pages": 20,
    "client.idle_sleep_s": 0.2,
    "client.timeout_s": 10,
    "client.retries": 0,
    "client.progress_log_s": 2,
    "client.shutdown_grace_s": 5,
}
CATCH_UP_S = 8.0


def scenario() -> Scenario:
    return Scenario(
        seed=8,
        users=tuple(
            WeiboUser(
                uid=uid,
                sites=("web",),
                cursor="since_id" if uid % 2 else "page",
                backlog=61,
                long_text_every=5,
                schedule=Schedule("periodic", interval_s=600),
            )
            for uid in USERS
        ),
    )


def with_accounts(stack: Stack, failure: str) -> Callable[[], str]:
    """A failure message with the scheduler's accounts, read only when a wait fails."""
    return lambda: f"{failure} (scheduler: {stack.scheduler_stats().get('accounts')})"


def missing(stack: Stack) -> set[ItemKey]:
    published = {key for _, key in truth_index(stack.truth()["items"], int((time.time() - CATCH_UP_S) * 1000))}
    return published - set(stored_index(stack.stored()))


def test_visitor_session_expiring_mid_crawl_is_renewed_once_and_nothing_is_lost(tmp_path: Path) -> None:
    with running_stack(
        tmp_path, scenario(), speed=60.0, scheduler_settings=SCHEDULER, client_settings=CLIENT, latency_ms=50
    ) as stack:
        stack.misbehave({"site": "web", "set": {"slow_rate": 1.0, "slow_ms": 1500}})
        stack.seed([f"weibo_web:{uid}" for uid in USERS])
        for name in ("c1", "c2"):
            stack.start_client(name)

        def second_page_in_flight() -> bool:
            return any(
                r["path"] == "/ajax/statuses/mymblog" and "page=1&" not in r["query"] + "&" and r["status"] == 0
                for r in stack.requests(site="web")
            )

        wait_for(second_page_in_flight, with_accounts(stack, "no crawl reached its second page"), 90, 0.2)
        stack.sandbox.control("visitors", {"expire": True})
        stack.misbehave({"site": "web", "clear": True})
        wait_for(
            lambda: not missing(stack), with_accounts(stack, "published posts are still missing from storage"), 120, 0.2
        )
        items = stack.truth()["items"]
        stored = stored_index(stack.stored())
        accounts = stack.scheduler_stats()["accounts"]
        web = stack.requests(site="web")
        passport = stack.requests(site="passport")
        assert stack.stop_scheduler() == 0
        done = stack.done_log()
        logs = "\n".join(client.log_path.read_text(errors="replace") for client in stack.clients.values())

    expired = [r for r in web if r["status"] == 432]
    assert expired and any("page=1&" not in r["query"] + "&" for r in expired), "no crawl met the 432 mid-way"
    assert [r["path"] for r in passport] == ["/visitor/genvisitor2"] * 2, "minted once, renewed once"
    assert accounts["visitor:weibo_web"]["renewals"] == 1 and accounts["visitor:weibo_web"]["mints"] == 2
    outcomes = [(e["task_id"], e["outcome"]) for e in sorted(done, key=lambda e: e["time_ms"])]
    banned = [i for i, (_, outcome) in enumerate(outcomes) if outcome == "Banned"]
    assert banned, outcomes
    assert all(any(t == outcomes[i][0] and o == "Ok" for t, o in outcomes[i + 1 :]) for i in banned), outcomes
    everything = {key for _, key in truth_index(items)}
    assert {k: c for k, c in stored.items() if c > 1} == {}, "a post was stored twice"
    assert set(stored) <= everything and everything - set(stored) <= missing_allowance(items)
    assert "Traceback" not in logs, logs[-3000:]


def missing_allowance(items: list[dict[str, Any]]) -> set[ItemKey]:
    """Posts published in the last catch-up window before the end need not be stored yet."""
    recent = int((time.time() - CATCH_UP_S) * 1000)
    return {key for _, key in truth_index(items)} - {key for _, key in truth_index(items, recent)}
