"""The sink's buffering and reporting policy as pure logic, with memory gateways standing in for the servers:
records before reports, buffering through outages, InvalidRecords, LeaseLost/InvalidArgument resends, lease
expiry, listing discoveries inside their reports, and leases given back."""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from crawler_client.crawl import CrawlResult
from crawler_client.gateways import CallCutoff, IceScheduler, IceStorage, SchedulerGateway, StorageGateway
from crawler_client.sink import Backoff, GivenBack, Sink
from crawler_client.wire_size import report_wire_bytes
from icecrawler import rpc
from icecrawler.errors import (
    InvalidArgumentError,
    InvalidRecordsError,
    LeaseLostError,
    NoWorkError,
    ServiceError,
    StorageUnavailableError,
)
from icecrawler.models import Outcome, Post, Report, Review, Task, TaskKind


class MemoryScheduler:
    def __init__(self) -> None:
        self.reports: list[Report] = []
        self.released: list[tuple[str, str]] = []
        self.added: list[tuple[list[str], TaskKind]] = []
        self.down = False
        self.lost: set[str] = set()
        self.invalid: set[str] = set()
        self.unknown: set[str] = set()
        self.calls = 0

    def lease(self, worker_id: str, count: int) -> list[Task]:
        raise NoWorkError()

    def _check(self, ids: Sequence[str]) -> None:
        self.calls += 1
        if self.down:
            raise ServiceError("scheduler: ConnectionRefusedException")
        for index, task_id in enumerate(ids):  # as scheduler_server.checks: the later of two is named
            if task_id in ids[:index]:
                raise InvalidArgumentError(
                    f"task {task_id} reported twice in one batch", field=f"reports[{index}].taskId", index=index
                )
        for index, task_id in enumerate(ids):
            if task_id in self.lost:
                raise LeaseLostError("expired", task_id=task_id, index=index)
            if task_id in self.invalid:
                raise InvalidArgumentError("bad report", field=f"reports[{index}].newItems", index=index)
            if task_id in self.unknown:
                raise InvalidArgumentError(
                    f"unknown task {task_id}", field=f"reports[{index}].taskId", index=index, code="UnknownTask"
                )

    def report(self, reports: Sequence[Report]) -> None:
        self._check([report.task_id for report in reports])
        self.reports.extend(reports)

    def release(self, leases: Sequence[tuple[str, str]]) -> None:
        self._check([task_id for task_id, _ in leases])
        self.released.extend(leases)

    def add_targets(self, ids: Sequence[str], kind: TaskKind) -> int:
        self.added.append((list(ids), kind))  # the sink never adds targets: discoveries go in the report
        return len(ids)


class MemoryStorage:
    def __init__(self) -> None:
        self.posts: list[Post] = []
        self.reviews: list[Review] = []
        self.unavailable = 0
        self.reject_ids: set[str] = set()
        self.writes: list[int] = []

    def write_posts(self, posts: Sequence[Post]) -> int:
        return self._write(list(posts), self.posts)

    def write_reviews(self, reviews: Sequence[Review]) -> int:
        return self._write(list(reviews), self.reviews)

    def _write(self, records: list, into: list) -> int:  # type: ignore[type-arg]
        if self.unavailable:
            self.unavailable -= 1
            raise StorageUnavailableError("backend and spool down")
        self.writes.append(len(records))
        rejected = [(i, "text too long") for i, r in enumerate(records) if str(r.id) in self.reject_ids]
        into.extend(r for i, r in enumerate(records) if i not in {j for j, _ in rejected})
        if rejected:
            raise InvalidRecordsError(rejected, stored=len(records) - len(rejected))
        return len(records)


class Times:
    """The sink's two time sources, moved by hand."""

    def __init__(self) -> None:
        self.wall_ms = 1_000_000
        self.mono = 0.0


