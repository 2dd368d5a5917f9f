"""Serialization of the scheduler's records, kept apart from the store that holds them (docs/ARCHITECTURE.md).

Keys: ``pending`` and ``inflight`` keys start with an 8-byte big-endian millisecond time, then the task id, so
B-tree order is time order and a range scan up to ``now`` yields exactly the due tasks (or expired leases).
Values are pickled tuples of builtins (protocol 5, stable across Python versions), one value per field in
``TaskRecord``'s declaration order: a record is decoded and re-encoded once per task cycle, and a tuple
pickles faster and smaller than the dict of the same fields, which in turn beats JSON (``icecrawler bench
scheduler`` measures the task cycle). Fields are only ever appended to ``TaskRecord``, so a shorter tuple
(written before a field existed) reads back with that field's default. A lease is not written into the record:
the ``inflight`` entry holds it (``encode_lease``). The database is private to the scheduler; nothing else writes it.
"""

from __future__ import annotations

import json
import math
import operator
import pickle
import struct
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = [
    "TaskRecord",
    "decode_lease",
    "decode_time_key",
    "done_value",
    "encode_lease",
    "history_append",
    "history_entries",
    "time_key",
]

_TIME = struct.Struct(">Q")
#: One entry of a task's crawl history: time (ms), period (s), fingerprint distance (-1: unknown), new items.
_HISTORY_ENTRY = struct.Struct("<qdqq")
_PROTOCOL = 5
#: json.dumps' own string encoder (ensure_ascii), in C.
_json_str = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]


def time_key(ms: int, task_id: str = "") -> bytes:
    """``(ms, id)`` as a key that sorts by time, then id. Negative times clamp to 0."""
    return _TIME.pack(max(0, int(ms))) + task_id.encode()


def decode_time_key(key: bytes) -> tuple[int, str]:
    return _TIME.unpack_from(key)[0], key[_TIME.size :].decode()


def encode_lease(token: str, worker: str, account_id: str) -> bytes:
    """An ``inflight`` entry's value: the lease itself. Leasing a task writes only this entry (and deletes the
    ``pending`` key), not the task's record, which changes again only when the lease ends."""
    return pickle.dumps((token, worker, account_id), _PROTOCOL)


def decode_lease(value: bytes) -> tuple[str, str, str]:
    """(token, worker, account id) of an ``inflight`` entry."""
    token, worker, account_id = pickle.loads(value)
    return token, worker, account_id


def history_append(history: bytes, time_ms: int, period_s: float, distance: int, new_items: int, keep: int) -> bytes:
    """``history`` (packed entries, oldest first) with one more entry, keeping the newest ``keep``.

    A record carries its last ``scheduler.history_len`` crawls. As nested lists they made up most of a full
    record and of its encoding and decoding time; packed, they are one bytes value that pickle copies."""
    return (history + _HISTORY_ENTRY.pack(int(time_ms), float(period_s), int(distance), int(new_items)))[
        -keep * _HISTORY_ENTRY.size :
    ]


def history_entries(history: bytes) -> list[tuple[int, float, int, int]]:
    """The entries of a packed history: (time_ms, period_s, distance, new_items), oldest first."""
    return list(_HISTORY_ENTRY.iter_unpack(history))


def _json_number(value: Any) -> str:
    # repr is what json.dumps writes for an int or a finite float; anything else goes through json itself.
    if type(value) is int or (type(value) is float and math.isfinite(value)):
        return repr(value)
    return json.dumps(value)


def done_value(
    outcome: str,
    new_items: Any,
    period_s: Any,
    worker: str,
    fetches: Any,
    leased_wall_ms: int,
    deadline_wall_ms: int,
    ended_wall_ms: int,
) -> bytes:
    """A reported lease's completion-log value: exactly ``json.dumps`` of the dict with these keys in this order
    (what ``Stack.done_log`` and audits read), built without the dict and the generic encoder, since one is
    written per report."""
    return (
        f'{{"outcome": {_json_str(outcome)}, "new": {_json_number(new_items)}, '
        f'"period_s": {_json_number(period_s)}, "worker": {_json_str(worker)}, '
        f'"fetches": {_json_number(fetches)}, "leased_wall_ms": {_json_number(leased_wall_ms)}, '
        f'"deadline_wall_ms": {_json_number(deadline_wall_ms)}, '
        f'"ended_wall_ms": {_json_number(ended_wall_ms)}}}'
    ).encode()


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
    #: "pending" or "inflight". The lease fields (state to account_id) are stored as "pending" with the last
    #: ended lease; the core fills in the current lease from the task's ``inflight`` entry when it reads one.
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
    #: Recent successful crawls, packed (``history_append`` / ``history_entries``).
    history: bytes = b""
    crawls: int = 0
    last_crawl_ms: int = 0
    last_outcome: str = ""
    last_error: str = ""
    #: Listing tasks: product ids this listing added that were new.
    discovered: int = 0
    created_ms: int = 0

    def to_bytes(self) -> bytes:
        return pickle.dumps(_values(self), _PROTOCOL)

    @classmethod
    def from_bytes(cls, data: bytes) -> TaskRecord:
        raw = pickle.loads(data)
        if type(raw) is not tuple:
            raise ValueError(f"a task record is a pickled tuple, not a {type(raw).__name__}")
        if len(raw) == len(_NAMES):  # the common case: skip __init__, the values are already complete
            record = object.__new__(cls)
            record.__dict__.update(zip(_NAMES, raw, strict=True))
            return record
        # written before the last fields existed: those take their defaults
        return cls(**dict(zip(_NAMES, raw, strict=False)))


#: Field names in declaration order: the order of a record's tuple on disk (only ever append new fields).
_NAMES = tuple(f.name for f in fields(TaskRecord))
#: A record's field values as a tuple in that order, picked in C.
_values = operator.attrgetter(*_NAMES)
