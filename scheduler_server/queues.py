"""The scheduler's pending and in-flight queues, indexed in memory, with rollback (pure logic, no I/O).

The ``pending`` and ``inflight`` B-trees of the store stay the durable, authoritative queues (every change is
written there in the same transaction as the task record). This index holds the same entries so that a lease
or the reaper finds the next due task or the next expired lease without a B-tree scan. The core rebuilds it
from the tables when it starts, changes it inside its store transaction and rolls it back with it;
``check_consistency`` compares the two.

Pending tasks sit in one heap per source (time order, then id, as the pending table's keys sort): a lease walks
the sources' heads in time order and skips a whole source once its host or accounts refuse, which is what a
walk over one time-ordered queue did. Heap entries are removed lazily: an entry counts only while the task's
entry in ``due`` (or ``deadline``) still holds the same time. Most leases end (report) long before their
deadline, so their entries would pile up in the deadline heap for a whole lease period; a heap holding more
than twice as many entries as live tasks is rebuilt from ``due`` or ``deadline`` (amortised O(1) per change).
"""

from __future__ import annotations

import heapq

__all__ = ["TaskQueues"]

_PENDING, _INFLIGHT = 0, 1
#: Stale heap entries tolerated beyond twice the live ones before a heap is rebuilt.
_SLACK = 1024