def make(
    buffer_records: int = 100,
    write_batch: int = 3,
    report_batch: int = 2,
    report_bytes: int = 0,
) -> tuple[Sink, MemoryScheduler, MemoryStorage, Times]:
    scheduler, storage, clock = MemoryScheduler(), MemoryStorage(), Times()
    sink = Sink(
        scheduler,
        storage,
        buffer_records=buffer_records,
        report_batch=report_batch,
        write_batch=write_batch,
        report_bytes=report_bytes,
        backoff_s=1.0,
        max_backoff_s=8.0,
        now_ms=lambda: clock.wall_ms,
        monotonic=lambda: clock.mono,
        fingerprint=lambda texts: len(list(texts)),
    )
    return sink, scheduler, storage, clock


def result(
    name: str,
    posts: int = 0,
    reviews: int = 0,
    *,
    deadline_ms: int = 0,
    discovered: Sequence[str] = (),
    aborted: bool = False,
    kind: TaskKind = TaskKind.WeiboUser,
) -> CrawlResult:
    task = Task(
        id=f"{kind.value}:weibo_mobile:{name}",
        kind=kind,
        source="ecshop" if discovered else "weibo_mobile",
        target=name,
        lease_token=f"tok-{name}",
        lease_deadline_ms=deadline_ms,
    )
    return CrawlResult(
        task,
        Report(
            task_id=task.id,
            lease_token=task.lease_token,
            new_items=posts + reviews + len(discovered),
            discovered_ids=tuple(discovered),
        ),
        posts=[Post(id=hash((name, n)) & 0xFFFFFF, user_id=1) for n in range(posts)],
        reviews=[Review(id=f"{name}-{n}", product_id=name) for n in range(reviews)],
        aborted=aborted,
    )


def test_records_are_stored_in_batches_before_reports_are_sent_in_batches() -> None:
    sink, scheduler, storage, _ = make()
    for n, count in enumerate([2, 2, 1]):
        sink.add(result(f"t{n}", posts=count))
    sink.add(result("r", reviews=4))
    assert sink.flush() is True
    assert len(storage.posts) == 5 and len(storage.reviews) == 4
    assert storage.writes == [3, 2, 3, 1]  # chunks of write_batch across results
    assert [r.task_id.rsplit(":", 1)[1] for r in scheduler.reports] == ["t0", "t1", "t2", "r"]
    assert scheduler.calls == 2  # report_batch = 2
    assert sink.stats.snapshot()["items_stored"] == 9


def test_storage_outage_buffers_records_withholds_reports_and_blocks_leasing_when_full() -> None:
    sink, scheduler, storage, clock = make(buffer_records=5)
    storage.unavailable = 1
    sink.add(result("a", posts=3))
    sink.add(result("b", posts=3))
    assert sink.flush() is False
    assert scheduler.reports == []  # never reported before its records are stored
    assert sink.buffered_records() == 6 and not sink.has_room()
    assert sink.flush() is False  # still backing off: no call made
    assert storage.writes == []
    clock.mono += 20
    assert sink.flush() is True
    assert len(storage.posts) == 6 and len(scheduler.reports) == 2 and sink.has_room()


def test_rejected_records_are_logged_not_retried_and_the_task_still_reported(caplog: pytest.LogCaptureFixture) -> None:
    sink, scheduler, storage, _ = make()
    bad = result("x", reviews=3)
    storage.reject_ids = {"x-1"}
    sink.add(bad)
    assert sink.flush() is True
    assert [r.id for r in storage.reviews] == ["x-0", "x-2"]
    assert "REJECTED review x-1" in caplog.text
    assert len(scheduler.reports) == 1 and storage.writes == [3]
    assert sink.stats.snapshot()["records_rejected"] == 1


def test_scheduler_outage_keeps_reports_until_it_is_back() -> None:
    sink, scheduler, storage, clock = make()
    scheduler.down = True
    sink.add(result("a", posts=1))
    assert sink.flush() is False
    assert len(storage.posts) == 1 and sink.buffered_records() == 0  # stored, report pending
    scheduler.down = False
    clock.mono += 20
    assert sink.flush() is True
    assert len(scheduler.reports) == 1
    assert len(storage.posts) == 1  # not written twice


