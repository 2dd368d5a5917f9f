"""Crawler-client stand-ins run as separate processes by the scheduler tests (real proxies, real processes).

    python -m tests.scheduler.workers hold  --proxy P --count N             lease N tasks, print them, wait
    python -m tests.scheduler.workers churn --proxy P --batch B --seconds S lease/report in a loop
    python -m tests.scheduler.workers fetch --proxy P --base-url U --seconds S  lease, GET U/target, report
    python -m tests.scheduler.workers shard-churn --proxy "P0;P1" --host jd=H0 --host ecshop=H1 ...
                                                  churn through the clients' ShardedScheduler gateway
    python -m tests.scheduler.workers reseed --proxy P --ids weibo_pc:1,weibo_pc:2 --seconds S
                                                  remove each id and add it again, in turn, in a loop

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

from crawler_client.gateways import IceScheduler, ShardedScheduler
from icecrawler import rpc
from icecrawler.errors import LeaseLostError, NoWorkError, ServiceError
from icecrawler.models import Report
from icecrawler.shards import ShardMap

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
            scheduler.putUsers(
                [C.Report(taskId=t.id, leaseToken=t.leaseToken, newItems=1, fingerprint=cycles) for t in tasks]
            )
            cycles += len(tasks)
        except (C.NoWork, C.LeaseLost):
            time.sleep(PAUSE_S)
        except C.InvalidArgument as exc:
            if exc.code != C.ErrorCode.UnknownTask:
                raise
            # A task removed by the operator (reseed) under a lease the scheduler no longer remembers (one a kill
            # -9 made it forget, since leases are not synced, or older than a record's last three): the scheduler
            # does not know the task, and the batch is dropped, as the client's sink drops a refused entry.
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


def shard_churn(proxies: list[Any], args: argparse.Namespace) -> None:
    hosts = dict(item.split("=", 1) for item in args.host)
    gateway = ShardedScheduler([IceScheduler(proxy) for proxy in proxies], ShardMap(hosts, len(proxies)))
    deadline = time.monotonic() + args.seconds
    cycles = 0
    while time.monotonic() < deadline:
        try:
            tasks = gateway.lease(args.name, args.batch)
            gateway.report(
                [Report(task_id=t.id, lease_token=t.lease_token, new_items=1, fingerprint=cycles) for t in tasks]
            )
            cycles += len(tasks)
        except (NoWorkError, LeaseLostError, ServiceError):
            time.sleep(PAUSE_S)  # nothing due, a lease expired while a shard was down, or a shard is down
    print(json.dumps({"cycles": cycles}), flush=True)


def reseed(scheduler: Any, args: argparse.Namespace) -> None:
    """The operator removing targets and adding them back, over and over (``removeUsers`` / ``addUsers``)."""
    C = rpc.crawler()
    ids = args.ids.split(",")
    deadline = time.monotonic() + args.seconds
    removed = added = 0
    while time.monotonic() < deadline:
        target = ids[(removed + added) % len(ids)]
        try:
            removed += scheduler.removeUsers([target], C.TaskKind.WeiboUser)
            added += scheduler.addUsers([target], C.TaskKind.WeiboUser)
        except Ice.LocalException:
            time.sleep(PAUSE_S)  # the scheduler is down or restarting
    print(json.dumps({"removed": removed, "added": added}), flush=True)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["hold", "churn", "fetch", "shard-churn", "reseed"])
    parser.add_argument("--proxy", required=True)
    parser.add_argument("--name", default="worker")
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--base-url", default="")
    parser.add_argument("--host", action="append", default=[], metavar="SOURCE=HOST")
    parser.add_argument("--ids", default="", help="reseed: comma-separated <source>:<target> ids")
    args = parser.parse_args(argv)
    with rpc.communicator(properties={"Ice.Default.InvocationTimeout": "5000"}) as comm:
        if args.mode == "shard-churn":
            shard_churn([rpc.crawler().SchedulerPrx(comm, proxy) for proxy in args.proxy.split(";")], args)
            return 0
        scheduler = rpc.crawler().SchedulerPrx(comm, args.proxy)
        {"hold": hold, "churn": churn, "fetch": fetch, "reseed": reseed}[args.mode](scheduler, args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
