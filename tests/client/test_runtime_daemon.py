"""The daemon's threads with memory gateways and a scripted runner (pure logic, no network): every leased task
ends reported; shutdown gives back queued and cancelled tasks; a full buffer stops leasing."""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence

import pytest

from crawler_client import daemon as daemon_module
from crawler_client.crawl import CrawlResult, failure_report
from crawler_client.daemon import ClientDaemon, DaemonConfig
from crawler_client.gateways import CallCutError, CallCutoff, IceScheduler, IceStorage
from icecrawler.clock import Clock
from icecrawler.errors import ConfigError, NoWorkError, StorageUnavailableError
from icecrawler.models import Outcome, Post, Report, Review, Task, TaskKind
from icecrawler.processes import poll_until


class Scheduler:
    def __init__(self, tasks: int) -> None:
        self.todo = [
            Task(
                id=f"user:weibo_mobile:{n}",
                kind=TaskKind.WeiboUser,
                source="weibo_mobile",
                target=str(n),
                lease_token=f"tok{n}",
            )
            for n in range(tasks)
        ]
        self.lease_calls: list[int] = []
        self.reports: list[Report] = []
        self.released: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def lease(self, worker_id: str, count: int) -> list[Task]:
        with self.lock:
            self.lease_calls.append(count)
            if not self.todo:
                raise NoWorkError("idle", next_due_in_ms=20)
            leased, self.todo = self.todo[:count], self.todo[count:]
            return leased

    def report(self, reports: Sequence[Report]) -> None:
        with self.lock:
            self.reports.extend(reports)

    def release(self, leases: Sequence[tuple[str, str]]) -> None:
        with self.lock:
            self.released.extend(leases)

    def add_targets(self, ids: Sequence[str], kind: TaskKind) -> int:
        return len(ids)


class Storage:
    def __init__(self, available: bool = True) -> None:
        self.available = available
        self.posts: list[Post] = []

    def write_posts(self, posts: Sequence[Post]) -> int:
        if not self.available:
            raise StorageUnavailableError("down")
        self.posts.extend(posts)
        return len(posts)

    def write_reviews(self, reviews: Sequence[Review]) -> int:
        return len(reviews)


class Runner:
    """Crawls instantly (one post per task), or blocks until cancelled when ``block`` is set."""

    def __init__(self, cancel: threading.Event, block: threading.Event, broken: frozenset[str]) -> None:
        self.cancel = cancel
        self.block = block
        self.broken = broken
        self.started = threading.Event()

    def run(self, task: Task) -> CrawlResult:
        self.started.set()
        if task.target in self.broken:
            raise KeyError("bug in the runner")
        if self.block.is_set():
            self.cancel.wait(30)
            report = failure_report(task, Outcome.Timeout, "", fetches=1)
            return CrawlResult(task, report, aborted=True)
        report = Report(task_id=task.id, lease_token=task.lease_token, new_items=1, fetches=1)
        return CrawlResult(task, report, posts=[Post(id=int(task.target) + 1, user_id=1)])

    def close(self) -> None:
        pass


def config(**overrides: float) -> DaemonConfig:
    values: dict[str, float] = dict(
        workers=2,
        batch=3,
        idle_sleep_s=0.05,
        buffer_records=1000,
        report_batch=10,
        write_batch=100,
        backoff_s=0.01,
        max_backoff_s=0.05,
        shutdown_grace_s=1.0,
        progress_log_s=60.0,
    )
    values.update(overrides)
    return DaemonConfig(**values)  # type: ignore[arg-type]


def make(
    scheduler: Scheduler,
    storage: Storage,
    cfg: DaemonConfig,
    block: threading.Event,
    broken: frozenset[str] = frozenset(),
) -> tuple[ClientDaemon, list[Runner]]:
    runners: list[Runner] = []

    def factory(cancel: threading.Event) -> Runner:
        runners.append(Runner(cancel, block, broken))
        return runners[-1]

    daemon = ClientDaemon(
        scheduler,
        storage,
        cfg,
        factory,  # type: ignore[arg-type]
        clock=Clock(),  # type: ignore[arg-type]
        fingerprint=lambda texts: 1,
        worker_id="test",
    )
    return daemon, runners