def test_lease_lost_drops_only_that_report_and_resends_the_rest() -> None:
    sink, scheduler, _, _ = make(report_batch=10)
    for name in ("a", "b", "c"):
        sink.add(result(name, posts=1))
    scheduler.lost = {"user:weibo_mobile:b"}
    assert sink.flush() is True
    assert [r.task_id for r in scheduler.reports] == ["user:weibo_mobile:a", "user:weibo_mobile:c"]
    assert sink.stats.snapshot()["reports_lost"] == 1


def test_invalid_report_is_dropped_loudly_and_the_rest_resent(caplog: pytest.LogCaptureFixture) -> None:
    sink, scheduler, _, _ = make(report_batch=10)
    sink.add(result("a"))
    sink.add(result("b"))
    scheduler.invalid = {"user:weibo_mobile:a"}
    assert sink.flush() is True
    assert [r.task_id for r in scheduler.reports] == ["user:weibo_mobile:b"]
    assert "InvalidArgumentError" in caplog.text


def test_a_task_the_scheduler_no_longer_knows_is_dropped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    """A task removed long ago (or a lease a kill -9 made the scheduler forget) is not a client bug: no ERROR line."""
    sink, scheduler, _, _ = make(report_batch=10)
    sink.add(result("a"))
    sink.add(result("b"))
    scheduler.unknown = {"user:weibo_mobile:a"}
    with caplog.at_level(logging.WARNING):
        assert sink.flush() is True
    assert [r.task_id for r in scheduler.reports] == ["user:weibo_mobile:b"]
    refused = [r for r in caplog.records if "refused" in r.getMessage()]
    assert [r.levelno for r in refused] == [logging.WARNING] and "unknown task" in refused[0].getMessage()
    assert sink.stats.snapshot()["reports_lost"] == 1


def test_result_past_its_lease_deadline_is_dropped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    sink, scheduler, storage, clock = make()
    storage.unavailable = 1
    sink.add(result("a", posts=2, deadline_ms=clock.wall_ms + 5_000))
    assert sink.flush() is False
    clock.wall_ms += 10_000
    clock.mono += 20
    assert sink.flush() is True
    assert storage.posts == [] and scheduler.reports == []
    assert "lease deadline passed" in caplog.text
    assert sink.stats.snapshot()["results_expired"] == 1


def test_listing_discoveries_travel_in_the_report_untouched_and_no_target_is_added() -> None:
    sink, scheduler, _, _ = make()
    sink.add(result("cat1", discovered=["101", "102", "103"], kind=TaskKind.Listing))
    assert sink.buffered_records() == 0  # discoveries wait for no storage
    assert sink.flush() is True
    assert scheduler.added == []
    assert [(r.task_id, r.discovered_ids, r.new_items) for r in scheduler.reports] == [
        ("listing:weibo_mobile:cat1", ("101", "102", "103"), 3)  # the scheduler, not the sink, counts the new ones
    ]


def test_reports_are_split_to_fit_the_scheduler_request_limit() -> None:
    one_listing = report_wire_bytes(result("x", discovered=[f"{n:08d}" for n in range(400)]).report)
    sink, scheduler, _, _ = make(report_batch=50, report_bytes=int(one_listing * 2.5))
    for name in "abcde":
        sink.add(result(name, discovered=[f"{n:08d}" for n in range(400)], kind=TaskKind.Listing))
    sink.add(result("f", posts=1))
    assert sink.flush() is True
    assert scheduler.calls == 3  # two listing reports a call, the last with the small one
    assert [len(r.discovered_ids) for r in scheduler.reports] == [400] * 5 + [0]


def test_a_report_over_the_limit_alone_is_still_sent_alone() -> None:
    sink, scheduler, _, _ = make(report_batch=50, report_bytes=100)
    sink.add(result("a", discovered=["1"] * 50, kind=TaskKind.Listing))
    sink.add(result("b", discovered=["2"] * 50, kind=TaskKind.Listing))
    assert sink.flush() is True
    assert scheduler.calls == 2 and len(scheduler.reports) == 2


