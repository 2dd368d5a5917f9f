"""The used-by scenario, as separate OS processes: a scheduler and a storage server, one client, then three more
clients added while the crawl runs, then one of them killed with ``kill -9`` in the middle of a crawl (product
pages answer slowly for a moment, and the client is killed while the request log shows it waiting for one).

Checked against the sandbox's ground truth and the scheduler's own records:

- every item the sandbox published (up to a short catch-up window before the end) is stored exactly once, and
  nothing the sandbox never published is stored;
- the clients added later pick up work at once (their first site request follows their start within a bound);
- no task was ever leased twice at the same time. The audit reads the scheduler's completion log (the ``done``
  table of its Berkeley DB environment, read after the scheduler stopped): every report and every expired lease
  is recorded there with the lease's interval (leased / deadline / ended, wall ms; added for this audit). Per
  task, sorted by lease time, each lease must start after the previous one ended. Leases given back unused by a
  clean client shutdown (releaseUsers) are not in that log; the clients stop only at the very end, after the
  audited period;
- weibo.com's JSON API (``weibo_web``) is crawled with a visitor session the scheduler minted from the sandbox's
  passport (no account is configured);
- the killed client's leases come back only after their deadline: each one it held expired (outcome
  LeaseExpired, ended >= deadline), the next lease of that task started after the deadline and another client
  reported it; the killed client made no request after the kill (sandbox request log, by User-Agent).
"""

from __future__ import annotations

import collections
import time
from pathlib import Path
from typing import Any

import pytest

from icecrawler.sourcespec import group_by_kind
from icecrawler_local.oracle import leases_by_task, overlapping_leases, stored_index, truth_index
from icecrawler_local.stack import Stack, running_stack
from sandbox.scenario import Category, Product, Scenario, WeiboUser
from sandbox.schedules import Schedule
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.ice, pytest.mark.bdb, pytest.mark.slow]

SPEED = 60.0
LEASE_S = 6.0
#: Items published within this many wall seconds of the end need not be stored yet.
CATCH_UP_S = 8.0
SCHEDULER = {
    "scheduler.initial_period_s": 60,
    "scheduler.min_period_s": 60,
    "scheduler.max_period_s": 300,
    "scheduler.lease_s": LEASE_S,
    "scheduler.maintenance_interval_s": 0.2,
    "scheduler.backoff_after_attempts": 100,
}
CLIENT = {
    "client.workers": 2,
    "client.batch": 1,
    "client.max_pages": 30,
    "client.idle_sleep_s": 0.2,
    "client.timeout_s": 5,
    "client.retries": 1,
    "client.progress_log_s": 2,
    "client.shutdown_grace_s": 5,
}
SEEDS = [
    "weibo_mobile:1907518591",
    "weibo_pc:1907518591",
    "weibo_web:1907518591",
    "weibo_mobile:1163218074",
    "weibo_pc:1163218074",
    "weibo_web:1163218074",
    "ecshop:12",
    "jd:100012043978",
    "jd:100008348542",
]
#: The task ids the seeds make (``<kind>:<source>:<target>``).
TASKS = [f"{kind.value}:{seed}" for kind, seeds in group_by_kind(SEEDS, None).items() for seed in seeds]


def scenario() -> Scenario:
    return Scenario(
        seed=5,
        users=(
            WeiboUser(uid=1907518591, backlog=15, schedule=Schedule("periodic", interval_s=240)),
            WeiboUser(uid=1163218074, cursor="page", backlog=12, schedule=Schedule("periodic", interval_s=300)),
        ),
        products=(
            Product("ecshop", "12", category=1, backlog=8, schedule=Schedule("periodic", interval_s=300)),
            Product("jd", "100012043978", backlog=15, schedule=Schedule("periodic", interval_s=180)),
            Product("jd", "100008348542", backlog=6, schedule=Schedule("periodic", interval_s=420)),
        ),
        categories=(Category(id=1),),
    )


def agent(name: str) -> str:
    return f"icecrawler-e2e/{name}"


def first_request_ms(stack: Stack, name: str) -> int | None:
    times = [r["wall_ms"] for r in stack.requests() if r.get("agent") == agent(name)]
    return min(times) if times else None


def task_infos(stack: Stack) -> dict[str, dict[str, Any]]:
    """Every seeded task's ``status --task`` record."""
    return {task: stack.task_info(task) for task in TASKS}


def is_held(info: dict[str, Any], worker: str) -> bool:
    """The task is leased to ``worker`` now."""
    return bool(info["state"] == "inflight" and info["worker"] == worker)


def missing_items(stack: Stack) -> int:
    published = {key for _, key in truth_index(stack.truth()["items"], int((time.time() - CATCH_UP_S) * 1000))}
    return len(published - set(stored_index(stack.stored())))