def test_every_leased_task_is_stored_and_reported_in_batches() -> None:
    scheduler, storage = Scheduler(tasks=10), Storage()
    daemon, _ = make(scheduler, storage, config(), threading.Event())
    daemon.start()
    try:
        assert poll_until(lambda: len(scheduler.reports) == 10, 20, 0.02)
    finally:
        daemon.stop()
    assert sorted(r.task_id for r in scheduler.reports) == sorted(f"user:weibo_mobile:{n}" for n in range(10))
    assert len(storage.posts) == 10
    assert max(scheduler.lease_calls) <= 3  # client.batch
    assert scheduler.released == []
    assert daemon.stats.snapshot()["outcomes"] == {"Ok": 10}


def test_shutdown_gives_back_queued_and_cancelled_tasks() -> None:
    scheduler, storage = Scheduler(tasks=3), Storage()
    block = threading.Event()
    block.set()
    daemon, runners = make(scheduler, storage, config(workers=1, batch=3, shutdown_grace_s=0.2), block)
    daemon.start()
    assert poll_until(lambda: bool(runners) and runners[0].started.is_set(), 20, 0.02)
    daemon.stop()
    assert sorted(task_id for task_id, _ in scheduler.released) == [f"user:weibo_mobile:{n}" for n in range(3)]
    assert scheduler.reports == []


def test_a_full_buffer_stops_leasing_until_storage_is_back() -> None:
    scheduler, storage = Scheduler(tasks=50), Storage(available=False)
    daemon, _ = make(scheduler, storage, config(workers=1, batch=1, buffer_records=3), threading.Event())
    daemon.start()
    try:
        assert poll_until(lambda: daemon.sink.buffered_records() >= 3, 20, 0.02)
        assert poll_until(lambda: not daemon.sink.has_room(), 20, 0.02)
        leased_when_full = sum(scheduler.lease_calls)
        assert leased_when_full <= 3 + 2  # the full buffer plus what was already leased (workers + batch)
        assert scheduler.reports == []  # nothing is reported before its records are stored
        storage.available = True
        assert poll_until(lambda: len(scheduler.reports) == 50, 20, 0.02)
    finally:
        daemon.stop()
    assert len(storage.posts) == 50


def test_bugs_in_the_runner_or_the_lease_call_do_not_kill_the_threads() -> None:
    scheduler, storage = Scheduler(tasks=4), Storage()
    real_lease = scheduler.lease
    calls = {"n": 0}

    def flaky_lease(worker_id: str, count: int) -> list[Task]:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("bug in the gateway")
        return real_lease(worker_id, count)

    scheduler.lease = flaky_lease  # type: ignore[method-assign]
    daemon, _ = make(scheduler, storage, config(workers=1, batch=1), threading.Event(), broken=frozenset({"1"}))
    daemon.start()
    try:
        assert poll_until(lambda: len(scheduler.reports) == 4, 20, 0.02)
    finally:
        daemon.stop()
    outcomes = {r.task_id: (r.outcome.value, r.error_class) for r in scheduler.reports}
    assert outcomes["user:weibo_mobile:1"] == ("ParseError", "client-bug:KeyError")
    assert sum(1 for outcome, _ in outcomes.values() if outcome == "Ok") == 3


def test_bad_client_settings_are_a_clear_error_before_anything_starts(capsys: pytest.CaptureFixture[str]) -> None:
    from icecrawler_cli.cli import main

    assert main(["client", "--set", "client.workers=0"]) == 2
    err = capsys.readouterr().err
    assert "client.workers" in err and "must be >= 1" in err
    assert main(["client", "--set", "client.batch=many"]) == 2
    assert "client.batch" in capsys.readouterr().err