def test_aborted_crawls_and_shutdown_give_leases_back() -> None:
    """At shutdown a result whose records are stored is still reported (its report had found the scheduler down);
    the others' leases are given back."""
    sink, scheduler, storage, _ = make()
    sink.add(result("a", aborted=True))
    assert sink.flush() is True
    assert scheduler.released == [("user:weibo_mobile:a", "tok-a")] and scheduler.reports == []
    scheduler.down = True
    sink.add(result("b", posts=1))
    assert sink.flush() is False  # stored, not reported
    storage.unavailable = 1
    sink.add(result("c", posts=1))
    assert sink.flush() is False  # not stored
    scheduler.down = False
    assert sink.give_back() == GivenBack(released=1)
    assert [r.task_id for r in scheduler.reports] == ["user:weibo_mobile:b"]
    assert scheduler.released[-1] == ("user:weibo_mobile:c", "tok-c")
    assert sink.pending_count() == 0


def test_failure_reports_without_records_are_reported_during_a_storage_outage() -> None:
    sink, scheduler, storage, _ = make()
    storage.unavailable = 5
    failed = result("f")
    failed.report.outcome = Outcome.Banned
    sink.add(failed)
    sink.add(result("a", posts=1))
    assert sink.flush() is False
    assert [r.outcome for r in scheduler.reports] == [Outcome.Banned]
    assert sink.stats.snapshot()["outcomes"] == {"Banned": 1}


def test_the_sink_fingerprints_ok_results_before_reporting_them() -> None:
    sink, scheduler, _, _ = make()
    ok = result("a", posts=1)
    ok.window_texts = ["one", "two", "three"]
    failed = result("b")
    failed.report.outcome = Outcome.Timeout
    failed.window_texts = ["partial"]
    sink.add(ok)
    sink.add(failed)
    assert sink.flush() is True
    assert [r.fingerprint for r in scheduler.reports] == [3, 0]


def test_backoff_grows_jittered_and_is_capped() -> None:
    backoff = Backoff(1.0, 8.0)
    delays = [backoff.failed(0.0) for _ in range(8)]
    assert 0.5 <= delays[0] <= 1.5 and 1.0 <= delays[1] <= 3.0
    assert all(delay <= 8.0 for delay in delays)  # the cap is the longest wait (DEPLOY.md says so)
    assert all(delay >= 6.0 for delay in delays[4:])  # at the cap: 0.75..1 × cap, still jittered
    assert len(set(delays[4:])) == 4
    assert not backoff.ready(0.0)
    backoff.succeeded()
    assert backoff.ready(0.0)


class BrokenStorage(MemoryStorage):
    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def write_posts(self, posts: Sequence[Post]) -> int:
        raise self.error


