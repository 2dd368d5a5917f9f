"""Task records that do not decode: moved, bytes unchanged, into the ``quarantine`` table (logic over a ``Txn`` and
the in-memory queues; ``settle_quarantined`` applies a committed move to the core, as ``budget`` reads it).

Berkeley DB checks its pages, not what a value means: a value cut short or overwritten (a torn write below the
database, a bad sector inside a value) opens and verifies fine, and ``TaskRecord.from_bytes`` raises only when a
call reads it. Before, that call failed, and with it every call that met the record: each lease once the task was
due, the budget's rebalance (so the daemon's start) for good. Now whatever reads a record and cannot decode it moves
it aside in the transaction it runs in: the raw bytes go to ``quarantine`` under the same key, and the record leaves
``tasks``, its ``pending`` key or ``inflight`` entry, the in-memory queues and its open page-cap gap (``set_aside``,
which ``--recover`` uses too), so the database
stays consistent (``audit.check_consistency``) and every other task is served on. Each one is logged once at ERROR
and counted after the commit (``settle_quarantined``; ``stats()["detail"]["quarantined"]``, the
``quarantined_tasks`` gauge). Adding the task again (``icecrawler seed``) starts it afresh and drops its quarantined
bytes, and removing it (``icecrawler remove``) drops them too; docs/DEPLOY.md ("Quarantined task records") says how to
look at them first. A task both live and quarantined (a seed under a release that ignored the table) keeps its live
record: the core drops the quarantined bytes when it opens (``drop_shadowed``).
"""

from __future__ import annotations

import io
import logging
import pickle
import pickletools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from icecrawler.shards import task_source
from scheduler_server.codec import TaskRecord, decode_lease, time_key
from scheduler_server.queues import TaskQueues
from scheduler_server.startup import GAP_KEY
from scheduler_server.store import HELD_VALUE, QueueStore, Txn, entries, held_key

if TYPE_CHECKING:
    from scheduler_server.core import SchedulerCore

__all__ = [
    "QUARANTINE",
    "Quarantine",
    "Quarantined",
    "RecordQuarantined",
    "UndecodableRecord",
    "damage_of",
    "decode_record",
    "decoded",
    "drop_shadowed",
    "set_aside",
    "settle_quarantined",
]

log = logging.getLogger(__name__)

#: The table of the records that do not decode: task id -> the bytes as they were found.
QUARANTINE = "quarantine"
#: The longest decode error kept for the log line and ``task_info``.
_ERROR_CHARS = 300
#: What ``pickle.loads`` and ``TaskRecord.from_bytes`` raise on damaged bytes (found by mutating records: a bad
#: opcode, a cut, a bad UTF-8 string, a bad extension code, an absurd length, a class name that imports nothing, a
#: value of the wrong type). Not MemoryError as such (see ``decode_record``), nor RecursionError, OSError, ...: a
#: healthy record meeting them is not damaged, and moving it aside would lose its state.
_DAMAGE = (
    pickle.UnpicklingError,
    EOFError,
    ValueError,
    TypeError,
    AttributeError,
    ImportError,
    LookupError,
    OverflowError,
)


class UndecodableRecord(ValueError):
    """A task record's bytes do not decode; the message says why."""


class RecordQuarantined(Exception):
    """The record a move needed was just quarantined: the caller skips the task."""


@dataclass(frozen=True)
class Quarantined:
    """One record moved aside, for the core's log line and counters after the commit."""

    task_id: str
    error: str
    size: int
    #: The queue it was taken out of: "pending", "inflight", or "" (none held it).
    state: str
    #: The lease it was under ("" unless in flight): the core ends it in the account pool.
    lease_token: str


