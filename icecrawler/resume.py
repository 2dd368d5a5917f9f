"""Page-cap gaps: the resume point a task keeps while a crawl could not reach its cursor.

A crawl walks newest first and stops at the task's cursor or at the page cap (``client.max_pages``). When the
cap comes first, the pages between the cap and the cursor hold items nobody fetched yet. Moving the cursor to
the newest item would skip them for good, so instead the task's cursor becomes a *gap cursor* that keeps:

* ``base``: the old cursor; the gap is closed once a walk reaches it (or the end of the list);
* ``top``: the cursor the task gets once the gap is closed (the newest item seen when the gap opened);
* ``low``: the oldest item fetched so far (items behind it are the ones still missing);
* ``request``: the last page fetched, to resume from (fetched again: one page of overlap, so items that moved
  down a page because newer ones were published in between are never jumped over).

The gap cursor travels in the ordinary ``cursor`` string of a report and of a leased task (so no wire or
task-record format changes): ``"gap1:" + JSON``. A plain cursor (every cursor written before gaps existed)
decodes as "no gap". The scheduler only needs ``is_gap`` (to count open gaps: a ``gap:<task id>`` key in its
``meta`` table, so a restart knows them without a scan) and ``describe`` (``status --task``); the client's walk
(``crawler_client.crawl``, ``crawler_client.gaps``) builds and reads them. Clients of an earlier version do not
understand a gap cursor: upgrade the clients with (or before) the scheduler.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["GAP_PREFIX", "Gap", "decode_cursor", "describe", "encode_cursor", "is_gap"]

#: What starts a gap cursor (plain cursors are digits or ISO 8601 times, never this).
GAP_PREFIX = "gap1:"


@dataclass(frozen=True)
class Gap:
    """An open page-cap gap (see the module docstring)."""

    base: str
    top: str
    low: str
    #: The page to resume from, as ``PageRequest`` fields (url relative to the base URL).
    request: dict[str, Any] = field(default_factory=dict)
    #: Visits spent on this gap so far (1 when it opened).
    visits: int = 1


def is_gap(cursor: str) -> bool:
    """True when ``cursor`` holds an open gap."""
    return cursor.startswith(GAP_PREFIX)


def encode_cursor(gap: Gap) -> str:
    """The gap cursor for ``gap`` (compact JSON, ASCII only)."""
    body = {"base": gap.base, "top": gap.top, "low": gap.low, "req": gap.request, "visits": gap.visits}
    return GAP_PREFIX + json.dumps(body, separators=(",", ":"), sort_keys=True)


def _not_json(name: str) -> Any:
    """``NaN`` and ``Infinity``, which Python's json reads by default, are not JSON (``encode_cursor`` never writes
    them): ``status --task`` would echo them into its JSON, and the client's walk cannot page by them."""
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999
        raise ValueError(f"{text[:40]} is not a finite number")
    return value


def decode_cursor(cursor: str) -> tuple[str, Gap | None]:
    """``(cursor to stop at, open gap or None)``. A plain cursor is returned as it is; a gap cursor that cannot
    be read (it never should) is treated as its base if that can be found, else as no cursor at all: the walk
    then starts from the top again, which re-fetches but never skips."""
    if not is_gap(cursor):
        return cursor, None
    try:
        body = json.loads(cursor[len(GAP_PREFIX) :], parse_constant=_not_json, parse_float=_finite)
        gap = Gap(
            base=str(body["base"]),
            top=str(body["top"]),
            low=str(body.get("low", "")),
            request=dict(body.get("req") or {}),
            visits=int(body.get("visits", 1)),
        )
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError):
        # RecursionError: JSON nested deeper than json reads (NaN, Infinity and 1e999 are refused while parsing)
        return "", None
    return gap.base, gap


def describe(cursor: str) -> dict[str, Any] | None:
    """What ``status --task`` shows of a task's gap (None when there is none)."""
    base, gap = decode_cursor(cursor)
    if gap is None:
        return None
    return {
        "open": True,
        "since_cursor": base,
        "resume_at_item": gap.low,
        "cursor_when_closed": gap.top,
        "resume_page": gap.request.get("page"),
        "visits": gap.visits,
    }
