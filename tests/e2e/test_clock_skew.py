"""A client machine whose clock is 10 minutes ahead of the scheduler's, as separate OS processes: it still
crawls, stores and reports every target. The scheduler's lease deadlines are its own wall-clock times; the client
times each lease from when it asked for it, on its own clock (``Task.on_local_clock``), so a skew longer than a
lease (20 s here) no longer makes every lease look over before the first fetch.

The client runs with Python's ``time.time`` moved 10 minutes ahead (a wrapper around the CLI, the way a machine
without time sync drifts); the scheduler, storage server and sites run on the real clock, at simulated speed 1
so that the simulated time of the client is the same 10 minutes ahead."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from icecrawler_local.oracle import stored_index
from icecrawler_local.stack import running_stack
from sandbox.scenario import Product, Scenario
from sandbox.schedules import Schedule
from tests.helpers import expected_keys, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.ice, pytest.mark.bdb, pytest.mark.slow]

SKEW_S = 600
SCHEDULER = {
    "scheduler.initial_period_s": 3600,
    "scheduler.lease_s": 20,
    "scheduler.maintenance_interval_s": 0.2,
}
CLIENT = {"client.workers": 2, "client.batch": 1, "client.idle_sleep_s": 0.2, "client.timeout_s": 10}
PRODUCTS = ("100012043978", "100008348542", "100035246702")

#: ``icecrawler`` with this process's wall clock SKEW_S ahead.
_AHEAD = f"""
import runpy, sys, time
real_time, real_time_ns = time.time, time.time_ns
time.time = lambda: real_time() + {SKEW_S}
time.time_ns = lambda: real_time_ns() + {SKEW_S} * 1_000_000_000
sys.argv = ["icecrawler", *sys.argv[1:]]
runpy.run_module("icecrawler_cli", run_name="__main__")
"""


def ahead(argv: list[str]) -> list[str]:
    assert argv[1:3] == ["-m", "icecrawler_cli"], argv
    return [sys.executable, "-c", _AHEAD, *argv[3:]]


def test_a_client_whose_clock_is_ahead_by_more_than_a_lease_still_crawls_everything(tmp_path: Path) -> None:
    scenario = Scenario(
        seed=11,
        products=tuple(
            Product("jd", product, backlog=8, schedule=Schedule("periodic", interval_s=86400)) for product in PRODUCTS
        ),
    )
    with running_stack(tmp_path, scenario, speed=1.0, scheduler_settings=SCHEDULER, client_settings=CLIENT) as stack:
        stack.seed([f"jd:{product}" for product in PRODUCTS])
        client = stack.start_client("ahead", wrap=ahead)
        wait_for(
            lambda: stack.scheduler_stats()["done"] >= len(PRODUCTS),
            lambda: f"the skewed client's crawls were never reported:\n{client.log_tail()}",
            90,
        )
        expected = expected_keys(stack, int(time.time() * 1000))
        stored = stored_index(stack.stored())
        assert len(expected) == 8 * len(PRODUCTS) and not expected - stored, expected - stored
        assert max(stored.values()) == 1
        log = client.log_path.read_text(errors="replace")
        assert "lease deadline passed" not in log
        warned = [line for line in log.splitlines() if "this machine's clock is at least" in line]
        assert len(warned) == 1 and "ahead of the scheduler's" in warned[0], warned
        assert SKEW_S - 5 <= int(warned[0].split("at least ")[1].split(" s ")[0]) <= SKEW_S
        outcomes = [entry["outcome"] for entry in stack.done_log()]
        assert outcomes == ["Ok"] * len(PRODUCTS), outcomes
        assert client.alive()
