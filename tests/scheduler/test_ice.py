"""The scheduler daemon through real Ice proxies: every operation of the contract, typed errors for bad input
(state unchanged), removing targets, holding a host, a client that dies holding leases, and SIGTERM."""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from icecrawler import rpc
from scheduler_server.refusals import RefusalLog
from tests.helpers import wait_for
from tests.scheduler.daemon import ICE_TEST_SETTINGS, SchedulerDaemon, ice_error, scheduler_daemon, scheduler_proxy

pytestmark = [pytest.mark.ice, pytest.mark.bdb]

C = rpc.crawler()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SchedulerDaemon]:
    with scheduler_daemon(tmp_path_factory.mktemp("sched"), **ICE_TEST_SETTINGS) as running:
        yield running


@pytest.fixture
def prx(daemon: SchedulerDaemon) -> Iterator[Any]:
    with scheduler_proxy(daemon) as proxy:
        yield proxy


def state(prx: Any, *task_ids: str) -> tuple[Any, ...]:
    """What must not change after a rejected call: queue depths and the named tasks' records."""
    stats = prx.stats()
    return (
        stats.tasks,
        stats.pending,
        stats.inflight,
        stats.done,
        *(json.loads(prx.taskInfo(task_id))["state"] for task_id in task_ids),
        *(json.loads(prx.taskInfo(task_id))["attempts"] for task_id in task_ids),
    )


def test_every_scheduler_operation(prx: Any) -> None:
    assert prx.addUsers(["weibo_mobile:1669879400", "weibo_pc:42"], C.TaskKind.WeiboUser) == 2
    assert prx.addUsers(["jd:100012043978"], C.TaskKind.ProductReviews) == 1
    assert prx.addUsers(["ecshop:3"], C.TaskKind.Listing) == 1
    assert prx.addUsers(["weibo_pc:42"], C.TaskKind.WeiboUser) == 0
    one = prx.getUser("w1")
    more = prx.getUsers("w1", 10)
    tasks = {task.id: task for task in [one, *more]}
    assert set(tasks) == {
        "user:weibo_mobile:1669879400",
        "user:weibo_pc:42",
        "reviews:jd:100012043978",
        "listing:ecshop:3",
    }
    listing = tasks["listing:ecshop:3"]
    assert listing.kind == C.TaskKind.Listing and listing.periodS == 600.0 and listing.leaseDeadlineMs > 0
    with pytest.raises(C.NoWork) as caught:
        prx.getUser("w1")
    assert caught.value.code == C.ErrorCode.QueueEmpty and caught.value.nextDueInMs == -1
    prx.putUser(
        C.Report(
            taskId=listing.id,
            leaseToken=listing.leaseToken,
            newItems=5,
            windowItems=20,
            fingerprint=-1,
            cursor="p2",
            newItemTimesMs=[1_700_000_000_000, 1_699_999_000_000],
            discoveredIds=["501", "502", "503", "504", "505", "100012043978"],  # a jd id, but new as an ecshop product
        )
    )
    reviews = tasks["reviews:jd:100012043978"]
    prx.putUsers(
        [
            C.Report(
                taskId=reviews.id, leaseToken=reviews.leaseToken, outcome=C.Outcome.Timeout, errorClass="ReadTimeout"
            )
        ]
    )
    rest = [tasks["user:weibo_mobile:1669879400"], tasks["user:weibo_pc:42"]]
    prx.releaseUsers([C.LeaseRef(taskId=t.id, leaseToken=t.leaseToken) for t in rest])
    stats = prx.stats()
    assert (stats.tasks, stats.inflight, stats.done) == (10, 0, 2)
    assert stats.leasesPerMin == 4 and stats.reportsPerMin == 2
    assert json.loads(stats.detailJson)["listings"] == {"listing:ecshop:3": 6}  # counted by the scheduler
    info = json.loads(prx.taskInfo(listing.id))
    assert info["discovered"] == 6 and info["fingerprint"] == 2**64 - 1 and info["cursor"] == "p2"
    assert info["history"][0]["period_s"] == 600.0
    again = {task.id: task for task in prx.getUsers("w2", 10)}
    products = {f"reviews:ecshop:{n}" for n in (501, 502, 503, 504, 505, 100012043978)}
    assert set(again) == {reviews.id, *(t.id for t in rest), *products}  # discovered, retried, released: due now
    assert again[reviews.id].attempts == 1 and again[rest[0].id].attempts == 0
    prx.releaseUsers([C.LeaseRef(taskId=t.id, leaseToken=t.leaseToken) for t in again.values()])