@pytest.mark.parametrize(
    "error",
    [InvalidArgumentError("batch too large", code="BatchTooLarge"), OverflowError("id does not fit a Slice long")],
)
def test_records_storage_can_never_take_are_not_retried_forever_and_the_task_is_not_reported_ok(
    error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    sink, scheduler, _, _ = make()
    sink.writer.storage = BrokenStorage(error)
    crawled = result("a", posts=2)
    crawled.task.cursor = "41"
    crawled.report.cursor = "99"
    crawled.report.account_cookies = "SUB=refreshed"
    sink.add(crawled)
    assert sink.flush() is True
    assert len(scheduler.reports) == 1
    report = scheduler.reports[0]
    assert report.outcome is Outcome.ParseError and report.error_class == "records-not-stored"
    assert report.account_cookies == "SUB=refreshed"  # the site's refresh of the login is kept all the same
    assert report.cursor == "41"  # the old cursor: the next visit fetches the records again
    assert sink.stats.snapshot()["records_rejected"] == 2
    assert "could not be stored" in caplog.text


class PickyStorage(MemoryStorage):
    """Fails a whole call when it holds one of ``poison`` (as a record Ice cannot marshal does)."""

    def __init__(self, poison: set[str]) -> None:
        super().__init__()
        self.poison = poison
        self.calls = 0

    def write_reviews(self, reviews: Sequence[Review]) -> int:
        self.calls += 1
        if any(review.id in self.poison for review in reviews):
            raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")
        return super().write_reviews(reviews)


def test_a_batch_failing_as_a_whole_is_split_until_the_bad_record_is_alone() -> None:
    sink, scheduler, _, _ = make(write_batch=10)
    sink.writer.storage = storage = PickyStorage({"x-6"})
    sink.add(result("x", reviews=10))
    assert sink.flush() is True
    assert sorted(r.id for r in storage.reviews) == [f"x-{n}" for n in range(10) if n != 6]
    assert sink.stats.snapshot()["records_rejected"] == 1 and sink.stats.snapshot()["items_stored"] == 9
    assert scheduler.reports[0].outcome is Outcome.ParseError  # x-6 was not proven bad: crawl the task again


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("content", "good \ud800 bad", "lone surrogate"),
        ("user", "\udfff", "lone surrogate"),
        ("id", "r\ud800", "lone surrogate"),
    ],
)
def test_a_record_the_wire_cannot_carry_is_dropped_alone_and_the_task_still_reported_ok(
    field: str, value: str, problem: str, caplog: pytest.LogCaptureFixture
) -> None:
    sink, scheduler, storage, _ = make(write_batch=10)
    crawled = result("x", reviews=10)
    setattr(crawled.reviews[3], field, value)
    sink.add(crawled)
    assert sink.flush() is True
    assert len(storage.reviews) == 9 and storage.writes == [9]
    assert scheduler.reports[0].outcome is Outcome.Ok
    assert sink.stats.snapshot()["records_rejected"] == 1
    assert problem in caplog.text and "dropped" in caplog.text


def test_a_post_id_outside_a_slice_long_is_dropped_alone(caplog: pytest.LogCaptureFixture) -> None:
    sink, scheduler, storage, _ = make(write_batch=10)
    crawled = result("p", posts=4)
    crawled.posts[1].id = 1 << 64
    sink.add(crawled)
    assert sink.flush() is True
    assert len(storage.posts) == 3 and scheduler.reports[0].outcome is Outcome.Ok
    assert "does not fit a 64-bit long" in caplog.text


def test_a_report_that_cannot_be_sent_is_dropped_loudly(caplog: pytest.LogCaptureFixture) -> None:
    sink, scheduler, _, _ = make()

    def broken(reports: Sequence[Report]) -> None:
        raise ValueError("cannot marshal")

    scheduler.report = broken  # type: ignore[method-assign]
    sink.add(result("a", posts=1))
    assert sink.flush() is True
    assert sink.stats.snapshot()["reports_lost"] == 1
    assert "cannot report" in caplog.text


def test_records_being_written_still_count_against_the_buffer_bound() -> None:
    """While a storage call hangs (a network cut lasts until the invocation timeout), the records it carries
    are still buffered: has_room() must not see an empty buffer and let the lease loop lease on."""
    sink, scheduler, storage, _ = make(buffer_records=3)
    entered, release = threading.Event(), threading.Event()
    write = storage.write_posts

    def hanging_write(posts: Sequence[Post]) -> int:
        entered.set()
        release.wait(10)
        return write(posts)

    storage.write_posts = hanging_write  # type: ignore[method-assign]
    sink.add(result("a", posts=4))
    flusher = threading.Thread(target=sink.flush)
    flusher.start()
    try:
        assert entered.wait(10)
        assert sink.buffered_records() == 4 and not sink.has_room()
        assert sink.pending_count() == 1
    finally:
        release.set()
        flusher.join(10)
    assert sink.buffered_records() == 0 and sink.has_room()
    assert len(scheduler.reports) == 1


def _leased_again(name: str, token: str, posts: int = 0) -> CrawlResult:
    """A new crawl of ``result(name)``'s task under another lease."""
    again = result(name, posts=posts)
    again.task = replace(again.task, lease_token=token)
    again.report = replace(again.report, lease_token=token)
    return again