def test_a_result_that_comes_during_the_sinks_last_pass_is_reported_not_given_back() -> None:
    """SIGTERM while a storage write is slow: the sink's pass has taken the first result when the second crawl
    ends and stop() tells the sink to finish. That pass returned "nothing left" (of what it had taken) and the sink
    ended, so the second result was given back at shutdown ("could not be reported in time") and crawled again,
    though nothing stopped its report."""
    scheduler = Scheduler(tasks=2)
    writing, storage_gate, second_started, second_gate = (threading.Event() for _ in range(4))

    class SlowStorage(Storage):
        def write_posts(self, posts: Sequence[Post]) -> int:
            writing.set()
            assert storage_gate.wait(30)
            return super().write_posts(posts)

    class GatedRunner(Runner):
        def run(self, task: Task) -> CrawlResult:
            if task.target == "1":
                second_started.set()
                assert second_gate.wait(30)
            return super().run(task)

    storage = SlowStorage()
    daemon = ClientDaemon(
        scheduler,
        storage,
        config(workers=1, batch=2, shutdown_grace_s=10.0),
        lambda cancel: GatedRunner(cancel, threading.Event(), frozenset()),  # type: ignore[arg-type,return-value]
        clock=Clock(),  # type: ignore[arg-type]
        fingerprint=lambda texts: 1,
        worker_id="test",
    )
    daemon.start()
    stopper = threading.Thread(target=daemon.stop)
    try:
        assert writing.wait(20) and second_started.wait(20)  # the sink is storing the first; the second is crawled
        stopper.start()
        assert poll_until(daemon._stopping.is_set, 20, 0.01)
        second_gate.set()  # the second result reaches the sink while its pass still writes the first
        assert poll_until(daemon._sink_done.is_set, 20, 0.01)
        storage_gate.set()
        stopper.join(30)
    finally:
        second_gate.set()
        storage_gate.set()
        if stopper.is_alive():
            stopper.join(30)
    assert sorted(r.task_id for r in scheduler.reports) == ["user:weibo_mobile:0", "user:weibo_mobile:1"]
    assert scheduler.released == []
    assert len(storage.posts) == 2


class StuckRunner(Runner):
    """A crawl blocked in a read: it does not see the cancel until ``block`` is cleared (or 60 s)."""

    def run(self, task: Task) -> CrawlResult:
        self.started.set()
        poll_until(lambda: not self.block.is_set(), 60, 0.05)
        return CrawlResult(task, failure_report(task, Outcome.Timeout, "", fetches=1), aborted=True)