def decode_record(key: bytes, raw: bytes) -> TaskRecord:
    """The record stored under ``key``; UndecodableRecord if its bytes do not decode (``_DAMAGE``), or decode to
    another task's record. A MemoryError counts only when the bytes do not even parse as pickle opcodes: a damaged
    length field makes ``pickle`` allocate that length first, but a healthy record may meet a short memory too."""
    try:
        record = TaskRecord.from_bytes(raw)
    except _DAMAGE as exc:
        raise UndecodableRecord(f"{type(exc).__name__}: {exc}"[:_ERROR_CHARS]) from exc
    except MemoryError as exc:
        if (why := _unparsable(raw)) is None:
            raise
        raise UndecodableRecord(f"MemoryError: {why}"[:_ERROR_CHARS]) from exc
    if record.id != key.decode("utf-8", "replace"):
        raise UndecodableRecord(f"it decodes to the record of another task, {record.id!r}"[:_ERROR_CHARS])
    return record


#: Opcodes that store into pickle's memo at an index they name: ``pickle`` grows the memo to that index first, so a
#: damaged byte that reads as one asks for gigabytes. The codec's pickles (protocol 5) memoize with MEMOIZE only.
_MEMO_PUTS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})


def damage_of(raw: bytes) -> str:
    """What is wrong with quarantined bytes, read without decoding them (``pickle`` may allocate what a damaged
    length asks for): where they stop being a record's pickle, else a pointer to the log line of the decode error."""
    return _unparsable(raw) or "they do not decode; the scheduler's log says why, from when they were set aside"


def _unparsable(raw: bytes) -> str | None:
    """Why ``raw`` is no well-formed record pickle (None if it is): ``pickletools.genops`` reads each length-prefixed
    argument from a buffer, so an absurd length fails without allocating it; an explicit memo store is damage."""
    try:
        for opcode, argument, position in pickletools.genops(io.BytesIO(raw)):
            if opcode.name in _MEMO_PUTS:
                return f"a memo store ({opcode.name} {argument}) at byte {position}, which no record holds"
    except _DAMAGE as exc:
        return str(exc)
    return None


def set_aside(txn: Txn, key: bytes, raw: bytes) -> None:
    """Move the ``tasks`` entry ``key`` (holding ``raw``) to the quarantine table, with its open page-cap gap: what a
    running core (``Quarantine.move``) and ``--recover`` (``integrity``) both do. It marks the table as holding records
    (``store.held_key``), so that a lost ``quarantine.db`` is refused at the next start instead of losing them."""
    txn.put(QUARANTINE, key, raw)
    txn.put("meta", held_key(QUARANTINE), HELD_VALUE)
    txn.delete("tasks", key)
    txn.delete("meta", GAP_KEY + key)


def drop_shadowed(store: QueueStore) -> list[str]:
    """Drop the quarantined bytes of tasks that have a live record too; returns their ids. Only a release that ignored
    the quarantine table (going back one, seeding, coming forward again) leaves such a pair: the live record is the
    task now, and the stale bytes would keep the gauge up for good. A scan of the (usually empty) quarantine table."""
    dropped: list[str] = []
    with store.transaction() as txn:
        for key in [key for key, _ in entries(txn, QUARANTINE)]:
            if txn.get("tasks", key) is not None:
                txn.delete(QUARANTINE, key)
                dropped.append(key.decode("utf-8", "replace"))
    for task_id in dropped:
        log.warning(
            "task %s has a live record and quarantined bytes too (a release that ignores the quarantine table "
            "added it again): the live record is kept, its quarantined record is dropped",
            task_id,
        )
    return dropped


def decoded(items: Iterable[tuple[bytes, bytes]], found: list[tuple[bytes, bytes, str]]) -> Iterator[TaskRecord]:
    """The records of ``tasks`` entries that decode; each one that does not is appended to ``found`` as (key, raw
    bytes, error), for ``SchedulerCore.quarantine_found`` once the scan's transaction is over."""
    for key, raw in items:
        try:
            yield decode_record(key, raw)
        except UndecodableRecord as exc:
            found.append((key, raw, str(exc)))


