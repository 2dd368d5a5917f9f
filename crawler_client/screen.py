"""Records the wire cannot carry, found before they are sent, so that one of them never sinks its batch.

A Slice ``string`` is UTF-8, a Slice ``long`` is signed 64-bit and an ``int`` 32-bit: a text holding a lone
surrogate (``\\ud800``, which ``json.loads`` lets through from a page's ``\\ud800`` escape), an id outside a
``long`` or a count outside an ``int`` (a post's likes, a review's score) makes the whole write call fail before it
leaves the client. A count is clamped into the ``int`` range (``clamp_counts``): the built-in parsers clamp theirs
already (``sources._counts.parse_count``), a source outside the tree may not, and its count should not cost the post
its text; a record with a text or an id the wire cannot carry can never be stored, so it
is dropped alone (logged and counted) and its batch goes on. Everything else (over-long texts, malformed ids and
times, a clamped count the server finds invalid) is the storage server's call: it rejects exactly those records by
index (``InvalidRecords``) and stores the rest.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from icecrawler.models import Post, Review
from icecrawler.wire import INT32_FIELDS, INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, lone_surrogate_at

__all__ = ["clamp_counts", "record_problem"]


def _text_problem(name: str, value: object) -> str | None:
    at = lone_surrogate_at(value) if isinstance(value, str) else None
    return None if at is None else f"{name} holds a lone surrogate at offset {at} (not UTF-8)"


def clamp_counts[R: (Post, Review)](record: R) -> tuple[R, list[tuple[str, int, int]]]:
    """``record`` with each count outside a 32-bit int (``INT32_FIELDS``) clamped to its bound (a copy; ``record``
    itself when none is), and (field, value, clamped value) for each one changed."""
    changed = [
        (name, value, min(max(value, INT32_MIN), INT32_MAX))
        for name in sorted(INT32_FIELDS)
        if isinstance(value := getattr(record, name, None), int) and not INT32_MIN <= value <= INT32_MAX
    ]
    if not changed:
        return record, []
    fitted: dict[str, Any] = {name: clamped for name, _, clamped in changed}
    return replace(record, **fitted), changed


def record_problem(record: Post | Review) -> str | None:
    """Why ``record`` cannot be sent at all (None when it can); its counts are ``clamp_counts``'s to fix first."""
    for spec in fields(record):
        value = getattr(record, spec.name)
        if isinstance(value, bool):
            continue
        if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
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
