"""The crawler client daemon: one lease loop, ``client.workers`` crawl threads and one sink thread in one
process.

    leaser ──getUsers(batch)──> task queue ──> worker × N ──crawl──> Sink ──writeWB/writeReviews──> storage
                                                                      └──putUsers / releaseUsers──> scheduler

* **Leasing** (``_lease_loop``): keeps at most ``workers + batch`` tasks leased but unfinished, so a lease
  does not sit in the local queue long enough to expire; stops leasing while the sink buffers more than
  ``client.buffer_records`` records (storage down); on ``NoWork(nextDueInMs)`` waits
  ``min(nextDue, client.idle_sleep_s)``; on an unreachable scheduler backs off exponentially.
* **Workers** (threads: the work is network waits, which release the GIL) crawl one task at a time with a
  ``TaskRunner`` each (its own HTTP sessions) and hand the ``CrawlResult`` to the sink.
* **Shutdown** (``stop``, called on SIGTERM/SIGINT): no new leases; tasks still queued are given back with
  ``releaseUsers``; running crawls get ``client.shutdown_grace_s`` to finish (then are cancelled at the next
  page and their leases given back; a crawl still blocked in a read after ``CANCEL_WAIT_S`` more has its lease
  given back at once and its late result dropped); the sink stores and reports what it can in the same grace period and
  gives back every lease it could not report. Nothing is left half-done: each task ends reported, released, or
  (if the scheduler is unreachable) simply expires and is re-crawled.
* **A server that does not answer** (stopped, its host dropping packets) cannot hold the stop past that: every
  remote call goes through one ``CallCutoff``. The sink's passes go on until its deadline (the grace period's end,
  or a second after the cancel wait); a pass begun before the stop handed it its last results is followed by one
  final pass, which may begin past the deadline. A call still unanswered ``LAST_CALLS_S`` after the deadline is
  abandoned and none is sent after that, so the final pass is bounded by the same cut, and a slow but healthy
  server still finishes the last pass; the lease loop's call ends at the same cut. Giving the leases back (and
  reporting results stored by then) gets ``LAST_CALLS_S`` of its own, and the command's communicator closes its
  connections within a second (``gateways.CLIENT_PROPERTIES``). A stop takes at most about
  ``shutdown_grace_s + CANCEL_WAIT_S + 1 + 2 * LAST_CALLS_S + 1`` seconds (10 s past the grace period; each step
  may end up to ``CallCutoff.POLL_S`` late), whatever the Ice timeouts.
  A result whose report was abandoned is not lost: its records are stored or not (the cursor moved only with a
  report), and its lease comes back by ``releaseUsers`` or at its deadline (a report or give-back the scheduler
  applied after all settled it: giving it back again is refused, and that is expected).
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from crawler_client import observer
from crawler_client.crawl import CrawlResult, failure_report
from crawler_client.gateways import CallCutoff, SchedulerGateway, StorageGateway, shared_cutoff
from crawler_client.runner import TaskRunner
from crawler_client.sink import Backoff, Sink
from crawler_client.writer import ClientStats
from icecrawler import limits
from icecrawler.clock import Clock
from icecrawler.errors import InvalidArgumentError, NotAuthorizedError, NoWorkError, ServiceError
from icecrawler.models import Outcome, Task
from icecrawler.settings import Settings

__all__ = ["ClientDaemon", "DaemonConfig", "default_worker_id"]

log = logging.getLogger(__name__)

#: How often idle threads re-check the stop flag (seconds); bounds shutdown latency, not throughput.
POLL_S = 0.2
#: After cancelling, how long shutdown waits for the crawl threads to notice before giving their leases back.
CANCEL_WAIT_S = 2.0
#: How long past the sink's deadline a remote call still under way may take (then it is abandoned), and again how
#: long giving the leases back at the end of the stop may take.
LAST_CALLS_S = 3.0


def _wall_ms() -> int:
    """Lease deadlines are wall-clock ms (the scheduler's simulated clock only drives due times)."""
    return int(time.time() * 1000)


def _join_all(threads: list[threading.Thread], deadline: float) -> None:
    """Join ``threads`` until ``deadline`` (``time.monotonic``) for all of them, not each."""
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))


