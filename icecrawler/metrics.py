"""Prometheus ``/metrics`` for every daemon: where it listens, and cheap counters that hot paths can afford.

Each role (scheduler, storage, client) reads ``metrics.<role>.address`` and ``metrics.<role>.port``
(``port = 0`` turns the endpoint off) and serves its own ``CollectorRegistry`` with ``prometheus_client``'s
HTTP server on a daemon thread. A port that is taken is not fatal: the next ports up to
``metrics.<role>.port_span`` are tried (so several clients, or scheduler shards, on one machine each get one),
and if all are taken the daemon logs an error and runs without metrics. Monitoring must never stop a crawl;
Prometheus shows the missing target as ``up == 0`` (the ``IcecrawlerTargetDown`` alert).

The scheduler handles thousands of leases and reports a second on one core, so its per-task counters are not
``prometheus_client`` objects (a label lookup and a lock per increment) but ``Tally`` and ``Buckets``: a dict
add under an uncontended lock, turned into metric families only when Prometheus scrapes. A path that observes
the same labels on every call keeps a ``BucketRow``, which only queues the value and counts in bulk. The other
roles use the same two classes, so every role's metrics are built one way. Gauges (queue sizes, spool depth, busy
workers) are read from the daemon's state at scrape time by a ``Collector``.

Naming follows the Prometheus rules: ``icecrawler_<role>_...``, base units (seconds, bytes), ``_total``
counters, ``_seconds`` histograms, and only low-cardinality labels (source, outcome, table, state, reason):
never a task id, a user id, an account or a cookie.
"""

from __future__ import annotations

import bisect
import logging
import shutil
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from icecrawler.errors import ConfigError
from icecrawler.settings import Settings

__all__ = [
    "FOLD_AT",
    "LATENCY_BUCKETS_S",
    "BucketRow",
    "Buckets",
    "MetricsConfig",
    "MetricsEndpoint",
    "ScrapeCollector",
    "Tally",
    "counter",
    "counter_family",
    "disk_space_families",
    "gauge",
    "histogram_family",
    "serve",
    "status_class",
]

log = logging.getLogger(__name__)

#: Bucket bounds of every latency histogram (seconds): 0.5 ms to 30 s.
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

Key = tuple[str, ...]


@dataclass(frozen=True)
class MetricsConfig:
    """``metrics.<role>.*``: where one daemon's ``/metrics`` listens (port 0 = off)."""

    role: str
    address: str
    port: int
    port_span: int

    @classmethod
    def from_settings(cls, settings: Settings, role: str) -> MetricsConfig:
        config = cls(
            role,
            settings.get_str(f"metrics.{role}.address"),
            settings.get_int(f"metrics.{role}.port"),
            settings.get_int(f"metrics.{role}.port_span"),
        )
        if not 0 <= config.port <= 65535:
            raise ConfigError(f"metrics.{role}.port must be 0 (off) or a TCP port, got {config.port}")
        if config.port_span < 1:
            raise ConfigError(f"metrics.{role}.port_span must be >= 1, got {config.port_span}")
        return config


@dataclass
class MetricsEndpoint:
    """A running ``/metrics`` server."""

    address: str
    port: int
    _server: Any
    _thread: threading.Thread

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.address in ("", "0.0.0.0") else self.address
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve(config: MetricsConfig, registry: CollectorRegistry, offset: int = 0) -> MetricsEndpoint | None:
    """Serve ``registry`` on the first free port of ``port + offset`` .. ``+ port_span - 1`` (``offset``: a
    scheduler shard's index). None when off, or when every port is taken (logged: the daemon runs on)."""
    if config.port == 0:
        return None
    # The standard process_* series (start time, CPU, resident memory, open files): a daemon that a supervisor keeps
    # restarting shows as a changing start time (IcecrawlerRestarting), one that leaks as a growing memory.
    ProcessCollector(registry=registry)
    first = config.port + offset
    for port in range(first, min(65536, first + config.port_span)):
        try:
            server, thread = start_http_server(port, config.address, registry=registry)
        except OSError:
            continue
        endpoint = MetricsEndpoint(config.address, port, server, thread)
        log.info("%s metrics at %s", config.role, endpoint.url)
        return endpoint
    log.warning(
        "metrics.%s: ports %d-%d on %s are all taken: this %s runs without /metrics",
        config.role,
        first,
        first + config.port_span - 1,
        config.address,
        config.role,
    )
    return None