def test_bad_reports_get_their_declared_exceptions(prx: Any) -> None:
    prx.addUsers(["jd:7001", "jd:7002"], C.TaskKind.ProductReviews)
    tasks = prx.getUsers("bad", 20)
    held = [t for t in tasks if t.id in ("reviews:jd:7001", "reviews:jd:7002")]
    assert len(held) == 2
    ids = [t.id for t in held]
    before = state(prx, *ids)
    good = C.Report(taskId=held[0].id, leaseToken=held[0].leaseToken)
    cases = [
        (
            lambda: prx.putUsers([good, C.Report(taskId=held[1].id, leaseToken="deadbeef")]),
            C.LeaseLost,
            C.ErrorCode.UnknownLease,
            1,
        ),
        (
            lambda: prx.putUser(C.Report(taskId="reviews:jd:999999", leaseToken="x")),
            C.InvalidArgument,
            C.ErrorCode.UnknownTask,
            0,
        ),
        (
            lambda: prx.putUsers([good, C.Report(taskId="reviews:nowhere:1", leaseToken="x")]),
            C.InvalidArgument,
            C.ErrorCode.InvalidId,
            1,
        ),
        (lambda: prx.putUsers([]), C.InvalidArgument, C.ErrorCode.EmptyBatch, -1),
        (lambda: prx.putUsers([good] * 21), C.InvalidArgument, C.ErrorCode.BatchTooLarge, -1),
        (
            lambda: prx.putUsers(
                [good, C.Report(taskId=held[1].id, leaseToken=held[1].leaseToken, newItems=1, newItemTimesMs=[1, 2, 3])]
            ),
            C.InvalidArgument,
            C.ErrorCode.InvalidField,
            1,
        ),
        (
            lambda: prx.putUsers([good, C.Report(taskId=held[1].id, leaseToken=held[1].leaseToken, newItems=-3)]),
            C.InvalidArgument,
            C.ErrorCode.InvalidField,
            1,
        ),
        (
            lambda: prx.releaseUsers([C.LeaseRef(taskId=held[0].id, leaseToken="nope")]),
            C.LeaseLost,
            C.ErrorCode.UnknownLease,
            0,
        ),
        (lambda: prx.releaseUsers([]), C.InvalidArgument, C.ErrorCode.EmptyBatch, -1),
        # a release's token is held to a report's bounds, and a task named twice is named by its position
        (
            lambda: prx.releaseUsers([C.LeaseRef(taskId=held[0].id, leaseToken="t" * 257)]),
            C.InvalidArgument,
            C.ErrorCode.InvalidField,
            0,
        ),
        (
            lambda: prx.releaseUsers([C.LeaseRef(taskId=t.id, leaseToken=t.leaseToken) for t in (held[0], held[0])]),
            C.InvalidArgument,
            C.ErrorCode.InvalidField,
            1,
        ),
        (lambda: prx.getUsers("bad", 21), C.InvalidArgument, C.ErrorCode.BatchTooLarge, -1),
        (lambda: prx.getUsers("bad", 0), C.InvalidArgument, C.ErrorCode.InvalidField, -1),
        (lambda: prx.addUsers([], C.TaskKind.WeiboUser), C.InvalidArgument, C.ErrorCode.EmptyBatch, -1),
        (
            lambda: prx.addUsers(["weibo_pc:1", "weibo_pc:no spaces"], C.TaskKind.WeiboUser),
            C.InvalidArgument,
            C.ErrorCode.InvalidId,
            1,
        ),
        (lambda: prx.taskInfo("nonsense"), C.InvalidArgument, C.ErrorCode.InvalidId, -1),
        (lambda: prx.listTasks("", "", 21), C.InvalidArgument, C.ErrorCode.BatchTooLarge, -1),
    ]
    for call, kind, code, index in cases:
        error = ice_error(call)
        assert isinstance(error, kind), (error, code)
        assert (error.code, error.index) == (code, index), error
        assert state(prx, *ids) == before
    # a lease given back is stale afterwards: its old token is refused, nothing changes
    prx.releaseUsers([C.LeaseRef(taskId=held[1].id, leaseToken=held[1].leaseToken)])
    after_release = state(prx, *ids)
    error = ice_error(lambda: prx.putUser(C.Report(taskId=held[1].id, leaseToken=held[1].leaseToken)))
    assert isinstance(error, C.LeaseLost) and error.code == C.ErrorCode.StaleLease and error.taskId == held[1].id
    assert state(prx, *ids) == after_release
    prx.putUser(good)
    # the same report again: the lease ended with the first, and the error says that it may have been reported
    error = ice_error(lambda: prx.putUser(good))
    assert isinstance(error, C.LeaseLost) and error.code == C.ErrorCode.StaleLease
    assert "already reported" in error.message
    others = [C.LeaseRef(taskId=t.id, leaseToken=t.leaseToken) for t in tasks if t.id not in ids]
    if others:  # tasks the module's earlier tests added (none when this test runs alone)
        prx.releaseUsers(others)


