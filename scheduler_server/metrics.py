"""The scheduler's ``/metrics`` (``icecrawler_scheduler_*``): the core's observer plus gauges read at scrape time.

Counters and histograms are fed by ``SchedulerMetrics`` (a ``CoreObserver``: the core calls it after each
commit, under its lock) and by the servant's ``timed`` wrapper (call latency); queue sizes, the due backlog,
blocked hosts and accounts are read from the core when Prometheus scrapes. Labels: source, outcome, state,
operation; never a task, user or account id.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from itertools import repeat
from operator import attrgetter
from time import perf_counter
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric

from icecrawler.metrics import (
    FOLD_AT,
    LATENCY_BUCKETS_S,
    BucketRow,
    Buckets,
    ScrapeCollector,
    Tally,
    counter_family,
    gauge,
    histogram_family,
)
from icecrawler.models import SOURCES, Outcome, Report, Task
from icecrawler.rpc import Converted, FutureLike
from scheduler_server.codec import TaskRecord
from scheduler_server.core import SchedulerCore
from scheduler_server.observer import MAINTENANCE_STEPS

__all__ = ["SchedulerMetrics", "TimedResult"]

#: Re-crawl period buckets (simulated seconds): one minute to 90 days, each at most about twice the one before.
#: Periods of days are common on a long run (``scheduler.max_period_s`` raised for quiet targets, the rate policy's
#: longest period stretched by a small ``scheduler.fetch_budget_per_s``); with a last bound of one day they all read
#: as one day.
PERIOD_BUCKETS_S = (
    *(60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0, 43200.0, 86400.0),
    *(172800.0, 345600.0, 604800.0, 1209600.0, 2592000.0, 5184000.0, 7776000.0),
)
#: The state-changing calls whose latency is observed (``make_servant``'s ``timed`` operations).
OPERATIONS = ("lease", "report", "release", "add", "remove", "hold")
#: Up to this many tasks, the observer counts a batch one task at a time (cheaper than its batch helpers).
SMALL_BATCH = 4
#: Calls per group commit.
GROUP_BUCKETS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)


_SOURCE = attrgetter("source")
_OUTCOME = attrgetter("outcome")
_FETCHES = attrgetter("fetches")
_NEW_ITEMS = attrgetter("new_items")
_PERIOD = attrgetter("period_s")


def _tally[T: Hashable](values: list[T]) -> Iterable[tuple[T, int]]:
    """(value, how many times) for each distinct value; a list of one repeated value (the usual batch) is
    counted without building a ``Counter``."""
    if not values:
        return ()
    first = values[0]
    n = values.count(first)
    return ((first, n),) if n == len(values) else Counter(values).items()


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
        self.clock_jumps = Tally(
            p + "clock_jumps",
            "Jumps of the wall clock under the running scheduler (forward or back), which move every lease, hold and "
            "due time at once.",
            ["direction"],
        )
        self.clock_jumps.ensure([("forward",), ("back",)])
        self.maintenance_failures = Tally(
            p + "maintenance_failures",
            "Failures of a step of the maintenance thread (reap, prune, budget, checkpoint, clock), each a bug: the "
            "other steps run on, and the log gives the traceback once a minute.",
            ["step"],
        )
        self.maintenance_failures.ensure((step,) for step in MAINTENANCE_STEPS)
        self.expiries.ensure((source,) for source in SOURCES)
        # Each call's timer and each group's two observations go straight to their row: no label lookup per call.
        self._latency_rows = {operation: self.latency.row((operation,)) for operation in OPERATIONS}
        self._group_row = self.groups.row(())
        self._fsync_row = self.fsyncs.row(())
        #: Called right after each fsync returns: a C callable (no Python frame on that path); ``group`` folds it.
        self.synced: Callable[[float], None] = self._fsync_row.append
        self._group_append = self._group_row.append
        self._groups_unfolded = 0

    def register(self, registry: CollectorRegistry) -> None:
        registry.register(ScrapeCollector(self.collect))

    # --- CoreObserver --------------------------------------------------------------------------------------

    # Both run on every lease and report, so they count a batch with C-level helpers (``map``, ``list.count``,
    # ``sum``, ``Counter``) rather than a Python loop per task: a batch is almost always of one source and
    # mostly of one outcome, and then costs a handful of dict updates however large it is.

    def leased(self, tasks: Sequence[Task]) -> None:
        leases = self._leases
        if len(tasks) <= SMALL_BATCH:
            for task in tasks:
                leases[task.source] = leases.get(task.source, 0) + 1
            return
        for source, n in _tally(list(map(_SOURCE, tasks))):
            leases[source] = leases.get(source, 0) + n

    def reported(self, records: Sequence[TaskRecord], reports: Sequence[Report]) -> None:
        if len(records) != len(reports):
            raise ValueError(f"{len(records)} records for {len(reports)} reports")
        if len(reports) <= SMALL_BATCH:
            for record, item in zip(records, reports, strict=True):
                self._reported_one(record, item)
            return
        sources = list(map(_SOURCE, records))
        if not sources or sources.count(sources[0]) == len(sources):
            self._reported_of(sources[0] if sources else "", records, reports)
            return
        parts: dict[str, tuple[list[TaskRecord], list[Report]]] = {}
        for source, record, item in zip(sources, records, reports, strict=True):
            part = parts.get(source)
            if part is None:
                part = parts[source] = ([], [])
            part[0].append(record)
            part[1].append(item)
        for source, (part_records, part_reports) in parts.items():
            self._reported_of(source, part_records, part_reports)

    def _reported_one(self, record: TaskRecord, item: Report) -> None:
        source, outcome = record.source, item.outcome
        key = (source, outcome)
        self._reports[key] = self._reports.get(key, 0) + 1
        self._fetches[source] = self._fetches.get(source, 0) + item.fetches
        self._new_items[source] = self._new_items.get(source, 0) + item.new_items
        if outcome is Outcome.Ok:
            row = self._periods.get(source)
            if row is None:
                row = self._periods[source] = [0.0] * (len(PERIOD_BUCKETS_S) + 2)
            row[bisect.bisect_left(PERIOD_BUCKETS_S, record.period_s)] += 1
            row[-1] += record.period_s

    def _reported_of(self, source: str, records: Sequence[TaskRecord], reports: Sequence[Report]) -> None:
        """``reported`` for a batch whose tasks are all of ``source``."""
        if not reports:
            return
        counts, ok = self._reports, Outcome.Ok
        outcomes = list(map(_OUTCOME, reports))
        for outcome, n in _tally(outcomes):
            key = (source, outcome)
            counts[key] = counts.get(key, 0) + n
        self._fetches[source] = self._fetches.get(source, 0) + sum(map(_FETCHES, reports))
        self._new_items[source] = self._new_items.get(source, 0) + sum(map(_NEW_ITEMS, reports))
        if outcomes.count(ok) != len(outcomes):
            records = [record for record, outcome in zip(records, outcomes, strict=True) if outcome is ok]
            if not records:
                return
        periods = list(map(_PERIOD, records))
        row = self._periods.get(source)
        if row is None:
            row = self._periods[source] = [0.0] * (len(PERIOD_BUCKETS_S) + 2)
        for index, n in _tally(list(map(bisect.bisect_left, repeat(PERIOD_BUCKETS_S), periods))):
            row[index] += n
        row[-1] += sum(periods)

    def expired(self, records: Sequence[TaskRecord]) -> None:
        self.expiries.add_all((record.source,) for record in records)

    def clock_jumped(self, seconds: float) -> None:
        self.clock_jumps.add(("forward" if seconds > 0 else "back",))

    def maintenance_failed(self, step: str) -> None:
        self.maintenance_failures.add((step,))

    @property
    def queued(self) -> int:
        """Values the hot paths observed that wait to be counted (each row holds fewer than ``FOLD_AT``)."""
        return sum(row.waiting for row in (self._group_row, self._fsync_row, *self._latency_rows.values()))

    def group(self, calls: int) -> None:
        self._group_append(calls)
        self._groups_unfolded += 1  # under the core's lock: calls never overlap
        if self._groups_unfolded >= FOLD_AT:  # at most one sync per group, so this bounds what ``synced`` queues too
            self._groups_unfolded = 0
            self._group_row.fold()
            self._fsync_row.fold()

    # --- the servant's latency ----------------------------------------------------------------------------------

    def timed(self, operation: str, future: FutureLike[Any], convert: Callable[[Any], Any]) -> TimedResult:
        """An asynchronous dispatch's result (``rpc.then(future, convert)``) that also observes the time until Ice
        reads it."""
        return TimedResult(future, convert, self._latency_rows[operation])

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
        yield gauge(
            p + "source_due_age_seconds",
            "How long each source's most overdue pending task has waited past its due time (simulated seconds; 0 when "
            "none of its tasks is due): above 0 the source has tasks waiting to be leased.",
            {(source,): seconds for source, seconds in values["source_due_age_s"].items()},
            ["source"],
        )
        yield gauge(p + "blocked_hosts", "Hosts blocked after a ban or rate limit.", values["blocked_hosts"])
        yield gauge(p + "held_hosts", "Hosts the operator holds (icecrawler hold).", values["held_hosts"])
        yield gauge(
            p + "accounts",
            "Pooled accounts by state.",
            {(state,): n for state, n in values["accounts"].items()},
            ["state"],
        )
        yield gauge(
            p + "source_blocked_seconds",
            "How long the host each source is crawled at stays blocked by the site (a ban or rate limit: its "
            "Retry-After, else scheduler.host_block_s; 0 when it is not): nothing of the source is leased meanwhile. "
            "An operator's hold is not counted (held_hosts).",
            {(source,): seconds for source, seconds in values["source_blocked_s"].items()},
            ["source"],
        )
        yield gauge(
            p + "source_accounts",
            "Pooled accounts that can crawl each source crawled with accounts, by state (ok, frozen): none ok means "
            "the source is not crawled at all (IcecrawlerNoUsableAccount).",
            {(source, state): n for source, states in values["source_accounts"].items() for state, n in states.items()},
            ["source", "state"],
        )
        yield gauge(
            p + "open_page_cap_gaps",
            "Tasks whose last crawl stopped at the page cap before reaching its "
            "cursor: their next visits close the gap first (docs/ARCHITECTURE.md, Guarantees).",
            values["open_gaps"],
        )
        yield gauge(
            p + "quarantined_tasks",
            "Task records that did not decode, moved unchanged to the quarantine table and out of the queues: their "
            'targets are not crawled until seeded again (docs/DEPLOY.md, "Quarantined task records").',
            values["quarantined"],
        )
        rate = values["rate"]
        if rate:
            if rate["budget_scale"] is not None:
                yield gauge(
                    p + "rate_budget_constant",
                    "The rate policy's square-root constant under scheduler.fetch_budget_per_s: a task with rate r "
                    "gets the period constant / sqrt(r) (seconds).",
                    rate["budget_scale"],
                )
            yield gauge(
                p + "rate_longest_period_seconds",
                "The rate policy's longest period: scheduler.max_period_s, or under a budget a stretch (1.75) "
                "x tasks / budget when that is longer.",
                rate["longest_period_s"],
            )
            yield gauge(
                p + "rate_daily_anchor",
                "1 while the rate policy moves once-a-day fetches to each task's daily crossing; 0 while it does "
                "not (the tasks keep one daily clock under a budget).",
                1.0 if rate["daily_anchor"] else 0.0,
            )
        yield counter_family(
            p + "visitor_sessions_minted",
            "Visitor sessions minted through a site's passport, by source.",
            ["source"],
            {(source,): n for source, n in values["visitor_mints"].items()},
        )
        yield counter_family(
            p + "visitor_session_mint_failures",
            "Visitor sessions a site's passport failed to mint, by source: while none is minted the source's tasks "
            "wait (IcecrawlerVisitorSessionsFailing).",
            ["source"],
            {(source,): n for source, n in values["visitor_mint_failures"].items()},
        )
        yield counter_family(
            p + "visitor_session_renewals",
            "Visitor sessions renewed after the site ended them (HTTP 432, a visitor redirect), by source.",
            ["source"],
            {(source,): n for source, n in values["visitor_renewals"].items()},
        )
        yield counter_family(
            p + "login_refreshes",
            "Logins the sites refreshed (Set-Cookie on their answers), by result: taken (leased from then on) or "
            "refused (unreadable, of another login, or naming cookies the accounts file does not). Refused ones "
            "leave the pasted login to expire.",
            ["result"],
            {(result,): n for result, n in values["login_refreshes"].items()},
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
        for metric in (
            self.expiries,
            self.clock_jumps,
            self.maintenance_failures,
            self.latency,
            self.groups,
            self.fsyncs,
        ):
            yield metric.family()


class TimedResult(Converted[Any, Any]):
    """``rpc.then``'s view of a future, plus the time from the dispatch until Ice read the result: one object per
    call, as without metrics, and two clock reads."""

    __slots__ = ("_row", "_started")

    def __init__(self, source: FutureLike[Any], convert: Callable[[Any], Any], row: BucketRow) -> None:
        self._source = source
        self._convert = convert
        self._row = row
        self._started = perf_counter()

    def result(self, timeout: float | None = None) -> Any:
        try:
            return Converted.result(self, timeout)
        finally:
            self._row.observe(perf_counter() - self._started)
