"""RecordCache as pure logic, then the core's use of it: cached records always equal the committed ones, and a
task cycled again reads no record from the store."""

from __future__ import annotations

from typing import Any

import pytest

from icecrawler.errors import ConfigError, LeaseLostError
from icecrawler.models import Report, TaskKind
from scheduler_server.cache import RecordCache
from scheduler_server.codec import TaskRecord
from scheduler_server.core import SchedulerCore, check_consistency
from scheduler_server.store import MemoryQueueStore, QueueStore
from tests.scheduler.conftest import ManualClocks, make_settings


def record(task_id: str) -> TaskRecord:
    return TaskRecord(id=task_id, kind="reviews", source="jd", target=task_id.rpartition(":")[2])


def test_the_least_recently_kept_record_is_evicted_first() -> None:
    cache = RecordCache(2)
    a, b, c = record("reviews:jd:a"), record("reviews:jd:b"), record("reviews:jd:c")
    cache.keep([a, b])
    cache.keep([a])  # a is kept again: b is now the oldest
    cache.keep([c])
    assert len(cache) == 2
    assert cache.peek("reviews:jd:b") is None
    assert cache.peek("reviews:jd:a") is a and cache.peek("reviews:jd:c") is c


def test_take_removes_and_peek_does_not() -> None:
    cache = RecordCache(4)
    a = record("reviews:jd:a")
    cache.keep([a])
    assert cache.peek(a.id) is a and len(cache) == 1
    assert cache.take(a.id) is a and len(cache) == 0
    assert cache.take(a.id) is None


def test_a_later_record_of_the_same_task_replaces_the_earlier_one() -> None:
    cache = RecordCache(4)
    old, new = record("reviews:jd:a"), record("reviews:jd:a")
    cache.keep([old, new])
    assert cache.peek("reviews:jd:a") is new and len(cache) == 1


def test_capacity_zero_keeps_nothing_and_negative_is_refused() -> None:
    cache = RecordCache(0)
    cache.keep([record("reviews:jd:a")])
    assert len(cache) == 0
    with pytest.raises(ValueError, match="capacity"):
        RecordCache(-1)


def test_a_negative_record_cache_setting_is_a_config_error(clocks: ManualClocks) -> None:
    with pytest.raises(ConfigError, match=r"scheduler\.record_cache"):
        SchedulerCore.from_settings(make_settings(scheduler__record_cache=-1), MemoryQueueStore(), clocks)


class CountingStore:
    """A store whose transactions count the reads of task records (everything else passes through)."""

    def __init__(self, store: QueueStore) -> None:
        self.store = store
        self.task_reads = 0

    def transaction(self) -> Any:
        outer = self

        class Counting:
            def __init__(self, txn: Any) -> None:
                self.txn = txn

            def get(self, table: str, key: bytes) -> bytes | None:
                outer.task_reads += table == "tasks"
                return self.txn.get(table, key)

            def __getattr__(self, name: str) -> Any:
                return getattr(self.txn, name)

        class Context:
            def __enter__(self) -> Counting:
                self.inner = outer.store.transaction()
                return Counting(self.inner.__enter__())

            def __exit__(self, *exc: Any) -> Any:
                return self.inner.__exit__(*exc)

        return Context()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


@pytest.mark.parametrize(("capacity", "reads_per_cycle"), [(100, 0), (0, 2)])
def test_a_cycled_task_reads_its_record_from_the_cache(
    store: QueueStore, clocks: ManualClocks, capacity: int, reads_per_cycle: int
) -> None:
    counting = CountingStore(store)
    core = SchedulerCore.from_settings(
        make_settings(scheduler__record_cache=capacity, scheduler__min_period_s=1.0, scheduler__initial_period_s=1.0),
        counting,
        clocks,
    )
    core.add([f"jd:{n}" for n in range(5)], TaskKind.ProductReviews)
    counting.task_reads = 0  # the add itself looks each id up
    for _ in range(3):
        tasks = core.lease("w", 5)
        core.report([Report(task.id, task.lease_token, new_items=1) for task in tasks])
        clocks.advance(2)
    # With a cache, neither the lease nor the report reads a record; without one, each reads it once.
    assert counting.task_reads == 3 * 5 * reads_per_cycle
    assert check_consistency(store, queues=core.queues, records=core.records)[1] == []


def test_a_refused_report_leaves_the_cache_as_committed(store: QueueStore, clocks: ManualClocks) -> None:
    core = SchedulerCore.from_settings(make_settings(), store, clocks)
    core.add(["jd:1", "jd:2"], TaskKind.ProductReviews)
    first, second = core.lease("w", 2)
    # The first report is valid, the second is not: the whole batch changes nothing, in the store or the cache.
    with pytest.raises(LeaseLostError):
        core.report([Report(first.id, first.lease_token), Report(second.id, "0" * 16)])
    assert check_consistency(store, queues=core.queues, records=core.records)[1] == []
    core.report([Report(first.id, first.lease_token), Report(second.id, second.lease_token)])
    assert check_consistency(store, queues=core.queues, records=core.records)[1] == []


def test_check_consistency_sees_a_cached_record_that_differs(store: QueueStore, clocks: ManualClocks) -> None:
    core = SchedulerCore.from_settings(make_settings(), store, clocks)
    core.add(["jd:1"], TaskKind.ProductReviews)
    task = core.lease("w", 1)[0]
    cached = core.records.peek(task.id)
    assert cached is not None and cached.lease_token == task.lease_token
    cached.attempts += 1  # what a change outside a transaction would do
    problems = check_consistency(store, records=core.records)[1]
    assert problems == [f"the cached record of {task.id} is not the stored one"]
