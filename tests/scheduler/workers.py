"""Crawler-client stand-ins run as separate processes by the scheduler tests (real proxies, real processes).

    python -m tests.scheduler.workers hold  --proxy P --count N             lease N tasks, print them, wait
    python -m tests.scheduler.workers churn --proxy P --batch B --seconds S lease/report in a loop
    python -m tests.scheduler.workers fetch --proxy P --base-url U --seconds S  lease, GET U/target, report

Every loop is bounded in time; transport errors (a scheduler being killed) are retried after a short pause.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from collections.abc import Sequence
from typing import Any

import Ice

from icecrawler import rpc

PAUSE_S = 0.05


def hold(scheduler: Any, args: argparse.Namespace) -> None:
    tasks = scheduler.getUsers(args.name, args.count)
    print(json.dumps([{"id": t.id, "deadline_ms": t.leaseDeadlineMs} for t in tasks]), flush=True)
    time.sleep(args.seconds)


def churn(scheduler: Any, args: argparse.Namespace) -> None:
    C = rpc.crawler()
    deadline = time.monotonic() + args.seconds
    cycles = 0
    while time.monotonic() < deadline:
        try:
            tasks = scheduler.getUsers(args.name, args.batch)
            scheduler.putUsers([C.Report(taskId=t.id, leaseToken=t.leaseToken, newItems=1, fingerprint=cycles)
                                for t in tasks])
            cycles += len(tasks)
        except (C.NoWork, C.LeaseLost):
            time.sleep(PAUSE_S)
        except Ice.LocalException:
            time.sleep(PAUSE_S)  # the scheduler is down or restarting
    print(json.dumps({"cycles": cycles}), flush=True)


def fetch(scheduler: Any, args: argparse.Namespace) -> None:
    C = rpc.crawler()
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        try:
            task = scheduler.getUser(args.name)
        except C.NoWork as exc:
            time.sleep(min(PAUSE_S, max(exc.nextDueInMs, 1) / 1000))
            continue
        with urllib.request.urlopen(f"{args.base_url}/{task.target}", timeout=5) as response:
            response.read()
        scheduler.putUser(C.Report(taskId=task.id, leaseToken=task.leaseToken, httpStatus=200, fetches=1))


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["hold", "churn", "fetch"])
    parser.add_argument("--proxy", required=True)
    parser.add_argument("--name", default="worker")
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--base-url", default="")
    args = parser.parse_args(argv)
    with rpc.communicator(properties={"Ice.Default.InvocationTimeout": "5000"}) as comm:
        scheduler = rpc.crawler().SchedulerPrx(comm, args.proxy)
        {"hold": hold, "churn": churn, "fetch": fetch}[args.mode](scheduler, args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
