"""The client's side of page-cap gaps (``icecrawler.resume``): where a walk starts, which cursor it stops at, and
what cursor its report carries. Pure logic, used by ``crawler_client.crawl``.

* No gap: start at ``source.first_request``, stop at the task's cursor.
* Open gap: start at the saved request (the last page fetched last time), stop at the gap's ``base``.
* The walk reached its stop cursor or the end of the list: the gap (if any) is closed and the cursor becomes the
  newest item seen (``top`` for a gap that was open).
* The walk hit the page cap first: a gap is opened (or kept, with a new resume point); the cursor stays where it
  was. A first crawl (no cursor yet) is no exception: its gap reaches back to the end of the list, so the whole
  history the site lists is fetched, ``client.max_pages`` pages a visit.

Items dated after the fetch time never move a cursor (a wrong clock on one item must not make every older item
look "seen"); they are still stored, and are fetched again until their time has come.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from crawler_client.sources.base import Item, PageRequest, Source
from icecrawler.models import Post
from icecrawler.resume import Gap, decode_cursor, encode_cursor

__all__ = [
    "WalkPlan",
    "closed_cursor",
    "oldest_cursor",
    "open_gap_cursor",
    "plan_walk",
    "request_from_dict",
    "request_to_dict",
]

log = logging.getLogger(__name__)


def request_to_dict(request: PageRequest, base_url: str) -> dict[str, Any]:
    """A request as plain data, its URL relative to ``base_url`` (so a changed base URL still resumes)."""
    data = asdict(request)
    base = base_url.rstrip("/")
    if base and data["url"].startswith(base + "/"):
        data["url"] = data["url"][len(base) :]
    return {key: value for key, value in data.items() if value not in ({}, None, "GET")}


def request_from_dict(data: dict[str, Any], base_url: str) -> PageRequest:
    """Inverse of ``request_to_dict``."""
    url = str(data.get("url", ""))
    if url.startswith("/"):
        url = base_url.rstrip("/") + url
    return PageRequest(
        url=url,
        params=dict(data.get("params") or {}),
        method=str(data.get("method", "GET")),
        data=data.get("data"),
        headers=dict(data.get("headers") or {}),
        page=int(data.get("page", 1)),
        state=dict(data.get("state") or {}),
        cookie_headers=dict(data.get("cookie_headers") or {}),
    )


def oldest_cursor(source: Source, items: Iterable[Item]) -> str:
    """The cursor of the oldest orderable item among ``items`` ("" if none)."""
    low = ""
    for item in items:
        cursor = source.cursor_of(item)
        if not cursor or (isinstance(item, Post) and item.pinned):
            continue
        if not low or source.is_older_or_equal(item, low):
            low = cursor
    return low


def _settled(items: Iterable[Item], now_ms: int, time_of: Callable[[Item], int]) -> list[Item]:
    """The items that may move a cursor: none dated after the fetch time."""
    return [item for item in items if time_of(item) <= now_ms]


@dataclass(frozen=True)
class WalkPlan:
    """Where one crawl starts and what it compares items with."""

    first: PageRequest
    #: The cursor the walk stops at (the task's, or the open gap's base).
    stop_at: str
    gap: Gap | None

    def fetched_before(self, source: Source, item: Item) -> bool:
        """True for an item an earlier visit of this gap already fetched (not behind ``low``): stored again
        harmlessly, but not counted as new."""
        gap = self.gap
        if gap is None or not gap.low:
            return False
        return source.cursor_of(item) == gap.low or not source.is_older_or_equal(item, gap.low)


def plan_walk(task_cursor: str, first_request: Callable[[], PageRequest], base_url: str) -> WalkPlan:
    """Where a crawl of a task with ``task_cursor`` starts (see the module docstring)."""
    stop_at, gap = decode_cursor(task_cursor)
    if gap is None or not gap.request:
        return WalkPlan(first_request(), stop_at, None)
    try:
        resume = request_from_dict(gap.request, base_url)
    except (ValueError, TypeError):  # e.g. {"page": "x"}: from the top down to the gap's base, as for an unreadable gap
        return WalkPlan(first_request(), stop_at, None)
    return WalkPlan(resume, stop_at, gap)


def closed_cursor(
    source: Source, plan: WalkPlan, window: list[Item], now_ms: int, time_of: Callable[[Item], int]
) -> str:
    """The cursor after a walk that reached its stop cursor or the end of the list."""
    current = plan.gap.top if plan.gap is not None else plan.stop_at
    return source.newest_cursor(_settled(window, now_ms, time_of), current)


def open_gap_cursor(
    source: Source,
    plan: WalkPlan,
    window: list[Item],
    last: PageRequest,
    base_url: str,
    now_ms: int,
    time_of: Callable[[Item], int],
) -> str:
    """The gap cursor after a walk that hit the page cap before ``plan.stop_at`` ("" on a first crawl: the end of
    the list)."""
    settled = _settled(window, now_ms, time_of)
    if plan.gap is None:
        top = source.newest_cursor(settled, plan.stop_at)
        visits = 1
    else:
        top = source.newest_cursor(settled, plan.gap.top)
        visits = plan.gap.visits + 1
    low = oldest_cursor(source, window) or (plan.gap.low if plan.gap is not None else "")
    return encode_cursor(
        Gap(base=plan.stop_at, top=top, low=low, request=request_to_dict(last, base_url), visits=visits)
    )