class Quarantine:
    """Moves records aside inside a transaction and remembers them until the core has committed it (``committed``)
    or rolled it back (``rollback``)."""

    def __init__(self, queues: TaskQueues) -> None:
        self.queues = queues
        #: Records in the quarantine table, as last committed.
        self.count = 0
        self._moved: list[Quarantined] = []
        #: (task id, why) of each record whose quarantined bytes the transaction dropped.
        self._released: list[tuple[str, str]] = []

    @property
    def pending(self) -> bool:
        """Whether the current transaction moved a record aside (it must then commit, even with nothing else)."""
        return bool(self._moved)

    @property
    def changed(self) -> bool:
        """Whether the current transaction moved a record aside or released one (the core's work after a commit)."""
        return bool(self._moved or self._released)

    def moved_now(self, task_id: str) -> bool:
        return any(item.task_id == task_id for item in self._moved)

    def move(self, txn: Txn, key: bytes, raw: bytes, error: str) -> None:
        """Move the ``tasks`` entry ``key`` (holding ``raw``) to the quarantine table, out of its queue and its gap."""
        task_id = key.decode("utf-8", "replace")
        set_aside(txn, key, raw)
        state, token = "", ""
        due_ms = self.queues.due.get(task_id)
        deadline_ms = self.queues.deadline.get(task_id)
        if due_ms is not None and txn.delete("pending", time_key(due_ms, task_id)):
            state = "pending"
        if deadline_ms is not None:
            lease = txn.get("inflight", time_key(deadline_ms, task_id))
            if lease is not None:
                txn.delete("inflight", time_key(deadline_ms, task_id))
                state = "inflight"
                try:
                    token = decode_lease(lease)[0]
                except Exception:  # a damaged lease too: the pool's lease then ends at its own deadline
                    token = ""
        self.queues.remove(task_id)
        self._moved.append(Quarantined(task_id, error, len(raw), state, token))

    def release(self, txn: Txn, key: bytes, why: str = "is added again") -> bool:
        """The task is added again (``icecrawler seed``, a listing's discovery) or removed (``icecrawler remove``,
        ``why`` says which): its quarantined bytes go; returns whether it had any. (No lookup while the table is
        empty, the usual case: adding a task costs no extra B-tree operation then.)"""
        if (self.count > 0 or self._moved) and txn.delete(QUARANTINE, key):
            self._released.append((key.decode("utf-8", "replace"), why))
            return True
        return False

    def rollback(self) -> None:
        self._moved.clear()
        self._released.clear()

    def committed(self) -> tuple[list[Quarantined], list[tuple[str, str]]]:
        """What the committed transaction moved aside and released; counted here, and forgotten."""
        moved, released = list(self._moved), list(self._released)
        self.rollback()
        self.count += len(moved) - len(released)
        return moved, released


def settle_quarantined(core: SchedulerCore) -> None:
    """After the core's commit: the records it moved to the quarantine table leave the counts, the record cache, the
    open gaps and (in flight) their host and account; each is logged once, at ERROR."""
    moved, released = core.quarantine.committed()
    wall = core.clocks.wall() if moved else 0.0
    for item in moved:
        log.error(
            "task %s: its stored record does not decode (%s); moved, %d bytes unchanged, to the quarantine table "
            "and out of the queues: `icecrawler seed` adds the target again with a fresh state "
            '(docs/DEPLOY.md, "Quarantined task records")',
            item.task_id,
            item.error,
            item.size,
        )
        core.records.take(item.task_id)
        core.open_gaps.discard(item.task_id)
        core.counts["tasks"] -= 1
        if item.state:
            core.counts[item.state] -= 1
        if item.state == "inflight":
            if (host := core.config.hosts.get(task_source(item.task_id))) is not None:
                core.gate.ended(host, wall)
            core.accounts.ended(item.lease_token)
    for task_id, why in released:
        log.warning("task %s %s: its quarantined record is dropped", task_id, why)
