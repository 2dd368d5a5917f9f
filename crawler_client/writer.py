"""The storing half of the sink (``crawler_client.sink``): writing the buffered results' records to storage in
chunks, and finding the one record at fault when storage refuses a chunk.

Chunks hold at most ``storage.batch_limit`` records and, estimated with ``record_wire_bytes``, no more bytes than
the storage server accepts in one request (``icecrawler.limits``). Records storage rejects by index
(``InvalidRecordsError``) are dropped alone, logged and counted; the others of their chunk WERE stored. A chunk
refused or failing as a whole is split in halves until the record at fault is alone; that record's task is then
reported as failed (``Pending.unstored``). Unavailability (``ServiceError``, ``StorageUnavailableError``)
propagates: the sink keeps the records and retries with backoff.
"""

from __future__ import annotations

import collections
import logging
import threading
from dataclasses import dataclass, field

from crawler_client.crawl import CrawlResult
from crawler_client.gateways import StorageGateway
from crawler_client.wire_size import fitting, record_wire_bytes
from icecrawler.errors import InvalidArgumentError, InvalidRecordsError, ServiceError, StorageUnavailableError
from icecrawler.models import Post, Review

__all__ = ["ClientStats", "Pending", "RecordWriter"]

log = logging.getLogger(__name__)


@dataclass
class ClientStats:
    """Counters for the progress log and the tests (thread-safe)."""

    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    tasks_reported: int = 0
    items_stored: int = 0
    records_rejected: int = 0
    reports_lost: int = 0
    results_expired: int = 0
    leases_released: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **deltas: int) -> None:
        with self._lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)

    def count_outcome(self, outcome: str) -> None:
        with self._lock:
            self.outcomes[outcome] += 1

    def snapshot(self) -> dict[str, object]:
        with self._lock:
            return {
                "tasks_reported": self.tasks_reported,
                "items_stored": self.items_stored,
                "records_rejected": self.records_rejected,
                "reports_lost": self.reports_lost,
                "results_expired": self.results_expired,
                "leases_released": self.leases_released,
                "outcomes": dict(sorted(self.outcomes.items())),
            }


@dataclass
class Pending:
    """One crawl result in the sink, with what of it storage has acknowledged so far."""

    result: CrawlResult
    posts_done: bool = False
    reviews_done: bool = False
    #: Records of this result that could not be stored for a reason other than being invalid themselves: the
    #: task is then reported as failed (its cursor stays), so a later visit fetches them again.
    unstored: int = 0
    #: A newer crawl of the same task is in the sink (the task was leased again: this lease is dead), so this
    #: result's report is never sent; its records still are (``Sink._supersede``).
    superseded: bool = False
    #: The call ("report" or "release") that was sent for it but whose answer the stop abandoned (``CallCutError``),
    #: "" if none: the scheduler may have applied it, settling the lease, so naming the lease again may be refused,
    #: and that is no lost report.
    maybe_applied: str = ""

    @property
    def stored(self) -> bool:
        return self.posts_done and self.reviews_done

    @property
    def waiting_records(self) -> int:
        result = self.result
        return (0 if self.posts_done else len(result.posts)) + (0 if self.reviews_done else len(result.reviews))


class RecordWriter:
    """Writes the records of pending results in chunks (see the module docstring)."""

    def __init__(self, storage: StorageGateway, *, write_batch: int, write_bytes: int, stats: ClientStats) -> None:
        self.storage = storage
        self.write_batch = max(1, write_batch)
        #: Most estimated wire bytes in one write (0: no limit): over the server's limit it would refuse the call.
        self.write_bytes = write_bytes
        self.stats = stats

    def write_kind(self, items: list[Pending], kind: str) -> None:
        """Write the results' records in chunks of ``write_batch``; mark a result once all of its records of
        this kind are acknowledged. Raises on the first unavailable write (a partly written result is
        written again later: storage is idempotent)."""
        chunk: list[tuple[Post | Review, Pending]] = []
        owners: list[Pending] = []
        for item in items:
            chunk.extend((record, item) for record in (item.result.posts if kind == "posts" else item.result.reviews))
            owners.append(item)
            while chunk:
                cut = fitting(chunk, self.write_batch, self.write_bytes, _record_bytes)
                if cut == len(chunk) < self.write_batch:  # fits, with room for more: wait for the next result
                    break
                self._write(kind, chunk[:cut])
                chunk = chunk[cut:]
            if not chunk:
                self._mark(owners, kind)
                owners = []
        if chunk:
            self._write(kind, chunk)
        self._mark(owners, kind)

    @staticmethod
    def _mark(owners: list[Pending], kind: str) -> None:
        for owner in owners:
            if kind == "posts":
                owner.posts_done = True
            else:
                owner.reviews_done = True

    def _write(self, kind: str, batch: list[tuple[Post | Review, Pending]]) -> None:
        """Write one chunk. Records storage rejects are dropped alone (InvalidRecords names them); a chunk refused
        or failing as a whole is split in halves until the record at fault is alone, so one bad record never
        costs its neighbours. Unavailability propagates (the chunk is retried later)."""
        records = [record for record, _ in batch]
        try:
            if kind == "posts":
                acked = self.storage.write_posts([record for record in records if isinstance(record, Post)])
            else:
                acked = self.storage.write_reviews([record for record in records if isinstance(record, Review)])
        except InvalidRecordsError as exc:
            for index, reason in exc.rejected:
                record = records[index] if 0 <= index < len(records) else None
                log.error(
                    "storage REJECTED %s %s: %s (dropped alone, not retried)",
                    kind[:-1],
                    getattr(record, "id", f"#{index}"),
                    reason,
                )
            self.stats.add(items_stored=exc.stored, records_rejected=len(exc.rejected))
            return
        except (ServiceError, StorageUnavailableError):
            raise
        except Exception as exc:  # refused whole (InvalidArgument) or cannot be sent: find the record at fault
            if len(batch) > 1:
                half = len(batch) // 2
                self._write(kind, batch[:half])
                self._write(kind, batch[half:])
                return
            record, owner = batch[0]
            log.error(
                "task %s: %s %s could not be stored (%s: %s); the task is reported as failed, so it is crawled again",
                owner.result.task.id,
                kind[:-1],
                str(record.id)[:40],
                type(exc).__name__,
                exc,
                exc_info=not isinstance(exc, InvalidArgumentError),
            )
            owner.unstored += 1
            self.stats.add(records_rejected=1)
            return
        self.stats.add(items_stored=acked)


def _record_bytes(pair: tuple[Post | Review, Pending]) -> int:
    return record_wire_bytes(pair[0])
