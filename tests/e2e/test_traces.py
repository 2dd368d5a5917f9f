"""A crawl of a world made from publication traces, end to end: a trace file (a Weibo user's posts, a product's
reviews) becomes the sandbox's world (``sandbox.tracescenario``, what ``icecrawler sandbox --traces`` serves), and
the real stack (scheduler with its default revisit policy, storage, a client, each its own process) crawls it on a
clock 120 times faster than real time. The traces end an hour after the start, so the whole truth is known: every
item, the backlog before the start and the items of one second included, must be stored exactly once."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from icecrawler_local import oracle
from icecrawler_local.stack import running_stack
from sandbox.tracefile import DAY_S, Trace
from sandbox.tracescenario import TRACE_PRODUCT_BASE, TRACE_UID_BASE, TraceMapping, load_trace_scenario
from tests.helpers import TRACE_T0, client_logs, wait_for, write_traces

pytestmark = [pytest.mark.e2e, pytest.mark.ice, pytest.mark.bdb, pytest.mark.slow]

SPEED = 120.0
#: Each trace starts a day after its first item (each its own: both first items are at TRACE_T0 here): the day's items
#: are the backlog a first crawl reads. Then an hour of items at uneven gaps, three of them in one second (spread 1 s
#: apart by the sandbox).
BACKLOG_DAYS = 1.0
TRACES = (
    Trace(
        "u1",
        "weibo",
        (
            TRACE_T0,
            TRACE_T0 + 20_000,
            TRACE_T0 + 50_000,
            TRACE_T0 + 80_000,
            *(TRACE_T0 + DAY_S + s for s in (0, 40, 40, 40, 300, 900, 1500, 2400, 3600)),
        ),
    ),
    Trace(
        "p1", "reviews", (TRACE_T0, TRACE_T0 + 7200, *(TRACE_T0 + DAY_S + s for s in (10, 200, 201, 1000, 2000, 3300)))
    ),
)
TOTAL = sum(len(trace.times) for trace in TRACES)
SCHEDULER = {
    "scheduler.initial_period_s": 60,
    "scheduler.min_period_s": 30,
    "scheduler.max_period_s": 300,
    "scheduler.lease_s": 30,
    "scheduler.maintenance_interval_s": 0.2,
}
CLIENT = {"client.workers": 2, "client.batch": 1, "client.idle_sleep_s": 0.2, "client.timeout_s": 5}


def test_every_item_of_a_trace_options_scenario_is_crawled_and_stored_exactly_once(tmp_path: Path) -> None:
    path = write_traces(tmp_path / "traces.jsonl", TRACES)
    scenario = load_trace_scenario(path, TraceMapping(backlog_days=BACKLOG_DAYS))
    uid, product = str(TRACE_UID_BASE), str(TRACE_PRODUCT_BASE)
    with running_stack(tmp_path, scenario, speed=SPEED, scheduler_settings=SCHEDULER, client_settings=CLIENT) as stack:
        stack.seed([f"weibo_mobile:{uid}", f"jd:{product}"])
        client = stack.start_client("client-1")

        def judged() -> tuple[list[dict[str, Any]], list[str]]:
            items = list(stack.truth()["items"])
            return items, oracle.problems(items, stack.stored())

        def complete() -> bool:
            items, problems = judged()
            return len(items) == TOTAL and not problems

        # An hour of simulated time is 30 wall seconds; the rest bounds a slow machine's crawl.
        wait_for(complete, lambda: f"not stored as published: {judged()[1][:5]}", timeout_s=180, interval_s=1.0)
        items, problems = judged()
        crawls = {
            task: stack.task_info(task)["crawls"] for task in (f"user:weibo_mobile:{uid}", f"reviews:jd:{product}")
        }
        codes = [client.stop(timeout_s=20)]
        logs = client_logs([client])

    assert not problems and len(items) == TOTAL
    assert sum(item["backlog"] for item in items) == 4 + 2, "the day before the start is the backlog"
    assert all(count > 1 for count in crawls.values()), f"each target should be visited again: {crawls}"
    assert codes == [0], logs[-3000:]
    assert "Traceback" not in logs, logs[-4000:]


def test_icecrawler_demo_crawls_a_trace_file_and_judges_it(tmp_path: Path) -> None:
    """``icecrawler demo --traces FILE``: the demo's crawl, drain and judgement on the traces' world. Ten wall seconds
    at speed 600 are 100 simulated minutes, past the traces' hour, so everything is published before the cut-off."""
    path = write_traces(tmp_path / "traces.jsonl", TRACES)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "icecrawler_cli",
            "demo",
            "--traces",
            str(path),
            "--traces-backlog-days",
            str(BACKLOG_DAYS),
            "--duration",
            "10",
            "--speed",
            "600",
            "--every",
            "5",
            "--no-plot",
            "--var-dir",
            str(tmp_path / "var"),
            "--output-dir",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=280,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert f"traces {path}: 1 Weibo user(s), 1 product(s); {TOTAL} items: 6 backlog" in output, output[-4000:]
    assert "OK: stored == published for every source" in output
    for source, trace in (("weibo_mobile", TRACES[0]), ("jd", TRACES[1])):
        row = re.search(rf"^{source}\s+(\d+)\s+(\d+)\s+(\d+)\s", output, re.M)
        assert row, f"no table row for {source}:\n{output[-3000:]}"
        assert [int(x) for x in row.groups()] == [len(trace.times), len(trace.times), 0], row.group(0)
