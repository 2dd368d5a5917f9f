"""Fixtures for the scheduler tests: a manual clock, settings for fast runs, cores over both stores."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from icecrawler.clock import Clock
from icecrawler.models import Outcome, Report, Task, TaskKind
from icecrawler.settings import Settings
from scheduler_server.core import SchedulerCore
from scheduler_server.store import BdbQueueStore, MemoryQueueStore, QueueStore


class ManualClocks(Clock):
    """The one clock type on a manual wall: simulated and wall time move together, only when a test says so."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.wall_s = start
        super().__init__(speed=1.0, origin=start, wall=lambda: self.wall_s)

    def advance(self, seconds: float) -> int:
        """Move the wall (and so simulated time) forward; leases expire and periods pass."""
        self.wall_s += seconds
        return self.now_ms()


def illegal_request(task: Task) -> Report:
    """The report of a crawl Weibo answered errno 100006 (请求非法, HTTP 403) on the lease ``task``: what it does
    depends on whether the lease was a visitor session or a logged-in account (``outcomes.REQUEST_REFUSALS``)."""
    return Report(
        task_id=task.id,
        lease_token=task.lease_token,
        outcome=Outcome.LoginRequired,
        error_class="illegal-request",
        http_status=403,
    )


def make_settings(**overrides: object) -> Settings:
    """Defaults with a fixed-period policy and short periods; ``overrides`` use ``scheduler__lease_s`` names."""
    base: dict[str, object] = {
        "scheduler__policy": "fixed",
        "scheduler__min_period_s": 10.0,
        "scheduler__initial_period_s": 60.0,
        "scheduler__max_period_s": 3600.0,
        "scheduler__lease_s": 30.0,
        "scheduler__batch_limit": 50,
    }
    return Settings().copy_with(**{**base, **overrides})


@pytest.fixture
def clocks() -> ManualClocks:
    return ManualClocks()


@pytest.fixture(params=["memory", pytest.param("bdb", marks=pytest.mark.bdb)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[QueueStore]:
    store: QueueStore = MemoryQueueStore() if request.param == "memory" else BdbQueueStore(tmp_path / "db")
    yield store
    store.close()


@pytest.fixture
def core(store: QueueStore, clocks: ManualClocks) -> SchedulerCore:
    return SchedulerCore.from_settings(make_settings(), store, clocks)


@contextmanager
def queued_together(core: SchedulerCore) -> Iterator[None]:
    """Calls made with the ``*_async`` methods inside the block are queued, then run as ONE group after it (while
    a first call, an add of a known id that changes nothing, holds the runner)."""
    with core.lock:
        opener = threading.Thread(target=core.add, args=(["weibo_pc:1"], TaskKind.WeiboUser))
        opener.start()
        deadline = time.monotonic() + 10
        while not core._runner._running:
            assert time.monotonic() < deadline, "the opener never started running"
            time.sleep(0.001)
        yield
    opener.join(10)