def test_clients_join_and_die_while_the_crawl_runs(tmp_path: Path) -> None:
    with running_stack(
        tmp_path, scenario(), speed=SPEED, scheduler_settings=SCHEDULER, client_settings=CLIENT, latency_ms=100
    ) as stack:
        print(stack.seed(SEEDS))
        stack.start_client("c1", {"client.user_agent": agent("c1")})
        wait_for(lambda: len(stack.stored()) > 0, "the first client stored nothing", 90)
        started: dict[str, float] = {}
        for name in ("c2", "c3", "c4"):
            started[name] = time.time()
            stack.start_client(name, {"client.user_agent": agent(name)})
        wait_for(
            lambda: all(first_request_ms(stack, n) is not None for n in started),
            "a client added during the crawl never fetched anything",
            60,
        )
        for name, at in started.items():
            print(
                f"{name} fetched its first page {(first_request_ms(stack, name) or 0) / 1000 - at:.1f}s after it "
                f"was started"
            )
        # Kill c3 in the middle of a crawl, so that it holds a lease: product pages answer slowly for a while
        # (2.5 s), and c3 is killed as soon as the request log shows it waiting for one of them (a slowed one).
        victim = "c3"
        for site in ("jd", "ecshop"):
            stack.misbehave({"site": site, "set": {"slow_rate": 1.0, "slow_ms": 2500}})
        kill_deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < kill_deadline, f"{victim} never crawled a product while pages were slow"
            # Only a request that is being slowed down proves c3 is inside a crawl (holding its lease) now: one
            # that arrived just before the slowdown was switched on is answered at once, and c3 may have
            # reported that task and be idle, holding nothing, by the time it is killed.
            waiting = [
                r
                for r in stack.requests()
                if r.get("agent") == agent(victim)
                and r["site"] in ("jd", "ecshop")
                and "slow" in r.get("misbehaviour", [])
                and r["wall_ms"] > (time.time() - 1.5) * 1000
            ]
            if waiting:
                break
            time.sleep(0.05)
        stack.kill_client(victim)
        killed_ms = int(time.time() * 1000)
        # The leases the dead client held (crawls included whose results it had not reported): each must expire, and
        # another client must then crawl that task. Its successful crawls count up only once that happened.
        held = {task: info["crawls"] for task, info in task_infos(stack).items() if is_held(info, victim)}
        for site in ("jd", "ecshop"):
            stack.misbehave({"site": site, "clear": True})
        # The crawl goes on with three clients: past the dead client's lease deadlines, until caught up.
        wait_for(
            lambda: all(stack.task_info(task)["crawls"] > crawls for task, crawls in held.items()),
            lambda: f"the dead client's tasks were not crawled again after its leases expired: {held}",
            90,
        )
        wait_for(lambda: missing_items(stack) == 0, "published items are still missing from storage", 90)
        end_ms = int((time.time() - CATCH_UP_S) * 1000)
        items = stack.truth()["items"]
        stored = stored_index(stack.stored())
        survivors = [stack.clients[n] for n in ("c1", "c2", "c4")]
        codes = [client.stop(timeout_s=20) for client in survivors]
        requests = stack.requests()
        assert stack.stop_scheduler() == 0
        done = stack.done_log()
        logs = "\n".join(client.log_path.read_text(errors="replace") for client in survivors)

    published = {key for _, key in truth_index(items, end_ms)}
    everything = {key for _, key in truth_index(items)}
    missing = published - set(stored)
    assert not missing, f"{len(missing)} published item(s) never stored, e.g. {sorted(missing)[:5]}"
    assert {k: c for k, c in stored.items() if c > 1} == {}, "an item was stored twice"
    assert set(stored) <= everything, f"stored items never published: {sorted(set(stored) - everything)[:5]}"
    print(f"{len(published)} published items checked, {len(stored)} stored, {len(done)} completion-log entries")

    overlaps = overlapping_leases(done)
    assert not overlaps, f"a task was leased twice at once: {overlaps[:3]}"
    per_task = leases_by_task(done)
    workers = collections.Counter(entry["worker"] for entry in done if entry["outcome"] == "Ok")
    print("successful crawls per client:", dict(workers))
    # (the victim fetched before it was killed, see above; it may have died in its first task)
    assert {"c1", "c2", "c4"} <= set(workers), f"a client never completed a task: {workers}"

    expired = [entry for entry in done if entry["outcome"] == "LeaseExpired"]
    print("expired leases:", [(e["task_id"], e["worker"]) for e in expired])
    assert any(entry["worker"] == victim for entry in expired), (
        f"the killed client held no lease at the kill (nothing expired): {expired}"
    )
    for entry in expired:
        assert entry["ended_wall_ms"] >= entry["deadline_wall_ms"], f"a lease expired before its deadline: {entry}"
        later = [e for e in per_task[entry["task_id"]] if e["leased_wall_ms"] > entry["leased_wall_ms"]]
        assert later, f"{entry['task_id']} was never leased again after its lease expired"
        assert later[0]["leased_wall_ms"] >= entry["deadline_wall_ms"], (
            f"{entry['task_id']} was re-leased before the dead client's deadline"
        )
        assert any(e["outcome"] == "Ok" and e["worker"] != victim for e in later), (
            f"no other client completed {entry['task_id']} after the dead client's lease expired"
        )
    assert not [e for e in done if e["worker"] == victim and e["leased_wall_ms"] > killed_ms]
    assert not [r for r in requests if r.get("agent") == agent(victim) and r["wall_ms"] > killed_ms], (
        "the killed client still fetched after the kill"
    )
    # weibo.com's JSON API was crawled through the visitor session the scheduler minted from the passport
    web_ok = {e["task_id"] for e in done if e["task_id"].startswith("user:weibo_web:") and e["outcome"] == "Ok"}
    assert web_ok == {"user:weibo_web:1907518591", "user:weibo_web:1163218074"}, web_ok
    assert any(r["site"] == "passport" for r in requests), "no visitor session was minted"
    assert codes == [0, 0, 0], logs[-3000:]
    assert "Traceback" not in logs, logs[-3000:]
