"""A task's moves between the two queues, inside a store transaction: added (new -> pending), leased (pending ->
in flight), lease ended (in flight -> pending at a due time), lease expired, removed (out of either queue). Each
move changes the queue tables and the in-memory queues (``queues``) together; the core's transaction rolls both
back on failure.

The record cache (``cache``) is kept consistent by taking a record out before it changes (``take``,
``take_leased``); the core puts records back only after their call committed. A stored record that does not decode
is moved to the quarantine table where it is met (``quarantine``): the move skips its task."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from icecrawler.errors import LeaseLostError, ServiceError, quote
from icecrawler.models import Account, TaskKind
from scheduler_server.cache import RecordCache
from scheduler_server.checks import invalid_field
from scheduler_server.codec import TaskRecord, encode_lease, hold_lease, time_key
from scheduler_server.config import SchedulerConfig
from scheduler_server.outcomes import backoff_s
from scheduler_server.quarantine import QUARANTINE, Quarantine, RecordQuarantined, UndecodableRecord, decode_record
from scheduler_server.queues import TaskQueues
from scheduler_server.startup import removed_lease_key
from scheduler_server.store import Txn

__all__ = ["TaskMoves"]

#: Ended lease tokens a record remembers, so that a late report is told StaleLease rather than UnknownLease.
_TOKEN_HISTORY = 3


class TaskMoves:
    """The moves of tasks in the tables and in-memory queues; see the module docstring."""

    def __init__(
        self, config: SchedulerConfig, queues: TaskQueues, records: RecordCache, quarantine: Quarantine
    ) -> None:
        self.config = config
        self.queues = queues
        self.records = records
        self.quarantine = quarantine

    def add_new(
        self,
        txn: Txn,
        task_ids: Sequence[tuple[str, str, str]],
        kind: TaskKind,
        now_ms: int,
        initial_state: Callable[[], dict[str, Any]],
    ) -> list[TaskRecord]:
        """Add the ``(task id, source, target)`` tasks that are not known yet, pending and due at ``now_ms``
        (an id named twice is added once); returns the new records."""
        added: list[TaskRecord] = []
        for task_id, source, target in task_ids:
            if txn.get("tasks", task_id.encode()) is not None:
                continue
            self.quarantine.release(txn, task_id.encode())  # added again: a fresh start
            record = TaskRecord(
                id=task_id,
                kind=kind.value,
                source=source,
                target=target,
                due_ms=now_ms,
                period_s=self.config.initial_period_s,
                policy_state=initial_state(),
                created_ms=now_ms,
            )
            txn.put("tasks", task_id.encode(), record.to_bytes())
            txn.put("pending", time_key(now_ms, task_id), b"")
            self.queues.pending(task_id, source, now_ms)
            added.append(record)
        return added

    def stored(self, txn: Txn, task_id: str) -> TaskRecord | None:
        """The task's record as stored, with its current lease (from its inflight entry) if it is in flight;
        None for an unknown task, and for one whose record does not decode: that record is quarantined."""
        key = task_id.encode()
        raw = txn.get("tasks", key)
        if raw is None:
            return None
        try:
            record = decode_record(key, raw)
        except UndecodableRecord as exc:
            self.quarantine.move(txn, key, raw, str(exc))
            return None
        deadline_ms = self.queues.deadline.get(task_id)
        if deadline_ms is not None:
            value = txn.get("inflight", time_key(deadline_ms, task_id))
            if value is None:
                raise ServiceError(f"{task_id} is in flight in memory but has no inflight entry at {deadline_ms}")
            hold_lease(record, deadline_ms, value)
        return record

    def take(self, txn: Txn, task_id: str) -> TaskRecord:
        """The task's record, to be changed: taken out of the cache, else read from the store. RecordQuarantined if
        the stored one did not decode (it is quarantined now)."""
        record = self.records.take(task_id) or self.stored(txn, task_id)
        if record is None:
            if self.quarantine.moved_now(task_id):
                raise RecordQuarantined(task_id)
            raise KeyError(task_id)
        return record

    def take_leased(self, txn: Txn, task_id: str, token: str, index: int, name: str) -> TaskRecord:
        """The task's record, to be changed, if ``token`` is its current lease; otherwise UnknownTask or
        LeaseLost (``name[index]`` is the argument at fault)."""
        cached = self.records.take(task_id)  # the record is about to change (or the call fails)
        if cached is not None and cached.lease_token == token:
            return cached
        record = self.stored(txn, task_id)
        gone = record is None or record.lease_token != token
        if record is None and txn.get(QUARANTINE, task_id.encode()) is not None:
            raise LeaseLostError(
                f"lease {quote(token)} of {quote(task_id)} ended: the task's record did not decode and was quarantined",
                task_id=task_id,
                index=index,
                code="TaskRemoved",
            )
        if gone and txn.get("meta", removed_lease_key(task_id, token)) is not None:  # (``startup.REMOVED_KEY``)
            raise LeaseLostError(
                f"lease {quote(token)} of {quote(task_id)} ended: the task was removed",
                task_id=task_id,
                index=index,
                code="TaskRemoved",
            )
        if record is None:
            raise invalid_field(f"unknown task {task_id}", f"{name}[{index}].taskId", index, code="UnknownTask")
        if record.state != "inflight" or record.lease_token != token:
            stale = token in record.old_tokens
            raise LeaseLostError(
                f"lease {quote(token)} of {quote(task_id)} "
                + ("ended: it expired, was given back or was already reported" if stale else "was never issued"),
                task_id=task_id,
                index=index,
                code="StaleLease" if stale else "UnknownLease",
            )
        return record

    def start_lease(
        self, txn: Txn, task_id: str, token: str, worker_id: str, account: Account, deadline_ms: int
    ) -> TaskRecord:
        """Move a pending task in flight until ``deadline_ms`` (wall ms). The lease lives in its inflight entry;
        the record is written again only when the lease ends."""
        record = self.take(txn, task_id)
        record.state = "inflight"
        record.lease_token = token
        record.lease_deadline_ms = deadline_ms
        record.worker = worker_id
        record.account_id = account.id
        if not txn.delete("pending", time_key(record.due_ms, task_id)):
            raise ServiceError(f"{task_id} is queued in memory but has no pending key at {record.due_ms}")
        txn.put("inflight", time_key(deadline_ms, task_id), encode_lease(token, worker_id, account.id))
        self.queues.inflight(task_id, deadline_ms)
        return record

    def end_lease(self, txn: Txn, record: TaskRecord, due_ms: int) -> None:
        """Move a task from in flight back to pending at ``due_ms``. The ended token is remembered, so a late
        or repeated report with it is told StaleLease rather than UnknownLease."""
        txn.delete("inflight", time_key(record.lease_deadline_ms, record.id))
        record.old_tokens = [*record.old_tokens, record.lease_token][-_TOKEN_HISTORY:]
        record.state = "pending"
        record.lease_token = ""
        record.lease_deadline_ms = 0
        record.due_ms = due_ms
        txn.put("pending", time_key(due_ms, record.id), b"")
        self.queues.pending(record.id, record.source, due_ms)
        txn.put("tasks", record.id.encode(), record.to_bytes())

    def expire_leases(self, txn: Txn, now_ms: int, wall: float, limit: int) -> list[TaskRecord]:
        """Leases past their deadline go back to pending with one more attempt (and its backoff). Every
        state-changing call does this first, in its own transaction; returns their records."""
        records = []
        for task_id in self.queues.expired(int(wall * 1000), limit):
            try:
                record = self.take(txn, task_id)
            except RecordQuarantined:
                continue
            record.attempts += 1
            records.append(record)
            # The completion log keeps expired leases too, so that an audit sees every lease interval.
            expired = {"outcome": "LeaseExpired", "worker": record.worker, **self.lease_interval(record, wall)}
            txn.put("done", time_key(now_ms, f"{record.id}#{record.lease_token}"), json.dumps(expired).encode())
            self.end_lease(txn, record, now_ms + int(backoff_s(record.attempts, self.config) * 1000))
        return records

    def remove(self, txn: Txn, task_id: str, now_ms: int, wall: float) -> TaskRecord | None:
        """Delete a task's record and its queue entry; None for an unknown task. A lease it is under ends in the
        completion log as ``Removed``, so that an audit still sees every lease interval."""
        record = self.records.take(task_id) or self.stored(txn, task_id)
        if record is None:
            return None
        if record.state == "inflight":
            txn.delete("inflight", time_key(record.lease_deadline_ms, task_id))
            removed = {"outcome": "Removed", "worker": record.worker, **self.lease_interval(record, wall)}
            txn.put("done", time_key(now_ms, f"{task_id}#{record.lease_token}"), json.dumps(removed).encode())
        elif not txn.delete("pending", time_key(record.due_ms, task_id)):
            raise ServiceError(f"{task_id} is pending but has no pending key at {record.due_ms}")
        txn.delete("tasks", task_id.encode())
        self.queues.remove(task_id)
        return record

    def lease_interval(self, record: TaskRecord, wall: float) -> dict[str, int]:
        """When the lease being ended was handed out and when it ends (wall ms), for the completion log: an
        audit can check that no task was ever leased twice at the same time."""
        return {
            "leased_wall_ms": record.lease_deadline_ms - int(self.config.lease_s * 1000),
            "deadline_wall_ms": record.lease_deadline_ms,
            "ended_wall_ms": int(wall * 1000),
        }
