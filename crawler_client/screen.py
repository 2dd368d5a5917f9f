"""Records the wire cannot carry, found before they are sent, so that one of them never sinks its batch.

A Slice ``string`` is UTF-8 and a Slice ``long`` is signed 64-bit: a text holding a lone surrogate (``\\ud800``,
which ``json.loads`` lets through from a page's ``\\ud800`` escape) or an id outside that range makes the whole
write call fail before it leaves the client. Such a record can never be stored, so it is dropped alone
(logged and counted) and its batch goes on. Everything else (over-long texts, malformed ids and times) is the
storage server's call: it rejects exactly those records by index (``InvalidRecords``) and stores the rest.
"""

from __future__ import annotations

import re
from dataclasses import fields

from icecrawler.models import Post, Review

__all__ = ["record_problem"]

_SURROGATE = re.compile("[\ud800-\udfff]")
_LONG = (-(1 << 63), (1 << 63) - 1)


def _text_problem(name: str, value: object) -> str | None:
    match = _SURROGATE.search(value) if isinstance(value, str) else None
    return f"{name} holds a lone surrogate at offset {match.start()} (not UTF-8)" if match else None


def record_problem(record: Post | Review) -> str | None:
    """Why ``record`` cannot be sent at all (None when it can)."""
    for spec in fields(record):
        value = getattr(record, spec.name)
        if isinstance(value, bool):
            continue
        if isinstance(value, int) and not _LONG[0] <= value <= _LONG[1]:
            return f"{spec.name}={value} does not fit a 64-bit long"
        if isinstance(value, list):
            for entry in value:
                problem = _text_problem(spec.name, entry)
                if problem:
                    return problem
        problem = _text_problem(spec.name, value)
        if problem:
            return problem
    return None
