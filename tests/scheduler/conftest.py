"""Fixtures for the scheduler tests: a manual clock, settings for fast runs, cores over both stores."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from icecrawler.settings import Settings
from scheduler_server.core import SchedulerCore
from scheduler_server.store import BdbQueueStore, MemoryQueueStore, QueueStore


class ManualClocks:
    """Simulated and wall time that only move when a test says so."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.sim = start
        self.wall_s = start

    def now(self) -> float:
        return self.sim

    def wall(self) -> float:
        return self.wall_s

    def wall_delay(self, sim_seconds: float) -> float:
        return sim_seconds

    def advance(self, seconds: float) -> None:
        self.sim += seconds
        self.wall_s += seconds


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