def test_a_kept_report_of_a_task_leased_again_gives_way_to_the_newer_one(caplog: pytest.LogCaptureFixture) -> None:
    """A report the scheduler committed just before a kill -9 (its answer lost, so the client kept it) and the crawl
    of the same task leased again after the restart went out in one batch: the scheduler refuses a task named twice
    and names the later entry, the live lease, which was dropped as a client bug (a kill -9 harness found it). The
    older report gives way; its records are still stored."""
    sink, scheduler, storage, clock = make(report_batch=10)
    sink.add(result("t", posts=1))
    scheduler.down = True
    assert sink.flush() is False  # kept: the answer never came
    scheduler.down = False
    scheduler.lost = set()
    sink.add(_leased_again("t", "tok-new", posts=1))
    sink.add(result("u"))
    clock.mono += 100  # past the backoff
    assert sink.flush() is True
    assert [(r.task_id, r.lease_token) for r in scheduler.reports] == [
        ("user:weibo_mobile:t", "tok-new"),
        ("user:weibo_mobile:u", "tok-u"),
    ]
    assert len(storage.posts) == 2  # both crawls' records
    assert "ERROR" not in [record.levelname for record in caplog.records]
    assert sink.stats.snapshot()["reports_lost"] == 1


def test_a_superseded_result_still_stores_its_records_before_it_goes(caplog: pytest.LogCaptureFixture) -> None:
    sink, scheduler, storage, clock = make(report_batch=10)
    storage.unavailable = 1
    sink.add(result("t", posts=2))
    sink.add(_leased_again("t", "tok-new"))
    assert sink.flush() is False  # storage down: the newer crawl (no records) is reported, the older one waits
    assert storage.posts == [] and [r.lease_token for r in scheduler.reports] == ["tok-new"]
    clock.mono += 100
    assert sink.flush() is True  # stored, then gone without a report
    assert len(storage.posts) == 2 and [r.lease_token for r in scheduler.reports] == ["tok-new"]
    assert sink.pending_count() == 0


def test_shutdown_gives_back_only_the_newest_lease_of_a_task() -> None:
    """Releasing two leases of one task in one batch is refused as a whole (no entry named): every lease in it
    would wait out its time."""
    sink, scheduler, storage, _ = make()
    storage.unavailable = 1  # nothing stored: both leases are to be given back
    sink.add(result("t", posts=1))
    sink.add(_leased_again("t", "tok-new", posts=1))
    assert sink.flush() is False
    assert sink.give_back() == GivenBack(released=1)
    assert scheduler.released == [("user:weibo_mobile:t", "tok-new")]


def test_a_pass_whose_report_found_the_scheduler_down_does_not_also_try_to_release() -> None:
    """A scheduler that does not answer holds each call until Ice's timeout: a pass that has just failed to report
    must not wait as long again to give leases back (nor, at a client's stop, spend its grace period twice)."""
    sink, scheduler, _, clock = make()
    scheduler.down = True
    sink.add(result("a", posts=1))
    sink.add(result("b", aborted=True))
    assert sink.flush() is False
    assert scheduler.calls == 1  # the report only
    scheduler.down = False
    clock.mono += 20  # past the backoff
    assert sink.flush() is True
    assert [r.task_id for r in scheduler.reports] == ["user:weibo_mobile:a"]
    assert scheduler.released == [("user:weibo_mobile:b", "tok-b")]