def status_class(status: int) -> str:
    """An HTTP status as a low-cardinality label: ``2xx`` .. ``5xx``, or ``none`` when no answer came."""
    return f"{status // 100}xx" if 100 <= status <= 599 else "none"


class Tally:
    """A labelled counter for hot paths: ``add`` is a dict update under an uncontended lock; ``family`` builds
    the ``_total`` counter family when Prometheus scrapes."""

    def __init__(self, name: str, documentation: str, labels: Sequence[str]) -> None:
        if name.endswith("_total"):
            raise ValueError(f"{name}: give the name without _total (the family adds it)")
        self.name = name
        self.documentation = documentation
        self.labels = list(labels)
        self._values: dict[Key, float] = {}
        self._lock = threading.Lock()

    def add(self, key: Key, amount: float = 1.0) -> None:
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def add_all(self, keys: Iterable[Key]) -> None:
        """One increment per key (a key may repeat)."""
        values = self._values
        with self._lock:
            for key in keys:
                values[key] = values.get(key, 0.0) + 1.0

    def add_amounts(self, pairs: Iterable[tuple[Key, float]]) -> None:
        values = self._values
        with self._lock:
            for key, amount in pairs:
                values[key] = values.get(key, 0.0) + amount

    def value(self, key: Key) -> float:
        with self._lock:
            return self._values.get(key, 0.0)

    def ensure(self, keys: Iterable[Key]) -> None:
        """Export these label sets as 0 until they are counted (a rate over a counter that appears late misses
        its first increase)."""
        with self._lock:
            for key in keys:
                self._values.setdefault(key, 0.0)

    def family(self) -> CounterMetricFamily:
        with self._lock:
            values = dict(self._values)
        return counter_family(self.name, self.documentation, self.labels, values)


#: A kept histogram row counts its waiting values into its buckets once this many wait (and at every scrape).
FOLD_AT = 1024


class BucketRow:
    """One label set's row of a ``Buckets`` (``Buckets.row``), for a caller that observes the same labels on every
    call (a latency per operation, an fsync time): ``observe`` only appends the value to a deque, one C call that
    needs no lock; the values are counted into the buckets in bulk when a scrape reads the histogram, or when
    ``FOLD_AT`` of them wait, so that memory stays bounded when nobody scrapes."""

    __slots__ = ("_bounds", "_lock", "_row", "_waiting")

    def __init__(self, bounds: tuple[float, ...], lock: threading.Lock, row: list[float]) -> None:
        self._bounds = bounds
        self._lock = lock
        self._row = row
        self._waiting: deque[float] = deque()

    def observe(self, value: float) -> None:
        waiting = self._waiting
        waiting.append(value)
        if len(waiting) >= FOLD_AT:
            self.fold()

    @property
    def append(self) -> Callable[[float], None]:
        """``observe`` without its bound check: the deque's own ``append``, a C callable that runs no Python frame,
        for a hot path whose caller makes sure ``fold`` runs at least every ``FOLD_AT`` values."""
        return self._waiting.append

    @property
    def waiting(self) -> int:
        """Values observed and not yet counted (fewer than ``FOLD_AT``)."""
        return len(self._waiting)

    def fold(self) -> None:
        """Count the waiting values into the buckets. Only folds take values out (under the histogram's lock),
        so values appended meanwhile simply wait for the next fold."""
        waiting, row = self._waiting, self._row
        with self._lock:
            values = [waiting.popleft() for _ in range(len(waiting))]
            for index, n in Counter(map(bisect.bisect_left, repeat(self._bounds), values)).items():
                row[index] += n
            row[-1] += sum(values)