def test_crawls_stuck_in_reads_cost_the_stop_one_cancel_wait_not_one_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight crawls blocked in reads at shutdown: the stop waits ``CANCEL_WAIT_S`` for all of them together, then
    gives their leases back. It used to wait that long for each crawl thread in turn (eight times 5 s here, where
    the test waits 25 s)."""
    monkeypatch.setattr(daemon_module, "CANCEL_WAIT_S", 5.0)
    workers = 8
    scheduler, storage = Scheduler(tasks=workers), Storage()
    stuck = threading.Event()
    stuck.set()
    runners: list[StuckRunner] = []

    def factory(cancel: threading.Event) -> StuckRunner:
        runners.append(StuckRunner(cancel, stuck, frozenset()))
        return runners[-1]

    daemon = ClientDaemon(
        scheduler,
        storage,
        config(workers=workers, batch=workers, shutdown_grace_s=0.2),
        factory,  # type: ignore[arg-type]
        clock=Clock(),  # type: ignore[arg-type]
        fingerprint=lambda texts: 1,
        worker_id="test",
    )
    daemon.start()
    stopper = threading.Thread(target=daemon.stop, name="stopper", daemon=True)
    try:
        assert poll_until(lambda: len(runners) == workers and all(r.started.is_set() for r in runners), 20, 0.02)
        stopper.start()
        stopper.join(25)
        stopped = not stopper.is_alive()
    finally:
        stuck.clear()
        if stopper.is_alive():
            stopper.join(60)
    assert stopped, "the stop waited CANCEL_WAIT_S for each stuck crawl in turn"
    released = sorted(task_id for task_id, _ in scheduler.released)
    assert released == sorted(f"user:weibo_mobile:{n}" for n in range(workers))


def not_sent_past(cutoff: CallCutoff, operation: str) -> None:
    """As the Ice gateways before each call: past the cutoff nothing is sent. A stand-in that took calls after the
    cut let a pass run after it succeed, which no Ice gateway does."""
    if cutoff.passed():
        raise CallCutError(f"{operation} not sent: past this client's stop deadline", sent=False)


def answered_when(cutoff: Callable[[], CallCutoff], answer: threading.Event) -> None:
    """A remote call as the Ice gateways make it: not sent past the daemon's ``CallCutoff``, else it waits for its
    answer (``answer``) through it and fails as they do when the cutoff ends it first."""
    not_sent_past(cutoff(), "the call")
    future: concurrent.futures.Future[None] = concurrent.futures.Future()

    def respond() -> None:
        if answer.wait(60):
            with contextlib.suppress(concurrent.futures.InvalidStateError):  # cancelled: the cutoff came first
                future.set_result(None)

    threading.Thread(target=respond, daemon=True).start()
    if not cutoff().wait(future):
        raise CallCutError("did not answer before this client's stop deadline: call abandoned", sent=True)


def test_a_slow_but_healthy_servers_last_pass_is_finished_not_cut_at_the_sinks_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Storage answers the sink's last write just after the sink's deadline (its writes are slow, nothing hangs).
    The stop used to cut every call at that deadline, so the stored result was given back and crawled again, and
    its report (a login refresh with it) never reached the scheduler. A call under way now has ``LAST_CALLS_S``
    more (30 s here: the test's own delays cannot matter); only new passes stop at the deadline."""
    monkeypatch.setattr(daemon_module, "LAST_CALLS_S", 30.0)
    scheduler = Scheduler(tasks=1)
    writing, answer = threading.Event(), threading.Event()
    daemons: list[ClientDaemon] = []

    class SlowStorage(Storage):
        def write_posts(self, posts: Sequence[Post]) -> int:
            writing.set()
            answered_when(lambda: daemons[0].cutoff, answer)
            return super().write_posts(posts)

    storage = SlowStorage()
    daemon, _ = make(scheduler, storage, config(workers=1, batch=1, shutdown_grace_s=0.0), threading.Event())
    daemons.append(daemon)
    daemon.start()
    stopper = threading.Thread(target=daemon.stop, name="stopper", daemon=True)
    try:
        assert writing.wait(20)
        stopper.start()
        # The sink's deadline passes (and a cut there would have ended the write, within CallCutoff.POLL_S)...
        assert poll_until(lambda: time.monotonic() > daemon._sink_deadline + 2 * CallCutoff.POLL_S, 20, 0.02)
        answer.set()  # ... then storage answers
        stopper.join(30)
    finally:
        answer.set()
        stopper.join(60)
    assert [r.task_id for r in scheduler.reports] == ["user:weibo_mobile:0"]
    assert scheduler.released == [] and len(storage.posts) == 1


