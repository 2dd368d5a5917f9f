"""The scheduler core's cache of decoded task records (pure logic, no I/O).

Each task cycle reads its record twice: at the lease (to build the task) and at the report (to apply it). Read
from the ``tasks`` B-tree, that is a lookup and a decode each time, a visible share of a batched cycle's CPU
(``icecrawler bench scheduler`` measures the cycle). The
core keeps the records it last committed here instead, so that a task leased again soon after its report, or
reported while this process still holds its lease, reads no B-tree.

The rule that keeps it correct is the core's, not this class's: an entry always equals the committed record (with
the current lease, if any). The core takes an entry out *before* it changes the record, and puts records back only
after their transaction committed. A rolled-back change so leaves no entry behind, and the next call reads the
store. Evicting an entry is always safe for the same reason: the store holds the same record.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator

from scheduler_server.codec import TaskRecord

__all__ = ["RecordCache"]


class RecordCache:
    """Up to ``capacity`` records by task id; the least recently kept one goes first (0: keep nothing)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self.capacity = capacity
        #: Order is the eviction order: ``keep`` moves a record to the end. (An OrderedDict, since evicting from the
        #: front of a plain dict leaves holes that every later ``next(iter(...))`` walks over.)
        self._records: OrderedDict[str, TaskRecord] = OrderedDict()

    def take(self, task_id: str) -> TaskRecord | None:
        """The record, removed from the cache (the caller is about to change it), or None."""
        return self._records.pop(task_id, None)

    def peek(self, task_id: str) -> TaskRecord | None:
        """The record, left in the cache (the caller must not change it), or None."""
        return self._records.get(task_id)

    def keep(self, records: Iterable[TaskRecord]) -> None:
        """Remember these committed records, in order (a later one of the same id replaces an earlier one)."""
        if not self.capacity:
            return
        cache = self._records
        for record in records:
            cache[record.id] = record
            cache.move_to_end(record.id)
        for _ in range(len(cache) - self.capacity):
            cache.popitem(last=False)

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[TaskRecord]:
        return iter(list(self._records.values()))