def test_a_report_whose_gap_cursor_does_not_read_is_refused_and_task_info_still_answers(prx: Any) -> None:
    prx.addUsers(["jd:7101"], C.TaskKind.ProductReviews)
    tasks = prx.getUsers("gaps", 20)
    task = next(t for t in tasks if t.id == "reviews:jd:7101")
    before = state(prx, task.id)
    for cursor in (
        'gap1:{"base":"1","top":"2","visits":Infinity}',  # Python's json reads it; int() of it overflows
        "gap1:" + "[" * 3000,  # nested deeper than json reads
        'gap1:{"base":"1","top":"2","req":{"page":NaN}}',  # taskInfo would answer it as "resume_page": NaN, not JSON
        "gap1:not json",
    ):
        report = C.Report(taskId=task.id, leaseToken=task.leaseToken, cursor=cursor)
        error = ice_error(functools.partial(prx.putUser, report))
        assert isinstance(error, C.InvalidArgument), error
        assert (error.code, error.field, error.index) == (C.ErrorCode.InvalidField, "reports[0].cursor", 0)
        assert "gap" in error.message
        assert state(prx, task.id) == before
    prx.putUser(C.Report(taskId=task.id, leaseToken=task.leaseToken, cursor="2024-05-01T12:00:00+08:00|r1"))
    assert json.loads(prx.taskInfo(task.id))["gap"] is None
    others = [C.LeaseRef(taskId=t.id, leaseToken=t.leaseToken) for t in tasks if t.id != task.id]
    if others:  # tasks earlier tests added, leased here too
        prx.releaseUsers(others)