class TaskQueues:
    """Pending tasks by due time (simulated ms) per source, in-flight tasks by lease deadline (wall ms)."""

    def __init__(self) -> None:
        #: Pending task id -> due time.
        self.due: dict[str, int] = {}
        #: In-flight task id -> lease deadline.
        self.deadline: dict[str, int] = {}
        self._sources: dict[str, str] = {}
        self._pending: dict[str, list[tuple[int, str]]] = {}
        #: Entries in all pending heaps, stale ones included.
        self._pending_entries = 0
        self._inflight: list[tuple[int, str]] = []
        #: (queue, task id, time before the change or -1) since ``begin``; None outside a change.
        self._undo: list[tuple[int, str, int]] | None = None
        #: Tasks removed since ``begin``: their sources are forgotten at the commit.
        self._removed: list[str] = []

    # --- changes ------------------------------------------------------------------------------------------

    def begin(self) -> None:
        """Start recording changes, so that ``rollback`` can undo them."""
        self._undo = []

    def commit(self) -> None:
        self._undo = None
        for task_id in self._removed:
            if task_id not in self.due and task_id not in self.deadline:
                self._sources.pop(task_id, None)
        self._removed.clear()

    def rollback(self) -> None:
        """Undo every change since ``begin`` (the store transaction they belonged to was rolled back)."""
        undo, self._undo = self._undo or [], None
        self._removed.clear()
        for queue, task_id, old in reversed(undo):
            table = self.due if queue == _PENDING else self.deadline
            if old < 0:
                table.pop(task_id, None)
            else:
                table[task_id] = old
                self._push(queue, task_id, old)  # its entry may have been popped; a duplicate is harmless

    def _remember(self, queue: int, task_id: str) -> None:
        if self._undo is not None:
            table = self.due if queue == _PENDING else self.deadline
            self._undo.append((queue, task_id, table.get(task_id, -1)))

    def _push(self, queue: int, task_id: str, ms: int) -> None:
        if queue == _PENDING:
            self._pending_entries += 1
            if self._pending_entries > 2 * len(self.due) + _SLACK:
                self._rebuild_pending()  # already holds this entry
                return
            heapq.heappush(self._pending.setdefault(self._sources[task_id], []), (ms, task_id))
        else:
            if len(self._inflight) > 2 * len(self.deadline) + _SLACK:
                self._inflight = [(deadline_ms, task) for task, deadline_ms in self.deadline.items()]
                heapq.heapify(self._inflight)
                return
            heapq.heappush(self._inflight, (ms, task_id))

    def _rebuild_pending(self) -> None:
        heaps: dict[str, list[tuple[int, str]]] = {source: [] for source in self._pending}
        for task_id, due_ms in self.due.items():
            heaps.setdefault(self._sources[task_id], []).append((due_ms, task_id))
        for heap in heaps.values():
            heapq.heapify(heap)
        self._pending = heaps
        self._pending_entries = len(self.due)

    def pending(self, task_id: str, source: str, due_ms: int) -> None:
        """The task is pending, due at ``due_ms`` (it leaves the in-flight queue if it was there)."""
        self._remember(_PENDING, task_id)
        self._remember(_INFLIGHT, task_id)
        self.deadline.pop(task_id, None)
        self._sources[task_id] = source
        self.due[task_id] = due_ms
        self._push(_PENDING, task_id, due_ms)

    def inflight(self, task_id: str, deadline_ms: int) -> None:
        """The task is leased until ``deadline_ms`` (it leaves the pending queue)."""
        self._remember(_PENDING, task_id)
        self._remember(_INFLIGHT, task_id)
        self.due.pop(task_id, None)
        self.deadline[task_id] = deadline_ms
        self._push(_INFLIGHT, task_id, deadline_ms)

    def remove(self, task_id: str) -> None:
        """The task is gone (removed by the operator): it leaves both queues. Its source is forgotten at the
        commit (a rollback may queue it again)."""
        self._removed.append(task_id)
        self._remember(_PENDING, task_id)
        self._remember(_INFLIGHT, task_id)
        self.due.pop(task_id, None)
        self.deadline.pop(task_id, None)

    # --- reading --------------------------------------------------------------------------------------------

    def sources(self) -> list[str]:
        return list(self._pending)

    def head(self, source: str) -> tuple[int, str] | None:
        """The source's earliest pending task: (due time, id), or None."""
        heap = self._pending.get(source)
        while heap:
            due_ms, task_id = heap[0]
            if self.due.get(task_id) == due_ms:
                return due_ms, task_id
            heapq.heappop(heap)  # left behind by a lease or a new due time
            self._pending_entries -= 1
        return None

    def first_due_ms(self) -> int | None:
        """The earliest due time of any pending task, or None when nothing is pending."""
        firsts = self.first_due_each().values()
        return min(firsts) if firsts else None

    def first_due_each(self) -> dict[str, int]:
        """Each source's earliest due time, for the sources with a pending task (one heap head each)."""
        heads = {source: self.head(source) for source in list(self._pending)}
        return {source: head[0] for source, head in heads.items() if head is not None}

    def expired(self, wall_ms: int, limit: int) -> list[str]:
        """In-flight tasks whose deadline is ``<= wall_ms``, earliest first, at most ``limit``: taken out of
        the deadline heap (the caller moves each to pending; a rollback puts them back)."""
        heap = self._inflight
        found: dict[str, None] = {}  # a rollback may have pushed an entry twice
        while heap and len(found) < limit:
            deadline_ms, task_id = heap[0]
            if self.deadline.get(task_id) == deadline_ms and task_id not in found:
                if deadline_ms > wall_ms:
                    break
                self._remember(_INFLIGHT, task_id)
                found[task_id] = None
            heapq.heappop(heap)
        return list(found)

    def heap_entries(self) -> int:
        """Entries in all heaps, stale ones included (memory use; bounded by about twice the tasks)."""
        return self._pending_entries + len(self._inflight)

    def due_before(self, ms: int, cap: int) -> int:
        """How many pending tasks are due before ``ms`` (counting stops at ``cap``)."""
        return self.due_before_each((ms,), cap)[0]

    def due_before_each(self, limits_ms: tuple[int, ...], cap: int) -> tuple[int, ...]:
        """``due_before`` for each limit, in one walk over the pending tasks (status asks for two under the lock)."""
        counts = [0] * len(limits_ms)
        for due_ms in self.due.values():
            for index, limit in enumerate(limits_ms):
                if due_ms < limit and counts[index] < cap:
                    counts[index] += 1
            if min(counts) >= cap:
                break
        return tuple(counts)