class Buckets:
    """A labelled histogram for hot paths: ``observe`` bisects into fixed bounds under a lock; ``family`` builds
    the cumulative ``_bucket``/``_sum``/``_count`` family at scrape time."""

    def __init__(self, name: str, documentation: str, labels: Sequence[str], bounds: Sequence[float]) -> None:
        self.name = name
        self.documentation = documentation
        self.labels = list(labels)
        self.bounds = tuple(sorted(bounds))
        #: key -> [count per bucket (the last one is +Inf)..., sum]
        self._values: dict[Key, list[float]] = {}
        self._lock = threading.Lock()
        self._rows: list[BucketRow] = []

    def observe(self, key: Key, value: float) -> None:
        index = bisect.bisect_left(self.bounds, value)
        with self._lock:
            row = self._values.get(key)
            if row is None:
                row = self._values[key] = [0.0] * (len(self.bounds) + 2)
            row[index] += 1
            row[-1] += value

    def row(self, key: Key) -> BucketRow:
        """The row of one label set (exported from now on, with zero counts until observed)."""
        with self._lock:
            row = self._values.get(key)
            if row is None:
                row = self._values[key] = [0.0] * (len(self.bounds) + 2)
            kept = BucketRow(self.bounds, self._lock, row)
            self._rows.append(kept)
        return kept

    def observe_all(self, pairs: Iterable[tuple[Key, float]]) -> None:
        bounds, width = self.bounds, len(self.bounds) + 2
        with self._lock:
            for key, value in pairs:
                row = self._values.get(key)
                if row is None:
                    row = self._values[key] = [0.0] * width
                row[bisect.bisect_left(bounds, value)] += 1
                row[-1] += value

    def family(self) -> HistogramMetricFamily:
        for kept in list(self._rows):
            kept.fold()
        with self._lock:
            rows = {key: list(row) for key, row in self._values.items()}
        return histogram_family(self.name, self.documentation, self.labels, self.bounds, rows)


def counter_family(
    name: str, documentation: str, labels: Sequence[str], values: dict[Key, float]
) -> CounterMetricFamily:
    """A ``_total`` counter family from counts by label values (``name`` without ``_total``)."""
    family = CounterMetricFamily(name, documentation, labels=list(labels))
    for key, value in sorted(values.items()):
        family.add_metric(list(key), value)
    return family


def histogram_family(
    name: str, documentation: str, labels: Sequence[str], bounds: Sequence[float], rows: dict[Key, list[float]]
) -> HistogramMetricFamily:
    """A histogram family from per-bucket counts by label values: each row holds one count per bound, one for
    +Inf, then the sum of the observed values (``Buckets``' layout)."""
    family = HistogramMetricFamily(name, documentation, labels=list(labels))
    names = [*(repr(float(bound)) for bound in bounds), "+Inf"]
    for key, row in sorted(rows.items()):
        cumulative, buckets = 0.0, []
        for bound, count in zip(names, row[:-1], strict=True):
            cumulative += count
            buckets.append((bound, cumulative))
        family.add_metric(list(key), buckets, row[-1])
    return family


def gauge(
    name: str, documentation: str, values: dict[Key, float] | float, labels: Sequence[str] = ()
) -> GaugeMetricFamily:
    """A gauge family read at scrape time: one value, or one per label set."""
    if not isinstance(values, dict):
        return GaugeMetricFamily(name, documentation, value=values)
    family = GaugeMetricFamily(name, documentation, labels=list(labels))
    for key, value in sorted(values.items()):
        family.add_metric(list(key), value)
    return family


def counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    """A counter family read at scrape time from a count the daemon keeps anyway (name without ``_total``)."""
    return CounterMetricFamily(name, documentation, value=value)


def disk_space_families(prefix: str, dirs: Mapping[str, Path]) -> list[Metric]:
    """Free and total bytes of the file system under each of a daemon's directories (``dir`` label: db, spool,
    store, backup). A full disk stops the scheduler's queue writes and the storage spool (each refuses the call
    and changes nothing), so an alert (IcecrawlerDiskFilling) should come a day before. "Free" is what an
    unprivileged process may still write. A directory that cannot be read is left out (its daemon's own errors
    say why)."""
    free: dict[Key, float] = {}
    size: dict[Key, float] = {}
    for name, path in dirs.items():
        try:
            usage = shutil.disk_usage(path)
        except OSError:
            continue
        free[name,], size[name,] = float(usage.free), float(usage.total)
    return [
        gauge(f"{prefix}_disk_free_bytes", "Bytes an unprivileged process may still write there.", free, ["dir"]),
        gauge(f"{prefix}_disk_size_bytes", "Size of the file system under the directory.", size, ["dir"]),
    ]


class ScrapeCollector(Collector):
    """Collects whatever ``produce`` returns, at every scrape. A failing ``produce`` is logged and the scrape
    answers with the rest of the registry (never an HTTP 500 that would hide every other metric)."""

    def __init__(self, produce: Callable[[], Iterable[Metric]]) -> None:
        self._produce = produce

    def collect(self) -> Iterator[Metric]:
        try:
            families = list(self._produce())
        except Exception:
            log.exception("collecting metrics failed")
            return
        yield from families
