"""The storage core: validate a batch, write it to the backend within a bounded time or spool it, replay the spool.

No Ice here (the servant adapts); tests drive it directly with ``MemoryStore`` and ``MemorySpool``.

Write path (one ``write_posts``/``write_reviews`` call):

1. Validate every record (``schema``). Bad records are collected with their index and reason; an empty or
   oversized batch raises ``InvalidArgumentError`` before anything is written.
2. The valid records become rows. If the spool is empty, the rows go to the backend on a worker thread and the
   call waits at most ``storage.write_timeout_s``. If the backend fails or is too slow, or the spool is not empty
   (to keep the order of writes), the rows are appended to the durable spool instead.
3. Only then is the call answered: ``WriteResult(stored, spooled)``, or ``InvalidRecordsError`` naming the
   rejected indexes, with the rest of the batch durable. If neither backend nor spool takes the rows, the
   caller gets ``StorageUnavailableError`` and nothing is acknowledged.

A replay thread moves spooled entries to the backend, oldest first, with bounded exponential backoff while the
backend is down. An entry it cannot read (damaged on disk) is set aside in the spool file with an ERROR, not retried
forever: behind it, every later write would have waited in the spool for good. A write that timed out may still
land in the backend later and then be replayed again: rows are keyed by identity, so that only rewrites the same
row.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass, field
from typing import Any, TypeVar

from icecrawler.errors import InvalidRecordsError, StorageUnavailableError
from icecrawler.logs import FailureEpisode, LogThrottle
from icecrawler.models import Review
from icecrawler.settings import Settings
from storage_server import schema
from storage_server.observer import StorageObserver
from storage_server.spool import SpoolQueue, SqliteSpool
from storage_server.stores import RecordStore, SqliteStore

__all__ = ["COUNT_BUDGET_S", "StorageService", "StorageStatsData", "WriteResult", "build_store"]

log = logging.getLogger(__name__)

#: Replay backoff while the backend is down: first retry, then doubling up to the cap.
REPLAY_BACKOFF_S = (0.2, 5.0)
#: How long a stop waits, in all, for the replay and the backend calls it interrupted (``close``) to end.
CLOSE_WAIT_S = 5.0
#: How long ``stats()`` waits for the backend's row counts (``icecrawler status`` gives a server 3 s in all).
COUNT_BUDGET_S = 1.5


T = TypeVar("T")


class _BackendFailed(Exception):
    """The backend refused a replayed entry (as opposed to the spool failing under the replay)."""


@dataclass(frozen=True)
class WriteResult:
    """How many records of a call reached the backend, and how many were spooled for replay."""

    stored: int
    spooled: int


@dataclass
class StorageStatsData:
    """What ``stats()`` reports; counts of -1 mean the backend has not answered a count yet (down or slow)."""

    backend: str
    posts: int
    reviews: int
    spool_depth: int
    #: Records acknowledged (stored or spooled) since start.
    records_accepted: int
    records_rejected: int
    detail: dict[str, Any] = field(default_factory=dict)


def build_store(settings: Settings) -> RecordStore:
    """The backend named by ``storage.backend``."""
    backend = settings.get_str("storage.backend")
    if backend == "embedded":
        return SqliteStore(settings.get_str("storage.embedded.path"))
    if backend == "hbase":
        from storage_server.hbase_store import HBaseStore

        return HBaseStore.from_settings(settings)
    from icecrawler.errors import ConfigError

    raise ConfigError(f"storage.backend must be 'embedded' or 'hbase', not {backend!r}")


class StorageService:
    """Validated, durable, idempotent writes of posts and reviews onto one ``RecordStore``."""

    def __init__(
        self,
        store: RecordStore,
        spool: SpoolQueue,
        *,
        max_text_chars: int,
        batch_limit: int,
        write_timeout_s: float,
        writers: int = 4,
    ) -> None:
        self.store = store
        self.spool = spool
        self.max_text_chars = max_text_chars
        self.batch_limit = batch_limit
        self.write_timeout_s = write_timeout_s
        self._executor = ThreadPoolExecutor(max_workers=writers, thread_name_prefix="store-write")
        self._lock = threading.Lock()
        self._counters = {"accepted": 0, "rejected": 0, "stored": 0, "spooled": 0, "replayed": 0}
        #: Backend write failures: the outage is said once, and once more when the spool drained after it; its
        #: ``message`` is the last error (``stats``).
        self._backend = FailureEpisode(math.inf)
        #: The replay could not read or shrink the spool: said once, not per retry, and once when it could again.
        self._spool_held = FailureEpisode(math.inf)
        #: Replay failures that are no outage (a bug): logged with their traceback at most once a minute.
        self._replay_failures = LogThrottle()
        #: Batches refused because neither the backend nor the spool took them: logged at most once a minute, and
        #: once when a batch begun after the last refusal is taken again.
        self._refusals = FailureEpisode()
        #: Batches with rejected records are logged at most once a minute per table (they are all counted).
        self._rejections = LogThrottle()
        #: Monotonic time the spool last went from empty to non-empty (None while empty): the spool's age, a span that
        #: a step of the wall clock (NTP) must not lengthen or cut.
        self._spooled_since: float | None = time.monotonic() if spool.depth() > 0 else None
        #: Told about writes, spooling and backend errors (the daemon's metrics, ``storage_server.metrics``).
        self.observer: StorageObserver | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._count_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-count")
        self._count_future: Future[tuple[int, int]] | None = None
        self._last_counts = (-1, -1)
        #: Backend calls submitted to the writers and the count pool and not ended yet (``close`` waits for them).
        self._calls: set[Future[Any]] = set()
        self._calls_lock = threading.Lock()  # apart from _lock: ``_counts`` submits while holding that one
        #: Why the last count failed ("" after one succeeded): the start-up line says why the backend is not there.
        self.count_error = ""
        self._replayer = threading.Thread(target=self._replay_loop, name="spool-replay", daemon=True)
        self._replayer.start()

    @classmethod
    def from_settings(cls, settings: Settings, store: RecordStore | None = None) -> StorageService:
        return cls(
            store if store is not None else build_store(settings),
            SqliteSpool(settings.get_str("storage.spool_dir")),
            max_text_chars=settings.get_int("storage.max_text_chars"),
            batch_limit=settings.get_int("storage.batch_limit"),
            write_timeout_s=settings.get_float("storage.write_timeout_s"),
            writers=settings.get_int("storage.hbase.pool_size"),
        )

    # --- writes ------------------------------------------------------------------------------------------------

    def write_posts(self, posts: Sequence[Any], fmt: schema.PostFormat = schema.CORE_POSTS) -> WriteResult:
        """Store core ``Post`` objects, or posts of another type that ``fmt`` reads (the servant's Slice structs)."""
        return self._write(schema.WEIBO, posts, lambda post, limit: schema.checked_post_row(post, limit, fmt))

    def write_reviews(self, reviews: Sequence[Review]) -> WriteResult:
        return self._write(schema.REVIEW, reviews, schema.checked_review_row)

    def _write(
        self, table: str, records: Sequence[Any], checked_row: Callable[[Any, int], schema.Row | list[str]]
    ) -> WriteResult:
        started = time.perf_counter()
        valid, rejected = schema.build_rows(
            records, self.batch_limit, lambda record: checked_row(record, self.max_text_chars)
        )
        began = self._refusals.mark()
        result = self._persist(table, valid) if valid else WriteResult(0, 0)
        if valid and self._refusals.failing and self._refusals.recovered(began):
            log.info("taking writes again (%s)", "stored" if result.stored else "spooled")
        if self.observer is not None:
            self.observer.wrote(table, result.stored, result.spooled, len(rejected), time.perf_counter() - started)
        with self._lock:
            self._counters["accepted"] += len(valid)
            self._counters["rejected"] += len(rejected)
            self._counters["stored"] += result.stored
            self._counters["spooled"] += result.spooled
        if rejected:
            admitted = self._rejections.admit(table)
            if admitted is not None:
                more = LogThrottle.more(admitted, "batches with rejected records")
                log.warning(
                    "%s: rejected %d of %d records: %s%s", table, len(rejected), len(records), rejected[:3], more
                )
            raise InvalidRecordsError(rejected, stored=len(valid))
        return result

    def _persist(self, table: str, rows: list[schema.Row]) -> WriteResult:
        if self.spool.depth() == 0:
            began = self._backend.mark()
            future: Future[None] = self._submit(self._executor, lambda: self.store.put(table, rows))
            try:
                future.result(timeout=self.write_timeout_s)
                # An outage whose batches were all refused spooled nothing, so no replay drains a spool after it.
                if self._backend.failing and self._backend.recovered(began):
                    log.info("backend %s is back (the spool is empty)", self.store.name)
                return WriteResult(len(rows), 0)
            except FutureTimeout:
                future.cancel()
                self._note_error(f"backend slower than storage.write_timeout_s={self.write_timeout_s}s")
            except StorageUnavailableError as exc:
                self._note_error(str(exc))
        try:
            self.spool.append(schema.encode_rows(table, rows), len(rows))
        except StorageUnavailableError as exc:  # nothing acknowledged: the caller keeps the batch and retries
            self._note_refusal(len(rows), str(exc))
            raise
        with self._lock:
            if self._spooled_since is None:
                self._spooled_since = time.monotonic()
        self._wake.set()
        return WriteResult(0, len(rows))

    def _note_refusal(self, records: int, message: str) -> None:
        """A batch neither the backend nor the spool took: a WARNING at most once a minute, with how many since."""
        if (failure := self._refusals.failed(message)).logged:
            log.warning(
                "refusing writes: the backend did not take a batch of %d records and the spool cannot (%s)%s; "
                "the callers keep them and retry",
                records,
                message,
                failure.more("batches refused"),
            )

    def _note_error(self, message: str) -> None:
        failure = self._backend.failed(message)
        if self.observer is not None:
            self.observer.backend_failed(outage_began=failure.first)
        (log.warning if failure.logged else log.debug)("backend write failed, spooling: %s", message)

    # --- replay ------------------------------------------------------------------------------------------------

    def _replay_loop(self) -> None:
        """Replay until stopped; nothing ends it early. A backend that is down, or a spool that cannot be read or
        shrunk (a full disk: a delete writes to SQLite's WAL too), is tried again after a backoff, so the spool
        drains once there is room again. An entry the backend took but the spool kept is replayed again later,
        which only rewrites the same rows."""
        backoff = REPLAY_BACKOFF_S[0]
        while not self._stop.is_set():
            try:
                replayed = self._replay_oldest()
            except _BackendFailed as exc:
                if not self._stop.is_set():  # a call the stop interrupted is no outage to report
                    self._note_error(str(exc))
                replayed = False
            except StorageUnavailableError as exc:
                self._note_spool_error(str(exc))
                replayed = False
            except Exception:  # a bug must not end the replay for good: logged (once a minute at most), tried again
                if (admitted := self._replay_failures.admit("replay")) is not None:
                    log.exception("spool replay failed%s", LogThrottle.more(admitted, "failures"))
                replayed = False
            if replayed is None:
                self._wake.wait(timeout=1.0)
                self._wake.clear()
            elif replayed:
                backoff = REPLAY_BACKOFF_S[0]
            else:
                self._stop.wait(backoff)
                backoff = min(backoff * 2, REPLAY_BACKOFF_S[1])

    def _replay_oldest(self) -> bool | None:
        """Move the oldest spooled entry to the backend: True once done, None when the spool is empty. Raises
        ``_BackendFailed`` when the backend refused it, StorageUnavailableError when the spool failed."""
        entry = self.spool.oldest()
        if entry is None:
            return None
        seq, blob, records = entry
        try:
            table, rows = schema.decode_rows(blob)
        except ValueError as exc:
            self._set_aside(seq, records, str(exc))
            return True
        began = self._backend.mark()
        try:
            self.store.put(table, rows)
        except StorageUnavailableError as exc:
            raise _BackendFailed(str(exc)) from exc
        self.spool.remove(seq)
        if self.observer is not None:
            self.observer.replayed(table, records)
        with self._lock:
            self._counters["replayed"] += records
            if self.spool.depth() == 0:
                self._spooled_since = None
        if self._spool_held.recovered():
            log.info("spool writable again; replaying")
        # A failure since this entry's put began (a direct write that spooled) is a new outage, not over yet.
        if self.spool.depth() == 0 and self._backend.recovered(began):
            log.info("spool drained; backend %s is back", self.store.name)
        return True

    def _set_aside(self, seq: int, records: int, reason: str) -> None:
        """Move an entry that cannot be decoded out of the way (kept in the spool file's ``unreadable`` table)."""
        self.spool.set_aside(seq, reason)
        with self._lock:
            if self.spool.depth() == 0:
                self._spooled_since = None
        log.error(
            "spool entry %d (%d records) cannot be read (%s): set aside, unchanged, in table unreadable of the spool "
            "file; replaying the entries after it",
            seq,
            records,
            reason,
        )

    def _note_spool_error(self, message: str) -> None:
        """The spool failed under the replay: said once (a warning), then the replay tries again quietly."""
        (log.warning if self._spool_held.failed(message).logged else log.debug)(
            "spool replay held up, trying again: %s", message
        )

    def wait_drained(self, timeout_s: float) -> bool:
        """Block until the spool is empty (tests, benchmarks); False if it is not within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while self.spool.depth() > 0 and time.monotonic() < deadline:
            self._wake.set()
            time.sleep(0.05)
        return self.spool.depth() == 0

    # --- stats ---------------------------------------------------------------------------------------------------

    def _counts(self) -> tuple[int, int]:
        """(posts, reviews) in the backend, counted on a thread of their own and waited for at most
        ``COUNT_BUDGET_S``, so ``stats()`` always answers quickly. A count still running (a big HBase table)
        is not started twice; until one finishes, the last known counts (or -1) are reported."""
        with self._lock:
            if self._count_future is None or self._count_future.done():
                self._count_future = self._submit(
                    self._count_pool, lambda: (self.store.count(schema.WEIBO), self.store.count(schema.REVIEW))
                )
            future = self._count_future
        try:
            counts = future.result(timeout=COUNT_BUDGET_S)
        except FutureTimeout:
            return self._last_counts
        except StorageUnavailableError as exc:
            self.count_error = str(exc)
            return (-1, -1)
        self._last_counts = counts
        self.count_error = ""
        return counts

    def spool_age_s(self) -> float:
        """Seconds since the spool was last empty (0 while it is empty)."""
        with self._lock:
            since = self._spooled_since
        # An entry appended just as the replay emptied the spool can leave a start time behind: empty is empty.
        return 0.0 if since is None or self.spool.depth() == 0 else max(0.0, time.monotonic() - since)

    def backend_up(self) -> bool:
        """False from a failed backend write until the spool drained after it (or, where nothing was spooled,
        until a batch went straight to the backend again)."""
        return not self._backend.failing

    def stats(self) -> StorageStatsData:
        posts, reviews = self._counts()
        with self._lock:
            counters = dict(self._counters)
        backend_up, last_error = not self._backend.failing, self._backend.message
        try:  # from the spool file, so that the entries of earlier runs count: they wait for an operator
            entries_set_aside, records_set_aside = self.spool.set_aside_count()
        except StorageUnavailableError:
            entries_set_aside = records_set_aside = -1
        return StorageStatsData(
            backend=self.store.name,
            posts=posts,
            reviews=reviews,
            spool_depth=self.spool.depth(),
            records_accepted=counters["accepted"],
            records_rejected=counters["rejected"],
            detail={
                "records_stored": counters["stored"],
                "records_spooled": counters["spooled"],
                "records_replayed": counters["replayed"],
                "records_set_aside": records_set_aside,
                "entries_set_aside": entries_set_aside,
                "backend_up": backend_up,
                "last_backend_error": last_error,
            },
        )

    def close(self) -> None:
        """Stop replaying and release the store and the spool; spooled entries stay on disk for the next start.

        A hung backend does not hold the stop: the store's calls under way are interrupted first, which loses
        nothing (a write's records were spooled when its call did not end within ``write_timeout_s``, and a
        replayed entry leaves the spool only once stored), and the threads that made them are waited for at most
        ``CLOSE_WAIT_S`` in all."""
        self._stop.set()
        self._wake.set()
        try:
            self.store.interrupt()
        except Exception:  # the rest of the stop (join, shut the pools, close store and spool) runs regardless
            log.exception("backend %s: interrupting the calls under way failed; stopping anyway", self.store.name)
        deadline = time.monotonic() + CLOSE_WAIT_S
        self._replayer.join(timeout=CLOSE_WAIT_S)
        with self._calls_lock:
            calls = set(self._calls)
        for pool in (self._executor, self._count_pool):
            pool.shutdown(wait=False, cancel_futures=True)
        _, running = futures_wait(calls, timeout=max(0.0, deadline - time.monotonic()))
        if running or self._replayer.is_alive():
            log.warning(
                "backend %s: %d call(s) still under way %.0f s after the stop interrupted them; closing anyway "
                "(their records are in the spool)",
                self.store.name,
                len(running) + self._replayer.is_alive(),
                CLOSE_WAIT_S,
            )
        self.store.close()
        self.spool.close()

    def _submit(self, pool: ThreadPoolExecutor, call: Callable[[], T]) -> Future[T]:
        """``pool.submit(call)``, kept in ``_calls`` until it ends, so that ``close`` can wait for it (bounded)."""
        future = pool.submit(call)
        with self._calls_lock:
            self._calls.add(future)
        future.add_done_callback(self._call_ended)
        return future

    def _call_ended(self, future: Future[Any]) -> None:
        with self._calls_lock:
            self._calls.discard(future)
