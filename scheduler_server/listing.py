"""``listTasks``: one page of the task table for ``icecrawler tasks``, in id order.

Reads the ``tasks`` table (ids, periods, attempts, the last crawl's outcome and error class) and takes each task's
queue and time from the core's in-memory queues (``queues``), which are the authority on pending/in-flight (a lease
does not rewrite the record). Paging is by id (``after``), so a listing of a large table never holds more than one
page.
"""

from __future__ import annotations

from itertools import chain, takewhile
from typing import TYPE_CHECKING, Any

from icecrawler.errors import InvalidArgumentError, quote
from scheduler_server.quarantine import decoded
from scheduler_server.store import chunks

if TYPE_CHECKING:
    from scheduler_server.core import SchedulerCore

__all__ = ["list_tasks"]


def list_tasks(core: SchedulerCore, prefix: str, after: str, max_tasks: int) -> list[dict[str, Any]]:
    """Up to ``max_tasks`` tasks whose id starts with ``prefix``, in id order, after the id ``after``."""
    limit = core.config.batch_limit
    if not 1 <= max_tasks <= limit:
        raise InvalidArgumentError(
            f"max={max_tasks} is outside [1, {limit}] (scheduler.batch_limit)",
            field="max",
            code="BatchTooLarge" if max_tasks > limit else "InvalidField",
        )
    for name, text in (("prefix", prefix), ("after", after)):
        if len(text) > 200:
            raise InvalidArgumentError(f"{name} is longer than 200 characters: {quote(text)}", field=name)
    start = max(prefix.encode(), after.encode() + b"\x00")
    rows: list[dict[str, Any]] = []
    found: list[tuple[bytes, bytes, str]] = []
    with core.lock:
        now_ms = core.clocks.now() * 1000
        wall_ms = core.clocks.wall() * 1000
        with core.store.transaction() as txn:
            # Scanned on past a record that does not decode (quarantined below), so a page holds ``max_tasks``.
            pages = chunks(lambda first: txn.scan("tasks", start=first, limit=max_tasks), start)
            in_prefix = takewhile(lambda item: item[0].startswith(prefix.encode()), chain.from_iterable(pages))
            for record in decoded(in_prefix, found):
                task_id = record.id
                row: dict[str, Any] = {
                    "id": task_id,
                    "periodS": record.period_s,
                    "attempts": record.attempts,
                    "lastOutcome": record.last_outcome,
                    "lastError": record.last_error,
                }
                if task_id in core.queues.deadline:
                    row["state"] = "inflight"
                    row["leaseLeftS"] = round((core.queues.deadline[task_id] - wall_ms) / 1000, 3)
                else:
                    row["state"] = "pending"
                    row["dueInS"] = round((core.queues.due.get(task_id, record.due_ms) - now_ms) / 1000, 3)
                rows.append(row)
                if len(rows) == max_tasks:
                    break
        core.quarantine_found(found)
    return rows
