"""The scheduler database's audit (``check_consistency``): every task in exactly one queue, queue keys that
match their records, and (given a running core's parts) in-memory queues and cached records that match the
tables. The tests run it after every step of the model test (``tests/scheduler/test_core_model.py``) and after
crashes; it reads every table in one transaction, so it is not for a running scheduler's hot path."""

from __future__ import annotations

from scheduler_server.cache import RecordCache
from scheduler_server.codec import decode_lease, decode_time_key, hold_lease
from scheduler_server.quarantine import decoded
from scheduler_server.queues import TaskQueues
from scheduler_server.store import QueueStore

__all__ = ["check_consistency"]


def check_consistency(
    store: QueueStore, limit: int = 10_000_000, queues: TaskQueues | None = None, records: RecordCache | None = None
) -> tuple[dict[str, int], list[str]]:
    """Audit: every task is in exactly one of pending/inflight; a pending key is at the due time its record names,
    an inflight entry holds a lease (and agrees with its record when the record names one too), and no queue key
    points at a missing task; given a running core's ``queues``, its in-memory
    queues hold exactly the same entries as the tables; given its record cache, every cached record is the
    stored one, with its current lease. A record that does not decode is a problem (a running core quarantines it
    where it meets it: ``quarantine``), and so is a task both in ``tasks`` and in the quarantine table (a core drops
    such bytes when it opens: ``quarantine.drop_shadowed``). Returns per-state counts and a list of problems (empty
    when consistent)."""
    problems: list[str] = []
    undecodable: list[tuple[bytes, bytes, str]] = []
    with store.transaction() as txn:
        stored = {record.id: record for record in decoded(txn.scan("tasks", limit=limit), undecodable)}
        pending = [decode_time_key(key) for key, _ in txn.scan("pending", limit=limit)]
        leases = [(decode_time_key(key), value) for key, value in txn.scan("inflight", limit=limit)]
        shadowed = [key for key, _ in txn.scan("quarantine", limit=limit) if txn.get("tasks", key) is not None]
    problems.extend(
        f"the record of {key.decode('utf-8', 'replace')} does not decode ({error})" for key, _, error in undecodable
    )
    problems.extend(
        f"{key.decode('utf-8', 'replace')} is both in tasks and in the quarantine table" for key in shadowed
    )
    inflight = [(key, decode_lease(value)[0]) for key, value in leases]
    where: dict[str, list[str]] = {task_id: [] for task_id in stored}
    for due_ms, task_id in pending:
        record = stored.get(task_id)
        if record is None or record.state != "pending" or record.due_ms != due_ms:
            problems.append(f"pending key ({due_ms}, {task_id}) does not match its record")
        where.setdefault(task_id, []).append("pending")
    for (deadline_ms, task_id), token in inflight:
        record = stored.get(task_id)
        if (
            record is None
            or not token
            or (record.state == "inflight" and (record.lease_deadline_ms != deadline_ms or record.lease_token != token))
        ):
            problems.append(f"inflight key ({deadline_ms}, {task_id}) does not match its record")
        where.setdefault(task_id, []).append("inflight")
    problems.extend(f"{task_id} is in {places or 'no queue'}" for task_id, places in where.items() if len(places) != 1)
    if queues is not None:
        if queues.due != {task_id: due_ms for due_ms, task_id in pending}:
            problems.append("the in-memory pending queue differs from the pending table")
        if queues.deadline != {task_id: deadline_ms for (deadline_ms, task_id), _ in inflight}:
            problems.append("the in-memory in-flight queue differs from the inflight table")
    if records is not None:
        for (deadline_ms, task_id), lease in leases:
            if task_id in stored:
                hold_lease(stored[task_id], deadline_ms, lease)
        problems.extend(
            f"the cached record of {cached.id} is not the stored one"
            for cached in records
            if cached.id not in stored or vars(cached) != vars(stored[cached.id])
        )
    counts = {"tasks": len(stored), "pending": len(pending), "inflight": len(inflight)}
    return counts, problems