class ScriptedSchedulerProxy:
    """A scheduler's proxy over a ``MemoryScheduler``: the first call of ``applied_unanswered`` (putUsers or
    releaseUsers) is applied (its leases settle: a later call naming them is LeaseLost) but its answer never comes,
    and the client's stop cuts the call meanwhile; other calls are answered as the memory scheduler answers them.
    ``calls`` lists each call as (operation, task ids)."""

    def __init__(self, scheduler: MemoryScheduler, cutoff: CallCutoff, applied_unanswered: str = "putUsers") -> None:
        self.scheduler = scheduler
        self.cutoff = cutoff
        self.applied_unanswered = applied_unanswered
        self.calls: list[tuple[str, list[str]]] = []

    def putUsersAsync(self, reports: Sequence[Any]) -> concurrent.futures.Future[None]:
        return self._answer("putUsers", [report.taskId for report in reports])

    def releaseUsersAsync(self, leases: Sequence[Any]) -> concurrent.futures.Future[None]:
        return self._answer("releaseUsers", [lease.taskId for lease in leases])

    def _answer(self, operation: str, ids: list[str]) -> concurrent.futures.Future[None]:
        first = operation == self.applied_unanswered and all(op != operation for op, _ in self.calls)
        self.calls.append((operation, ids))
        if first:
            self.scheduler.lost.update(ids)
            self.cutoff.cut(time.monotonic())  # the stop comes while the call waits for its answer
            return concurrent.futures.Future()
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        try:
            self.scheduler._check(ids)
        except Exception as exc:
            future.set_exception(rpc.to_slice_error(exc))
        else:
            future.set_result(None)
        return future


def stopping_sink(scheduler: SchedulerGateway, storage: StorageGateway | None = None) -> Sink:
    """A sink over gateways a client's stop cuts (``IceScheduler``/``IceStorage`` with a ``CallCutoff``), its clocks
    still: only the cutoff's time moves."""
    return Sink(
        scheduler,
        storage or MemoryStorage(),
        buffer_records=100,
        report_batch=2,
        write_batch=3,
        backoff_s=1.0,
        max_backoff_s=8.0,
        now_ms=lambda: 1_000_000,
        monotonic=lambda: 0.0,
        fingerprint=lambda texts: 1,
    )


