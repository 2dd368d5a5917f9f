"""The scheduler's ``/metrics`` (``icecrawler_scheduler_*``): the core's observer plus gauges read at scrape time.

Counters and histograms are fed by ``SchedulerMetrics`` (a ``CoreObserver``: the core calls it after each
commit, under its lock) and by the servant's ``timed`` wrapper (call latency); queue sizes, the due backlog,
blocked hosts and accounts are read from the core when Prometheus scrapes. Labels: source, outcome, state,
operation; never a task, user or account id.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric

from icecrawler.metrics import (
    LATENCY_BUCKETS_S,
    Buckets,
    ScrapeCollector,
    Tally,
    counter_family,
    gauge,
    histogram_family,
)
from icecrawler.models import SOURCES, Outcome, Report, Task
from scheduler_server.codec import TaskRecord
from scheduler_server.core import SchedulerCore

__all__ = ["PAGE_CAP_GAPS_HOOK", "SchedulerMetrics", "TimedResult"]

#: Re-crawl period buckets (simulated seconds): one minute to one day.
PERIOD_BUCKETS_S = (60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0, 43200.0, 86400.0)
#: Calls per group commit.
GROUP_BUCKETS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)
#: A core method returning the number of open page-cap gaps (tasks whose last crawl stopped at the page cap before
#: reaching its cursor). Exported as ``icecrawler_scheduler_open_page_cap_gaps`` when the core has it.
PAGE_CAP_GAPS_HOOK = "open_page_cap_gaps"


class SchedulerMetrics:
    """The scheduler's metric set: observer of the core, latency timer of the servant, scrape-time collector."""

    def __init__(self, core: SchedulerCore) -> None:
        self.core = core
        p = "icecrawler_scheduler_"
        # Per-task counts: plain dicts, updated by the core under its own lock (one loop per call, no lock of
        # ours) and copied at scrape time (a dict copy is atomic under the GIL).
        self._leases: dict[str, int] = dict.fromkeys(SOURCES, 0)
        self._reports: dict[tuple[str, Outcome], int] = {
            (source, outcome): 0 for source in SOURCES for outcome in Outcome
        }
        self._fetches: dict[str, int] = dict.fromkeys(SOURCES, 0)
        self._new_items: dict[str, int] = dict.fromkeys(SOURCES, 0)
        self._periods: dict[str, list[float]] = {}
        self.expiries = Tally(p + "lease_expiries", "Leases that ran out unreported, by source.", ["source"])
        self.latency = Buckets(
            p + "request_duration_seconds",
            "Time from dispatch to answer of a state-changing call, by operation (lease, report, release, add).",
            ["operation"],
            LATENCY_BUCKETS_S,
        )
        self.groups = Buckets(
            p + "group_commit_calls", "Calls run in one group commit (one transaction).", [], GROUP_BUCKETS
        )
        self.fsyncs = Buckets(
            p + "fsync_duration_seconds", "Time of one durable sync of the Berkeley DB log.", [], LATENCY_BUCKETS_S
        )
        self.expiries.ensure((source,) for source in SOURCES)

    def register(self, registry: CollectorRegistry) -> None:
        registry.register(ScrapeCollector(self.collect))

    # --- CoreObserver --------------------------------------------------------------------------------------

    def leased(self, tasks: Sequence[Task]) -> None:
        leases = self._leases
        for task in tasks:
            leases[task.source] = leases.get(task.source, 0) + 1

    def reported(self, records: Sequence[TaskRecord], reports: Sequence[Report]) -> None:
        counts, fetches, new_items, periods = self._reports, self._fetches, self._new_items, self._periods
        ok, bounds = Outcome.Ok, PERIOD_BUCKETS_S
        for record, item in zip(records, reports, strict=True):
            source, outcome = record.source, item.outcome
            key = (source, outcome)
            counts[key] = counts.get(key, 0) + 1
            fetches[source] = fetches.get(source, 0) + item.fetches
            new_items[source] = new_items.get(source, 0) + item.new_items
            if outcome is ok:
                row = periods.get(source)
                if row is None:
                    row = periods[source] = [0.0] * (len(bounds) + 2)
                row[bisect.bisect_left(bounds, record.period_s)] += 1
                row[-1] += record.period_s

    def expired(self, records: Sequence[TaskRecord]) -> None:
        self.expiries.add_all((record.source,) for record in records)

    def group(self, calls: int) -> None:
        self.groups.observe((), calls)

    def synced(self, seconds: float) -> None:
        self.fsyncs.observe((), seconds)

    # --- the servant's latency ----------------------------------------------------------------------------------

    def timed(self, operation: str, result: Any) -> TimedResult:
        """Wrap an asynchronous dispatch's result so that the time until Ice reads it is observed."""
        return TimedResult(result, lambda seconds: self.latency.observe((operation,), seconds))

    # --- scrape time --------------------------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        p = "icecrawler_scheduler_"
        core = self.core
        values = core.gauges()
        yield gauge(
            p + "tasks",
            "Tasks by state (pending: waiting for their due time; inflight: leased).",
            {("pending",): values["pending"], ("inflight",): values["inflight"]},
            ["state"],
        )
        yield gauge(p + "completion_log_entries", "Entries in the completion log (done table).", values["done"])
        yield gauge(p + "due_backlog_tasks", "Pending tasks whose due time has passed (not leased yet).", values["due"])
        yield gauge(
            p + "due_backlog_age_seconds",
            "How long the most overdue pending task has waited past its due "
            "time (simulated seconds; 0 when none is due).",
            values["due_age_s"],
        )
        yield gauge(p + "blocked_hosts", "Hosts blocked after a ban or rate limit.", values["blocked_hosts"])
        yield gauge(
            p + "accounts",
            "Pooled accounts by state.",
            {(state,): n for state, n in values["accounts"].items()},
            ["state"],
        )
        gaps = getattr(core, PAGE_CAP_GAPS_HOOK, None)
        if callable(gaps):
            yield gauge(
                p + "open_page_cap_gaps",
                "Tasks whose last crawl stopped at the page cap before reaching "
                "its cursor (items may have been skipped).",
                float(gaps()),
            )
        yield counter_family(
            p + "leases",
            "Tasks leased, by source.",
            ["source"],
            {(source,): n for source, n in dict(self._leases).items()},
        )
        yield counter_family(
            p + "reports",
            "Crawl reports applied, by source and outcome.",
            ["source", "outcome"],
            {(source, outcome.value): n for (source, outcome), n in dict(self._reports).items()},
        )
        yield counter_family(
            p + "fetches",
            "HTTP requests the clients made for the reported crawls, by source.",
            ["source"],
            {(source,): n for source, n in dict(self._fetches).items()},
        )
        yield counter_family(
            p + "new_items",
            "New items the reported crawls found, by source.",
            ["source"],
            {(source,): n for source, n in dict(self._new_items).items()},
        )
        yield histogram_family(
            p + "recrawl_period_seconds",
            "Re-crawl period set by successful reports (simulated seconds), by source.",
            ["source"],
            PERIOD_BUCKETS_S,
            {(source,): list(row) for source, row in dict(self._periods).items()},
        )
        for metric in (self.expiries, self.latency, self.groups, self.fsyncs):
            yield metric.family()


class TimedResult:
    """A servant's asynchronous result (``rpc.Converted``) that reports how long it took until Ice read it."""

    __slots__ = ("_observe", "_result", "_started")

    def __init__(self, result: Any, observe: Callable[[float], None]) -> None:
        self._result = result
        self._observe = observe
        self._started = time.perf_counter()

    def add_done_callback(self, callback: Callable[[Any], object]) -> None:
        self._result.add_done_callback(lambda _: callback(self))

    def result(self, timeout: float | None = None) -> Any:
        try:
            return self._result.result(timeout)
        finally:
            self._observe(time.perf_counter() - self._started)
