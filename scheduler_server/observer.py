"""What the scheduler core tells an observer (the daemon's metrics) as it works, without knowing about Prometheus:
the core stays free of metrics code, and its tests run without an observer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from icecrawler.models import Report, Task
from scheduler_server.codec import TaskRecord

__all__ = ["MAINTENANCE_STEPS", "CoreObserver"]

#: The steps of each pass of the scheduler's maintenance thread (``server.Maintenance``), the values of the
#: ``step`` label of ``maintenance_failures_total``.
MAINTENANCE_STEPS = ("clock", "reap", "prune", "budget", "checkpoint")


class CoreObserver(Protocol):
    """Called by ``SchedulerCore`` after each change committed (under the core's lock, so calls never overlap).
    Implementations must be cheap: they run on the path of every lease and report."""

    def leased(self, tasks: Sequence[Task]) -> None:
        """Tasks handed out by one getUser(s) call."""

    def reported(self, records: Sequence[TaskRecord], reports: Sequence[Report]) -> None:
        """Reports applied (``records[i]`` is the task of ``reports[i]``, with its new period)."""

    def expired(self, records: Sequence[TaskRecord]) -> None:
        """Leases that ran out and went back to pending."""

    def group(self, calls: int) -> None:
        """One group commit ran ``calls`` calls in one transaction."""

    def synced(self, seconds: float) -> None:
        """One ``store.sync()`` (the fsync of a group's durable commit) took ``seconds``."""

    def clock_jumped(self, seconds: float) -> None:
        """The wall clock jumped ``seconds`` (> 0 forward, < 0 back) under the running daemon. Called by the
        maintenance thread, not under the core's lock: implementations must be thread-safe."""

    def maintenance_failed(self, step: str) -> None:
        """A step of the maintenance thread (one of ``MAINTENANCE_STEPS``) failed with a bug; the others ran on.
        Called by the maintenance thread, not under the core's lock: implementations must be thread-safe."""