def test_a_lease_call_that_outlives_the_cut_leaves_the_give_back_its_whole_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The lease loop's call ends at the stop's cut within ``CallCutoff.POLL_S``, but one that misses it (the cut
    moved on to the give-back's window before the call looked) ran on, and the stop waited ``LAST_CALLS_S`` for it
    out of the give-back's window: the leases left for the give-back were not sent and expired instead. Here the
    lease call ignores the cut altogether; the stop must still give the leases back."""
    # The give-back's window is wall time: 3 s (the default) leaves its memory calls room on a loaded machine,
    # where 0.5 s made this a timing threshold.
    monkeypatch.setattr(daemon_module, "LAST_CALLS_S", 3.0)
    daemons: list[ClientDaemon] = []
    leasing, lease_answer = threading.Event(), threading.Event()

    class StoppingScheduler(Scheduler):
        def lease(self, worker_id: str, count: int) -> list[Task]:
            if self.todo:
                return super().lease(worker_id, count)
            leasing.set()
            lease_answer.wait(60)  # deaf to the cut
            raise NoWorkError("idle", next_due_in_ms=20)

        def release(self, leases: Sequence[tuple[str, str]]) -> None:
            not_sent_past(daemons[0].cutoff, "releaseUsers")
            super().release(leases)

    scheduler = StoppingScheduler(tasks=1)
    daemon, _ = make(
        scheduler, Storage(available=False), config(workers=1, batch=1, shutdown_grace_s=0.0), threading.Event()
    )
    daemons.append(daemon)
    daemon.start()
    try:
        assert leasing.wait(20) and poll_until(lambda: daemon.sink.pending_count() == 1, 20, 0.02)
        daemon.stop()  # the result cannot be stored (storage down): its lease is given back at the end
    finally:
        lease_answer.set()
    assert scheduler.released == [("user:weibo_mobile:0", "tok0")]
    assert scheduler.reports == []


def test_a_daemon_reads_its_cutoff_from_its_ice_gateways_and_refuses_unbounded_ones() -> None:
    """The stop bounds the calls through the cutoff the gateways were built with; a daemon given its own (or none)
    used to bound nothing, silently."""
    cutoff = CallCutoff()
    daemon = ClientDaemon(
        IceScheduler(object(), cutoff),
        IceStorage(object(), cutoff),
        config(),
        lambda cancel: Runner(cancel, threading.Event(), frozenset()),  # type: ignore[arg-type,return-value]
        clock=Clock(),  # type: ignore[arg-type]
        fingerprint=lambda texts: 1,
        worker_id="test",
    )
    assert daemon.cutoff is cutoff
    for storage in (IceStorage(object()), IceStorage(object(), CallCutoff())):
        with pytest.raises(ConfigError, match="CallCutoff"):
            ClientDaemon(
                IceScheduler(object(), cutoff),
                storage,
                config(),
                lambda cancel: Runner(cancel, threading.Event(), frozenset()),  # type: ignore[arg-type,return-value]
                clock=Clock(),  # type: ignore[arg-type]
                fingerprint=lambda texts: 1,
                worker_id="test",
            )


def test_results_stored_before_storage_hung_are_reported_at_the_stop_not_given_back(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """One sink pass stores the first result's records, then storage hangs on the second's until the stop cuts the
    call. The stored result's report came after the cut in the same pass, so it was not sent and its lease was
    given back: a crawl whose items are stored, crawled again. The give-back's window now reports it first."""
    # The give-back's window is wall time: 3 s (the default) leaves its memory calls room on a loaded machine,
    # where 0.5 s made this a timing threshold.
    monkeypatch.setattr(daemon_module, "LAST_CALLS_S", 3.0)
    daemons: list[ClientDaemon] = []
    first_gate, hung = threading.Event(), threading.Event()

    class HangingStorage(Storage):
        """The first write waits for ``first_gate`` (so the next two results reach one pass); from the third on
        storage never answers, and past the cutoff nothing is sent, as through the Ice gateways."""

        def __init__(self) -> None:
            super().__init__()
            self.writes = 0

        def write_posts(self, posts: Sequence[Post]) -> int:
            not_sent_past(daemons[0].cutoff, "writeWB")
            self.writes += 1
            if self.writes == 1:
                assert first_gate.wait(30)
            if self.writes >= 3:
                hung.set()
                answered_when(lambda: daemons[0].cutoff, threading.Event())
            return super().write_posts(posts)

        def write_reviews(self, reviews: Sequence[Review]) -> int:
            not_sent_past(daemons[0].cutoff, "writeReviews")
            return super().write_reviews(reviews)

    class IceLikeScheduler(Scheduler):
        def report(self, reports: Sequence[Report]) -> None:
            not_sent_past(daemons[0].cutoff, "putUsers")
            super().report(reports)

        def release(self, leases: Sequence[tuple[str, str]]) -> None:
            not_sent_past(daemons[0].cutoff, "releaseUsers")
            super().release(leases)

    scheduler, storage = IceLikeScheduler(tasks=3), HangingStorage()
    daemon, _ = make(
        scheduler,
        storage,
        # No backoff: the sink's final pass, after the cut, retries the cut write at once (refused, not sent).
        config(workers=1, batch=1, write_batch=1, shutdown_grace_s=0.0, backoff_s=0.0),
        threading.Event(),
    )
    daemons.append(daemon)
    daemon.start()
    try:
        assert poll_until(lambda: daemon.sink.pending_count() == 3, 20, 0.02)  # one being written, two waiting
        first_gate.set()
        assert hung.wait(20)
        with caplog.at_level(logging.WARNING, logger="crawler_client.daemon"):
            daemon.stop()
    finally:
        first_gate.set()
    assert sorted(r.task_id for r in scheduler.reports) == ["user:weibo_mobile:0", "user:weibo_mobile:1"]
    assert scheduler.released == [("user:weibo_mobile:2", "tok2")]
    summary = "2 result(s) could not be reported in time by the last pass: 1 reported or settled at the end, 1 lease"
    assert summary in caplog.text and "0 give-back(s) refused" in caplog.text
