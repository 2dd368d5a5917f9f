"""What the scheduler's metrics cost the core itself, without Ice or other processes: CPU time per task cycle
(lease + report of batches of 100, in-process core over a durable Berkeley DB environment) with the metrics
observer off and on, in alternating one-second blocks, plus one scrape per "on" block. CPU time of one thread is
far less disturbed by other tenants of a shared machine than throughput through several processes."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from icecrawler.errors import NoWorkError
from icecrawler.models import Outcome, Report, TaskKind
from icecrawler.settings import Settings
from scheduler_server.core import SchedulerCore
from scheduler_server.metrics import SchedulerMetrics
from scheduler_server.store import BdbQueueStore

__all__ = ["core_cycle_cost"]


def core_cycle_cost(tmp: Path, tasks: int = 5000, batch: int = 100, blocks: int = 8,
                    block_s: float = 1.0) -> dict[str, float]:
    """Median CPU microseconds per task cycle, observer off and on, and the cost in percent."""
    settings = Settings().copy_with(scheduler__policy="fixed", scheduler__min_period_s=0.001,
                                    scheduler__initial_period_s=0.001, scheduler__max_period_s=1.0,
                                    scheduler__lease_s=60.0)
    store = BdbQueueStore(tmp / "core-cost", durable=True)
    core = SchedulerCore.from_settings(settings, store)
    metrics = SchedulerMetrics(core)
    registry = CollectorRegistry()
    metrics.register(registry)
    try:
        for first in range(0, tasks, 1000):
            core.add([f"jd:{n}" for n in range(first, min(tasks, first + 1000))], TaskKind.ProductReviews)
        cost: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(blocks):
            for on in (False, True):
                core.observer = metrics if on else None
                cycles = 0
                cpu = time.thread_time()
                end = time.perf_counter() + block_s
                while time.perf_counter() < end:
                    try:
                        leased = core.lease("bench", batch)
                    except NoWorkError:
                        continue
                    core.report([Report(task_id=task.id, lease_token=task.lease_token, outcome=Outcome.Ok,
                                        new_items=1, fetches=1, http_status=200) for task in leased])
                    cycles += len(leased)
                if on:
                    generate_latest(registry)
                cost[on].append(1e6 * (time.thread_time() - cpu) / max(1, cycles))
    finally:
        core.close()
    off_us, on_us = statistics.median(cost[False]), statistics.median(cost[True])
    return {"core_metrics_off_cpu_us_per_cycle": round(off_us, 2), "core_metrics_on_cpu_us_per_cycle": round(on_us, 2),
            "core_metrics_cost_cpu_pct": round(100 * (on_us - off_us) / off_us, 2), "core_metrics_blocks": blocks}
