"""What the scheduler's metrics cost the core itself, without Ice or other processes: CPU time per task cycle
(lease + report of batches of 100, in-process core over a durable Berkeley DB environment) with the metrics
observer off and on, in alternating short blocks (ABBA), plus one scrape per second of "on" blocks. CPU time of
one thread is far less disturbed by other tenants of a shared machine than throughput through several processes;
the cost is the median over the pairs of blocks of the on/off ratio."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from icecrawler.errors import NoWorkError
from icecrawler.models import Outcome, Report, Task, TaskKind
from icecrawler.settings import Settings
from scheduler_server.codec import TaskRecord
from scheduler_server.core import SchedulerCore
from scheduler_server.metrics import SchedulerMetrics
from scheduler_server.store import BdbQueueStore

__all__ = ["core_cycle_cost"]


class _Recorder:
    """An observer that keeps the arguments of the last lease and report (to time the metrics on real data)."""

    def __init__(self) -> None:
        self.tasks: Sequence[Task] = ()
        self.records: Sequence[TaskRecord] = ()
        self.reports: Sequence[Report] = ()

    def leased(self, tasks: Sequence[Task]) -> None:
        self.tasks = tasks

    def reported(self, records: Sequence[TaskRecord], reports: Sequence[Report]) -> None:
        self.records, self.reports = records, reports

    def expired(self, records: Sequence[TaskRecord]) -> None:
        pass

    def group(self, calls: int) -> None:
        pass

    def synced(self, seconds: float) -> None:
        pass

    def clock_jumped(self, seconds: float) -> None:
        pass

    def maintenance_failed(self, step: str) -> None:
        pass


def _cycle(core: SchedulerCore, batch: int) -> int:
    """Lease up to ``batch`` due tasks and report them all Ok; how many."""
    try:
        leased = core.lease("bench", batch)
    except NoWorkError:
        return 0
    core.report(
        [
            Report(
                task_id=task.id,
                lease_token=task.lease_token,
                outcome=Outcome.Ok,
                new_items=1,
                fetches=1,
                http_status=200,
            )
            for task in leased
        ]
    )
    return len(leased)


def core_cycle_cost(
    tmp: Path, tasks: int = 5000, batch: int = 100, blocks: int = 24, block_s: float = 0.4
) -> dict[str, float]:
    """Median CPU microseconds per task cycle, observer off and on, and the cost in percent (median of the
    pairs' ratios); and the CPU the observer's per-task work (``leased`` + ``reported``) takes alone, timed on a
    real batch."""
    settings = Settings().copy_with(
        scheduler__policy="fixed",
        scheduler__min_period_s=0.001,
        scheduler__initial_period_s=0.001,
        scheduler__max_period_s=1.0,
        scheduler__lease_s=60.0,
    )
    store = BdbQueueStore(tmp / "core-cost", durable=True)
    core = SchedulerCore.from_settings(settings, store)
    metrics = SchedulerMetrics(core)
    registry = CollectorRegistry()
    metrics.register(registry)
    try:
        for first in range(0, tasks, 1000):
            core.add([f"jd:{n}" for n in range(first, min(tasks, first + 1000))], TaskKind.ProductReviews)
        cost: dict[bool, list[float]] = {False: [], True: []}
        on_s = 0.0  # "on" time so far: one scrape per second of it, as the daemon A/B does
        for block in range(blocks):
            for on in (False, True) if block % 2 == 0 else (True, False):  # ABBA
                core.observer = metrics if on else None
                cycles = 0
                cpu = time.thread_time()
                end = time.perf_counter() + block_s
                while time.perf_counter() < end:
                    cycles += _cycle(core, batch)
                if on:
                    scrapes = int(on_s + block_s) - int(on_s)
                    on_s += block_s
                    for _ in range(scrapes):
                        generate_latest(registry)
                cost[on].append(1e6 * (time.thread_time() - cpu) / max(1, cycles))
        recorder = _Recorder()
        core.observer = recorder
        while not recorder.reports:
            _cycle(core, batch)
    finally:
        core.close()
    repeat = 200
    cpu = time.thread_time()
    for _ in range(repeat):
        metrics.leased(recorder.tasks)
        metrics.reported(recorder.records, recorder.reports)
    observer_us = 1e6 * (time.thread_time() - cpu) / (repeat * len(recorder.reports))
    off_us, on_us = statistics.median(cost[False]), statistics.median(cost[True])
    ratio = statistics.median(on / off for off, on in zip(cost[False], cost[True], strict=True))
    return {
        "core_metrics_off_cpu_us_per_cycle": round(off_us, 2),
        "core_metrics_on_cpu_us_per_cycle": round(on_us, 2),
        "core_metrics_cost_cpu_pct": round(100 * (ratio - 1), 2),
        "core_metrics_blocks": blocks,
        "core_metrics_observer_cpu_us_per_cycle": round(observer_us, 3),
        "core_metrics_observer_share_pct": round(100 * observer_us / off_us, 2),
    }
