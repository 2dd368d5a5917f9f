"""Where crawl results go after the crawl: records to storage first, then the report to the scheduler.

The ordering is the client's durability rule: **a task is reported only after its records are durably
acknowledged**, because the report advances the task's cursor; a report that overtook its records could lose
them for good. Everything in between is buffered here, in memory, bounded:

* storage unreachable (``ServiceError``) or refusing (``StorageUnavailableError``) → keep the records, retry
  with jittered exponential backoff; while more than ``client.buffer_records`` records wait, the lease loop
  stops leasing (``has_room``), so a long outage costs no new leases;
* storage rejects some records (``InvalidRecordsError``) → the others WERE stored: log each rejected record
  loudly, never retry it (it would be rejected again), carry on. A record the wire cannot carry (``screen``),
  or one over the storage server's request limit by itself (``record_bytes``, on its exact size: Ice would refuse
  every write of it by closing the connection, which looks like an outage, so it was resent forever), is dropped
  alone before sending; a chunk refused or failing as a whole is split until the record at fault is alone. A record that
  could not be stored though it is not invalid makes its task's report a failure (``records-not-stored``, old
  cursor), so the task is crawled again instead of being reported Ok;
* scheduler unreachable → keep the reports, retry with backoff;
* ``LeaseLostError(index)`` on ``putUsers`` → that task's lease expired and it will be re-crawled: drop that
  report (its records are stored, idempotently) and resend the rest; ``InvalidArgumentError(index)`` → that
  report is malformed, so resending cannot help: log it as a bug, drop it, resend the rest (code ``UnknownTask``,
  a task an operator removed, is dropped with a warning instead);
* a result whose lease deadline passed before it could be reported is dropped with a warning: the scheduler
  has re-queued the task, whose cursor did not move, so the next crawl fetches the same items again;
* aborted crawls (shutdown) give their leases back with ``releaseUsers``;
* a result kept through a scheduler outage while its task was leased to this client again (a report the scheduler
  committed just before it was killed, whose answer never came) is superseded by the newer crawl's: only the newer
  lease is alive, and one batch naming a task twice is refused, which used to drop the newer report.

A listing crawl's discovered product ids travel inside its report (``Report.discovered_ids``): the scheduler adds
them in the report's own transaction and counts the new ones, so the sink has nothing to add or rewrite. Reports
go in ``putUsers`` calls of at most ``client.report_batch`` reports and, with ``report_bytes``, no more
estimated bytes (``report_wire_bytes``) than the scheduler accepts in one request (``icecrawler.limits``).

Storing is ``crawler_client.writer`` (chunked writes, the record at fault found alone); this module keeps the
order, the buffer, the backoff and the reporting.

The sink also computes each report's SHHD fingerprint (``fingerprint_result``), so the CPU-bound jieba + simhash
work runs on the sink thread while the workers wait on the network.

The sink has no thread of its own: the daemon calls ``flush`` from its sink thread; workers call ``add``.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from crawler_client.crawl import CrawlResult, failure_report, fingerprint_result
from crawler_client.gateways import CallCutError, SchedulerGateway, StorageGateway
from crawler_client.observer import current as current_observer
from crawler_client.screen import clamp_counts, record_problem
from crawler_client.wire_size import fitting, record_exact_bytes, record_wire_bytes, report_wire_bytes
from crawler_client.writer import ClientStats, Pending, RecordWriter
from icecrawler.errors import InvalidArgumentError, LeaseLostError, ServiceError, StorageUnavailableError
from icecrawler.logs import LogThrottle
from icecrawler.models import Outcome, Post, Review

__all__ = ["Backoff", "GivenBack", "Sink"]

log = logging.getLogger(__name__)


class Backoff:
    """Jittered exponential backoff for one remote peer: ``base`` × 2^failures × U(0.5, 1.5), never over the cap;
    at the cap, U(0.75, 1) × cap, so that clients waiting out a long outage do not all retry at once."""

    def __init__(self, base_s: float, cap_s: float, rng: random.Random | None = None) -> None:
        self.base_s = base_s
        self.cap_s = cap_s
        self.failures = 0
        self.retry_at = 0.0
        self._rng = rng or random.Random()

    def ready(self, now: float) -> bool:
        return now >= self.retry_at

    def failed(self, now: float) -> float:
        """Record a failure at ``now``; returns the delay until the next try."""
        delay = self.base_s * 2 ** min(self.failures, 30) * self._rng.uniform(0.5, 1.5)
        if delay >= self.cap_s:
            delay = self.cap_s * self._rng.uniform(0.75, 1.0)
        self.failures += 1
        self.retry_at = now + delay
        return delay

    def succeeded(self) -> None:
        self.failures = 0
        self.retry_at = 0.0


@dataclass(frozen=True)
class GivenBack:
    """What ``Sink.give_back`` did with the leases it sent back, for the stop's summary: a refused one was not given
    back (settled by a call the stop abandoned, or lost), so it is counted apart."""

    #: Leases the scheduler took back.
    released: int = 0
    #: Leases whose give-back the scheduler refused (or that could not be sent at all): dropped.
    refused: int = 0


class Sink:
    """Buffers results, stores their records, then reports them (see the module docstring)."""

    def __init__(
        self,
        scheduler: SchedulerGateway,
        storage: StorageGateway,
        *,
        buffer_records: int,
        report_batch: int,
        write_batch: int,
        write_bytes: int = 0,
        report_bytes: int = 0,
        record_bytes: int = 0,
        record_limit_from: str = "",
        backoff_s: float,
        max_backoff_s: float,
        now_ms: Callable[[], int],
        monotonic: Callable[[], float],
        fingerprint: Callable[[Iterable[str]], int],
        stats: ClientStats | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.buffer_records = buffer_records
        self.report_batch = max(1, report_batch)
        #: Most estimated wire bytes in one putUsers (0: no limit): over the scheduler's limit it would refuse it.
        self.report_bytes = report_bytes
        #: Most wire bytes of one record (0: no limit): over the storage server's limit by itself, it can never be
        #: sent.
        self.record_bytes = record_bytes
        #: The setting ``record_bytes`` was derived from, for the log (the server's own limit is not visible here).
        self.record_limit_from = record_limit_from
        self._now_ms = now_ms
        self._monotonic = monotonic
        self._fingerprint = fingerprint
        self.stats = stats or ClientStats()
        self.writer = RecordWriter(storage, write_batch=write_batch, write_bytes=write_bytes, stats=self.stats)
        self.storage_backoff = Backoff(backoff_s, max_backoff_s)
        self.scheduler_backoff = Backoff(backoff_s, max_backoff_s)
        self._lock = threading.Lock()
        self._pending: list[Pending] = []
        #: The results a flush or give_back is working on right now (out of ``_pending``, still buffered): they
        #: count in ``buffered_records``, or a storage call hanging until its timeout would hide the whole
        #: buffer from ``has_room`` and the lease loop would keep leasing through an outage.
        self._working: list[Pending] = []
        #: The WARNING of a count clamped into a 32-bit int, at most one per source and field a minute: a parser
        #: that misreads a field does so on every record (1000 posts of one crawl were 1000 lines).
        self._clamps = LogThrottle(60.0, monotonic)

    # --- called by workers and the lease loop ---

    def add(self, result: CrawlResult) -> None:
        result.posts = self._screened(result, result.posts)
        result.reviews = self._screened(result, result.reviews)
        pending = Pending(result, posts_done=not result.posts, reviews_done=not result.reviews)
        with self._lock:
            self._pending.append(pending)

    def _screened[R: (Post, Review)](self, result: CrawlResult, records: list[R]) -> list[R]:
        """``records`` less those the wire cannot carry (``screen``) or that are over the storage server's request
        limit by themselves: each one dropped alone, logged, counted. A count outside a 32-bit int is clamped
        instead (``clamp_counts``), counted, and logged at most once a minute per source and field."""
        good: list[R] = []
        for record in records:
            record, clamped = clamp_counts(record)
            problem = record_problem(record) or self._oversized(record)
            if problem is None:
                if clamped:  # counted as sent with clamped counts only when it is sent
                    self._log_clamped(result, record, clamped)
                good.append(record)
                continue
            log.error(
                "task %s: %s %s dropped, it cannot be sent: %s",
                result.task.id,
                type(record).__name__.lower(),
                str(record.id)[:40],
                problem,
            )
            self.stats.add(records_rejected=1)
        return good

    def _log_clamped(self, result: CrawlResult, record: Post | Review, clamped: list[tuple[str, int, int]]) -> None:
        """Count a record sent with ``clamped`` counts (``records_clamped{source}``) and log each field's change,
        unless that source's field was logged less than a minute ago (the next line says how many were not)."""
        source = result.task.source
        current_observer().records_clamped(source)
        kind = type(record).__name__.lower()
        for name, value, fitted in clamped:
            admitted = self._clamps.admit((source, name))
            if admitted is None:
                continue
            log.warning(
                "task %s: %s %s: %s=%s clamped to %s (a count is a 32-bit int on the wire); the record is sent with "
                "that%s",
                result.task.id,
                kind,
                str(record.id)[:40],
                name,
                value,
                fitted,
                LogThrottle.more(admitted, f"{kind}s with {name} clamped"),
            )

    def _oversized(self, record: Post | Review) -> str | None:
        """Why ``record`` alone is over the storage server's request limit (None when it is not, or no limit). The
        cheap estimate clears nearly every record; one it does not is measured exactly before it is dropped, since
        the estimate can be four times the real size."""
        if not self.record_bytes or record_wire_bytes(record) <= self.record_bytes:
            return None
        size = record_exact_bytes(record)
        if size <= self.record_bytes:
            return None
        source = f", derived from this client's {self.record_limit_from}" if self.record_limit_from else ""
        return f"it takes {size} bytes on the wire, over the storage request limit of {self.record_bytes} bytes{source}"

    def buffered_records(self) -> int:
        with self._lock:
            return sum(item.waiting_records for item in (*self._pending, *self._working))

    def has_room(self) -> bool:
        """False while more records wait for storage than ``client.buffer_records``: stop leasing."""
        return self.buffered_records() < self.buffer_records

    def pending_count(self) -> int:
        with self._lock:
            return len(self._pending) + len(self._working)

    # --- called by the sink thread ---

    def flush(self) -> bool:
        """One pass: expire, store, report, release. Returns True when nothing is left pending."""
        with self._lock:
            batch, self._pending = self._pending, []
            self._working = batch
        try:
            batch = self._expire(batch)
            self._supersede(batch)
            for item in batch:
                fingerprint_result(item.result, self._fingerprint)
            now = self._monotonic()
            if self.storage_backoff.ready(now):
                self._store(batch)
            batch = [item for item in batch if not (item.superseded and item.stored)]  # nothing left to do for them
            if self.scheduler_backoff.ready(now):
                batch = self._report(batch)
                if self.scheduler_backoff.ready(now):  # not when the report just found it down: one wait per pass
                    batch, _ = self._release(batch)
        finally:
            with self._lock:
                self._pending[:0] = batch
                self._working = []
        return not batch

    def give_back(self) -> GivenBack:
        """Shutdown: report the results whose records are all stored (the stop cut a pass short between the two:
        a storage call that hung), then release every lease still pending (their records may be stored; storage
        is idempotent). Returns how many leases the scheduler took back and how many it refused."""
        with self._lock:
            batch, self._pending = self._pending, []
            self._working = batch
        self._supersede(batch)
        batch = [item for item in batch if not item.superseded]  # their leases are dead
        batch = self._report(batch)
        for item in batch:
            item.result.aborted = True
        # Leases whose report or release the stop abandoned, sent, go last, apart: the scheduler may have applied
        # it and refuse each of them (settled), one call per refusal, and the others must not wait behind those calls.
        unsent = [item for item in batch if not item.maybe_applied]
        maybe = [item for item in batch if item.maybe_applied]
        left, released = self._release(unsent)
        if left:
            left += maybe
        else:
            left, released_maybe = self._release(maybe)
            released += released_maybe
        with self._lock:
            self._pending[:0] = left
            self._working = []
        return GivenBack(released=released, refused=len(batch) - len(left) - released)

    def _expire(self, batch: list[Pending]) -> list[Pending]:
        now = self._now_ms()
        keep = []
        for item in batch:
            deadline = item.result.task.lease_deadline_ms
            if deadline and now > deadline and not item.result.aborted:
                log.warning(
                    "task %s: lease deadline passed before its report (%d record(s) %s); dropped, the "
                    "scheduler re-crawls it",
                    item.result.task.id,
                    item.result.record_count,
                    "stored" if item.stored else "not stored",
                )
                self.stats.add(results_expired=1)
            else:
                keep.append(item)
        return keep

    def _supersede(self, batch: list[Pending]) -> None:
        """Mark every result of a task that has a newer result in the sink (the list is oldest first) as superseded:
        the scheduler leased the task again, so its lease is dead and its report would be refused (and, in one batch
        with the newer report, make that one refused too). Its records are still stored; ``flush`` then lets it go."""
        newest = {item.result.task.id: item for item in batch}
        for item in batch:
            newer = newest[item.result.task.id]
            if newer is not item and not item.superseded:
                item.superseded = True
                log.info(
                    "task %s: a newer crawl of it (leased again, lease %s) replaces the report of lease %s",
                    item.result.task.id,
                    newer.result.task.lease_token,
                    item.result.task.lease_token,
                )
                self.stats.add(reports_lost=1)

    def _store(self, batch: list[Pending]) -> None:
        try:
            self.writer.write_kind([item for item in batch if not item.posts_done], "posts")
            self.writer.write_kind([item for item in batch if not item.reviews_done], "reviews")
        except CallCutError as exc:  # the stop, not an outage: nothing to back off from
            log.info("storing ended by this client's stop (%s)", exc)
        except (ServiceError, StorageUnavailableError) as exc:
            delay = self.storage_backoff.failed(self._monotonic())
            log.warning(
                "storage unavailable (%s); %d record(s) buffered, retry in %.1fs",
                exc,
                sum(item.waiting_records for item in batch),
                delay,
            )
        else:
            self.storage_backoff.succeeded()

    def _report(self, batch: list[Pending]) -> list[Pending]:
        ready = [item for item in batch if item.stored and not item.result.aborted and not item.superseded]
        if not ready:
            return batch
        # Reports the stop may have seen applied after all go last, in calls of their own: each may be refused
        # (settled), one call each, and the others must not wait behind those calls.
        ready.sort(key=lambda item: bool(item.maybe_applied))
        for item in ready:
            if item.unstored and item.result.report.outcome is Outcome.Ok:
                report = item.result.report
                item.result.report = failure_report(
                    item.result.task, Outcome.ParseError, "records-not-stored", fetches=report.fetches
                )
                # The crawl's login refresh is the site's, whatever became of the records: it still goes on.
                item.result.report.account_cookies = report.account_cookies
        done: set[int] = set()
        start = 0
        while start < len(ready):
            rest = [item for item in ready[start:] if bool(item.maybe_applied) == bool(ready[start].maybe_applied)]
            chunk = rest[: fitting(rest, self.report_batch, self.report_bytes, _report_bytes)]
            try:
                sent = self._send_all_or_nothing(
                    chunk, lambda part: self.scheduler.report([item.result.report for item in part]), "report"
                )
            except CallCutError as exc:  # the stop, not an outage: nothing to back off from
                if exc.sent:
                    _maybe_applied(chunk, "report")
                log.info(
                    "reporting ended by this client's stop (%s); %d report(s) not confirmed", exc, len(ready) - start
                )
                break
            except ServiceError as exc:
                delay = self.scheduler_backoff.failed(self._monotonic())
                log.warning(
                    "scheduler unavailable (%s); %d report(s) kept, retry in %.1fs", exc, len(ready) - start, delay
                )
                break
            self.scheduler_backoff.succeeded()
            for item in chunk:
                done.add(id(item))
            for item in sent:
                self.stats.add(tasks_reported=1)
                self.stats.count_outcome(item.result.report.outcome.value)
            start += len(chunk)
        return [item for item in batch if id(item) not in done]

    def _release(self, batch: list[Pending]) -> tuple[list[Pending], int]:
        """Give the aborted results' leases back. Returns what is left of ``batch`` (all of it when the call could
        not be made) and how many leases the scheduler took back."""
        aborted = [item for item in batch if item.result.aborted and not item.superseded]
        if not aborted:
            return batch, 0
        try:
            sent = self._send_all_or_nothing(
                aborted,
                lambda part: self.scheduler.release(
                    [(item.result.task.id, item.result.task.lease_token) for item in part]
                ),
                "release",
            )
        except CallCutError as exc:  # the stop, not an outage: nothing to back off from
            if exc.sent:  # the scheduler may have taken them back: the give-back's resend may be refused, settled
                _maybe_applied(aborted, "release")
            log.info("giving %d lease(s) back ended by this client's stop (%s)", len(aborted), exc)
            return batch, 0
        except ServiceError as exc:
            delay = self.scheduler_backoff.failed(self._monotonic())
            log.warning("scheduler unavailable for releaseUsers (%s); retry in %.1fs", exc, delay)
            return batch, 0
        self.stats.add(leases_released=len(sent))
        return [item for item in batch if not item.result.aborted], len(sent)

    def _send_all_or_nothing(
        self, items: list[Pending], send: Callable[[list[Pending]], None], what: str
    ) -> list[Pending]:
        """Send an all-or-nothing batch; on LeaseLost/InvalidArgument(index) drop that entry and resend the
        rest. Returns the entries the scheduler accepted. ServiceError propagates (nothing was accepted)."""
        part = list(items)
        while part:
            try:
                send(part)
                return part
            except ServiceError:
                raise
            except (LeaseLostError, InvalidArgumentError) as exc:
                index = exc.index
                if not 0 <= index < len(part):
                    log.error(
                        "scheduler refused a %s batch of %d without naming an entry (%s); dropped, the "
                        "leases will expire and the tasks be re-crawled",
                        what,
                        len(part),
                        exc,
                    )
                    self.stats.add(reports_lost=len(part))
                    return []
                bad = part.pop(index)
                if isinstance(exc, LeaseLostError) and bad.maybe_applied:
                    log.info(
                        "%s of task %s refused (%s): its %s, abandoned at the stop, was applied after all; "
                        "resending %d",
                        what,
                        bad.result.task.id,
                        exc,
                        bad.maybe_applied,
                        len(part),
                    )
                    continue
                # A lost lease, or a task the scheduler no longer knows (removed by an operator longer ago than it
                # remembers removed leases), is the crawl's normal course; any other refusal is a bug here.
                expected = isinstance(exc, LeaseLostError) or exc.code == "UnknownTask"
                level = logging.WARNING if expected else logging.ERROR
                log.log(
                    level,
                    "%s of task %s refused (%s: %s); dropped, resending %d",
                    what,
                    bad.result.task.id,
                    type(exc).__name__,
                    exc,
                    len(part),
                )
                self.stats.add(reports_lost=1)
            except Exception:  # a bug (a report that cannot be marshalled): loud, and never a stuck buffer
                log.exception("cannot %s %d task(s); dropped, their leases will expire", what, len(part))
                self.stats.add(reports_lost=len(part))
                return []
        return []


def _maybe_applied(items: list[Pending], call: str) -> None:
    """Mark ``items`` as named in ``call``, sent but abandoned at the stop (the first such call is the one named)."""
    for item in items:
        item.maybe_applied = item.maybe_applied or call


def _report_bytes(item: Pending) -> int:
    return report_wire_bytes(item.result.report)