def default_worker_id() -> str:
    """``host:pid``: unique per client process, readable in the scheduler's stats."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class DaemonConfig:
    """The ``client.*`` settings the daemon itself reads."""

    workers: int
    batch: int
    idle_sleep_s: float
    buffer_records: int
    report_batch: int
    write_batch: int
    backoff_s: float
    max_backoff_s: float
    shutdown_grace_s: float
    progress_log_s: float
    #: Most bytes (estimated) in one storage write: the storage server's request limit (icecrawler.limits).
    write_bytes: int = 0
    #: Most bytes (estimated) in one putUsers: the scheduler's request limit (icecrawler.limits).
    report_bytes: int = 0
    #: Most bytes one record may take (its exact size): a record over it can never be sent (icecrawler.limits).
    record_bytes: int = 0

    @classmethod
    def from_settings(cls, settings: Settings) -> DaemonConfig:
        config = cls(
            workers=settings.get_int("client.workers"),
            batch=settings.get_int("client.batch"),
            idle_sleep_s=settings.get_float("client.idle_sleep_s"),
            buffer_records=settings.get_int("client.buffer_records"),
            report_batch=settings.get_int("client.report_batch"),
            write_batch=settings.get_int("storage.batch_limit"),
            backoff_s=settings.get_float("client.backoff_s"),
            max_backoff_s=settings.get_float("client.max_backoff_s"),
            shutdown_grace_s=settings.get_float("client.shutdown_grace_s"),
            progress_log_s=settings.get_float("client.progress_log_s"),
            write_bytes=limits.storage_message_bytes(settings),
            report_bytes=limits.scheduler_message_bytes(settings),
            record_bytes=limits.storage_record_bytes(settings),
        )
        for name in ("workers", "batch", "buffer_records", "report_batch", "write_batch"):
            if getattr(config, name) < 1:
                raise InvalidArgumentError(
                    f"client.{name} must be >= 1, got {getattr(config, name)}", field=f"client.{name}"
                )
        return config


class ClientDaemon:
    """Runs the lease loop, the workers and the sink until ``stop``."""

    def __init__(
        self,
        scheduler: SchedulerGateway,
        storage: StorageGateway,
        config: DaemonConfig,
        runner_factory: Callable[[threading.Event], TaskRunner],
        *,
        clock: Clock,
        fingerprint: Callable[[Iterable[str]], int],
        worker_id: str | None = None,
    ) -> None:
        self.scheduler = scheduler
        #: What ends the gateways' remote calls at the stop's deadlines: the one their Ice gateways were built with.
        self.cutoff = shared_cutoff(scheduler, storage)
        self.config = config
        self.worker_id = worker_id or default_worker_id()
        self.clock = clock
        self.stats = ClientStats()
        self.sink = Sink(
            scheduler,
            storage,
            buffer_records=config.buffer_records,
            report_batch=config.report_batch,
            write_batch=config.write_batch,
            write_bytes=config.write_bytes,
            report_bytes=config.report_bytes,
            record_bytes=config.record_bytes,
            record_limit_from=f"storage.batch_limit = {config.write_batch}",
            backoff_s=config.backoff_s,
            max_backoff_s=config.max_backoff_s,
            now_ms=_wall_ms,
            monotonic=time.monotonic,
            fingerprint=fingerprint,
            stats=self.stats,
        )
        self._runner_factory = runner_factory
        self._tasks: queue.Queue[Task] = queue.Queue()
        self._stopping = threading.Event()
        self._cancel = threading.Event()
        self._sink_done = threading.Event()
        self._wake_sink = threading.Event()
        self._running = 0
        #: Task each busy worker thread is crawling (to give its lease back if the crawl outlives shutdown).
        self._current: dict[str, Task] = {}
        self._running_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._leaser: threading.Thread | None = None
        self._sink_thread: threading.Thread | None = None
        self._sink_deadline = float("inf")
        self.crawled = 0

    # --- lifecycle ----------------------------------------------------------------------------------------

    def start(self) -> None:
        self._leaser = threading.Thread(target=self._lease_loop, name="leaser", daemon=True)
        self._threads = [
            threading.Thread(target=self._work_loop, name=f"worker-{n}", daemon=True)
            for n in range(self.config.workers)
        ]
        self._sink_thread = threading.Thread(target=self._sink_loop, name="sink", daemon=True)
        for thread in [self._leaser, *self._threads, self._sink_thread]:
            thread.start()
        log.info("client %s started: %d workers, batch %d", self.worker_id, self.config.workers, self.config.batch)

    def stop(self) -> None:
        """Graceful, bounded shutdown (see the module docstring). Safe to call once from any one thread."""
        log.info(
            "client %s stopping: finishing in-flight tasks (grace %.0fs)", self.worker_id, self.config.shutdown_grace_s
        )
        deadline = time.monotonic() + self.config.shutdown_grace_s
        self._stopping.set()
        self._release_queued()
        # The crawl threads only: the lease loop may wait on a scheduler that does not answer, and the cutoff
        # ends that call below.
        _join_all(self._threads, deadline)
        if any(thread.is_alive() for thread in self._threads):
            log.warning("crawls still running after the grace period: cancelling them")
            self._cancel.set()
            _join_all(self._threads, time.monotonic() + CANCEL_WAIT_S)
        self._release_queued()
        self._abandon_stuck_crawls()
        # The sink's passes end at this deadline, but for one final pass after a pass under way (_sink_loop).
        self._sink_deadline = max(deadline, time.monotonic() + 1.0)
        # A call still unanswered LAST_CALLS_S later is abandoned: a slow but healthy server finishes the sink's last
        # pass (its report, its login refresh), a hung one holds the stop no longer.
        calls_end = self._sink_deadline + LAST_CALLS_S
        self.cutoff.cut(calls_end)
        self._sink_done.set()
        self._wake_sink.set()
        if self._sink_thread is not None:
            # Bounded: past its deadline the sink begins one final pass at most, and no call outlives the cut.
            self._sink_thread.join()
        if self._leaser is not None:
            # Its call ends at the same cut (within CallCutoff.POLL_S): wait for that before the give-back's window
            # opens, so that the window is the give-back's alone. Tasks it leased meanwhile are given back below;
            # a call still running after this (it missed the cut) is abandoned, and what it leases expires.
            self._leaser.join(max(0.0, calls_end + 2 * CallCutoff.POLL_S - time.monotonic()))
        self.cutoff.cut(time.monotonic() + LAST_CALLS_S)  # the give-back's own window
        self._release_queued()
        left = self.sink.pending_count()
        if left:
            given = self.sink.give_back()
            unsettled = self.sink.pending_count()
            log.warning(
                "%d result(s) could not be reported in time by the last pass: %d reported or settled at the end, "
                "%d lease(s) given back, %d give-back(s) refused (settled already, or the lease lost), %d left to "
                "expire",
                left,
                left - given.released - given.refused - unsettled,
                given.released,
                given.refused,
                unsettled,
            )
        self.log_progress()
        log.info("client %s stopped", self.worker_id)

    def run_until(self, stop_requested: threading.Event) -> None:
        """Start, log progress every ``client.progress_log_s`` until ``stop_requested``, then stop."""
        self.start()
        next_log = time.monotonic() + self.config.progress_log_s
        while not stop_requested.wait(POLL_S):
            if time.monotonic() >= next_log:
                self.log_progress()
                next_log = time.monotonic() + self.config.progress_log_s
        self.stop()

    def log_progress(self) -> None:
        snap = self.stats.snapshot()
        outcomes = snap.pop("outcomes")
        log.info(
            "progress: crawled=%d reported=%s items_stored=%s buffered_records=%d pending_results=%d outcomes=%s %s",
            self.crawled,
            snap.pop("tasks_reported"),
            snap.pop("items_stored"),
            self.sink.buffered_records(),
            self.sink.pending_count(),
            outcomes,
            " ".join(f"{key}={value}" for key, value in snap.items() if value),
        )

    # --- threads ------------------------------------------------------------------------------------------

    def busy_workers(self) -> int:
        """Crawl threads crawling a task now (the metrics' gauge)."""
        with self._running_lock:
            return self._running

    def _in_flight(self) -> int:
        with self._running_lock:
            return self._tasks.qsize() + self._running

    def _lease_loop(self) -> None:
        backoff = Backoff(self.config.backoff_s, self.config.max_backoff_s)
        limit = self.config.workers + self.config.batch
        while not self._stopping.is_set():
            room = limit - self._in_flight()
            if self._tasks.qsize() >= self.config.workers or room < 1 or not self.sink.has_room():
                self._stopping.wait(POLL_S / 4)
                continue
            try:
                tasks = self.scheduler.lease(self.worker_id, min(self.config.batch, room))
            except Exception as exc:
                self._lease_failed(exc, backoff)
                continue
            backoff.succeeded()
            for task in tasks:
                self._tasks.put(task)

    def _lease_failed(self, exc: Exception, backoff: Backoff) -> None:
        """Wait as the failure asks: until the next task is due (NoWork), else a growing backoff."""
        if isinstance(exc, NoWorkError):
            due_s = exc.next_due_in_ms / 1000 if exc.next_due_in_ms >= 0 else self.config.idle_sleep_s
            wait = max(0.0, min(due_s, self.config.idle_sleep_s))
            observer.current().waited("no_work", wait)
            self._stopping.wait(wait)
            return
        if self._stopping.is_set() and isinstance(exc, ServiceError):  # the stop's cutoff ended it: no retry
            log.info("leasing ended by the stop: %s", exc)
            return
        delay = backoff.failed(time.monotonic())
        observer.current().waited("backoff", delay)
        if isinstance(exc, NotAuthorizedError):
            log.error(
                "leasing refused: %s; retry in %.1fs (this node needs a certificate with --role client)", exc, delay
            )
        elif isinstance(exc, (ServiceError, InvalidArgumentError)):
            log.warning("leasing failed (%s); retry in %.1fs", exc, delay)
        else:  # a bug: keep leasing alive, loudly
            log.exception("leasing failed unexpectedly; retry in %.1fs", delay, exc_info=exc)
        self._stopping.wait(delay)

    def _work_loop(self) -> None:
        runner = self._runner_factory(self._cancel)
        try:
            while not self._stopping.is_set():
                try:
                    task = self._tasks.get(timeout=POLL_S)
                except queue.Empty:
                    continue
                name = threading.current_thread().name
                with self._running_lock:
                    self._running += 1
                    self._current[name] = task
                started = time.monotonic()
                try:
                    result = runner.run(task)
                except Exception as exc:  # a bug outside the crawl loop: classify it, keep the worker alive
                    log.exception("task %s: runner failed", task.id)
                    result = CrawlResult(
                        task, failure_report(task, Outcome.ParseError, f"client-bug:{type(exc).__name__}")
                    )
                finally:
                    with self._running_lock:
                        self._running -= 1
                        abandoned = self._current.pop(name, None) is None
                        self.crawled += 0 if abandoned else 1
                if abandoned:  # stop() already gave this lease back
                    continue
                if not result.aborted:
                    report = result.report
                    observer.current().crawled(
                        task.source, report.outcome.value, report.new_items, time.monotonic() - started
                    )
                self.sink.add(result)
                self._wake_sink.set()
        finally:
            runner.close()

    def _sink_loop(self) -> None:
        while True:
            self._wake_sink.wait(POLL_S)
            self._wake_sink.clear()
            # Read before the pass: stop() hands the sink its last results before it sets _sink_done, so only a
            # pass that began after it saw _sink_done has them all. (A pass already under way, say one slow
            # storage write, returned "empty" for what it had taken, and a result that came meanwhile was given
            # back at shutdown instead of reported.)
            finishing = self._sink_done.is_set()
            try:
                empty = self.sink.flush()
            except Exception:  # a bug must not stop storing and reporting for good
                log.exception("sink pass failed; retrying")
                empty = False
                time.sleep(POLL_S)
            if finishing:
                if empty or time.monotonic() >= self._sink_deadline:
                    return
                time.sleep(POLL_S / 4)

    def _abandon_stuck_crawls(self) -> None:
        """Crawls blocked in a fetch even after the cancel (a read can take client.timeout_s): give their leases
        back now; whatever those threads produce later is dropped (they are daemon threads)."""
        with self._running_lock:
            stuck = list(self._current.values())
            self._current.clear()
        for task in stuck:
            log.warning("task %s: crawl still blocked at shutdown; giving its lease back", task.id)
            report = failure_report(task, Outcome.Timeout, "")
            self.sink.add(CrawlResult(task, report, aborted=True))

    def _release_queued(self) -> None:
        """Hand tasks that were leased but never started to the sink as aborted (it gives the leases back)."""
        while True:
            try:
                task = self._tasks.get_nowait()
            except queue.Empty:
                break
            report = failure_report(task, Outcome.Timeout, "")
            self.sink.add(CrawlResult(task, report, aborted=True))
        self._wake_sink.set()
