"""The storage server's ``/metrics`` (``icecrawler_storage_*``): the service's observer plus spool and backend
gauges read at scrape time. Labels: table (weibo, review) and backend (embedded, hbase)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric

from icecrawler.metrics import LATENCY_BUCKETS_S, Buckets, ScrapeCollector, Tally, gauge
from storage_server import schema
from storage_server.service import StorageService

__all__ = ["StorageMetrics"]

TABLES = (schema.WEIBO, schema.REVIEW)


class StorageMetrics:
    """The storage metric set (a ``StorageObserver``)."""

    def __init__(self, service: StorageService) -> None:
        self.service = service
        backend = service.store.name
        self.backend = backend
        p = "icecrawler_storage_"
        self.written = Tally(
            p + "records_written",
            "Records that reached the backend (directly or replayed from the spool), by table and backend.",
            ["table", "backend"],
        )
        self.spooled = Tally(
            p + "records_spooled",
            "Records acknowledged into the spool because the backend was down, slow or the spool not empty, by table.",
            ["table"],
        )
        self.invalid = Tally(p + "invalid_records", "Records rejected by validation, by table.", ["table"])
        self.errors = Tally(p + "backend_errors", "Backend writes that failed or timed out, by backend.", ["backend"])
        self.outages = Tally(
            p + "backend_outages", "Times the backend went from up to failing, by backend.", ["backend"]
        )
        self.latency = Buckets(
            p + "write_duration_seconds",
            "Time of one write call (validation, backend write or spooling), by table.",
            ["table"],
            LATENCY_BUCKETS_S,
        )
        self.written.ensure((table, backend) for table in TABLES)
        self.spooled.ensure((table,) for table in TABLES)
        self.invalid.ensure((table,) for table in TABLES)
        self.errors.ensure([(backend,)])
        self.outages.ensure([(backend,)])

    def register(self, registry: CollectorRegistry) -> None:
        registry.register(ScrapeCollector(self.collect))

    # --- StorageObserver ------------------------------------------------------------------------------------

    def wrote(self, table: str, stored: int, spooled: int, rejected: int, seconds: float) -> None:
        if stored:
            self.written.add((table, self.backend), stored)
        if spooled:
            self.spooled.add((table,), spooled)
        if rejected:
            self.invalid.add((table,), rejected)
        self.latency.observe((table,), seconds)

    def replayed(self, table: str, records: int) -> None:
        self.written.add((table, self.backend), records)

    def backend_failed(self, outage_began: bool) -> None:
        self.errors.add((self.backend,))
        if outage_began:
            self.outages.add((self.backend,))

    # --- scrape time --------------------------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        p = "icecrawler_storage_"
        service = self.service
        yield gauge(p + "spool_records", "Records waiting in the spool for the backend.", service.spool.depth())
        yield gauge(
            p + "spool_age_seconds", "Seconds since the spool was last empty (0 while empty).", service.spool_age_s()
        )
        yield gauge(
            p + "backend_up",
            "1 while backend writes succeed; 0 from a failed write until the spool drained.",
            {(self.backend,): 1.0 if service.backend_up() else 0.0},
            ["backend"],
        )
        for metric in (self.written, self.spooled, self.invalid, self.errors, self.outages, self.latency):
            yield metric.family()
