"""The client daemon against real servers that fail: storage stopped mid-run (records are buffered and
nothing is lost or duplicated once it is back), the scheduler stopped mid-run (reports and leasing resume),
SIGTERM while a crawl hangs in a read (the client exits cleanly and the lease is given back, not left to
expire), and SIGTERM while a server hangs without closing its connections (SIGSTOP: the client still stops
within its grace period, whatever its Ice timeouts, and nothing is lost once the server runs again)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from icecrawler_local.stack import running_stack
from sandbox.misbehave import Misbehaviour, MisbehaviourRule
from sandbox.scenario import Product, Scenario, WeiboUser
from sandbox.schedules import Schedule
from tests.helpers import LONG_ICE_WAITS, caught_up, client_logs, restart, wait_for

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


#: How long the test waits for the stopped client (generous: the stop's bound is grace + about 10 s).
STOP_WAIT_S = 60.0


@pytest.mark.parametrize("hung", ["scheduler", "storage"])
def test_sigterm_while_a_server_hangs_stops_within_the_grace_and_loses_nothing(tmp_path: Path, hung: str) -> None:
    """The server is SIGSTOPped while crawls are under way, so the client's calls to it (a report or a write, the
    next lease) go unanswered: its kernel still takes the bytes. With Ice timeouts of ten minutes, the stop used to
    wait them out (systemd would SIGKILL it); the client must exit 0 well before. Once the server runs again, the
    leases come back (given back, or at their deadline: ``scheduler.lease_s``) and a new client stores every item."""
    scheduler = {**SCHEDULER, "scheduler.lease_s": 30}
    client_settings = {**CLIENT, "client.shutdown_grace_s": 2}
    with running_stack(
        tmp_path,
        small_world(),
        speed=SPEED,
        scheduler_settings=scheduler,
        client_settings=client_settings,
        latency_ms=1500,  # each page takes 1.5 s: crawls are under way when the server stops
    ) as stack:
        stack.seed(SEEDS)
        client = stack.start_client("client", ice=LONG_ICE_WAITS)
        wait_for(lambda: len(stack.stored()) > 0, "nothing stored before the server hung")
        wait_for(lambda: stack.scheduler_stats()["inflight"] > 0, "no crawl under way")
        peer = stack.scheduler if hung == "scheduler" else stack.storage
        os.kill(peer.pid, signal.SIGSTOP)
        try:
            time.sleep(2)  # the crawls under way end meanwhile: their records or reports wait on the hung server
            client.popen.send_signal(signal.SIGTERM)
            try:
                code: int | None = client.popen.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                code = None
                client.kill9()
        finally:
            os.kill(peer.pid, signal.SIGCONT)
        logs = client_logs([client])
        assert code is not None, f"the client was still stopping {STOP_WAIT_S:.0f}s after SIGTERM:\n{logs[-3000:]}"
        assert code == 0, logs[-3000:]
        again = stack.start_client("again")
        expected, stored, _ = caught_up(stack, CATCH_UP_S, timeout_s=120)
        code_again = again.stop(timeout_s=20)
        logs += client_logs([again])
    missing = expected - stored
    assert not missing, f"{sum(missing.values())} item(s) lost, e.g. {list(missing)[:3]}\n{logs[-3000:]}"
    assert not {key: n for key, n in stored.items() if n > 1}, "an item was stored twice"
    assert code_again == 0, logs[-3000:]
    assert "Traceback" not in logs, logs[-3000:]