def test_a_report_with_account_cookies_that_are_no_cookie_header_is_refused_without_echoing_them(prx: Any) -> None:
    prx.addUsers(["jd:7102"], C.TaskKind.ProductReviews)
    tasks = prx.getUsers("cookies", 20)
    task = next(t for t in tasks if t.id == "reviews:jd:7102")
    for cookies in ("SUB=secret\r\nX-Injected: 1", "SUB=" + "s" * 20_000):
        report = C.Report(taskId=task.id, leaseToken=task.leaseToken, accountCookies=cookies)
        error = ice_error(functools.partial(prx.putUser, report))
        assert isinstance(error, C.InvalidArgument), error
        assert (error.code, error.field) == (C.ErrorCode.InvalidField, "reports[0].accountCookies")
        assert "secret" not in error.message and "sss" not in error.message
    prx.releaseUsers([C.LeaseRef(taskId=t.id, leaseToken=t.leaseToken) for t in tasks])


def test_a_failed_crawl_echoing_an_unreadable_stored_gap_cursor_is_taken(prx: Any) -> None:
    """A failed crawl's report echoes the task's stored cursor, which an older scheduler may have taken unread. Only
    an Ok report's cursor is kept, so the failure counts (backoff, host block) and the stored cursor stays."""
    prx.addUsers(["jd:7102"], C.TaskKind.ProductReviews)
    tasks = prx.getUsers("gaps", 20)
    task = next(t for t in tasks if t.id == "reviews:jd:7102")
    unreadable = 'gap1:{"base":"1","top":"2","req":{"page":NaN}}'
    failed = C.Report(taskId=task.id, leaseToken=task.leaseToken, cursor=unreadable, outcome=C.Outcome.Busy)
    prx.putUser(failed)
    info = json.loads(prx.taskInfo(task.id))
    assert info["last_outcome"] == "Busy" and info["gap"] is None, info
    others = [C.LeaseRef(taskId=t.id, leaseToken=t.leaseToken) for t in tasks if t.id != task.id]
    if others:  # tasks earlier tests added, leased here too
        prx.releaseUsers(others)


def test_a_worker_id_or_hold_reason_with_a_control_character_is_refused(prx: Any) -> None:
    prx.addUsers(["jd:7201"], C.TaskKind.ProductReviews)
    host = json.loads(prx.stats().detailJson)["source_hosts"]["jd"]
    before = state(prx, "reviews:jd:7201")
    for worker in ("w\x00", "w\n1", "\x1b[2Jw"):
        error = ice_error(functools.partial(prx.getUsers, worker, 20))
        assert isinstance(error, C.InvalidArgument), error
        assert (error.code, error.field) == (C.ErrorCode.InvalidField, "workerId")
        assert "control character" in error.message
    error = ice_error(lambda: prx.holdHost(host, 60, "maintenance\nheld by: nobody"))
    assert isinstance(error, C.InvalidArgument) and error.field == "reason", error
    assert state(prx, "reviews:jd:7201") == before
    assert not json.loads(prx.stats().detailJson)["hosts"].get(host, {}).get("block", {}).get("reason")
    assert prx.holdHost(host, 0, "lifted: 维护结束") == 0.0  # printable text of any script is fine
    leased = prx.getUsers("host-1:4242 工作者", 20)
    prx.releaseUsers([C.LeaseRef(taskId=t.id, leaseToken=t.leaseToken) for t in leased])


def test_list_tasks_names_the_argument_that_is_too_long(prx: Any) -> None:
    for prefix, after, field in (("x" * 201, "", "prefix"), ("", "x" * 201, "after")):
        error = ice_error(functools.partial(prx.listTasks, prefix, after, 5))
        assert isinstance(error, C.InvalidArgument) and error.field == field, error
        assert f"{field} is longer than 200 characters" in error.message


