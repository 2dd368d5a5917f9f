"""A crawler client's ``/metrics`` (``icecrawler_client_*``): the process's observer (``crawler_client.observer``)
plus the daemon's state read at scrape time. Labels: source, outcome, status_class (2xx..5xx, none), reason."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric

from crawler_client.daemon import ClientDaemon
from icecrawler.metrics import (
    LATENCY_BUCKETS_S,
    Buckets,
    ScrapeCollector,
    Tally,
    counter,
    counter_family,
    gauge,
    status_class,
)
from icecrawler.models import SOURCES, Outcome

if TYPE_CHECKING:
    from shhd.fingerprint import CacheUsage

__all__ = ["ClientMetrics"]

#: Bucket bounds of a whole crawl's time (seconds): the latency buckets, then on to ten minutes. A crawl reads up
#: to ``client.max_pages`` pages, each up to ``client.total_timeout_s``, so crawls of minutes (up to and past the
#: lease) are in its range, and with the latency buckets alone they all read as 30 s.
CRAWL_BUCKETS_S = (*LATENCY_BUCKETS_S, 60.0, 120.0, 300.0, 600.0)

#: Reasons of ``waited``.
WAIT_REASONS = ("no_work", "backoff", "fetch_retry")


class ClientMetrics:
    """The client metric set (a ``ClientObserver``). ``caches`` reads the fingerprint's memory caches
    (``shhd.fingerprint.cache_usage``; given by the command that runs the client, as the fingerprint itself is)."""

    def __init__(self, daemon: ClientDaemon, caches: Callable[[], Mapping[str, CacheUsage]] | None = None) -> None:
        self.daemon = daemon
        self.caches = caches
        p = "icecrawler_client_"
        self.crawls = Tally(
            p + "crawls", "Tasks crawled (each ends in one report), by source and outcome.", ["source", "outcome"]
        )
        self.fetches = Tally(
            p + "fetches",
            "HTTP requests (retries and logins included), by source and status class (none: no answer).",
            ["source", "status_class"],
        )
        self.bytes = Tally(p + "response_bytes", "Response body bytes read, by source.", ["source"])
        self.new_items = Tally(p + "new_items", "New items found by successful crawls, by source.", ["source"])
        self.items_read = Tally(
            p + "items_read",
            "Items the parser read off pages, new or already stored, by source (new_items over it: the share of "
            "what was read that was new).",
            ["source"],
        )
        self.pages_parsed = Tally(
            p + "pages_parsed",
            "Pages given to the parser, by source (every source shown from the start, with pages_read_nothing: the "
            "two start together, so their ratio is right from a client's first scrape).",
            ["source"],
        )
        self.pages_read_nothing = Tally(
            p + "pages_read_nothing",
            "Pages the parser read no item off (a profile or cursor page, an empty target, a page it refused), by "
            "source; over pages_parsed, the share of empty pages.",
            ["source"],
        )
        self.waits = Tally(
            p + "wait_seconds",
            "Seconds spent in deliberate waits, by reason (no_work: nothing "
            "due or held back by politeness; backoff: scheduler unreachable; fetch_retry).",
            ["reason"],
        )
        self.renewals = Tally(
            p + "session_renewals", "Sessions renewed (form logins, visitor cookies), by source.", ["source"]
        )
        self.cookies_refused = Tally(
            p + "cookies_refused",
            "Cookies a session's jar refused past its bounds (a site churning cookie names), by source.",
            ["source"],
        )
        self.clamped = Tally(
            p + "records_clamped",
            "Records sent with a count or score clamped into a 32-bit int (a value the wire cannot carry, most likely "
            "misread by the parser), by source.",
            ["source"],
        )
        self.fetch_latency = Buckets(
            p + "fetch_duration_seconds",
            "Time of one HTTP request, to the end of its body, by source.",
            ["source"],
            LATENCY_BUCKETS_S,
        )
        self.parse_latency = Buckets(
            p + "parse_duration_seconds", "Time to parse one page, by source.", ["source"], LATENCY_BUCKETS_S
        )
        self.crawl_latency = Buckets(
            p + "crawl_duration_seconds",
            "Time to crawl one task (all its pages), by source.",
            ["source"],
            CRAWL_BUCKETS_S,
        )
        sources = [(source,) for source in SOURCES]
        self.crawls.ensure((source, outcome.value) for source in SOURCES for outcome in Outcome)
        for tally in (
            self.bytes,
            self.new_items,
            self.items_read,
            self.pages_parsed,
            self.pages_read_nothing,
            self.renewals,
            self.cookies_refused,
            self.clamped,
        ):
            tally.ensure(sources)
        self.waits.ensure((reason,) for reason in WAIT_REASONS)

    def register(self, registry: CollectorRegistry) -> None:
        registry.register(ScrapeCollector(self.collect))

    # --- ClientObserver --------------------------------------------------------------------------------------

    def crawled(self, source: str, outcome: str, new_items: int, seconds: float) -> None:
        self.crawls.add((source, outcome))
        if new_items:
            self.new_items.add((source,), new_items)
        self.crawl_latency.observe((source,), seconds)

    def fetched(self, source: str, status: int, size: int, seconds: float) -> None:
        self.fetches.add((source, status_class(status)))
        if size:
            self.bytes.add((source,), size)
        self.fetch_latency.observe((source,), seconds)

    def parsed(self, source: str, seconds: float, items: int) -> None:
        self.parse_latency.observe((source,), seconds)
        self.pages_parsed.add((source,))
        if items:
            self.items_read.add((source,), items)
        else:
            self.pages_read_nothing.add((source,))

    def waited(self, reason: str, seconds: float) -> None:
        self.waits.add((reason,), seconds)

    def session_renewed(self, source: str) -> None:
        self.renewals.add((source,))

    def cookie_refused(self, source: str) -> None:
        self.cookies_refused.add((source,))

    def records_clamped(self, source: str) -> None:
        self.clamped.add((source,))

    # --- scrape time --------------------------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        p = "icecrawler_client_"
        daemon = self.daemon
        yield gauge(p + "workers", "Crawl threads of this client (client.workers).", daemon.config.workers)
        yield gauge(p + "busy_workers", "Crawl threads crawling a task now.", daemon.busy_workers())
        yield gauge(
            p + "buffered_records", "Records held in memory until storage takes them.", daemon.sink.buffered_records()
        )
        yield gauge(
            p + "pending_results", "Crawled tasks not reported yet (storing or reporting).", daemon.sink.pending_count()
        )
        snap = daemon.stats.snapshot()
        for name, documentation in (
            ("tasks_reported", "Tasks reported to the scheduler."),
            ("items_stored", "Records storage acknowledged (stored or spooled)."),
            (
                "records_rejected",
                "Records not stored: storage rejected them as invalid, this client dropped them before sending (a "
                "text or id the wire cannot carry, a record over the storage request limit), or a write of one alone "
                "failed (its task is crawled again).",
            ),
            (
                "reports_lost",
                "Reports the scheduler refused (lease lost), or not sent: a newer lease of the task came.",
            ),
            ("leases_released", "Leases given back unused (shutdown)."),
        ):
            yield counter(p + name, documentation, float(snap[name]))  # type: ignore[arg-type]
        if self.caches is not None:
            yield from self._cache_families(self.caches())
        for metric in (
            self.crawls,
            self.fetches,
            self.bytes,
            self.new_items,
            self.items_read,
            self.pages_parsed,
            self.pages_read_nothing,
            self.waits,
            self.renewals,
            self.cookies_refused,
            self.clamped,
            self.fetch_latency,
            self.parse_latency,
            self.crawl_latency,
        ):
            yield metric.family()

    @staticmethod
    def _cache_families(caches: Mapping[str, CacheUsage]) -> Iterator[Metric]:
        """The memory caches that grow with what this client has crawled: each fills over days and then stops
        (docs/BENCHMARKS.md, "soak"); a growing memory with every cache full is a leak."""
        p = "icecrawler_client_"
        yield gauge(
            p + "cache_entries",
            "Entries in each of the fingerprint's memory caches (fingerprint_texts, feature_words, token_hashes, "
            "word_log_probs).",
            {(name,): float(usage.entries) for name, usage in caches.items()},
            ["cache"],
        )
        yield gauge(
            p + "cache_capacity_entries",
            "The most entries each cache holds (the feature words start again from empty past it).",
            {(name,): float(usage.capacity) for name, usage in caches.items()},
            ["cache"],
        )
        lookups: dict[tuple[str, ...], float] = {}
        for name, usage in caches.items():
            if usage.hits is not None and usage.misses is not None:
                lookups[name, "hit"], lookups[name, "miss"] = float(usage.hits), float(usage.misses)
        yield counter_family(
            p + "cache_lookups", "Lookups of the caches that count them, by result.", ["cache", "result"], lookups
        )
