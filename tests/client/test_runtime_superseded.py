"""A report the scheduler committed but whose answer was lost (the scheduler killed right after its commit), and the
crawl of the same task leased again, against a real scheduler daemon: both reports reached one batch, which the
scheduler refuses for naming a task twice, naming the later entry (the live lease); the client dropped that one as
a bug and the task sat leased until its lease ran out (a kill -9 harness found it). The older report gives way."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from crawler_client.crawl import CrawlResult
from crawler_client.gateways import IceScheduler
from crawler_client.sink import Sink
from icecrawler import rpc
from icecrawler.errors import NoWorkError, ServiceError
from icecrawler.models import Post, Report, Review, Task
from tests.scheduler.daemon import scheduler_daemon, scheduler_proxy

pytestmark = [pytest.mark.ice, pytest.mark.bdb]

SETTINGS = {
    "scheduler__lease_s": 60,
    "scheduler__policy": "fixed",
    "scheduler__initial_period_s": 0.05,
    "scheduler__min_period_s": 0.05,
    "scheduler__backoff_after_attempts": 100,
}


class NoStorage:
    """The crawls here hold no records: storage is never asked."""

    def write_posts(self, posts: Sequence[Post]) -> int:
        raise AssertionError("no records to store")

    def write_reviews(self, reviews: Sequence[Review]) -> int:
        raise AssertionError("no records to store")


class AnswerLostOnce:
    """The real scheduler, except that the answer to the first report is lost after the scheduler committed it (a
    scheduler killed with -9 just after its commit)."""

    def __init__(self, scheduler: IceScheduler) -> None:
        self.scheduler = scheduler
        self.lost = False

    def lease(self, worker_id: str, count: int) -> list[Task]:
        return self.scheduler.lease(worker_id, count)

    def report(self, reports: Sequence[Report]) -> None:
        self.scheduler.report(reports)
        if not self.lost:
            self.lost = True
            raise ServiceError("scheduler: ConnectionLostException (killed after its commit)")

    def release(self, leases: Sequence[tuple[str, str]]) -> None:
        self.scheduler.release(leases)


def _lease_again(scheduler: IceScheduler, deadline_s: float = 30.0) -> Task:
    """Lease the one task, waiting (bounded) until it is due again."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            return scheduler.lease("w1", 1)[0]
        except NoWorkError:
            if time.monotonic() > end:
                raise
            time.sleep(0.2)


def test_a_kept_report_gives_way_to_the_crawl_of_its_task_leased_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = [0.0]
    with scheduler_daemon(tmp_path, **SETTINGS) as daemon:
        with scheduler_proxy(daemon) as proxy:
            assert proxy.addUsers(["jd:1"], rpc.crawler().TaskKind.ProductReviews) == 1
        with rpc.communicator() as comm:
            scheduler = IceScheduler(rpc.crawler().SchedulerPrx(comm, daemon.proxy))
            gateway = AnswerLostOnce(scheduler)
            sink = Sink(
                gateway,
                NoStorage(),
                buffer_records=100,
                report_batch=10,
                write_batch=10,
                backoff_s=1.0,
                max_backoff_s=8.0,
                now_ms=lambda: int(time.time() * 1000),
                monotonic=lambda: clock[0],
                fingerprint=lambda texts: 1,
            )
            first = _lease_again(scheduler)
            sink.add(CrawlResult(first, Report(task_id=first.id, lease_token=first.lease_token, cursor="c1")))
            assert sink.flush() is False and gateway.lost  # committed, but the client never heard: kept
            second = _lease_again(scheduler)  # due again at once (a 50 ms period), leased to this client again
            assert second.id == first.id and second.lease_token != first.lease_token
            sink.add(CrawlResult(second, Report(task_id=second.id, lease_token=second.lease_token, cursor="c2")))
            clock[0] += 100.0  # past the sink's backoff
            with caplog.at_level(logging.INFO, logger="crawler_client.sink"):
                assert sink.flush() is True
        with scheduler_proxy(daemon) as proxy:
            info = json.loads(proxy.taskInfo(first.id))
    assert (info["state"], info["cursor"], info["attempts"]) == ("pending", "c2", 0)  # the live lease was reported
    assert "replaces the report of lease" in caplog.text
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]