def test_remove_users_ends_the_tasks_and_their_leases(prx: Any) -> None:
    ids = ["jd:880001", "jd:880002"]
    assert prx.addUsers(ids, C.TaskKind.ProductReviews) == 2
    leased = prx.getUsers("w-remove", 20)
    mine = next(task for task in leased if task.id == "reviews:jd:880001")
    prx.releaseUsers([C.LeaseRef(taskId=t.id, leaseToken=t.leaseToken) for t in leased if t is not mine])
    before = state(prx)
    for call, code, index in (
        (lambda: prx.removeUsers([], C.TaskKind.ProductReviews), C.ErrorCode.EmptyBatch, -1),
        (lambda: prx.removeUsers([ids[0], "jd:no spaces"], C.TaskKind.ProductReviews), C.ErrorCode.InvalidId, 1),
        (lambda: prx.removeUsers(["weibo_pc:1"], C.TaskKind.ProductReviews), C.ErrorCode.InvalidId, 0),
    ):
        error = ice_error(call)
        assert isinstance(error, C.InvalidArgument) and (error.code, error.index) == (code, index), error
        assert state(prx) == before
    assert prx.removeUsers([*ids, "jd:880003"], C.TaskKind.ProductReviews) == 2
    stats = prx.stats()
    assert (stats.tasks, stats.inflight) == (before[0] - 2, before[2] - 1)
    error = ice_error(lambda: prx.putUser(C.Report(taskId=mine.id, leaseToken=mine.leaseToken, newItems=1)))
    assert isinstance(error, C.LeaseLost) and (error.code, error.taskId) == (C.ErrorCode.TaskRemoved, mine.id)
    assert isinstance(ice_error(lambda: prx.taskInfo(mine.id)), C.InvalidArgument)


def test_hold_host_stops_its_leases_until_lifted(prx: Any) -> None:
    prx.addUsers(["jd:880101"], C.TaskKind.ProductReviews)
    assert prx.holdHost("127.0.0.1:8800", 600.0, "maintenance") == 600.0
    try:
        assert isinstance(ice_error(lambda: prx.getUsers("w-hold", 20)), C.NoWork)
        error = ice_error(lambda: prx.holdHost("nowhere.example", 60.0, ""))
        assert (
            isinstance(error, C.InvalidArgument) and error.field == "host" and "known: 127.0.0.1:8800" in error.message
        )
        hosts = json.loads(prx.stats().detailJson)["hosts"]
        assert hosts["127.0.0.1:8800"]["block"]["reason"] == "held by the operator: maintenance"
    finally:
        assert prx.holdHost("127.0.0.1:8800", 0.0, "") == 0.0
    leased = prx.getUsers("w-hold", 20)
    assert "reviews:jd:880101" in {task.id for task in leased}
    prx.releaseUsers([C.LeaseRef(taskId=t.id, leaseToken=t.leaseToken) for t in leased])
    prx.removeUsers(["jd:880101"], C.TaskKind.ProductReviews)


def test_dead_client_leases_come_back_after_the_deadline_not_before(tmp_path: Path) -> None:
    with (
        scheduler_daemon(tmp_path, scheduler__lease_s=3, scheduler__maintenance_interval_s=0.2) as daemon,
        scheduler_proxy(daemon) as prx,
    ):
        prx.addUsers([f"jd:{n}" for n in range(5)], C.TaskKind.ProductReviews)
        holder = daemon.client("holder", "hold", "--count", "5", "--name", "doomed")
        wait_for(lambda: bool(holder.log_path.read_text().strip()), "the holder never printed its leases", 60, 0.05)
        held = json.loads(holder.log_path.read_text().strip().splitlines()[-1])
        holder.kill9()
        old_deadline = {item["id"]: item["deadline_ms"] for item in held}
        relet: list[Any] = []
        # Whether each call answered before the dead client's first deadline was refused (NoWork). Judged by the
        # clock when the answer came, not by how many calls a loop made: a loaded machine may not run this test
        # again until the deadline has passed, and then there is no early call to refuse.
        early: list[bool] = []

        def rescued() -> bool:
            try:
                got: list[Any] = list(prx.getUsers("rescuer", 5))
            except C.NoWork:
                got = []
                refused = True
            else:
                refused = False
            if time.time() * 1000 < min(old_deadline.values()):
                early.append(refused)
            relet.extend(got)
            return len(relet) == 5

        wait_for(rescued, lambda: f"only {sorted(t.id for t in relet)} came back", 60, 0.02)
        assert sorted(t.id for t in relet) == sorted(old_deadline)
        assert all(early), f"a lease came back before the dead client's deadline: {early}"
        assert all(t.attempts == 1 for t in relet)
        # the scheduler's own lease time (new deadline - lease_s) is never before the dead client's deadline
        assert all(t.leaseDeadlineMs - 3000 >= old_deadline[t.id] for t in relet)


