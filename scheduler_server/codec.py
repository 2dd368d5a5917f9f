"""Serialization of the scheduler's records, apart from storage (STYLE rule 3).

Keys: ``pending`` and ``inflight`` keys start with an 8-byte big-endian millisecond time, then the task id, so
B-tree order is time order and a range scan up to ``now`` yields exactly the due tasks (or expired leases).
Values are pickled dicts of builtins (protocol 5, stable across Python versions): a record is decoded and
re-encoded twice per task cycle, and pickle does that several times faster than JSON. Fields are stored by
name, so a record written before a field existed reads back with that field's default, and unknown fields
are ignored. The database is private to the scheduler; nothing else writes it.
"""

from __future__ import annotations

import pickle
import struct
from dataclasses import dataclass, field, fields
from typing import Any

from icecrawler.models import TaskKind

__all__ = ["TaskRecord", "decode_time_key", "time_key"]

_TIME = struct.Struct(">Q")
_PROTOCOL = 5


def time_key(ms: int, task_id: str = "") -> bytes:
    """``(ms, id)`` as a key that sorts by time, then id. Negative times clamp to 0."""
    return _TIME.pack(max(0, int(ms))) + task_id.encode()


def decode_time_key(key: bytes) -> tuple[int, str]:
    return _TIME.unpack_from(key)[0], key[_TIME.size:].decode()


@dataclass
class TaskRecord:
    """One target's metadata: the Storm paper's "URL meta-information" row plus lease bookkeeping.

    Times ending in ``_ms`` are simulated epoch milliseconds except ``lease_deadline_ms`` (wall clock: the
    client compares it with its own clock).
    """

    id: str
    kind: str
    source: str
    target: str
    params: dict[str, str] = field(default_factory=dict)
    #: "pending" or "inflight".
    state: str = "pending"
    due_ms: int = 0
    period_s: float = 0.0
    #: Unsigned 64-bit simhash of the last crawled window (0: none yet).
    fingerprint: int = 0
    item_count: int = 0
    newest_item_ms: int = 0
    cursor: str = ""
    #: Failed or expired attempts since the last success.
    attempts: int = 0
    lease_token: str = ""
    lease_deadline_ms: int = 0
    worker: str = ""
    account_id: str = ""
    #: Tokens of recent leases that ended without a report (to tell StaleLease from UnknownLease).
    old_tokens: list[str] = field(default_factory=list)
    policy_state: dict[str, Any] = field(default_factory=dict)
    #: Recent successful crawls: [time_ms, period_s, distance, new_items].
    history: list[list[float]] = field(default_factory=list)
    crawls: int = 0
    last_crawl_ms: int = 0
    last_outcome: str = ""
    last_error: str = ""
    #: Listing tasks: product ids this listing added that were new.
    discovered: int = 0
    created_ms: int = 0

    @property
    def task_kind(self) -> TaskKind:
        return TaskKind(self.kind)

    def to_bytes(self) -> bytes:
        return pickle.dumps(vars(self), _PROTOCOL)

    @classmethod
    def from_bytes(cls, data: bytes) -> TaskRecord:
        raw = pickle.loads(data)
        if raw.keys() == _FIELDS:  # the common case: skip __init__, the values are already complete
            record = object.__new__(cls)
            record.__dict__.update(raw)
            return record
        return cls(**{key: value for key, value in raw.items() if key in _FIELDS})


_FIELDS = frozenset(f.name for f in fields(TaskRecord))
