"""Shared test plumbing: fixture bytes, tasks and fetched pages (no network, no clock)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

from crawler_client.sources import PageRequest, ParsedPage, get_source
from crawler_client.sources.base import FetchedPage
from icecrawler.clock import BEIJING
from icecrawler.models import Task, TaskKind

FIXTURES = Path(__file__).parent / "fixtures"
#: The fetch time every test resolves relative dates against: 2021-07-06 12:00:00 +08:00.
NOW_MS = int(datetime(2021, 7, 6, 12, 0, tzinfo=BEIJING).timestamp() * 1000)
BASE = "http://127.0.0.1:8800/x"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def make_task(source: str, target: str, kind: TaskKind | None = None, *, attempts: int = 0, **params: str) -> Task:
    """A task as the scheduler leases it; ``attempts``: the failed visits in a row before this one."""
    kind = kind or next(iter(get_source(source).kinds))
    return Task(
        id=f"{kind.value}:{source}:{target}",
        kind=kind,
        source=source,
        target=target,
        params=dict(params),
        attempts=attempts,
    )


def fetched(
    body: bytes,
    request: PageRequest | None = None,
    *,
    status: int = 200,
    final_url: str = "",
    headers: Mapping[str, str] | None = None,
) -> FetchedPage:
    return FetchedPage(
        url=request.url if request else BASE, status=status, headers=dict(headers or {}), body=body, final_url=final_url
    )


def parse(
    source: str, task: Task, request: PageRequest, body: bytes, *, now_ms: int = NOW_MS, **page_kw: object
) -> ParsedPage:
    return get_source(source).parse(task, request, fetched(body, request, **page_kw), now_ms)  # type: ignore[arg-type]


def busy_then_end(source: str, known: Task, later: PageRequest, body: bytes) -> ParsedPage:
    """``body`` on a later page of a walk that has a cursor: Busy ``{source}-empty-page`` while the task has failed
    fewer than ``END_AFTER_CURSOR_RETRIES`` visits in a row, the end of the list after that (returned)."""
    import dataclasses

    import pytest

    from crawler_client.sources._weibo import END_AFTER_CURSOR_RETRIES
    from icecrawler.errors import FetchError

    with pytest.raises(FetchError) as info:
        parse(source, known, later, body)
    assert (info.value.outcome, info.value.error_class) == ("Busy", f"{source}-empty-page")
    with pytest.raises(FetchError):
        parse(source, dataclasses.replace(known, attempts=END_AFTER_CURSOR_RETRIES - 1), later, body)
    end = parse(source, dataclasses.replace(known, attempts=END_AFTER_CURSOR_RETRIES), later, body)
    assert end.next_request is None
    return end