def test_sigterm_closes_the_environment_cleanly(tmp_path: Path) -> None:
    with scheduler_daemon(tmp_path) as daemon, scheduler_proxy(daemon) as prx:
        prx.addUsers(["weibo_pc:1"], C.TaskKind.WeiboUser)
        assert daemon.stop() == 0
        assert daemon.process is not None and "scheduler database closed" in daemon.process.log_tail()
        daemon.start()
        assert prx.getUser("after-restart").id == "user:weibo_pc:1"


def test_refused_calls_are_logged_at_most_once_a_minute_per_operation_and_code(tmp_path: Path) -> None:
    """A client that keeps sending bad calls shows in the scheduler's log, in one line per operation and error code,
    not one per call; a lease that ran out and an empty queue are no one's mistake and are not logged."""
    with scheduler_daemon(tmp_path, **ICE_TEST_SETTINGS) as daemon, scheduler_proxy(daemon) as prx:
        prx.addUsers(["jd:8001"], C.TaskKind.ProductReviews)
        task = prx.getUser("logs")
        bad = C.Report(taskId=task.id, leaseToken=task.leaseToken, newItems=-1)
        forged = [C.LeaseRef(taskId=task.id, leaseToken="forged")]
        for _ in range(30):
            assert isinstance(ice_error(lambda: prx.putUser(bad)), C.InvalidArgument)  # refused before it is queued
            assert isinstance(ice_error(lambda: prx.releaseUsers(forged)), C.LeaseLost)  # refused in its group
        good = C.Report(taskId=task.id, leaseToken=task.leaseToken)
        prx.putUser(good)
        stale = ice_error(lambda: prx.putUser(good))
        assert isinstance(stale, C.LeaseLost) and stale.code == C.ErrorCode.StaleLease
        assert isinstance(ice_error(lambda: prx.getUser("logs")), C.NoWork)
        assert daemon.process is not None
        logged = daemon.process.log_path.read_text().splitlines()
    lines = [line for line in logged if "scheduler_server.refusals" in line]
    assert len(lines) == 2, lines
    assert "refused putUser: InvalidField at reports[0].newItems: reports[0].newItems=-1 is outside" in lines[0]
    assert "refused releaseUsers: UnknownLease: lease 'forged' of 'reviews:jd:8001' was never issued" in lines[1]


def test_a_refusal_logged_after_the_interval_counts_those_that_were_not(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    refusals = RefusalLog(interval_s=60.0, clock=lambda: now[0])
    error = C.InvalidArgument(code=C.ErrorCode.InvalidId, message="invalid task id 'x'", field="taskId", index=-1)
    with caplog.at_level(logging.WARNING, logger="scheduler_server.refusals"):
        for second in range(0, 121, 10):  # 13 refusals over two minutes
            now[0] = float(second)
            refusals.note("taskInfo", error)
        refusals.note("listTasks", error)  # another operation has its own minute
    assert [record.getMessage() for record in caplog.records] == [
        "refused taskInfo: InvalidId at taskId: invalid task id 'x'",
        "refused taskInfo: InvalidId at taskId: invalid task id 'x' (5 more refused so in the last 60 s)",
        "refused taskInfo: InvalidId at taskId: invalid task id 'x' (5 more refused so in the last 60 s)",
        "refused listTasks: InvalidId at taskId: invalid task id 'x'",
    ]