def test_reports_abandoned_at_the_stop_but_applied_go_last_and_are_no_lost_report(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A putUsers cut at the stop that the scheduler applied all the same settles those leases: naming them again
    is refused (LeaseLost). At the end of the stop that used to be logged as a refused release, counted as a lost
    report, and resent one by one ahead of the leases that could still go back."""
    scheduler, cutoff = MemoryScheduler(), CallCutoff()
    proxy = ScriptedSchedulerProxy(scheduler, cutoff)
    sink = stopping_sink(IceScheduler(proxy, cutoff))
    for name in ("a", "b", "c"):
        sink.add(result(name, posts=1))
    assert sink.flush() is False  # a and b were sent, then cut; c was never sent
    assert scheduler.lost == {"user:weibo_mobile:a", "user:weibo_mobile:b"}
    cutoff.cut(time.monotonic() + 60)  # the daemon's window for the last calls
    with caplog.at_level(logging.INFO, logger="crawler_client.sink"):
        assert sink.give_back() == GivenBack()  # c reported; a and b settled
    assert sink.stats.snapshot()["reports_lost"] == 0
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert "applied after all" in caplog.text
    assert proxy.calls[1] == ("putUsers", ["user:weibo_mobile:c"])  # first after the cut: the one nothing had settled
    assert sink.pending_count() == 0


def test_a_call_the_stop_did_not_send_is_not_the_scheduler_being_down(caplog: pytest.LogCaptureFixture) -> None:
    """Past the stop's cutoff a call is not sent: that is the stop, not an unavailable scheduler. It used to be
    logged as "scheduler unavailable" and mark a healthy scheduler's backoff as failed."""
    cutoff = CallCutoff()
    cutoff.cut(time.monotonic())
    sink = stopping_sink(IceScheduler(object(), cutoff))
    sink.add(result("a", aborted=True))
    sink.add(result("b", posts=1))
    with caplog.at_level(logging.INFO, logger="crawler_client.sink"):
        assert sink.flush() is False
    assert sink.pending_count() == 2  # kept: the daemon gives back what is left
    assert sink.scheduler_backoff.failures == 0
    assert "unavailable" not in caplog.text
    assert "not sent: past this client's stop deadline" in caplog.text


def test_a_give_back_abandoned_at_the_stop_but_applied_is_no_lost_report(caplog: pytest.LogCaptureFixture) -> None:
    """The sink's last pass gives a cancelled crawl's lease back; the scheduler applies that releaseUsers but the stop
    cuts it before its answer. The give-back at the end of the stop sends it again, refused (LeaseLost): that used to
    be logged as a WARNING and counted as a lost report, though nothing was lost."""
    scheduler, cutoff = MemoryScheduler(), CallCutoff()
    proxy = ScriptedSchedulerProxy(scheduler, cutoff, applied_unanswered="releaseUsers")
    sink = stopping_sink(IceScheduler(proxy, cutoff))
    sink.add(result("a", aborted=True))
    assert sink.flush() is False  # sent, applied, cut
    cutoff.cut(time.monotonic() + 60)  # the daemon's window for the last calls
    with caplog.at_level(logging.INFO, logger="crawler_client.sink"):
        assert sink.give_back() == GivenBack(released=0, refused=1)  # settled: not given back
    assert proxy.calls == [("releaseUsers", ["user:weibo_mobile:a"])] * 2
    assert sink.stats.snapshot()["reports_lost"] == 0
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert "its release, abandoned at the stop, was applied after all" in caplog.text
    assert sink.pending_count() == 0


def test_at_the_give_back_unsent_leases_go_before_those_a_cut_call_may_have_settled() -> None:
    """Leases whose releaseUsers the stop cut after sending may be settled already: each may be refused, one call per
    refusal, so they go after the leases nothing has settled, which must not wait behind those calls."""
    scheduler, cutoff = MemoryScheduler(), CallCutoff()
    proxy = ScriptedSchedulerProxy(scheduler, cutoff, applied_unanswered="releaseUsers")
    sink = stopping_sink(IceScheduler(proxy, cutoff))
    sink.add(result("a", aborted=True))
    sink.add(result("b", aborted=True))
    assert sink.flush() is False  # a and b sent, applied, cut
    sink.add(result("c", aborted=True))  # a crawl the stop cancelled after that pass
    cutoff.cut(time.monotonic() + 60)  # the daemon's window for the last calls
    assert sink.give_back() == GivenBack(released=1, refused=2)
    a, b, c = (f"user:weibo_mobile:{name}" for name in "abc")
    # c first and taken; then a and b, each refused (settled) and dropped in turn
    assert proxy.calls[1:] == [("releaseUsers", [c]), ("releaseUsers", [a, b]), ("releaseUsers", [b])]
    assert sink.stats.snapshot()["leases_released"] == 1 and sink.stats.snapshot()["reports_lost"] == 0
    assert sink.pending_count() == 0


class HungStorageProxy:
    """A storage server's proxy that takes writeWB and never answers; the client's stop cuts the call meanwhile."""

    def __init__(self, cutoff: CallCutoff) -> None:
        self.cutoff = cutoff
        self.writes = 0

    def writeWBAsync(self, posts: Sequence[Any]) -> concurrent.futures.Future[Any]:
        self.writes += 1
        self.cutoff.cut(time.monotonic())
        return concurrent.futures.Future()


def test_a_storage_write_the_stop_cut_keeps_the_records_and_is_not_storage_being_down(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A write the stop cut is the stop's, not an outage: no backoff marked failed, no "storage unavailable"; the
    result stays unreported (its records are not acknowledged) and its lease goes back at the give-back, while a
    result with nothing to store is reported."""
    cutoff = CallCutoff()
    proxy = HungStorageProxy(cutoff)
    scheduler = MemoryScheduler()
    sink = stopping_sink(scheduler, IceStorage(proxy, cutoff))
    sink.add(result("a", posts=1))
    sink.add(result("b"))
    with caplog.at_level(logging.INFO, logger="crawler_client.sink"):
        assert sink.flush() is False
    assert proxy.writes == 1 and sink.storage_backoff.failures == 0
    assert "unavailable" not in caplog.text and "storing ended by this client's stop" in caplog.text
    assert [r.task_id for r in scheduler.reports] == ["user:weibo_mobile:b"]
    assert sink.pending_count() == 1 and sink.buffered_records() == 1  # kept, still counted against the buffer
    assert sink.give_back() == GivenBack(released=1)
    assert scheduler.released == [("user:weibo_mobile:a", "tok-a")]
